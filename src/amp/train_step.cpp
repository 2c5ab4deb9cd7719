// The train step (TrainOneStepCell) and build_train_network. A step: forward in the network's
// AMP configuration, loss in fp32, backward of loss * scale into captured gradients, one fused
// unscale-and-check pass, optional global-norm clipping, then the optimizer unless the step is
// skipped; the manager then adapts the scale. A skipped step touches nothing else: weights,
// optimizer state, step count and learning-rate schedule stay as they were.
#include <cmath>
#include <cstdio>

#include "mixprec/amp/amp.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/error.h"
#include "mixprec/nn/loss.h"
#include "mixprec/ops/ops.h"

namespace mixprec::amp {
namespace {

// loss_fn(fp32(network(data)), fp32(label)) — MindSpore's _add_loss_network for O1-O3/auto.
class CastWithLossCell : public nn::Cell {
 public:
  CastWithLossCell(nn::Cell& net, nn::Cell& loss) : net_(net), loss_(loss) {
    register_cell("backbone", net);
    register_cell("loss_fn", loss);
  }
  Tensor construct(const Tensor& data, const Tensor& label) override {
    Tensor out = net_(data);
    if (is_low_precision(out.dtype())) out = ops::cast(out, DType::f32);
    const Tensor l = is_low_precision(label.dtype()) ? ops::cast(label, DType::f32) : label;
    return loss_(out, l);
  }
  std::string type_name() const override { return "WithLossCell"; }

 private:
  nn::Cell& net_;
  nn::Cell& loss_;
};

double global_norm(const std::vector<Tensor>& grads) {
  double sq = 0.0;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    const Tensor g32 = g.astype(DType::f32);
    const double n = ops::sum(ops::mul(g32, g32)).item();
    sq += n;
  }
  return std::sqrt(sq);
}

}  // namespace

TrainOneStepCell::TrainOneStepCell(nn::Cell& net, optim::Optimizer& opt,
                                   std::shared_ptr<LossScaleManager> manager, TrainStepOptions options)
    : network_(net), optimizer_(opt), manager_(std::move(manager)), options_(options) {
  MIXPREC_CHECK(options.accumulation_steps >= 1, "TrainOneStepCell: accumulation_steps must be >= 1, got ",
                options.accumulation_steps);
  MIXPREC_CHECK(options.max_grad_norm >= 0, "TrainOneStepCell: max_grad_norm must be >= 0");
  register_cell("network", net);
}

Tensor TrainOneStepCell::construct(const Tensor& data, const Tensor& label) {
  const double scale = manager_ ? manager_->get_loss_scale() : 1.0;
  const std::vector<Tensor>& params = optimizer_.parameters();
  Tensor loss = network_(data, label);
  MIXPREC_CHECK(loss.numel() == 1, "train step: the loss must be a scalar, got shape ", shape_str(loss.shape()),
                Hint{"use a reduction (mean or sum) in the loss function"});
  const double loss_value = loss.item();
  const Tensor scaled = scale != 1.0 ? ops::mul(loss, scale) : loss;
  std::vector<Tensor> grads = run_backward({scaled}, {Tensor()}, {.capture = &params});

  // Gradient accumulation: sum the (still scaled) micro-batch gradients.
  if (options_.accumulation_steps > 1) {
    if (accumulated_.empty()) accumulated_ = grads;
    else
      for (size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined())
          accumulated_[i] = accumulated_[i].defined() ? ops::add(accumulated_[i], grads[i]) : grads[i];
    if (++micro_ < options_.accumulation_steps) {
      last_ = StepInfo{attempted_, loss_value, std::isfinite(loss_value), false, false, scale,
                       optimizer_.learning_rate(), -1.0};
      return loss.detach();
    }
    grads = std::move(accumulated_);
    accumulated_.clear();
    micro_ = 0;
  }

  // One pass: unscale (by the scale times the number of micro-batches) and check.
  const double divisor = scale * options_.accumulation_steps;
  bool finite = unscale_and_check(grads, divisor);
  const bool loss_finite = std::isfinite(loss_value);
  double norm = -1.0;
  if (finite && options_.max_grad_norm > 0) {
    norm = global_norm(grads);
    if (!std::isfinite(norm)) finite = false;
    else if (norm > options_.max_grad_norm) unscale_and_check(grads, norm / options_.max_grad_norm);
  }
  const bool overflow = !finite || !loss_finite;
  const bool drop = manager_ ? manager_->get_drop_overflow_update() : false;
  const bool skip = overflow && drop;
  ++attempted_;
  last_ = StepInfo{attempted_, loss_value, loss_finite, overflow, skip, scale, optimizer_.learning_rate(), norm};
  if (!skip) {
    if (overflow)
      std::fprintf(stderr, "mixprec: warning: step %lld applied an update with non-finite gradients "
                   "(drop_overflow_update is false)\n", static_cast<long long>(attempted_));
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros(params[i].shape());
    optimizer_.step(grads);
  } else {
    ++skipped_;
  }
  if (manager_) manager_->update_loss_scale(overflow, loss_finite);
  return loss.detach();
}

std::shared_ptr<TrainOneStepCell> build_train_network(nn::Cell& network, optim::Optimizer& optimizer,
                                                      nn::Cell& loss_fn, std::string_view level_name,
                                                      BuildOptions options) {
  const Level level = parse_amp_level(level_name);
  const DType low = options.cast_model_type.value_or(default_low_dtype());
  MIXPREC_CHECK(is_low_precision(low) || low == DType::f32, "build_train_network: cast_model_type must be "
                "f16, bf16 or f32, got ", dtype_name(low));
  const bool keep_bn = options.keep_batchnorm_fp32.value_or(level == Level::O2);
  auto_mixed_precision(network, level, low, keep_bn);

  std::shared_ptr<LossScaleManager> manager;
  if (options.loss_scale_manager) manager = *options.loss_scale_manager;
  else if (level == Level::O2 && low != DType::f32) manager = std::make_shared<DynamicLossScaleManager>();

  // O2/O3: fp32 masters stay with the optimizer; the low working copies it refreshes in its
  // update pass are what the forward pass uses (persistent cast-cache entries).
  nn::AmpConfig* config = network.mutable_amp_config();
  if (config && (level == Level::O2 || level == Level::O3))
    optimizer.attach_working_copies(config->cache.get(), low);
  else
    optimizer.detach_working_copies();

  std::shared_ptr<nn::Cell> with_loss;
  if (level == Level::O0 || low == DType::f32) with_loss = std::make_shared<nn::WithLossCell>(network, loss_fn);
  else with_loss = std::make_shared<CastWithLossCell>(network, loss_fn);
  auto step = std::make_shared<TrainOneStepCell>(*with_loss, optimizer, manager, options.step);
  step->take_ownership(with_loss);
  return step;
}

}  // namespace mixprec::amp
