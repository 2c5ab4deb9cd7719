// Kernel dispatch: each op family keeps an ordered list of implementations per device (the
// oneDNN one first, the reference last). The first that accepts the problem runs; each that
// declines says why. MIXPREC_VERBOSE=1 prints every choice with the reasons of the decliners;
// ForceImpl("ref") makes every op take the named implementation (tests compare fast vs ref).
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "mixprec/device.h"
#include "mixprec/error.h"
#include "mixprec/ops/registry.h"

namespace mixprec::ops {

// A problem type provides: Device device() const; std::string describe() const.
template <class Problem>
struct Impl {
  std::string_view name;
  Device::Type device;
  // Empty string: accepts. Otherwise the reason it declines.
  std::string (*declines)(const Problem&);
  void (*run)(const Problem&);
};

int verbose_level();  // MIXPREC_VERBOSE, read once

// `declines` for an implementation that takes every problem (the reference kernels).
template <class Problem>
std::string accept_all(const Problem&) {
  return {};
}

// Forces the implementation named `name` for every op on this thread while alive.
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

// MIXPREC_PROFILE=1: time spent per (op, phase, implementation), printed at exit.
bool profiling();
void profile_add(std::string_view op, std::string_view phase, std::string_view impl, double seconds);
double profile_now();

template <class Problem>
void dispatch(OpId op, std::string_view phase, std::span<const Impl<Problem>> impls,
              const Problem& p) {
  const std::string_view forced = forced_impl();
  const bool verbose = verbose_level() > 0;
  std::string declined;
  for (const Impl<Problem>& impl : impls) {
    std::string reason;
    if (impl.device != p.device().type) reason = "wrong device";
    else if (!forced.empty() && impl.name != forced) reason = "not the forced implementation";
    else reason = impl.declines(p);
    if (reason.empty()) {
      if (verbose) log_dispatch(op, phase, impl.name, p.describe(), declined);
      if (profiling()) {
        const double t0 = profile_now();
        impl.run(p);
        profile_add(op_name(op), phase, impl.name, profile_now() - t0);
      } else {
        impl.run(p);
      }
      return;
    }
    if (verbose) declined += std::string(declined.empty() ? "" : "; ") + std::string(impl.name) + ": " + reason;
  }
  MIXPREC_CHECK(false, op_name(op), " ", phase, ": no implementation accepts ", p.describe(),
                " (", declined.empty() ? std::string("none registered") : declined, ")");
}

}  // namespace mixprec::ops
