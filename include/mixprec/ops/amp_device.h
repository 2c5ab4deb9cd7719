// AMP's multi-tensor updates with their state in device tensors, so that a mixed-precision
// step on a GPU never waits for the host: PyTorch's _amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_ and a fused momentum step that reads the found-inf flag itself and skips.
// They run on the CPU too (the reference kernels), which is what the CUDA ones are tested
// against. found_inf / inv_scale / scale: f32 tensors of one element; growth_tracker: i32.
#pragma once

#include <cstdint>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// Multiplies every gradient by inv_scale in place and sets found_inf to 1 if any result is inf
// or NaN (found_inf is not reset: zero it once per step). One launch on a GPU for all of them.
void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads,
                                               const Tensor& found_inf, const Tensor& inv_scale);

// The dynamic loss scale's update from found_inf, on the tensors' device (see amp_problem.h).
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval,
                       double min_scale = 1.0);

struct FusedMomentumOptions {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool nesterov = false;
};
// optim::Momentum's update on every parameter at once, skipped entirely when found_inf != 0
// (decided where the tensors live; undefined found_inf: never skipped); gradients multiplied by
// inv_scale first (undefined: 1); the f16/bf16 working copies refreshed from the new fp32
// weights when `working` is not empty. `lr` (f32, on the device; undefined: options.lr): the
// learning rate is its first element, read where the tensors live (amp_advance_step_ writes it).
void fused_momentum_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& velocity, const std::vector<Tensor>& working,
                     const Tensor& found_inf, const Tensor& inv_scale,
                     const FusedMomentumOptions& options, const Tensor& lr = Tensor());

// The optimizer's applied-step count kept on the device, for steps queued before the host knows
// whether the steps before them were skipped: `out` (f32 [width]) = row count - base of `table`
// (f32 [rows, width]: row j = optim::Optimizer::step_scalars(base + j), the learning rate and
// whatever else depends on the step), then count (i32 [1]) += 1 unless found_inf (f32 [1];
// undefined: never skipped) is set. A count outside [base, base + rows) writes NaN into `out`.
void amp_advance_step_(const Tensor& count, const Tensor& found_inf, const Tensor& table,
                       int64_t base, const Tensor& out);

}  // namespace mixprec::ops
