// The AMP multi-tensor family's problems (ops/amp_foreach.cpp): the fused unscale + finite check
// over every gradient, the dynamic loss-scale update, and the fused momentum step that skips
// itself when the found-inf flag is set. Their state (found_inf, scale, growth tracker) lives in
// one-element tensors on the problem's device, so on a GPU the whole AMP step runs without the
// host reading anything (PyTorch's _amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_
// and fused optimizers). Kernels: ref::amp_* (the oracle), cuda::amp_* (one launch each).
// Invariants the ops establish: every tensor on one device; tensor lists contiguous, same length,
// matching shapes; found_inf and inv_scale f32 [1]; growth_tracker i32 [1].
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "mixprec/tensor.h"
#include "ops/elementwise_problem.h"  // MIXPREC_HD

namespace mixprec::ops {

// Whether v, rounded to nearest even into dt (f32, f16 or bf16), is finite: |v| below the first
// value that rounds to infinity (the largest finite value plus half its ulp: 65520 for f16,
// 0x1.ffp+127 for bf16) and not NaN. The check of the stored value without reading it back: a
// fixed loss scale below 1 makes g / scale larger than g, finite in f32 but inf in f16.
MIXPREC_HD inline bool stores_finite(float v, DType dt) {
  const float a = v < 0 ? -v : v;
  return a < (dt == DType::f16    ? 0x1.ffep+15f
              : dt == DType::bf16 ? 0x1.ffp+127f
                                  : std::numeric_limits<float>::infinity());
}

// grads[i] *= inv_scale (f32 arithmetic, rounded into the gradient's dtype); found_inf = 1 when
// any stored value (after that rounding: stores_finite) is inf or NaN (never reset here: the
// caller zeroes it once per step).
struct AmpUnscaleProblem {
  std::vector<Tensor> grads;  // f32, f16 or bf16, contiguous, updated in place
  Tensor found_inf, inv_scale;
  Device device() const { return found_inf.device(); }
  std::string describe() const;
};

// found_inf: scale = max(scale * backoff, min_scale), tracker = 0. Else tracker += 1, and when
// it reaches growth_interval: scale *= growth (kept only if finite), tracker = 0. In f32, on the
// device (PyTorch's _amp_update_scale_, plus mixprec's floor of 1).
struct AmpUpdateScaleProblem {
  Tensor scale, growth_tracker, found_inf;
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 1.0;
  int64_t growth_interval = 2000;
  Device device() const { return scale.device(); }
  std::string describe() const;
};

// One element of optim::Momentum's update (optim/optimizer.cpp runs the same functor), with
// g already multiplied by the gradient scale: weight decay, velocity, then the step.
struct MomentumStep {
  float lr, momentum, weight_decay;
  bool nesterov;
  MIXPREC_HD void operator()(float& p, float& v, float g) const {
    g += weight_decay * p;
    v = momentum * v + g;
    p -= nesterov ? lr * (g + momentum * v) : lr * v;
  }
};

// For every i unless found_inf != 0 (then nothing is written): g = grads[i] * inv_scale, the
// MomentumStep on params[i] (f32 master) and velocity[i] (f32), then working[i] (f16/bf16, when
// given) = params[i] rounded once. With lr defined, the step's learning rate is lr's first
// element, read on the device (step.lr is ignored).
struct FusedMomentumProblem {
  std::vector<Tensor> params, grads, velocity, working;  // working: empty or one per param
  Tensor found_inf;                                      // undefined: never skip
  Tensor inv_scale;                                      // undefined: 1
  MomentumStep step{};
  Tensor lr;  // f32, at least one element; undefined: step.lr
  Device device() const { return params.front().device(); }
  std::string describe() const;
};

// The optimizer's step count on the device, so that a step's learning rate never waits for the
// host to learn whether the steps still in flight were skipped. count (i32 [1]) is the number of
// applied updates; the host knows it is at least `base`, and row j of `table` (f32 [rows, width])
// holds the step-dependent scalars of update base + j (optim::Optimizer::step_scalars). The
// kernel copies row count - base into `out` (f32 [width]) and then, unless found_inf (f32 [1];
// undefined: never) is set, adds 1 to count. A count outside the table writes NaN into `out`
// (the host's bookkeeping is wrong; the update then poisons the weights visibly).
struct AmpAdvanceStepProblem {
  Tensor count, found_inf, table, out;
  int64_t base = 0;
  Device device() const { return count.device(); }
  std::string describe() const;
};

}  // namespace mixprec::ops
