// The AMP multi-tensor ops (ops/amp_problem.h): argument checks, then dispatch to the kernel of
// the tensors' device. No autograd: these are optimizer-side, in-place updates; each bumps the
// versions of the tensors it writes.
#include "mixprec/ops/amp_device.h"

#include <cstdint>

#include "ops/amp_problem.h"
#include "ops/dispatch.h"

namespace mixprec::ops {

std::string AmpUnscaleProblem::describe() const {
  return std::to_string(grads.size()) + " gradients on " + device().str();
}
std::string AmpUpdateScaleProblem::describe() const { return "scale on " + device().str(); }
std::string AmpAdvanceStepProblem::describe() const {
  return std::to_string(table.defined() ? table.size(0) : 0) + " table rows on " + device().str();
}
std::string FusedMomentumProblem::describe() const {
  return std::to_string(params.size()) + " parameters on " + device().str() +
         (working.empty() ? "" : ", with working copies");
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
                       double min_scale) {
  constexpr std::string_view op = "amp_update_scale_";
  check_flag(op, "scale", scale, DType::f32, scale.defined() ? scale.device() : Device::cpu());
  check_flag(op, "growth_tracker", growth_tracker, DType::i32, scale.device());
  check_flag(op, "found_inf", found_inf, DType::f32, scale.device());
  MIXPREC_CHECK(growth_factor >= 1 && backoff_factor > 0 && backoff_factor <= 1 &&
                    growth_interval > 0 && min_scale >= 0,
                op,
                ": expected growth_factor >= 1, 0 < backoff_factor <= 1, growth_interval > 0, "
                "min_scale >= 0, got ",
                growth_factor, ", ", backoff_factor, ", ", growth_interval, ", ", min_scale);
  dispatch(OpId::amp_update_scale, "update",
           AmpUpdateScaleProblem{scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                 min_scale, growth_interval});
  scale.storage()->bump_version();
  growth_tracker.storage()->bump_version();
}

void fused_momentum_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& velocity, const std::vector<Tensor>& working,
                     const Tensor& found_inf, const Tensor& inv_scale,
                     const FusedMomentumOptions& options, const Tensor& lr) {
  constexpr std::string_view op = "fused_momentum_";
  if (params.empty()) return;
  const Device device = params.front().device();
  check_list(op, "parameters", params, params, device, true);
  check_list(op, "gradients", grads, params, device, false);
  check_list(op, "velocities", velocity, params, device, true);
  if (!working.empty()) {
    check_list(op, "working copies", working, params, device, false);
    for (size_t i = 0; i < working.size(); ++i)
      MIXPREC_CHECK(is_low_precision(working[i].dtype()), op, ": working copy ", i,
                    " must be f16 or bf16, got ", dtype_name(working[i].dtype()));
  }
  if (found_inf.defined()) check_flag(op, "found_inf", found_inf, DType::f32, device);
  if (inv_scale.defined()) check_flag(op, "inv_scale", inv_scale, DType::f32, device);
  if (lr.defined())
    MIXPREC_CHECK(
        lr.numel() >= 1 && lr.dtype() == DType::f32 && lr.is_contiguous() && lr.device() == device,
        op, ": lr must be a contiguous f32 tensor on ", device.str(), ", got ", desc(lr));
  const MomentumStep step{static_cast<float>(options.lr), static_cast<float>(options.momentum),
                          static_cast<float>(options.weight_decay), options.nesterov};
  dispatch(OpId::fused_momentum, "update",
           FusedMomentumProblem{params, grads, velocity, working, found_inf, inv_scale, step, lr});
  for (const auto* list : {&params, &velocity, &working})
    for (const Tensor& t : *list) t.storage()->bump_version();
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

}  // namespace mixprec::ops
