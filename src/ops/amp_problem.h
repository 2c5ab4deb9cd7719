// The AMP multi-tensor family's problems (ops/amp_foreach.cpp): the fused unscale + finite check
// over every gradient, the dynamic loss-scale update, and the optimizers' fused updates (SGD,
// Momentum, Adam/AdamW) that skip themselves when the found-inf flag is set. Their state
// (found_inf, scale, growth tracker) lives in one-element tensors on the problem's device, so on a
// GPU the whole AMP step runs without the host reading anything (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_ and fused optimizers). The
// element formulas (finite_bits, DynamicScaleRule, SgdStep, MomentumStep, AdamStep) are written
// once here, host and device: kernels ref::* (the oracle), cpu::* and cuda::* all call them.
// Invariants the ops establish: every tensor on one device; tensor lists contiguous, same length,
// matching shapes; found_inf and inv_scale f32 [1]; growth_tracker i32 [1].
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mixprec/tensor.h"
#include "ops/elementwise_problem.h"  // MIXPREC_HD

namespace mixprec::ops {

// Whether an f32 value is finite, from its exponent bits (not inf, not NaN): the one test of every
// f32 finite check (the unscale kernels, the data-parallel flag).
MIXPREC_HD inline bool finite_bits(float v) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(v);
#else
  const uint32_t bits = std::bit_cast<uint32_t>(v);
#endif
  return (bits & 0x7f800000u) != 0x7f800000u;
}

// Whether v, rounded to nearest even into dt (f32, f16 or bf16), is finite: |v| below the first
// value that rounds to infinity (the largest finite value plus half its ulp: 65520 for f16,
// 0x1.ffp+127 for bf16) and not NaN. The check of the stored value without reading it back: a
// fixed loss scale below 1 makes g / scale larger than g, finite in f32 but inf in f16.
MIXPREC_HD inline bool stores_finite(float v, DType dt) {
  if (dt != DType::f16 && dt != DType::bf16) return finite_bits(v);
  const float a = v < 0 ? -v : v;
  return a < (dt == DType::f16 ? 0x1.ffep+15f : 0x1.ffp+127f);
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

// The dynamic loss-scale rule, all in f32, written once: every backend's scale-update kernel and
// the loss-scale manager call it. Overflow: scale = max(scale / backoff_divisor, min_scale),
// tracker = 0. Else, when tracker + 1 reaches growth_interval: scale * growth_factor, kept only if
// finite and <= max_scale, and tracker = 0; otherwise tracker += 1. (PyTorch's _amp_update_scale_
// multiplies by a backoff factor b; with b = 1 / divisor that is the same number for every power
// of two, PyTorch's 0.5 included. MindSpore's functional DynamicLossScaler keeps its own rule.)
struct DynamicScaleRule {
  float growth_factor = 2.0f, backoff_divisor = 2.0f, min_scale = 1.0f;
  float max_scale = std::numeric_limits<float>::max();
  int64_t growth_interval = 2000;
  MIXPREC_HD void operator()(float& scale, int32_t& tracker, bool overflow) const {
    if (overflow) {
      const float backed = scale / backoff_divisor;
      scale = backed < min_scale ? min_scale : backed;
      tracker = 0;
    } else if (int64_t{tracker} + 1 >= growth_interval) {
      const float grown = scale * growth_factor;
      if (finite_bits(grown) && grown <= max_scale) scale = grown;
      tracker = 0;
    } else {
      tracker += 1;
    }
  }
};

// scale and growth_tracker updated in place by `rule` from found_inf (!= 0: overflow), on the
// device.
struct AmpUpdateScaleProblem {
  Tensor scale, growth_tracker, found_inf;
  DynamicScaleRule rule{};
  Device device() const { return scale.device(); }
  std::string describe() const;
};

// The optimizers' element updates, g already multiplied by the gradient scale. kSlots: the f32
// state arrays an element reads and writes (operator()'s arguments between p and g); kScalars: the
// leading entries of optim::Optimizer::step_scalars that read_scalars takes (the step-dependent
// values, read on the device when the problem carries them). The operation order is the f32
// arithmetic optim's tests and trajectories pin bit for bit: do not reassociate.
// SGD: p -= lr * (g + wd * p). Not Momentum with momentum 0: that writes -0 differently.
struct SgdStep {
  static constexpr int kSlots = 0, kScalars = 1;
  static constexpr std::array<const char*, 0> kSlotNames{};
  float lr, weight_decay;
  MIXPREC_HD void read_scalars(const float* s) { lr = s[0]; }
  MIXPREC_HD void operator()(float& p, float g) const { p -= lr * (g + weight_decay * p); }
};

// Momentum (MindSpore's nn.Momentum, PyTorch's SGD with momentum and dampening 0): weight decay,
// velocity, then the step.
struct MomentumStep {
  static constexpr int kSlots = 1, kScalars = 1;
  static constexpr std::array<const char*, 1> kSlotNames{"velocities"};
  float lr, momentum, weight_decay;
  bool nesterov;
  MIXPREC_HD void read_scalars(const float* s) { lr = s[0]; }
  MIXPREC_HD void operator()(float& p, float& v, float g) const {
    g += weight_decay * p;
    v = momentum * v + g;
    p -= nesterov ? lr * (g + momentum * v) : lr * v;
  }
};

// Adam (L2 decay added to the gradient) and AdamW (decoupled: p -= lr * wd * p first), with the
// bias corrections c1 = 1 / (1 - beta1^t), c2 = 1 / (1 - beta2^t) given as numbers.
struct AdamStep {
  static constexpr int kSlots = 2, kScalars = 3;
  static constexpr std::array<const char*, 2> kSlotNames{"first moments", "second moments"};
  float lr, beta1, beta2, eps, weight_decay, c1 = 1.0f, c2 = 1.0f;
  bool decoupled;
  MIXPREC_HD void read_scalars(const float* s) {
    lr = s[0];
    c1 = s[1];
    c2 = s[2];
  }
  MIXPREC_HD void operator()(float& p, float& m, float& v, float g) const {
    if (decoupled)
      p -= lr * weight_decay * p;
    else
      g += weight_decay * p;
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    p -= lr * (m * c1) / (std::sqrt(v * c2) + eps);
  }
};

// Element i of one parameter: step on p[i] and its state slots s0[i], s1[i] (Step::kSlots of them
// used), g its scaled gradient. The one place a kernel spells out a step's arguments.
template <class Step> MIXPREC_HD inline void step_at(const Step& step, int64_t i, float* p,
                                                     float* s0, float* s1, float g) {
  if constexpr (Step::kSlots == 0)
    step(p[i], g);
  else if constexpr (Step::kSlots == 1)
    step(p[i], s0[i], g);
  else
    step(p[i], s0[i], s1[i], g);
}

// An optimizer's update of every parameter at once. Unless found_inf != 0 (then nothing is
// written): for every i, g = grads[i] * inv_scale, the Step on params[i] (f32 master) and its
// state[k][i] (f32), then working[i] (f16/bf16, when given) = params[i] rounded once. With
// scalars defined (f32, at least Step::kScalars elements, read on the device), step.read_scalars
// takes the step's learning rate (and bias corrections) from there.
template <class Step> struct FusedUpdateProblem {
  std::vector<Tensor> params, grads;
  std::array<std::vector<Tensor>, Step::kSlots> state;  // one per param each
  std::vector<Tensor> working;                          // empty or one per param
  Tensor found_inf;                                     // undefined: never skip
  Tensor inv_scale;                                     // undefined: 1
  Step step{};
  Tensor scalars;  // undefined: step's own lr (and corrections)
  Device device() const { return params.front().device(); }
  std::string describe() const {
    return std::to_string(params.size()) + " parameters on " + device().str() +
           (working.empty() ? "" : ", with working copies");
  }
  // What the host kernels (cpu, ref) read before their loops: whether found_inf says skip, the
  // step with its scalars read, the gradient multiplier, parameter t's state pointers.
  bool skipped_on_host() const { return found_inf.defined() && *found_inf.data<float>() != 0; }
  Step step_on_host() const {
    Step s = step;
    if (scalars.defined()) s.read_scalars(scalars.data<float>());
    return s;
  }
  float inv_scale_on_host() const { return inv_scale.defined() ? *inv_scale.data<float>() : 1; }
  std::array<float*, 2> state_of(size_t t) const {
    std::array<float*, 2> s{nullptr, nullptr};
    for (int k = 0; k < Step::kSlots; ++k) s[k] = state[k][t].template data<float>();
    return s;
  }
};
using FusedSgdProblem = FusedUpdateProblem<SgdStep>;
using FusedMomentumProblem = FusedUpdateProblem<MomentumStep>;
using FusedAdamProblem = FusedUpdateProblem<AdamStep>;

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

// The clip stage of the train step (src/amp/step): the global L2 norm of every gradient times
// unscale = 1 / (scale * micro_batches) (f64; the scale, f32 [], read where the tensors live,
// undefined: 1), the squares summed in f64 over chunks of kClipChunk elements of each tensor and
// the chunk sums added in order, tensor by tensor, so every rank and device gets the same bits
// from the same gradients. When found_inf (f32 []) is already set, norm (f64 []) = -1 and nothing
// else is written; otherwise norm = that norm, a non-finite norm sets found_inf, and a finite one
// sets inv_scale (f32 []) = unscale * (norm > max_norm ? max_norm / norm : 1), in f64 rounded once.
struct AmpClipProblem {
  std::vector<Tensor> grads;  // f32, f16 or bf16, contiguous
  Tensor scale, found_inf, inv_scale, norm;
  int64_t micro_batches = 1;
  double max_norm = 1.0;
  Device device() const { return found_inf.device(); }
  std::string describe() const;
};
inline constexpr int64_t kClipChunk = 4096;
MIXPREC_HD inline double clip_unscale(float scale, int64_t micro_batches) {
  return 1.0 / (static_cast<double>(scale) * static_cast<double>(micro_batches));
}
// AmpClipProblem's decision from the sum of squares (sqrt taken here).
MIXPREC_HD inline void clip_decide(double sum_sq, double unscale, double max_norm, float* found_inf,
                                   float* inv_scale, double* norm) {
  const double n = std::sqrt(sum_sq);
  *norm = n;
  if (!std::isfinite(n)) {
    *found_inf = 1.0f;
    return;
  }
  *inv_scale = static_cast<float>(n > max_norm ? unscale * (max_norm / n) : unscale);
}

}  // namespace mixprec::ops
