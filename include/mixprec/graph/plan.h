// GRAPH_MODE's captured plan: the kernels of one run of a function (a train step's forward and
// backward), recorded in order with the tensors they read and write, and replayed on the same
// buffers without dispatch, autograd nodes or allocation. Intermediates that nothing outside the
// plan holds share one arena, at offsets assigned from their liveness (greedy best-fit).
// Capture, planning and replay are explained in docs/design.md, "GRAPH_MODE".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::graph {

struct PlanStats {
  int64_t kernels = 0;           // kernel calls replayed in order (after fusion)
  int64_t fused = 0;             // recorded calls that fusion folded into others
  int64_t casts_elided = 0;      // casts back of a cast, removed (the result aliases the source)
  int64_t planned_buffers = 0;   // intermediates placed in the arena
  int64_t arena_bytes = 0;       // the arena they share (offsets by liveness)
  int64_t unplanned_bytes = 0;   // what the same intermediates take one buffer each
  int64_t held_bytes = 0;        // other buffers the plan holds apart (constants, outputs)
  int64_t eager_peak_bytes = 0;  // live bytes the captured (eager) run added at its peak
};

class Plan {
 public:
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Runs fn once, eagerly, recording its kernels. Returns the plan, or null with *why_not set
  // when the run cannot be replayed (a host read of a tensor value, a random draw): fn has run
  // either way and its results are valid.
  static std::unique_ptr<Plan> capture(const std::function<void()>& fn, std::string* why_not);

  // Fuses kernels (unless MIXPREC_GRAPH_FUSE=0), then moves the intermediates into the arena.
  // Call once, after the caller has dropped every tensor of the run it does not keep: what
  // anything outside the plan still holds (inputs, parameters, buffers) keeps its own memory and
  // is never fused away. `outputs` (made by the run; the gradients and loss of a train step) go
  // into the arena too, alive from their first kernel to the end of the plan, their values
  // copied over: they are valid after the capture and after each replay, until the next replay.
  void plan_memory(const std::vector<Tensor>& outputs = {});

  // Runs the recorded kernels again, in order, on the same buffers.
  void replay() const;

  const PlanStats& stats() const { return stats_; }

 private:
  struct Recorder;
  Plan() = default;
  std::shared_ptr<Storage> arena_;  // declared first: destroyed after the kernels that use it
  std::vector<std::function<void()>> kernels_;
  std::unique_ptr<Recorder> rec_;   // what capture saw, until plan_memory
  PlanStats stats_;
};

// Runs fn and returns the most live bytes it added above what was live before (the allocator's
// peak is restored afterwards, so a run's reported peak is unchanged).
int64_t measure_peak(const std::function<void()>& fn);

}  // namespace mixprec::graph
