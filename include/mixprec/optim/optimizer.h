// Optimizers (MindSpore names: Momentum, SGD, Adam, AdamW) and learning-rate schedules.
// Master weights and all optimizer state are fp32; each update is one multi-tensor op on the
// parameters' device (ops::fused_sgd_, fused_momentum_, fused_adam_: the cpu, reference and CUDA
// kernels give the same bits) that reads the gradient (f32, bf16 or f16), applies weight decay,
// updates the state and the fp32 weight, and — when AMP working copies are attached — writes the
// low-precision copy in the same pass (no extra sweep) and registers it in the cast cache. step()
// advances the step counter and the schedule; a step the loss scaler skips never calls it. State
// lives on the parameters' device: it follows them (to(), or at the next step) when they move.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/ops/autocast.h"
#include "mixprec/tensor.h"

namespace mixprec::optim {

// A learning rate as a function of the (applied) step count. Implicit from a number.
class LearningRate {
 public:
  LearningRate(double constant);  // NOLINT: implicit, so Momentum(params, 0.01, 0.9) reads like the seed
  static LearningRate constant(double lr);
  // lr * gamma^(step / step_size)
  static LearningRate step_decay(double lr, int64_t step_size, double gamma);
  // Cosine from lr to min_lr over total_steps, then min_lr.
  static LearningRate cosine(double lr, int64_t total_steps, double min_lr = 0.0);
  // Linear warm-up from 0 over `steps`, then this schedule (shifted by `steps`).
  LearningRate with_warmup(int64_t steps) const;
  double at(int64_t step) const { return fn_(step); }
  const std::string& description() const { return description_; }

 private:
  LearningRate(std::function<double(int64_t)> fn, std::string description)
      : fn_(std::move(fn)), description_(std::move(description)) {}
  std::function<double(int64_t)> fn_;
  std::string description_;
};

struct NamedState {
  std::string name;
  Tensor tensor;
};

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, LearningRate lr, double weight_decay, int num_state_slots,
            std::string name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // The seed's optimizer(grads): one update from explicit gradients, one per parameter.
  void operator()(const std::vector<Tensor>& grads) { step(grads); }
  void step(const std::vector<Tensor>& grads);
  // Same, with every gradient multiplied by grad_scale inside the fused pass (the train step
  // passes 1 / loss_scale here: unscaling costs no separate write pass over the gradients).
  void step(const std::vector<Tensor>& grads, double grad_scale);
  void step();  // from each parameter's .grad (parameters without one are left alone)
  void zero_grad();

  const std::vector<Tensor>& parameters() const { return params_; }
  int64_t global_step() const { return step_; }
  void set_global_step(int64_t s) { step_ = s; }
  double learning_rate() const { return lr_.at(step_); }
  const LearningRate& schedule() const { return lr_; }
  const std::string& name() const { return name_; }

  // Attaches low-precision working copies (O2/O3): after every update each parameter is also
  // written in `dtype` in the same pass and stored in `cache` as a persistent entry.
  void attach_working_copies(CastCache* cache, DType dtype);
  void detach_working_copies();
  // Re-derives the working copies from the masters (after weights were loaded in place).
  void refresh_working_copies();

  // All state tensors ("moments.3", ...), fp32, for checkpoints; written in place on load.
  std::vector<NamedState> state() const;

  // Moves the state to `device` and re-derives the working copies there (after the parameters
  // moved: nn::Cell::to). step() does this by itself when it finds the parameters elsewhere.
  void to(Device device);
  // The update of every parameter as one multi-tensor op on their device, queued without any
  // host read: skipped there when found_inf (f32 [1]; undefined: never) is not 0, gradients
  // multiplied by inv_scale (f32 [1]; undefined: 1) as they are read, and `scalars` (f32
  // [step_scalars_width()] on the device) holding step_scalars() of this update, read there:
  // the host need not know the step count (ops::amp_advance_step_ selects them on the device).
  // Does not advance the step count (the caller knows when the update applied); step() is this
  // with the step count's scalars, then ++global_step(). Gradients: one per parameter, on its
  // device (undefined: that parameter is left alone).
  void fused_step(const std::vector<Tensor>& grads, const Tensor& found_inf,
                  const Tensor& inv_scale, const Tensor& scalars);
  // What an update depends on through the step count, rounded to f32 by the caller: {learning
  // rate} here, Adam adds its two bias corrections. `step`: the number of updates applied before.
  virtual std::vector<double> step_scalars(int64_t step) const { return {lr_.at(step)}; }
  int64_t step_scalars_width() const { return static_cast<int64_t>(step_scalars(0).size()); }
  // step_scalars(global_step()) as an f32 tensor on `device` (one queued upload).
  Tensor step_scalars_on(Device device) const;

 protected:
  // What fused_step hands an optimizer: the parameters that have a gradient, with their
  // (contiguous) gradients, state slots ([slot][k]) and working copies (empty without AMP's).
  struct UpdateLists {
    std::vector<Tensor> params, grads, working;
    std::vector<std::vector<Tensor>> slots;
  };
  // The optimizer's multi-tensor op on the lists (fused_step's arguments otherwise).
  virtual void fused_update(const UpdateLists& lists, const Tensor& found_inf,
                            const Tensor& inv_scale, const Tensor& scalars) = 0;
  void follow_parameters();  // state and working copies onto the parameters' device
  double weight_decay() const { return weight_decay_; }
  const LearningRate& lr_schedule() const { return lr_; }

 private:
  // Throws unless `scalars` is an f32 tensor of step_scalars_width() elements on the parameters'
  // device.
  void check_step_scalars(const Tensor& scalars) const;
  std::vector<Tensor> params_;
  std::vector<std::vector<Tensor>> state_;  // [param][slot]
  std::vector<Tensor> working_;             // low copies (O2/O3), or empty
  LearningRate lr_;
  double weight_decay_;
  int64_t step_ = 0;
  CastCache* cache_ = nullptr;
  DType low_dtype_ = DType::bf16;
  std::string name_;
};

// v = momentum * v + (g + wd * p); p -= lr * v   (nesterov: p -= lr * (g' + momentum * v)).
// MindSpore's nn.Momentum, equal to PyTorch's SGD with momentum and dampening 0.
class Momentum : public Optimizer {
 public:
  Momentum(std::vector<Tensor> params, LearningRate learning_rate, double momentum,
           double weight_decay = 0.0, bool use_nesterov = false);

 protected:
  void fused_update(const UpdateLists& lists, const Tensor& found_inf, const Tensor& inv_scale,
                    const Tensor& scalars) override;

 private:
  double momentum_;
  bool nesterov_;
};

// Plain SGD (momentum 0): p -= lr * (g + wd * p).
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, LearningRate learning_rate = 0.1, double weight_decay = 0.0);

 protected:
  void fused_update(const UpdateLists& lists, const Tensor& found_inf, const Tensor& inv_scale,
                    const Tensor& scalars) override;
};

// Adam with L2 weight decay added to the gradient; AdamW decouples it (p -= lr * wd * p).
// Bias-corrected moments, eps added to sqrt(v_hat). One fused op (ops::fused_adam_) on every
// device, the same bits on the CPU and a GPU.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, LearningRate learning_rate = 1e-3, double beta1 = 0.9,
       double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0.0);
  // {learning rate, 1 / (1 - beta1^(step + 1)), 1 / (1 - beta2^(step + 1))}
  std::vector<double> step_scalars(int64_t step) const override;

 protected:
  Adam(std::vector<Tensor> params, LearningRate lr, double b1, double b2, double eps, double wd,
       bool decoupled, std::string name);
  void fused_update(const UpdateLists& lists, const Tensor& found_inf, const Tensor& inv_scale,
                    const Tensor& scalars) override;

 private:
  double beta1_, beta2_, eps_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, LearningRate learning_rate = 1e-3, double beta1 = 0.9,
        double beta2 = 0.999, double eps = 1e-8, double weight_decay = 1e-2);
};

}  // namespace mixprec::optim

namespace mixprec::nn {
// The seed writes nn.Momentum(...): the optimizers are reachable from nn too.
using optim::Adam;
using optim::AdamW;
using optim::Momentum;
using optim::SGD;
}  // namespace mixprec::nn
