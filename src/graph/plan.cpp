// Capture, memory planning and replay of a graph::Plan (mixprec/graph/plan.h). Capture installs
// a recorder (core/capture.h) for one eager run: every kernel's work is kept, every data_ptr()
// is noted. Planning finds the intermediates (made during the run, held by nothing but the
// recorded kernels), gives each the span of kernels that hold it, and places them in one arena,
// largest first, in the best-fitting gap among the buffers whose spans overlap.
#include "mixprec/graph/plan.h"

#include <execinfo.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/capture.h"
#include "graph/fuse.h"
#include "ops/dispatch.h"
#include "mixprec/allocator.h"
#include "mixprec/env.h"
#include "mixprec/error.h"

namespace mixprec::graph {

struct Plan::Recorder final : detail::CaptureRecorder {
  struct StorageUse {
    std::shared_ptr<Storage> storage;
    bool host_written = false;    // written outside a kernel while new: a constant, kept apart
    bool kernel_touched = false;
    int64_t first = -1, last = -1;  // kernels that touched it through data_ptr()
  };
  std::vector<std::function<void()>>* kernels = nullptr;
  std::unordered_map<const TensorImpl*, std::shared_ptr<TensorImpl>> impls;
  std::unordered_map<const Storage*, StorageUse> storages;
  std::unordered_map<const TensorImpl*, std::vector<int64_t>> owned;  // references kernels own
  std::unordered_map<const Storage*, std::vector<int64_t>> written;   // reported writes
  std::unordered_set<int64_t> reports_writes;                         // kernels that report them
  uint64_t first_id = 0;  // storages with this id or above were made during the capture
  std::string failure;

  // Who holds each storage made during the capture (defined below, used by plan_memory).
  fusion::Holdings holdings(const std::vector<std::function<void()>>& kernels_,
                            const std::vector<Tensor>& outputs);

  void record(std::function<void()> work) override { kernels->push_back(std::move(work)); }
  void owns(const TensorImpl* t) override { owned[t].push_back(static_cast<int64_t>(kernels->size()) - 1); }
  void writes(const Storage* s) override {
    const auto k = static_cast<int64_t>(kernels->size());  // the kernel now running
    reports_writes.insert(k);
    written[s].push_back(k);
  }

  void touch(const std::shared_ptr<TensorImpl>& t, bool in_kernel) override {
    impls.try_emplace(t.get(), t);
    StorageUse& u = storages[t->storage.get()];
    if (!u.storage) u.storage = t->storage;
    if (in_kernel) {
      const auto k = static_cast<int64_t>(kernels->size());
      if (u.first < 0) u.first = k;
      u.last = k;
      u.kernel_touched = true;
      return;
    }
    if (u.storage->id() >= first_id && !u.kernel_touched) {
      u.host_written = true;
      return;
    }
    fail("a host read of a tensor value (" + std::string(dtype_name(t->dtype)) + shape_str(t->shape) +
         ") inside the step");
  }

  void fail(std::string reason) override {
    if (!failure.empty()) return;
    failure = std::move(reason);
    if (env::get("MIXPREC_GRAPH_DEBUG") == "1") {  // where the capture failed, for developers
      void* frames[32];
      backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
  }
};

Plan::~Plan() = default;

std::unique_ptr<Plan> Plan::capture(const std::function<void()>& fn, std::string* why_not) {
  MIXPREC_CHECK(detail::capture_recorder() == nullptr, "graph capture: a capture is already running on this thread");
  std::unique_ptr<Plan> plan(new Plan());
  auto rec = std::make_unique<Recorder>();
  rec->kernels = &plan->kernels_;
  rec->first_id = Storage::allocate(0, Device::cpu())->id() + 1;
  detail::capture_recorder() = rec.get();
  try {
    fn();
  } catch (...) {
    detail::capture_recorder() = nullptr;
    throw;
  }
  detail::capture_recorder() = nullptr;
  plan->stats_.kernels = static_cast<int64_t>(plan->kernels_.size());
  if (!rec->failure.empty()) {
    if (why_not) *why_not = rec->failure;
    return nullptr;
  }
  plan->rec_ = std::move(rec);
  return plan;
}

void Plan::replay() const {
  for (const std::function<void()>& k : kernels_) k();
}

namespace {

struct Buffer {
  Storage* storage;
  int64_t bytes, first, last, offset = 0;
  bool output = false;
};

int64_t align_up(int64_t n) {
  const auto a = static_cast<int64_t>(kAllocAlignment);
  return (n + a - 1) / a * a;
}

// Offsets for buffers with lifetimes [first, last], in the order given: each in the smallest gap
// that fits among the placed buffers alive at the same time. Returns the arena size.
int64_t place(std::vector<Buffer>& buffers) {
  int64_t total = 0;
  std::vector<const Buffer*> placed;
  for (Buffer& b : buffers) {
    std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of overlapping buffers
    for (const Buffer* p : placed)
      if (p->first <= b.last && b.first <= p->last) busy.emplace_back(p->offset, p->offset + p->bytes);
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (auto [lo, hi] : busy) {
      if (lo - at >= b.bytes && lo - at < best_gap) {
        best = at;
        best_gap = lo - at;
      }
      at = std::max(at, align_up(hi));
    }
    b.offset = best >= 0 ? best : at;
    total = std::max(total, b.offset + b.bytes);
    placed.push_back(&b);
  }
  return total;
}

// Best-fit placement in two orders, the smaller arena kept: largest first (big buffers do not
// fragment the small ones' gaps) and in the order the kernels first use them (as eager's
// allocator meets them, which wins when lifetimes nest like a stack).
int64_t assign_offsets(std::vector<Buffer>& buffers) {
  std::vector<Buffer> by_time = buffers;
  std::sort(buffers.begin(), buffers.end(), [](const Buffer& a, const Buffer& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  std::sort(by_time.begin(), by_time.end(), [](const Buffer& a, const Buffer& b) {
    return a.first != b.first ? a.first < b.first : a.bytes > b.bytes;
  });
  const int64_t by_size_total = place(buffers), by_time_total = place(by_time);
  if (by_time_total >= by_size_total) return by_size_total;
  buffers = std::move(by_time);
  return by_time_total;
}

}  // namespace

// Who holds each storage made during the capture: copying one kernel's work raises the use count
// of exactly the tensors it captured, so each view's holders are the kernels whose copy raised
// it. A storage is internal when nothing outside the plan explains a reference to it (inputs,
// outputs, parameters, buffers and caches are held elsewhere) and the host never wrote it.
fusion::Holdings Plan::Recorder::holdings(const std::vector<std::function<void()>>& kernels_,
                                          const std::vector<Tensor>& outputs) {
  Recorder& r = *this;
  std::unordered_map<const TensorImpl*, long> base;
  for (auto& [key, impl] : r.impls) base.emplace(key, impl.use_count());
  std::unordered_map<const TensorImpl*, std::vector<int64_t>> held_by;  // kernel, once per ref
  for (size_t k = 0; k < kernels_.size(); ++k) {
    if (!kernels_[k]) continue;
    const std::function<void()> copy = kernels_[k];
    for (auto& [key, count] : base)
      for (long extra = r.impls[key].use_count() - count; extra > 0; --extra)
        held_by[key].push_back(static_cast<int64_t>(k));
  }
  for (auto& [key, ks] : r.owned)
    for (int64_t k : ks)
      if (kernels_[static_cast<size_t>(k)]) held_by[key].push_back(k);
  std::unordered_map<const Storage*, std::vector<const TensorImpl*>> views;
  for (auto& [key, count] : base) views[r.impls[key]->storage.get()].push_back(key);
  std::unordered_set<const Storage*> returned;
  for (const Tensor& t : outputs)
    if (t.defined()) returned.insert(t.storage().get());
  fusion::Holdings out;
  for (auto& [key, u] : r.storages) {
    if (u.storage->id() < r.first_id || !u.storage->device().is_cpu()) continue;
    const std::vector<const TensorImpl*>& vs = views[key];
    fusion::Holding& h = out[key];
    h.internal = !u.host_written && u.storage.use_count() == static_cast<long>(vs.size()) + 1;
    for (const TensorImpl* v : vs) {
      auto it = held_by.find(v);
      const long held = it == held_by.end() ? 0 : static_cast<long>(it->second.size());
      h.internal = h.internal && base[v] == 1 + held;  // the recorder's reference + the kernels'
      if (held > 0) h.kernels.insert(h.kernels.end(), it->second.begin(), it->second.end());
    }
    h.output = !u.host_written && returned.count(key) > 0;
    h.first_touch = u.first;
    h.last_touch = u.last;
    std::sort(h.kernels.begin(), h.kernels.end());
    h.kernels.erase(std::unique(h.kernels.begin(), h.kernels.end()), h.kernels.end());
    for (int64_t k : h.kernels)
      if (r.reports_writes.count(k) == 0) h.writers.push_back(k);
    if (auto w = r.written.find(key); w != r.written.end())
      for (int64_t k : w->second)
        if (kernels_[static_cast<size_t>(k)]) h.writers.push_back(k);
    std::sort(h.writers.begin(), h.writers.end());
    h.writers.erase(std::unique(h.writers.begin(), h.writers.end()), h.writers.end());
  }
  return out;
}

void Plan::plan_memory(const std::vector<Tensor>& outputs) {
  if (!rec_) return;
  Recorder& r = *rec_;
  std::vector<fusion::Alias> aliases;
  if (env::get("MIXPREC_GRAPH_FUSE") != "0") {  // checked: 0 or 1
    const bool verbose = ops::verbose_level() > 0;
    stats_.fused = fusion::fuse(kernels_, r.holdings(kernels_, outputs), verbose);
    stats_.casts_elided = fusion::elide_round_trip_casts(kernels_, r.holdings(kernels_, outputs), aliases,
                                                         verbose);
  }
  // A storage that aliases another (through a chain of them, oldest first) keeps that one's
  // buffer alive until its own last use, and takes no buffer itself.
  std::unordered_map<const Storage*, const fusion::Alias*> alias_of;
  std::unordered_map<const Storage*, int64_t> alias_last;  // root storage -> last use through aliases
  for (const fusion::Alias& a : aliases) {
    alias_of[a.storage.get()] = &a;
    const Storage* root = a.target.get();
    while (alias_of.count(root)) root = alias_of[root]->target.get();
    alias_last[root] = std::max(alias_last[root], a.last);
  }
  const fusion::Holdings holds = r.holdings(kernels_, outputs);
  const auto end = static_cast<int64_t>(kernels_.size()) - 1;
  std::vector<Buffer> buffers;
  for (auto& [key, h] : holds) {
    if (alias_of.count(key)) continue;
    const Recorder::StorageUse& u = r.storages.at(key);
    const bool planned = (h.internal || h.output) && !h.kernels.empty();
    if (!h.kernels.empty() && !planned) stats_.held_bytes += static_cast<int64_t>(u.storage->nbytes());
    if (!planned) continue;
    // The span: the kernels holding it and those that touched it through data_ptr() at capture;
    // an output's lasts to the end. Made during the run, a buffer's first kernel writes it before
    // anything reads it (eager's memory was as uninitialised), so the bytes before its span are
    // free to share.
    const int64_t first = u.first < 0 ? h.kernels.front() : std::min(u.first, h.kernels.front());
    int64_t last = h.output ? end : std::max(u.last, h.kernels.back());
    if (auto al = alias_last.find(key); al != alias_last.end()) last = std::max(last, al->second);
    buffers.push_back(Buffer{u.storage.get(), align_up(static_cast<int64_t>(u.storage->nbytes())), first, last, 0,
                             h.output});
  }
  const int64_t total = assign_offsets(buffers);
  if (total > 0) {
    arena_ = Storage::allocate(static_cast<size_t>(total), Device::cpu());
    // Outputs keep the values the capture computed (the caller uses them now): no two outputs
    // share bytes (both live at the end), and nothing else is copied, so the copies cannot clash.
    for (const Buffer& b : buffers) {
      char* at = static_cast<char*>(arena_->data()) + b.offset;
      if (b.output) std::memcpy(at, b.storage->data(), b.storage->nbytes());
      b.storage->rebind_to_arena(at);
    }
  }
  for (const fusion::Alias& a : aliases)  // after their targets moved (a chain in order)
    a.storage->rebind_to_arena(static_cast<char*>(a.target->data()) + a.byte_offset);
  stats_.planned_buffers = static_cast<int64_t>(buffers.size());
  stats_.arena_bytes = total;
  for (const Buffer& b : buffers) stats_.unplanned_bytes += b.bytes;
  rec_.reset();
  std::erase_if(kernels_, [](const std::function<void()>& k) { return !k; });  // the fused-away
  stats_.kernels = static_cast<int64_t>(kernels_.size());
}

int64_t measure_peak(const std::function<void()>& fn) {
  const MemoryStats before = memory_stats();
  reset_peak_memory();
  try {
    fn();
  } catch (...) {
    detail::raise_peak(Device::cpu(), before.peak_bytes);
    throw;
  }
  const int64_t peak = memory_stats().peak_bytes;
  detail::raise_peak(Device::cpu(), before.peak_bytes);
  return peak - before.live_bytes;
}

}  // namespace mixprec::graph
