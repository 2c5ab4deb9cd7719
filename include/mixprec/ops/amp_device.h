// AMP's multi-tensor updates with their state in device tensors, so that a mixed-precision
// step on a GPU never waits for the host: PyTorch's _amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_ and fused SGD, Momentum and Adam/AdamW steps that read the found-inf flag
// themselves and skip. They run on the CPU too (the cpu kernels, checked against the reference
// kernels, which the CUDA ones are tested against: the same bits on every device); the
// optimizers' step() is these. found_inf / inv_scale / scale: f32 tensors of one element;
// growth_tracker: i32.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// Multiplies every gradient by inv_scale in place and sets found_inf to 1 if any result is inf
// or NaN (found_inf is not reset: zero it once per step). One launch on a GPU for all of them.
void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads,
                                               const Tensor& found_inf, const Tensor& inv_scale);

// The dynamic loss scale's update from found_inf, on the tensors' device, in f32 (the rule of
// ops/amp_problem.h, DynamicScaleRule): overflow divides the scale by 1 / backoff_factor (exact
// for a power of two, PyTorch's 0.5 among them) down to min_scale; growth_interval clean steps
// multiply it by growth_factor unless that is inf or above max_scale. CPU tensors work too.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval,
                       double min_scale = 1.0,
                       double max_scale = std::numeric_limits<float>::max());

// The fused optimizer updates below share their arguments: params (f32 masters) and their state
// (f32), gradients (f32, f16 or bf16), all contiguous, one per parameter, on one device; the whole
// update is skipped when found_inf != 0 (decided where the tensors live; undefined: never
// skipped); gradients are multiplied by inv_scale first (undefined: 1); the f16/bf16 working
// copies are refreshed from the new f32 weights when `working` is not empty. The step's scalars
// may come as a tensor read where the tensors live (amp_advance_step_ writes it), else from the
// options. Each is bit for bit optim's optimizer of the same name, on every device.

struct FusedSgdOptions {
  double lr = 0.01;
  double weight_decay = 0.0;
};
// optim::SGD's update; `lr` (f32; undefined: options.lr): the learning rate is its first element.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& working, const Tensor& found_inf,
                const Tensor& inv_scale, const FusedSgdOptions& options,
                const Tensor& lr = Tensor());

struct FusedMomentumOptions {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};
// optim::Momentum's update over `velocity`; `lr` (f32; undefined: options.lr): the learning rate
// is its first element.
void fused_momentum_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& velocity, const std::vector<Tensor>& working,
                     const Tensor& found_inf, const Tensor& inv_scale,
                     const FusedMomentumOptions& options, const Tensor& lr = Tensor());

struct FusedAdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  // 1 / (1 - beta1^t), 1 / (1 - beta2^t) of this update's count t
  double bias_correction1 = 1.0;
  double bias_correction2 = 1.0;
};
// optim::Adam's (decoupled: AdamW's) update over the moments exp_avg and exp_avg_sq. `scalars`
// (f32 [3]; undefined: the options'): {learning rate, bias_correction1, bias_correction2}.
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                 const std::vector<Tensor>& working, const Tensor& found_inf,
                 const Tensor& inv_scale, const FusedAdamOptions& options,
                 const Tensor& scalars = Tensor());

// The optimizer's applied-step count kept on the device, for steps queued before the host knows
// whether the steps before them were skipped: `out` (f32 [width]) = row count - base of `table`
// (f32 [rows, width]: row j = optim::Optimizer::step_scalars(base + j), the learning rate and
// whatever else depends on the step), then count (i32 [1]) += 1 unless found_inf (f32 [1];
// undefined: never skipped) is set. A count outside [base, base + rows) writes NaN into `out`.
// Clipping by the global norm, decided where the tensors live (ops/amp_problem.h, AmpClipProblem):
// unless found_inf (f32 []) is set (then norm = -1), norm (f64 []) = || grads * unscale ||_2 with
// unscale = 1 / (scale * micro_batches) (scale f32 [], undefined: 1), summed in f64 in a fixed
// order; a non-finite norm sets found_inf, otherwise inv_scale (f32 []) = unscale, times max_norm /
// norm when the norm is above max_norm: the multiplier the fused update reads the gradients with.
void amp_clip_by_global_norm_(const std::vector<Tensor>& grads, const Tensor& scale,
                              int64_t micro_batches, double max_norm, const Tensor& found_inf,
                              const Tensor& inv_scale, const Tensor& norm);

void amp_advance_step_(const Tensor& count, const Tensor& found_inf, const Tensor& table,
                       int64_t base, const Tensor& out);

}  // namespace mixprec::ops
