// Optimizer base (parameter and gradient checks, state, step counting, working copies, the one
// update route: fused_step) and the Momentum, SGD, Adam and AdamW updates, each one multi-tensor
// op of ops/amp_device.h whose element formula is in ops/amp_problem.h (the kernels, cpu/ref/
// cuda, run it in chunks: update a chunk of fp32 weights, then round it into the low-precision
// working copy while it is in cache).
#include "mixprec/optim/optimizer.h"

#include <cmath>

#include "mixprec/error.h"
#include "ops/cast_cache.h"
#include "mixprec/grad_mode.h"
#include "mixprec/ops/amp_device.h"
#include "mixprec/ops/ops.h"

namespace mixprec::optim {

// ---------------------------------------------------------------- learning rates

LearningRate::LearningRate(double lr)
    : LearningRate([lr](int64_t) { return lr; }, "constant(" + std::to_string(lr) + ")") {
  MIXPREC_CHECK(std::isfinite(lr) && lr >= 0, "learning rate must be finite and >= 0, got ", lr);
}

LearningRate LearningRate::constant(double lr) { return LearningRate(lr); }

LearningRate LearningRate::step_decay(double lr, int64_t step_size, double gamma) {
  MIXPREC_CHECK(step_size > 0 && gamma > 0, "step_decay: expected step_size > 0 and gamma > 0");
  return LearningRate(
      [=](int64_t s) { return lr * std::pow(gamma, static_cast<double>(s / step_size)); },
      "step(" + std::to_string(lr) + ", every " + std::to_string(step_size) + ", x" +
          std::to_string(gamma) + ")");
}

LearningRate LearningRate::cosine(double lr, int64_t total, double min_lr) {
  MIXPREC_CHECK(total > 0, "cosine: expected total_steps > 0, got ", total);
  return LearningRate(
      [=](int64_t s) {
        if (s >= total) return min_lr;
        const double t = static_cast<double>(s) / static_cast<double>(total);
        return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(M_PI * t));
      },
      "cosine(" + std::to_string(lr) + " -> " + std::to_string(min_lr) + " over " +
          std::to_string(total) + ")");
}

LearningRate LearningRate::with_warmup(int64_t steps) const {
  MIXPREC_CHECK(steps >= 0, "warmup: expected steps >= 0");
  auto base = fn_;
  return LearningRate(
      [=](int64_t s) {
        if (s < steps) return base(0) * static_cast<double>(s + 1) / static_cast<double>(steps);
        return base(s - steps);
      },
      "warmup(" + std::to_string(steps) + ") then " + description_);
}

// ---------------------------------------------------------------- base

Optimizer::Optimizer(std::vector<Tensor> params, LearningRate lr, double weight_decay,
                     int num_state_slots, std::string name)
    : params_(std::move(params)),
      lr_(std::move(lr)),
      weight_decay_(weight_decay),
      name_(std::move(name)) {
  MIXPREC_CHECK(!params_.empty(), name_, ": no parameters to optimize",
                Hint{"pass net.trainable_params()"});
  MIXPREC_CHECK(weight_decay >= 0 && std::isfinite(weight_decay), name_,
                ": weight_decay must be >= 0, got ", weight_decay);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    MIXPREC_CHECK(
        p.defined() && p.dtype() == DType::f32 && p.is_contiguous() && p.is_leaf(), name_,
        ": parameter ", i, " must be a contiguous fp32 leaf (master weights are fp32), got ",
        p.defined() ? std::string(dtype_name(p.dtype())) : "undefined",
        Hint{"keep parameters in fp32 and let AMP cast them (amp::auto_mixed_precision)"});
    std::vector<Tensor> slots;
    for (int s = 0; s < num_state_slots; ++s)
      slots.push_back(zeros(p.shape(), {.device = p.device()}));
    state_.push_back(std::move(slots));
  }
}

void Optimizer::attach_working_copies(CastCache* cache, DType dtype) {
  MIXPREC_CHECK(is_low_precision(dtype), name_, ": working copies must be f16 or bf16, got ",
                dtype_name(dtype));
  cache_ = cache;
  low_dtype_ = dtype;
  working_.clear();
  NoGradGuard ng;
  for (const Tensor& p : params_) {
    Tensor low = ops::amp_cast(p.detach(), dtype);
    working_.push_back(low);
    if (cache_) cache_->store(p, low, /*persistent=*/true);
  }
}

void Optimizer::refresh_working_copies() {
  if (working_.empty()) return;
  attach_working_copies(cache_, low_dtype_);
}

void Optimizer::detach_working_copies() {
  working_.clear();
  cache_ = nullptr;
}

void Optimizer::to(Device device) {
  bool there = true;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const Tensor& s : state_[i]) there &= s.device() == device;
    there &= working_.empty() || working_[i].device() == device;
  }
  if (there) return;
  for (std::vector<Tensor>& slots : state_)
    for (Tensor& s : slots) s = s.to(device);
  if (working_.empty()) return;
  if (cache_) cache_->clear();                // entries keyed by the storages the parameters left
  attach_working_copies(cache_, low_dtype_);  // from the moved masters, on their device
}

void Optimizer::follow_parameters() {
  const Device device = params_.front().device();
  for (size_t i = 0; i < params_.size(); ++i)
    MIXPREC_CHECK(params_[i].device() == device, name_, ": parameter ", i, " is on ",
                  params_[i].device().str(), ", parameter 0 on ", device.str(),
                  Hint{"move the whole network at once: net.to(device)"});
  to(device);  // nothing when the state is there already
}

Tensor Optimizer::step_scalars_on(Device device) const {
  const std::vector<double> v = step_scalars(step_);
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_data(f.data(), DType::f32, {static_cast<int64_t>(f.size())},
                           {.dtype = DType::f32, .device = device});
}

void Optimizer::check_step_scalars(const Tensor& scalars) const {
  MIXPREC_CHECK(
      scalars.defined() && scalars.dtype() == DType::f32 && scalars.is_contiguous() &&
          scalars.numel() == step_scalars_width() && scalars.device() == params_.front().device(),
      name_, ": the step's scalars must be a contiguous f32 tensor of ", step_scalars_width(),
      " elements on ", params_.front().device().str(), " (step_scalars), got ",
      scalars.defined() ? std::string(dtype_name(scalars.dtype())) + " " +
                              shape_str(scalars.shape()) + " on " + scalars.device().str()
                        : std::string("undefined"));
}

void Optimizer::fused_step(const std::vector<Tensor>& grads, const Tensor& found_inf,
                           const Tensor& inv_scale, const Tensor& scalars) {
  MIXPREC_CHECK(grads.size() == params_.size(), name_, ": expected ", params_.size(),
                " gradients (one per parameter), got ", grads.size());
  NoGradGuard ng;
  follow_parameters();
  check_step_scalars(scalars);
  UpdateLists l;
  l.slots.resize(state_.empty() ? 0 : state_.front().size());
  std::vector<size_t> updated;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;  // that parameter is left alone
    MIXPREC_CHECK(g.shape() == params_[i].shape(), name_, ": gradient ", i, " has shape ",
                  shape_str(g.shape()), ", expected ", shape_str(params_[i].shape()));
    MIXPREC_CHECK(is_floating(g.dtype()) && g.dtype() != DType::f64, name_, ": gradient ", i,
                  " must be f32, bf16 or f16, got ", dtype_name(g.dtype()));
    updated.push_back(i);
    l.params.push_back(params_[i]);
    l.grads.push_back(g.contiguous());
    for (size_t s = 0; s < l.slots.size(); ++s) l.slots[s].push_back(state_[i][s]);
    if (!working_.empty()) l.working.push_back(working_[i]);
  }
  fused_update(l, found_inf, inv_scale, scalars);
  if (cache_)  // the versions moved on: the refreshed copies are the cache's again
    for (size_t i : updated) cache_->store(params_[i], working_[i], /*persistent=*/true);
}

void Optimizer::step(const std::vector<Tensor>& grads) { step(grads, 1.0); }

void Optimizer::step(const std::vector<Tensor>& grads, double grad_scale) {
  MIXPREC_CHECK(std::isfinite(grad_scale) && grad_scale > 0, name_,
                ": grad_scale must be finite and > 0");
  const Device device = params_.front().device();
  const float scale = static_cast<float>(grad_scale);  // the f32 multiplier of every element
  // x * 1 is x: no tensor for the common plain step.
  const Tensor inv_scale =
      scale == 1.0f
          ? Tensor()
          : Tensor::from_data(&scale, DType::f32, {1}, {.dtype = DType::f32, .device = device});
  fused_step(grads, Tensor(), inv_scale, step_scalars_on(device));
  ++step_;
}

void Optimizer::step() {
  std::vector<Tensor> grads;
  for (const Tensor& p : params_) grads.push_back(p.grad());
  step(grads, 1.0);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

std::vector<NamedState> Optimizer::state() const {
  std::vector<NamedState> out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (size_t s = 0; s < state_[i].size(); ++s)
      out.push_back({"slot" + std::to_string(s) + "." + std::to_string(i), state_[i][s]});
  return out;
}

// ---------------------------------------------------------------- the optimizers

Momentum::Momentum(std::vector<Tensor> params, LearningRate lr, double momentum, double wd,
                   bool nesterov)
    : Optimizer(std::move(params), std::move(lr), wd, 1, "Momentum"),
      momentum_(momentum),
      nesterov_(nesterov) {
  MIXPREC_CHECK(momentum >= 0 && momentum < 1, "Momentum: momentum must be in [0, 1), got ",
                momentum);
}

void Momentum::fused_update(const UpdateLists& l, const Tensor& found_inf, const Tensor& inv_scale,
                            const Tensor& scalars) {
  ops::fused_momentum_(
      l.params, l.grads, l.slots[0], l.working, found_inf, inv_scale,
      {.momentum = momentum_, .weight_decay = weight_decay(), .nesterov = nesterov_}, scalars);
}

SGD::SGD(std::vector<Tensor> params, LearningRate lr, double wd)
    : Optimizer(std::move(params), std::move(lr), wd, 0, "SGD") {}

void SGD::fused_update(const UpdateLists& l, const Tensor& found_inf, const Tensor& inv_scale,
                       const Tensor& scalars) {
  ops::fused_sgd_(l.params, l.grads, l.working, found_inf, inv_scale,
                  {.weight_decay = weight_decay()}, scalars);
}

Adam::Adam(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd)
    : Adam(std::move(params), std::move(lr), b1, b2, eps, wd, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd,
           bool decoupled, std::string name)
    : Optimizer(std::move(params), std::move(lr), wd, 2, std::move(name)),
      beta1_(b1),
      beta2_(b2),
      eps_(eps),
      decoupled_(decoupled) {
  MIXPREC_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1 && eps > 0, this->name(),
                ": expected 0 <= beta1, beta2 < 1 and eps > 0");
}

std::vector<double> Adam::step_scalars(int64_t step) const {
  const double t = static_cast<double>(step + 1);
  return {lr_schedule().at(step), 1.0 / (1.0 - std::pow(beta1_, t)),
          1.0 / (1.0 - std::pow(beta2_, t))};
}

void Adam::fused_update(const UpdateLists& l, const Tensor& found_inf, const Tensor& inv_scale,
                        const Tensor& scalars) {
  ops::fused_adam_(l.params, l.grads, l.slots[0], l.slots[1], l.working, found_inf, inv_scale,
                   {.beta1 = beta1_,
                    .beta2 = beta2_,
                    .eps = eps_,
                    .weight_decay = weight_decay(),
                    .decoupled = decoupled_},
                   scalars);
}

AdamW::AdamW(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps,
             double wd)
    : Adam(std::move(params), std::move(lr), b1, b2, eps, wd, true, "AdamW") {}

}  // namespace mixprec::optim
