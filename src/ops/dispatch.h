// Kernel dispatch: every problem type (ops/<family>_problem.h) has one ordered list of kernels,
// filled by the backends (ops/<backend>/register.cpp, in the build's backend order, see
// register_backends). The first kernel on the problem's device that accepts it runs; each that
// declines says why. MIXPREC_VERBOSE=1 prints every choice with the reasons of the decliners;
// ForceImpl("ref") makes every op take the named kernel (tests compare fast vs ref); problem
// types that opt in (kMeasured) choose among the accepting kernels by timing them instead
// (ops/kernel_choice.h; MIXPREC_KERNEL_CHOICE=first keeps the order);
// MIXPREC_DISABLE_KERNELS=name,name takes kernels out of the running (an A/B measurement in one
// build, or ruling a kernel out when chasing a wrong result).
// A problem type provides: Device device() const; std::string describe() const (one line for
// logs and errors); for low_via_f32, static inputs() / outputs() (ops/low_via_f32.h).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "core/capture.h"
#include "ops/kernel_choice.h"
#include "mixprec/device.h"
#include "mixprec/error.h"
#include "mixprec/ops/profile.h"
#include "mixprec/ops/registry.h"
#include "mixprec/tensor.h"

namespace mixprec::ops {

// One kernel for a problem type.
template <class Problem> struct Impl {
  std::string_view name;  // what MIXPREC_VERBOSE prints and ForceImpl names
  Device::Type device;
  // Empty string: accepts. Otherwise the reason it declines.
  std::string (*declines)(const Problem&);
  void (*run)(const Problem&);
};

// `declines` for a kernel that takes every problem (the reference kernels).
template <class Problem> std::string accept_all(const Problem&) { return {}; }

namespace detail {
// The registry's storage: one list per problem type, shared by every module of the process.
void* kernel_list_storage(const std::type_info& problem, void* (*make)());
template <class Problem> std::vector<Impl<Problem>>& kernel_list() {
  static auto* const list = static_cast<std::vector<Impl<Problem>>*>(kernel_list_storage(
      typeid(Problem), []() -> void* { return new std::vector<Impl<Problem>>(); }));
  return *list;
}
// Every kernel name registered, for MIXPREC_DISABLE_KERNELS's check of the names it is given.
void note_kernel_name(std::string_view name);
// True when MIXPREC_DISABLE_KERNELS (a comma-separated list of kernel names, read once and checked
// against the registered names: an unknown name is an error) lists `name`.
bool kernel_disabled(std::string_view name);
}  // namespace detail

// Appends a kernel to its problem type's list. Called only from the backends' registration
// functions, which register_backends runs once, before the first dispatch.
template <class Problem> void register_kernel(const Impl<Problem>& impl) {
  detail::kernel_list<Problem>().push_back(impl);
  detail::note_kernel_name(impl.name);
}

// Calls each backend's register_<backend>_kernels() in the build's order (src/CMakeLists.txt,
// MIXPREC_OPS_BACKENDS); generated from ops/backends.cpp.in. Runs once (ensure_registered).
void register_backends();
void ensure_registered();

// The kernels for Problem in dispatch order.
template <class Problem> std::span<const Impl<Problem>> kernels() {
  ensure_registered();
  return detail::kernel_list<Problem>();
}

int verbose_level();  // MIXPREC_VERBOSE, read once

// Forces the implementation named `name` for every op on this thread while alive, in every
// problem type that has a kernel of that name (the others dispatch as usual).
class ForceImpl {
 public:
  explicit ForceImpl(std::string_view name);
  ~ForceImpl();
  ForceImpl(const ForceImpl&) = delete;
  ForceImpl& operator=(const ForceImpl&) = delete;

 private:
  std::string_view prev_;
};
std::string_view forced_impl();

void log_dispatch(OpId op, std::string_view phase, std::string_view chosen,
                  const std::string& problem, const std::string& declined);

// The kernel profile (mixprec/ops/profile.h: MIXPREC_PROFILE=1, or set_profiling) records here.
void profile_add(std::string_view op, std::string_view phase, std::string_view impl, double seconds,
                 ProfileWork work = {});
double profile_now();

// The bytes of t's span in memory (a broadcast dim counts once), 0 when undefined.
double touched_bytes(const Tensor& t);

// What the profile charges a call of p with: the bytes of the tensors the problem lists
// (inputs() and outputs(), or its header's profile_tensors(p)) and its profile_flops(p) where the
// problem's header defines one.
template <class Problem> ProfileWork profile_work(const Problem& p) {
  ProfileWork w;
  if constexpr (requires {
                  Problem::inputs();
                  Problem::outputs();
                }) {
    for (Tensor Problem::*m : Problem::inputs()) w.bytes += touched_bytes(p.*m);
    for (Tensor Problem::*m : Problem::outputs()) w.bytes += touched_bytes(p.*m);
  } else if constexpr (requires { profile_tensors(p); }) {
    for (const Tensor* t : profile_tensors(p)) w.bytes += touched_bytes(*t);
  }
  if constexpr (requires { profile_flops(p); }) w.flops = profile_flops(p);
  return w;
}

// run(p), timed into the kernel profile when it is on and no capture is recording.
template <class Problem> void timed_run(void (*run)(const Problem&), const Problem& p,
                                        std::string_view op, std::string_view phase,
                                        std::string_view impl) {
  if (!profiling() || mixprec::detail::capture_recorder() != nullptr) return run(p);
  const ProfileWork work = profile_work(p);
  const double t0 = profile_now();
  run(p);
  profile_add(op, phase, impl, profile_now() - t0, work);
}

// "bf16[2, 3]" for problem descriptions, logs and errors; with_strides adds "{3,1}".
std::string desc(const Tensor& t);
std::string desc_with_strides(const Tensor& t);

// A recorded kernel call: the problem (by value: copying the call holds its tensors) and the
// kernel that ran it. GRAPH_MODE's fusion (src/graph/fuse.cpp) finds calls by problem type through
// std::function::target and may rewrite the problem, never the kernel.
// While capturing, the problem's data tensors (inputs() / outputs(), where the problem lists
// them) are reported as held by the call (a kernel that reads them only through views it makes,
// low_via_f32_batched's chunks, would otherwise hold a tensor the plan cannot see); a problem
// that lists writes() reports those as everything its kernel writes. A replay (no recorder
// active) with the kernel profile on times the call under the op, phase and kernel it was
// dispatched as, so that GRAPH_MODE steps have the per-op table that eager steps have.
template <class Problem> struct RecordedCall {
  Problem p;
  void (*run)(const Problem&);
  std::string_view op, phase, impl;  // static strings: op_name, the dispatch phase, Impl::name
  void operator()() const {
    if constexpr (requires {
                    Problem::inputs();
                    Problem::outputs();
                  }) {
      if (mixprec::detail::capture_recorder() != nullptr) {
        for (Tensor Problem::*m : Problem::inputs()) mixprec::detail::capture_holds(p.*m);
        for (Tensor Problem::*m : Problem::outputs()) mixprec::detail::capture_holds(p.*m);
      }
    }
    if constexpr (requires { Problem::writes(); }) {
      if (mixprec::detail::capture_recorder() != nullptr)
        for (Tensor Problem::*m : Problem::writes()) mixprec::detail::capture_writes(p.*m);
    }
    timed_run(run, p, op, phase, impl);
  }
};

// The registered kernel whose run function is `run` (null if none).
template <class Problem> const Impl<Problem>* kernel_of(void (*run)(const Problem&)) {
  for (const Impl<Problem>& impl : kernels<Problem>())
    if (impl.run == run) return &impl;
  return nullptr;
}

// GRAPH_MODE capture (core/capture.h): runs the kernel and records the call. A problem that hands
// a tensor back through a pointer (PoolFwdProblem::workspace) gets a tensor owned by the recorded
// call, so every replay writes into the buffer that the recorded backward reads (the kernels
// reuse a workspace they are handed back).
template <class Problem> void record_call(const Problem& p, void (*run)(const Problem&),
                                          std::string_view op, std::string_view phase,
                                          std::string_view impl) {
  if constexpr (requires {
                  { p.workspace } -> std::convertible_to<const Tensor*>;
                }) {
    if (p.workspace != nullptr) {
      auto owned = std::make_shared<Tensor>();
      Problem q = p;
      q.workspace = owned.get();
      mixprec::detail::run_kernel(
          [q, owned, run, op, phase, impl] { timed_run(run, q, op, phase, impl); });
      *p.workspace = *owned;
      mixprec::detail::capture_owns(*owned);  // the call holds it through `owned`
      return;
    }
  }
  mixprec::detail::run_kernel(RecordedCall<Problem>{p, run, op, phase, impl});
}

namespace detail {

// A problem type whose kernels dispatch may time against each other (ops/kernel_choice.h).
template <class P>
concept Measured = requires {
  requires P::kMeasured;
};
// Whether p's kernels are timed: every problem of a Measured type, unless the type narrows it
// with `bool measured() const` (PointwiseProblem: gelu's 16-bit forms only).
template <class P> bool measured(const P& p) {
  if constexpr (requires { p.measured(); })
    return p.measured();
  else
    return true;
}

// What a measured choice is keyed by: threads, op, phase, the problem and its tensors' strides.
template <class P> std::string choice_signature(OpId op, std::string_view phase, const P& p) {
  std::string sig = choice::signature_prefix(op_name(op), phase) + p.describe() + " |";
  if constexpr (requires {
                  P::inputs();
                  P::outputs();
                }) {
    for (Tensor P::*m : P::inputs()) sig += " " + desc_with_strides(p.*m);
    for (Tensor P::*m : P::outputs()) sig += " " + desc_with_strides(p.*m);
  }
  return sig;
}

// p with every tensor its kernels write replaced by a new zero-filled one of the same layout, so
// that timing runs leave the real outputs alone (and an in-place problem's inputs too). None when
// a written tensor is not dense (a view whose span a new tensor would not match).
template <class P> std::optional<P> with_fresh_writes(const P& p) {
  P q = p;
  for (Tensor P::*m : P::writes()) {
    const Tensor& t = p.*m;
    if (!t.defined()) continue;
    if (!is_dense(t.shape(), t.strides())) return std::nullopt;
    auto storage = Storage::allocate(t.nbytes(), t.device());
    std::memset(storage->data(), 0, t.nbytes());
    q.*m = Tensor::from_storage(std::move(storage), t.shape(), t.strides(), 0, t.dtype());
  }
  return q;
}

// Stops GRAPH_MODE's recording while alive: timing runs are not part of the step.
class CapturePause {
 public:
  CapturePause() : saved_(mixprec::detail::capture_recorder()) {
    mixprec::detail::capture_recorder() = nullptr;
  }
  ~CapturePause() { mixprec::detail::capture_recorder() = saved_; }
  CapturePause(const CapturePause&) = delete;
  CapturePause& operator=(const CapturePause&) = delete;

 private:
  mixprec::detail::CaptureRecorder* saved_;
};

void log_measured(OpId op, std::string_view phase, const choice::Choice& c, bool cached,
                  const std::string& problem);

// The kernel to run for p, `first` being the first that accepts it: the cached choice for p's
// signature, or the fastest of the CPU kernels that accept p (the reference kernels never
// compete), timed now on fresh outputs: one warm-up run each, then the best of 3 rounds. A choice
// from the file that is not yet confirmed (kernel_choice.h) is timed again and merged with it.
template <class P> const Impl<P>* choose_kernel(OpId op, std::string_view phase, const P& p,
                                                std::span<const Impl<P>> impls,
                                                const Impl<P>* first) {
  const std::string sig = choice_signature(op, phase, p);
  const auto usable = [&](const Impl<P>& k) {
    return k.device == Device::Type::cpu && k.name != "ref" && !kernel_disabled(k.name) &&
           k.declines(p).empty();
  };
  // The kernels that compete for p: `first` (unless it is the reference) and the usable ones after
  // it.
  const auto candidate = [&](const Impl<P>& k) {
    return &k == first ? first->name != "ref" : (&k > first && usable(k));
  };
  const std::optional<choice::Choice> cached = choice::lookup(sig);
  // A choice from the file is timed again and merged with (`before`) when it is not yet
  // confirmed (kernel_choice.h), or when it never timed a candidate this build has (a kernel
  // added since the file was written; the merge has more runs, so the file takes it). A complete
  // one is adopted into this process's table: the check runs once a signature.
  std::optional<choice::Choice> before;
  if (cached && cached->to_confirm()) {
    before = cached;
  } else if (cached && cached->from_file && !cached->seconds.empty()) {
    const auto timed = [&](const Impl<P>& k) {
      return std::any_of(cached->seconds.begin(), cached->seconds.end(),
                         [&](const auto& s) { return s.first == k.name; });
    };
    if (std::all_of(impls.begin(), impls.end(),
                    [&](const Impl<P>& k) { return !candidate(k) || timed(k); }))
      choice::adopt(sig, *cached);
    else
      before = cached;
  }
  if (const std::optional<choice::Choice>& c = cached; c && !before) {
    for (const Impl<P>& k : impls)
      if (k.name == c->kernel && (&k == first || usable(k))) {
        if (c->chosen()) {
          choice::note_used(sig, *c);
          if (verbose_level() > 0) log_measured(op, phase, *c, true, p.describe());
        }
        return &k;
      }
  }
  std::vector<const Impl<P>*> candidates;
  for (const Impl<P>& k : impls)
    if (candidate(k)) candidates.push_back(&k);
  std::optional<P> trial;
  if (candidates.size() > 1) trial = with_fresh_writes(p);
  if (!trial) {
    // Nothing to time: remember, don't save. (A named Choice, not a braced argument: nvcc's
    // front end turns `{std::string(...), {}}` here into code g++ rejects in the .cu files.)
    choice::Choice only;
    only.kernel = first->name;
    choice::store(sig, only);
    return first;
  }
  CapturePause pause;
  std::vector<double> best(candidates.size(), 1e300);
  for (const Impl<P>* k : candidates) k->run(*trial);
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < candidates.size(); ++i) {
      const double t0 = profile_now();
      candidates[i]->run(*trial);
      best[i] = std::min(best[i], profile_now() - t0);
    }
  size_t win = 0;
  choice::Choice c;
  c.runs = 1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    c.seconds.emplace_back(candidates[i]->name, best[i]);
    if (best[i] < best[win]) win = i;
  }
  c.kernel = candidates[win]->name;
  if (before) c = choice::merge_runs(*before, c);
  choice::count_measurement();
  choice::store(sig, c);
  choice::note_used(sig, c);
  if (verbose_level() > 0) log_measured(op, phase, c, false, p.describe());
  for (const Impl<P>* k : candidates)
    if (k->name == c.kernel) return k;
  return candidates[win];
}

}  // namespace detail

// Runs the first kernel registered for Problem that accepts p (see the top of this file), or,
// for a Measured problem type in measure mode, the fastest of those that accept it. `phase` must
// be a static string (a literal): a captured call keeps it for the profile of its replays.
template <class Problem> void dispatch(OpId op, std::string_view phase, const Problem& p) {
  const std::span<const Impl<Problem>> impls = kernels<Problem>();
  std::string_view forced = forced_impl();
  if (!forced.empty()) {
    bool known = false;
    for (const Impl<Problem>& impl : impls) known = known || impl.name == forced;
    if (!known) forced = {};
  }
  const bool verbose = verbose_level() > 0;
  std::string declined;
  for (const Impl<Problem>& impl : impls) {
    std::string reason;
    if (impl.device != p.device().type)
      reason = "wrong device";
    else if (!forced.empty() && impl.name != forced)
      reason = "not the forced implementation";
    else if (detail::kernel_disabled(impl.name))
      reason = "disabled by MIXPREC_DISABLE_KERNELS";
    else
      reason = impl.declines(p);
    if (reason.empty()) {
      const Impl<Problem>* run = &impl;
      if constexpr (detail::Measured<Problem>)
        if (forced.empty() && impl.device == Device::Type::cpu &&
            kernel_choice() == KernelChoice::measure && detail::measured(p))
          run = detail::choose_kernel(op, phase, p, impls, &impl);
      if (verbose) log_dispatch(op, phase, run->name, p.describe(), declined);
      if (mixprec::detail::capture_recorder() != nullptr) {  // GRAPH_MODE capture: record the call
        record_call(p, run->run, op_name(op), phase, run->name);
      } else {
        timed_run(run->run, p, op_name(op), phase, run->name);
      }
      return;
    }
    if (verbose)
      declined +=
          std::string(declined.empty() ? "" : "; ") + std::string(impl.name) + ": " + reason;
  }
  // Without MIXPREC_VERBOSE the reasons were not kept (the hot path builds no strings): ask again.
  if (declined.empty())
    for (const Impl<Problem>& impl : impls)
      if (impl.device == p.device().type)
        declined += std::string(declined.empty() ? "" : "; ") + std::string(impl.name) + ": " +
                    (!forced.empty() && impl.name != forced ? "not the forced implementation"
                     : detail::kernel_disabled(impl.name)   ? "disabled by MIXPREC_DISABLE_KERNELS"
                                                            : impl.declines(p));
  MIXPREC_CHECK(false, op_name(op), " ", phase, ": no implementation accepts ", p.describe(), " (",
                declined.empty() ? "none registered for " + p.device().str() : declined, ")");
}

}  // namespace mixprec::ops
