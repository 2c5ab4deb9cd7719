// Optimizer base (parameter checks, state, step counting, working copies) and the fused update
// kernels of Momentum, SGD, Adam and AdamW. Each kernel runs in chunks: update the fp32 weights
// of a chunk (gradient widened from its dtype on the fly), then round that chunk into the
// low-precision working copy while it is still in cache. Chunks are independent, so OpenMP
// splits them without changing any result.
#include "mixprec/optim/optimizer.h"

#include <cmath>

#include "mixprec/convert.h"
#include "mixprec/error.h"
#include "ops/amp_problem.h"
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
  return LearningRate([=](int64_t s) { return lr * std::pow(gamma, static_cast<double>(s / step_size)); },
                      "step(" + std::to_string(lr) + ", every " + std::to_string(step_size) + ", x" +
                          std::to_string(gamma) + ")");
}

LearningRate LearningRate::cosine(double lr, int64_t total, double min_lr) {
  MIXPREC_CHECK(total > 0, "cosine: expected total_steps > 0, got ", total);
  return LearningRate([=](int64_t s) {
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
  return LearningRate([=](int64_t s) {
                        if (s < steps) return base(0) * static_cast<double>(s + 1) / static_cast<double>(steps);
                        return base(s - steps);
                      },
                      "warmup(" + std::to_string(steps) + ") then " + description_);
}

// ---------------------------------------------------------------- base

Optimizer::Optimizer(std::vector<Tensor> params, LearningRate lr, double weight_decay,
                     int num_state_slots, std::string name)
    : params_(std::move(params)), lr_(std::move(lr)), weight_decay_(weight_decay), name_(std::move(name)) {
  MIXPREC_CHECK(!params_.empty(), name_, ": no parameters to optimize",
                Hint{"pass net.trainable_params()"});
  MIXPREC_CHECK(weight_decay >= 0 && std::isfinite(weight_decay), name_,
                ": weight_decay must be >= 0, got ", weight_decay);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    MIXPREC_CHECK(p.defined() && p.dtype() == DType::f32 && p.is_contiguous() && p.is_leaf(), name_,
                  ": parameter ", i, " must be a contiguous fp32 leaf (master weights are fp32), got ",
                  p.defined() ? std::string(dtype_name(p.dtype())) : "undefined",
                  Hint{"keep parameters in fp32 and let AMP cast them (amp::auto_mixed_precision)"});
    std::vector<Tensor> slots;
    for (int s = 0; s < num_state_slots; ++s) slots.push_back(zeros(p.shape(), {.device = p.device()}));
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
  if (cache_) cache_->clear();  // entries keyed by the storages the parameters left
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

void Optimizer::fused_step(const std::vector<Tensor>&, const Tensor&, const Tensor&, const Tensor&) {
  MIXPREC_CHECK(false, name_, ": no multi-tensor update on ", params_.front().device().str(),
                " yet (Momentum and SGD have one)",
                Hint{"use Momentum or SGD on a CUDA device, or train on the CPU"});
}

Tensor Optimizer::step_scalars_on(Device device) const {
  const std::vector<double> v = step_scalars(step_);
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_data(f.data(), DType::f32, {static_cast<int64_t>(f.size())},
                           {.dtype = DType::f32, .device = device});
}

void Optimizer::check_step_scalars(const Tensor& scalars) const {
  MIXPREC_CHECK(scalars.defined() && scalars.dtype() == DType::f32 && scalars.is_contiguous() &&
                    scalars.numel() == step_scalars_width() && scalars.device() == params_.front().device(),
                name_, ": the step's scalars must be a contiguous f32 tensor of ", step_scalars_width(),
                " elements on ", params_.front().device().str(), " (step_scalars), got ",
                scalars.defined() ? std::string(dtype_name(scalars.dtype())) + " " + shape_str(scalars.shape()) +
                                        " on " + scalars.device().str()
                                  : std::string("undefined"));
}

void Optimizer::fused_momentum_step(const std::vector<Tensor>& grads,
                                    const std::vector<Tensor>& velocity, const Tensor& found_inf,
                                    const Tensor& inv_scale, const Tensor& scalars, double momentum,
                                    bool nesterov) {
  MIXPREC_CHECK(grads.size() == params_.size(), name_, ": expected ", params_.size(),
                " gradients (one per parameter), got ", grads.size());
  check_step_scalars(scalars);
  NoGradGuard ng;
  std::vector<Tensor> p, g, v, w;
  std::vector<size_t> updated;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;  // as step(grads): that parameter is left alone
    updated.push_back(i);
    p.push_back(params_[i]);
    g.push_back(grads[i].contiguous());
    v.push_back(velocity[i]);
    if (!working_.empty()) w.push_back(working_[i]);
  }
  ops::fused_momentum_(p, g, v, w, found_inf, inv_scale,
                       {.momentum = momentum, .weight_decay = weight_decay_, .nesterov = nesterov},
                       scalars);
  if (cache_)  // the versions moved on: the refreshed copies are the cache's again
    for (size_t i : updated) cache_->store(params_[i], working_[i], /*persistent=*/true);
}

void Optimizer::refresh_working_copy(size_t i) {
  if (working_.empty()) return;
  working_[i].copy_(params_[i].detach());  // one rounding, as the fused kernels'
  if (cache_) cache_->store(params_[i], working_[i], /*persistent=*/true);
}

void Optimizer::apply(size_t i, const Tensor& grad, double grad_scale) {
  Tensor& p = params_[i];
  MIXPREC_CHECK(grad.shape() == p.shape(), name_, ": gradient ", i, " has shape ",
                shape_str(grad.shape()), ", expected ", shape_str(p.shape()));
  MIXPREC_CHECK(is_floating(grad.dtype()) && grad.dtype() != DType::f64, name_, ": gradient ", i,
                " must be f32, bf16 or f16, got ", dtype_name(grad.dtype()));
  const Tensor g = grad.contiguous();
  std::vector<float*> st;
  for (Tensor& s : state_[i]) st.push_back(s.data<float>());
  void* low = working_.empty() ? nullptr : working_[i].data_ptr();
  update(UpdateArgs{p.data<float>(), g.data_ptr(), g.dtype(), st.data(), low, low_dtype_, p.numel(),
                    lr_.at(step_), weight_decay_, step_ + 1, grad_scale});
  p.storage()->bump_version();
  if (low) {
    working_[i].storage()->bump_version();
    if (cache_) cache_->store(p, working_[i], /*persistent=*/true);
  }
}

void Optimizer::step(const std::vector<Tensor>& grads) { step(grads, 1.0); }

void Optimizer::step(const std::vector<Tensor>& grads, double grad_scale) {
  MIXPREC_CHECK(grads.size() == params_.size(), name_, ": expected ", params_.size(),
                " gradients (one per parameter), got ", grads.size());
  MIXPREC_CHECK(std::isfinite(grad_scale) && grad_scale > 0, name_, ": grad_scale must be finite and > 0");
  NoGradGuard ng;
  const Device device = params_.front().device();
  if (device.is_cuda()) {  // one multi-tensor op on the device, the scale as an f32 [1] there
    fused_step(grads, Tensor(), full({1}, grad_scale, {.device = device}), step_scalars_on(device));
    ++step_;
    return;
  }
  follow_parameters();
  for (size_t i = 0; i < params_.size(); ++i)
    if (grads[i].defined()) apply(i, grads[i], grad_scale);
  ++step_;
}

void Optimizer::step() {
  NoGradGuard ng;
  if (params_.front().device().is_cuda()) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params_) grads.push_back(p.grad());
    fused_step(grads, Tensor(), Tensor(), step_scalars_on(params_.front().device()));
    ++step_;
    return;
  }
  follow_parameters();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (g.defined()) apply(i, g, 1.0);
  }
  ++step_;
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

// ---------------------------------------------------------------- fused kernels

namespace {

constexpr int64_t kChunk = 4096;

// Runs body(i, g) for every element, in chunks; after each chunk the updated fp32 weights are
// rounded into the low copy (when there is one).
template <class Body>
void fused_loop(const Optimizer* /*self*/, float* p, const void* g, DType gdt, void* low, DType ldt,
                int64_t n, float gscale, Body&& body) {
  visit_float(gdt, [&]<class G>() {
    const G* gp = static_cast<const G*>(g);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
      for (int64_t i = lo; i < hi; ++i) body(i, static_cast<float>(load(gp[i])) * gscale);
      if (low) convert_row(p + lo, DType::f32, static_cast<char*>(low) + lo * 2, ldt, hi - lo);
    }
  });
}

}  // namespace

Momentum::Momentum(std::vector<Tensor> params, LearningRate lr, double momentum, double wd, bool nesterov)
    : Optimizer(std::move(params), std::move(lr), wd, 1, "Momentum"), momentum_(momentum), nesterov_(nesterov) {
  MIXPREC_CHECK(momentum >= 0 && momentum < 1, "Momentum: momentum must be in [0, 1), got ", momentum);
}

void Momentum::fused_step(const std::vector<Tensor>& grads, const Tensor& found_inf,
                          const Tensor& inv_scale, const Tensor& scalars) {
  follow_parameters();
  std::vector<Tensor> velocity;
  for (const std::vector<Tensor>& s : slots()) velocity.push_back(s[0]);
  fused_momentum_step(grads, velocity, found_inf, inv_scale, scalars, momentum_, nesterov_);
}

void Momentum::update(const UpdateArgs& a) {
  // The same element step as the multi-tensor fused_momentum_ (ops/amp_problem.h).
  const ops::MomentumStep step{static_cast<float>(a.lr), static_cast<float>(momentum_),
                               static_cast<float>(a.weight_decay), nesterov_};
  float* p = a.p;
  float* v = a.state[0];
  fused_loop(this, p, a.g, a.grad_dtype, a.low, a.low_dtype, a.n, static_cast<float>(a.grad_scale),
             [=](int64_t i, float g) { step(p[i], v[i], g); });
}

SGD::SGD(std::vector<Tensor> params, LearningRate lr, double wd)
    : Optimizer(std::move(params), std::move(lr), wd, 0, "SGD") {}

void SGD::fused_step(const std::vector<Tensor>& grads, const Tensor& found_inf,
                     const Tensor& inv_scale, const Tensor& scalars) {
  follow_parameters();
  const std::vector<Tensor>& params = parameters();
  if (scratch_.size() != params.size() || scratch_.front().device() != params.front().device()) {
    scratch_.clear();
    for (const Tensor& p : params) scratch_.push_back(Tensor::empty(p.shape(), {.device = p.device()}));
  }
  for (Tensor& v : scratch_) v.fill_(0.0);  // momentum 0 * v must not see an earlier inf
  fused_momentum_step(grads, scratch_, found_inf, inv_scale, scalars, 0.0, false);
}

void SGD::update(const UpdateArgs& a) {
  const float lr = static_cast<float>(a.lr), wd = static_cast<float>(a.weight_decay);
  float* p = a.p;
  fused_loop(this, p, a.g, a.grad_dtype, a.low, a.low_dtype, a.n, static_cast<float>(a.grad_scale),
             [=](int64_t i, float g) { p[i] -= lr * (g + wd * p[i]); });
}

Adam::Adam(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd)
    : Adam(std::move(params), std::move(lr), b1, b2, eps, wd, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd,
           bool decoupled, std::string name)
    : Optimizer(std::move(params), std::move(lr), wd, 2, std::move(name)),
      beta1_(b1), beta2_(b2), eps_(eps), decoupled_(decoupled) {
  MIXPREC_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1 && eps > 0, this->name(),
                ": expected 0 <= beta1, beta2 < 1 and eps > 0");
}

void Adam::update(const UpdateArgs& a) {
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  const float lr = static_cast<float>(a.lr), eps = static_cast<float>(eps_);
  const float wd = static_cast<float>(a.weight_decay);
  const std::vector<double> scalars = step_scalars(a.step - 1);  // a.step counts this update
  const float c1 = static_cast<float>(scalars[1]), c2 = static_cast<float>(scalars[2]);
  float* p = a.p;
  float* m = a.state[0];
  float* v = a.state[1];
  const bool decoupled = decoupled_;
  fused_loop(this, p, a.g, a.grad_dtype, a.low, a.low_dtype, a.n, static_cast<float>(a.grad_scale), [=](int64_t i, float g) {
    if (decoupled) p[i] -= lr * wd * p[i];
    else g += wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    p[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  });
}

std::vector<double> Adam::step_scalars(int64_t step) const {
  const double t = static_cast<double>(step + 1);
  return {lr_schedule().at(step), 1.0 / (1.0 - std::pow(beta1_, t)), 1.0 / (1.0 - std::pow(beta2_, t))};
}

void Adam::fused_step(const std::vector<Tensor>& grads, const Tensor& found_inf,
                      const Tensor& inv_scale, const Tensor& scalars) {
  follow_parameters();
  const std::vector<Tensor>& params = parameters();
  MIXPREC_CHECK(grads.size() == params.size(), name(), ": expected ", params.size(),
                " gradients (one per parameter), got ", grads.size());
  NoGradGuard ng;
  AutocastScope as_is(AutocastState{});  // f32 throughout, whatever the caller's scope
  using namespace ops;
  check_step_scalars(scalars);
  const double wd = weight_decay();
  // The step's scalars as [1] tensors on the device (broadcast against each parameter).
  const Tensor lr = scalars.slice(0, 0, 1), c1 = scalars.slice(0, 1, 2), c2 = scalars.slice(0, 2, 3);
  const Tensor skip = found_inf.defined() ? found_inf.astype(DType::boolean) : Tensor();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].defined()) continue;
    Tensor p = params[i].detach(), m = slots()[i][0], v = slots()[i][1];
    Tensor g = amp_cast(grads[i].detach(), DType::f32);
    if (inv_scale.defined()) g = mul(g, inv_scale);
    Tensor pn = p;
    if (decoupled_) pn = sub(p, mul(mul(p, wd), lr));
    else g = add(g, mul(p, wd));
    const Tensor mn = add(mul(m, beta1_), mul(g, 1 - beta1_));
    const Tensor vn = add(mul(v, beta2_), mul(mul(g, g), 1 - beta2_));
    pn = sub(pn, mul(div(mul(mn, c1), add(sqrt(mul(vn, c2)), eps_)), lr));
    p.copy_(skip.defined() ? where(skip, p, pn) : pn);
    m.copy_(skip.defined() ? where(skip, m, mn) : mn);
    v.copy_(skip.defined() ? where(skip, v, vn) : vn);
    refresh_working_copy(i);
  }
}

AdamW::AdamW(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd)
    : Adam(std::move(params), std::move(lr), b1, b2, eps, wd, true, "AdamW") {}

}  // namespace mixprec::optim
