// The AMP multi-tensor ops (ops/amp_problem.h): argument checks, then dispatch to the kernel of
// the tensors' device. No autograd: these are optimizer-side, in-place updates; each bumps the
// versions of the tensors it writes.
#include "mixprec/ops/amp_device.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ops/amp_problem.h"
#include "ops/dispatch.h"

namespace mixprec::ops {

std::string AmpUnscaleProblem::describe() const {
  return std::to_string(grads.size()) + " gradients on " + device().str();
}
std::string AmpUpdateScaleProblem::describe() const { return "scale on " + device().str(); }
std::string AmpClipProblem::describe() const {
  return std::to_string(grads.size()) + " gradients on " + device().str();
}
std::string AmpAdvanceStepProblem::describe() const {
  return std::to_string(table.defined() ? table.size(0) : 0) + " table rows on " + device().str();
}

namespace {

void check_flag(std::string_view op, const char* what, const Tensor& t, DType dtype,
                Device device) {
  MIXPREC_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.is_contiguous(), op, ": ",
                what, " must be a one-element ", dtype_name(dtype), " tensor, got ",
                t.defined() ? desc(t) : std::string("undefined"));
  MIXPREC_CHECK(t.device() == device, op, ": ", what, " is on ", t.device().str(), ", expected ",
                device.str());
}

void check_list(std::string_view op, const char* what, const std::vector<Tensor>& ts,
                const std::vector<Tensor>& like, Device device, bool f32_only) {
  MIXPREC_CHECK(ts.size() == like.size(), op, ": expected ", like.size(), " ", what, ", got ",
                ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    MIXPREC_CHECK(t.defined() && t.is_contiguous() && t.device() == device, op, ": ", what, " ", i,
                  " must be a contiguous tensor on ", device.str());
    MIXPREC_CHECK(t.shape() == like[i].shape(), op, ": ", what, " ", i, " has shape ",
                  shape_str(t.shape()), ", expected ", shape_str(like[i].shape()));
    const DType d = t.dtype();
    MIXPREC_CHECK(f32_only ? d == DType::f32 : (d == DType::f32 || is_low_precision(d)), op, ": ",
                  what, " ", i, " must be ", f32_only ? "f32" : "f32, f16 or bf16", ", got ",
                  dtype_name(d));
  }
}

}  // namespace

void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads,
                                               const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr std::string_view op = "amp_foreach_non_finite_check_and_unscale_";
  check_flag(op, "found_inf", found_inf, DType::f32,
             found_inf.defined() ? found_inf.device() : Device::cpu());
  check_flag(op, "inv_scale", inv_scale, DType::f32, found_inf.device());
  check_list(op, "gradients", grads, grads, found_inf.device(), false);
  if (grads.empty()) return;
  dispatch(OpId::amp_unscale, "update", AmpUnscaleProblem{grads, found_inf, inv_scale});
  for (const Tensor& g : grads) g.storage()->bump_version();
  found_inf.storage()->bump_version();
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval,
                       double min_scale, double max_scale) {
  constexpr std::string_view op = "amp_update_scale_";
  check_flag(op, "scale", scale, DType::f32, scale.defined() ? scale.device() : Device::cpu());
  check_flag(op, "growth_tracker", growth_tracker, DType::i32, scale.device());
  check_flag(op, "found_inf", found_inf, DType::f32, scale.device());
  MIXPREC_CHECK(growth_factor >= 1 && backoff_factor > 0 && backoff_factor <= 1 &&
                    growth_interval > 0 && min_scale >= 0 && max_scale >= min_scale,
                op,
                ": expected growth_factor >= 1, 0 < backoff_factor <= 1, growth_interval > 0, "
                "0 <= min_scale <= max_scale, got ",
                growth_factor, ", ", backoff_factor, ", ", growth_interval, ", ", min_scale, ", ",
                max_scale);
  const DynamicScaleRule rule{.growth_factor = static_cast<float>(growth_factor),
                              .backoff_divisor = static_cast<float>(1.0 / backoff_factor),
                              .min_scale = static_cast<float>(min_scale),
                              .max_scale = static_cast<float>(
                                  std::min<double>(max_scale, std::numeric_limits<float>::max())),
                              .growth_interval = growth_interval};
  dispatch(OpId::amp_update_scale, "update",
           AmpUpdateScaleProblem{scale, growth_tracker, found_inf, rule});
  scale.storage()->bump_version();
  growth_tracker.storage()->bump_version();
}

namespace {

// The checks and the dispatch of an optimizer's fused update (FusedUpdateProblem<Step>); bumps the
// versions of everything it may write.
template <class Step>
void fused_update(std::string_view op, OpId id, const FusedUpdateProblem<Step>& p) {
  if (p.params.empty()) return;
  const Device device = p.params.front().device();
  check_list(op, "parameters", p.params, p.params, device, true);
  check_list(op, "gradients", p.grads, p.params, device, false);
  for (int k = 0; k < Step::kSlots; ++k)
    check_list(op, Step::kSlotNames[k], p.state[k], p.params, device, true);
  if (!p.working.empty()) {
    check_list(op, "working copies", p.working, p.params, device, false);
    for (size_t i = 0; i < p.working.size(); ++i)
      MIXPREC_CHECK(is_low_precision(p.working[i].dtype()), op, ": working copy ", i,
                    " must be f16 or bf16, got ", dtype_name(p.working[i].dtype()));
  }
  if (p.found_inf.defined()) check_flag(op, "found_inf", p.found_inf, DType::f32, device);
  if (p.inv_scale.defined()) check_flag(op, "inv_scale", p.inv_scale, DType::f32, device);
  const Tensor& s = p.scalars;
  if (s.defined())
    MIXPREC_CHECK(s.numel() >= Step::kScalars && s.dtype() == DType::f32 && s.is_contiguous() &&
                      s.device() == device,
                  op, ": the step's scalars must be a contiguous f32 tensor of at least ",
                  Step::kScalars, " elements on ", device.str(), ", got ", desc(s));
  dispatch(id, "update", p);
  for (const Tensor& t : p.params) t.storage()->bump_version();
  for (const std::vector<Tensor>& slot : p.state)
    for (const Tensor& t : slot) t.storage()->bump_version();
  for (const Tensor& t : p.working) t.storage()->bump_version();
}

}  // namespace

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& working, const Tensor& found_inf,
                const Tensor& inv_scale, const FusedSgdOptions& options, const Tensor& lr) {
  const SgdStep step{static_cast<float>(options.lr), static_cast<float>(options.weight_decay)};
  fused_update("fused_sgd_", OpId::fused_sgd,
               FusedSgdProblem{params, grads, {}, working, found_inf, inv_scale, step, lr});
}

void fused_momentum_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& velocity, const std::vector<Tensor>& working,
                     const Tensor& found_inf, const Tensor& inv_scale,
                     const FusedMomentumOptions& options, const Tensor& lr) {
  const MomentumStep step{static_cast<float>(options.lr), static_cast<float>(options.momentum),
                          static_cast<float>(options.weight_decay), options.nesterov};
  fused_update(
      "fused_momentum_", OpId::fused_momentum,
      FusedMomentumProblem{params, grads, {velocity}, working, found_inf, inv_scale, step, lr});
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                 const std::vector<Tensor>& working, const Tensor& found_inf,
                 const Tensor& inv_scale, const FusedAdamOptions& options, const Tensor& scalars) {
  const AdamStep step{.lr = static_cast<float>(options.lr),
                      .beta1 = static_cast<float>(options.beta1),
                      .beta2 = static_cast<float>(options.beta2),
                      .eps = static_cast<float>(options.eps),
                      .weight_decay = static_cast<float>(options.weight_decay),
                      .c1 = static_cast<float>(options.bias_correction1),
                      .c2 = static_cast<float>(options.bias_correction2),
                      .decoupled = options.decoupled};
  fused_update(
      "fused_adam_", OpId::fused_adam,
      FusedAdamProblem{
          params, grads, {exp_avg, exp_avg_sq}, working, found_inf, inv_scale, step, scalars});
}

void amp_advance_step_(const Tensor& count, const Tensor& found_inf, const Tensor& table,
                       int64_t base, const Tensor& out) {
  constexpr std::string_view op = "amp_advance_step_";
  check_flag(op, "count", count, DType::i32, count.defined() ? count.device() : Device::cpu());
  const Device device = count.device();
  if (found_inf.defined()) check_flag(op, "found_inf", found_inf, DType::f32, device);
  MIXPREC_CHECK(table.defined() && table.dim() == 2 && table.size(0) >= 1 && table.size(1) >= 1 &&
                    table.dtype() == DType::f32 && table.is_contiguous() &&
                    table.device() == device,
                op, ": table must be a contiguous f32 [rows, width] tensor on ", device.str(),
                ", got ", table.defined() ? desc(table) : std::string("undefined"));
  MIXPREC_CHECK(out.defined() && out.numel() == table.size(1) && out.dtype() == DType::f32 &&
                    out.is_contiguous() && out.device() == device,
                op, ": out must be a contiguous f32 tensor of ", table.size(1), " elements on ",
                device.str(), ", got ", out.defined() ? desc(out) : std::string("undefined"));
  MIXPREC_CHECK(base >= 0 && base <= INT32_MAX, op, ": base must be in [0, 2^31), got ", base);
  dispatch(OpId::amp_advance_step, "update",
           AmpAdvanceStepProblem{count, found_inf, table, out, base});
  count.storage()->bump_version();
  out.storage()->bump_version();
}

void amp_clip_by_global_norm_(const std::vector<Tensor>& grads, const Tensor& scale,
                              int64_t micro_batches, double max_norm, const Tensor& found_inf,
                              const Tensor& inv_scale, const Tensor& norm) {
  constexpr std::string_view op = "amp_clip_by_global_norm_";
  check_flag(op, "found_inf", found_inf, DType::f32,
             found_inf.defined() ? found_inf.device() : Device::cpu());
  const Device device = found_inf.device();
  if (scale.defined()) check_flag(op, "scale", scale, DType::f32, device);
  check_flag(op, "inv_scale", inv_scale, DType::f32, device);
  check_flag(op, "norm", norm, DType::f64, device);
  MIXPREC_CHECK(micro_batches >= 1, op, ": micro_batches must be >= 1, got ", micro_batches);
  MIXPREC_CHECK(max_norm > 0 && max_norm < std::numeric_limits<double>::infinity(), op,
                ": max_norm must be finite and > 0, got ", max_norm);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    MIXPREC_CHECK(g.defined() && g.is_contiguous() && g.device() == device &&
                      (g.dtype() == DType::f32 || is_low_precision(g.dtype())),
                  op, ": gradient ", i, " must be a contiguous f32, f16 or bf16 tensor on ",
                  device.str(), ", got ", g.defined() ? desc(g) : std::string("undefined"));
  }
  dispatch(OpId::amp_clip, "update",
           AmpClipProblem{grads, scale, found_inf, inv_scale, norm, micro_batches, max_norm});
  for (const Tensor* t : {&found_inf, &inv_scale, &norm}) t->storage()->bump_version();
}

}  // namespace mixprec::ops
