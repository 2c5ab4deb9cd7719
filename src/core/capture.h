// Core's half of GRAPH_MODE capture (the plan itself is src/graph): a thread-local recorder that
// the graph layer installs while it captures a train step. Every site that computes on tensor
// memory (ops::dispatch, strided copies, conversions, fills, host-side kernels) wraps the work in
// run_kernel(), which runs it and, while a recorder is active, hands the recorder a copy of the
// work to replay. The work must capture its tensors by value (never by reference): the copy runs
// again on later steps. Tensor::data_ptr() reports every access to the recorder, so that a read
// of a tensor value outside a kernel (a host decision) makes the step uncapturable.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "mixprec/tensor.h"

namespace mixprec::detail {

class CaptureRecorder {
 public:
  virtual ~CaptureRecorder() = default;
  // The work of one kernel, run once already; the recorder keeps it for replay.
  virtual void record(std::function<void()> work) = 0;
  // data_ptr() of `t` while recording; in_kernel: from inside run_kernel's work.
  virtual void touch(const std::shared_ptr<TensorImpl>& t, bool in_kernel) = 0;
  // Marks the capture as failed (the step still ran eagerly); the first reason wins.
  virtual void fail(std::string reason) = 0;
  // The last recorded kernel owns one reference to t that copying the kernel does not show (a
  // tensor behind a pointer the kernel shares, such as a pooling workspace).
  virtual void owns(const TensorImpl* t) = 0;
  // The kernel now running writes `s` (see capture_writes).
  virtual void writes(const Storage* s) = 0;
};

// The recorder active on this thread (null: not capturing), and the depth of run_kernel calls.
CaptureRecorder*& capture_recorder();
int& capture_depth();

// Runs `work` now; while capturing, records a copy of it (nested kernels run inside the outer one
// and are not recorded again).
template <class F> void run_kernel(F&& work) {
  CaptureRecorder* r = capture_recorder();
  if (r == nullptr || capture_depth() > 0) {
    work();
    return;
  }
  ++capture_depth();
  try {
    work();
  } catch (...) {
    --capture_depth();
    r->fail("a kernel threw during capture");
    throw;
  }
  --capture_depth();
  r->record(std::function<void()>(std::forward<F>(work)));
}

// From inside a kernel: tells the active recorder (if any) that the kernel holds `t` without
// reading it (a problem field this kernel ignores, e.g. max pooling's x when the argmax workspace
// serves; ops::RecordedCall reports every problem's inputs() / outputs() this way), so that
// memory planning sees every holder of t's storage. Without it the storage has
// a holder the plan cannot explain and keeps its own memory, outside the arena.
void capture_holds(const Tensor& t);

// After run_kernel: the kernel just recorded owns one reference to t (see CaptureRecorder::owns).
void capture_owns(const Tensor& t);

// From inside a kernel (its outermost level, not a kernel nested in it): the kernel writes t. A
// kernel that reports one write must report them all (ops::RecordedCall reports its problem's
// outputs(), a strided copy its destination); the plan takes a kernel that reports none as
// writing everything it holds.
void capture_writes(const Tensor& t);

}  // namespace mixprec::detail
