// Numerics you can see, at the op level: a thread-local checker that finds the first op (in
// execution order, forward or backward) whose output holds inf or NaN and records where it ran,
// and per-thread AMP counters (casts performed and their bytes, FLOPs run in low precision).
// Both cost nothing when off. The autograd engine reports backward ops; finish() forward ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mixprec/ops/registry.h"
#include "mixprec/tensor.h"

namespace mixprec {

struct NonFiniteEvent {
  OpId op = OpId::add;
  std::string op_name;          // op (forward) or node (backward) name
  std::string cell;             // cell path that ran the op ("" = the network itself)
  std::string phase;            // "forward" or "backward"
  std::string detail;           // e.g. "gradient w.r.t. input 1 (weight)"
  DType dtype = DType::f32;     // dtype of the non-finite tensor
  double input_max_abs = 0.0;   // max |x| over the op's inputs (forward) or incoming gradients
  int64_t nonfinite_count = 0;  // how many values of the output are inf/NaN
  bool has_nan = false;
};

// While alive, the first non-finite op output on this thread is recorded (later ones are not).
class NumericsCheckScope {
 public:
  NumericsCheckScope();
  ~NumericsCheckScope();
  NumericsCheckScope(const NumericsCheckScope&) = delete;
  NumericsCheckScope& operator=(const NumericsCheckScope&) = delete;
  const std::optional<NonFiniteEvent>& first() const { return first_; }
  void record(NonFiniteEvent e);

 private:
  NumericsCheckScope* prev_;
  std::optional<NonFiniteEvent> first_;
};
// The innermost active scope, or null. Null while the autograd engine runs backward functions
// (the engine checks each node's gradients itself, naming the node rather than inner ops).
NumericsCheckScope* numerics_check();

// Set by the autograd engine for the duration of a backward pass.
class BackwardPhaseGuard {
 public:
  BackwardPhaseGuard();
  ~BackwardPhaseGuard();
  BackwardPhaseGuard(const BackwardPhaseGuard&) = delete;
  BackwardPhaseGuard& operator=(const BackwardPhaseGuard&) = delete;

 private:
  bool prev_;
};
// The active scope for the engine's own checks during backward (ignores the phase).
NumericsCheckScope* numerics_check_any_phase();

// Count of non-finite values, and max |value| over finite ones (0 for an empty tensor).
struct FiniteSummary {
  int64_t nonfinite = 0;
  bool has_nan = false;
  double max_abs = 0.0;
};
FiniteSummary summarize_finite(const Tensor& t);

// Per-thread AMP counters; reset and read by the train step.
struct AmpCounters {
  int64_t casts = 0;       // casts that copied data (cache hits excluded)
  int64_t cast_bytes = 0;  // bytes written by those casts
  int64_t flops = 0;       // forward FLOPs of GEMM-like ops
  int64_t low_flops = 0;   // the part that ran in f16/bf16
};
AmpCounters& amp_counters();

}  // namespace mixprec
