// Loss-scale managers and functional scalers: the state machines of DESIGN.md "Loss scaling";
// and the cross-rank agreement on finite flags that keeps data-parallel ranks deciding alike.
#include "mixprec/amp/loss_scale.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "amp/consensus.h"
#include "amp/step/step.h"
#include "amp/step/testing.h"
#include "mixprec/ops/amp_device.h"
#include "mixprec/ops/ops.h"

namespace mixprec::amp {

LossScaleManager::LossScaleManager(double scale, bool tracks_growth) {
  scale_ = full({}, scale);  // f32: the value every step multiplies by
  if (tracks_growth) tracker_ = zeros({}, {.dtype = DType::i32});
}

double LossScaleManager::get_loss_scale() const { return scale_.item(); }

LossScaleState LossScaleManager::state() const {
  return {.scale = scale_.item(),
          .good_steps = tracker_.defined() ? static_cast<int64_t>(tracker_.item()) : good_steps_,
          .consecutive_overflows = consecutive_overflows_,
          .total_overflows = total_overflows_};
}

void LossScaleManager::set_state(const LossScaleState& s) {
  MIXPREC_CHECK(std::isfinite(s.scale) && s.scale > 0 && s.scale <= kMaxLossScale,
                "loss scaling: the state's scale must be > 0 and finite in f32, got ", s.scale);
  MIXPREC_CHECK(s.good_steps >= 0 && s.good_steps <= INT32_MAX,
                "loss scaling: the state's good_steps ", s.good_steps, " is out of range");
  scale_.fill_(s.scale);
  if (tracker_.defined()) tracker_.fill_(static_cast<double>(s.good_steps));
  good_steps_ = s.good_steps;
  consecutive_overflows_ = s.consecutive_overflows;
  total_overflows_ = s.total_overflows;
  ++generation_;
}

void LossScaleManager::update_loss_scale(bool overflow, bool loss_finite) {
  if (!flag_.defined() || flag_.device() != scale_.device())
    flag_ = zeros({}, {.device = scale_.device()});
  flag_.fill_(overflow ? 1.0 : 0.0);
  adapt(flag_);
  count(overflow, loss_finite);
}

void LossScaleManager::count(bool overflow, bool loss_finite) {
  count_overflows(overflow, loss_finite);
}

void LossScaleManager::count_overflows(bool overflow, bool loss_finite) {
  if (!overflow) {
    consecutive_overflows_ = 0;
    return;
  }
  ++total_overflows_;
  ++consecutive_overflows_;
  if (consecutive_overflows_ < max_consecutive_overflows) return;
  if (!loss_finite) {
    MIXPREC_CHECK(
        false, "loss scaling: ", consecutive_overflows_,
        " consecutive steps with a non-finite LOSS (NaN/inf in the forward pass); the loss "
        "scale cannot fix this",
        Hint{"look for NaN in the input data, a too-high learning rate, or an op that "
             "overflows in low precision (TrainStepOptions::check_numerics names the first op "
             "that produced inf/NaN; amp_level O0 trains in fp32)"});
  }
  MIXPREC_CHECK(
      false, "loss scaling: ", consecutive_overflows_,
      " consecutive steps whose GRADIENTS overflowed (the loss itself was finite); the "
      "scale is now ",
      get_loss_scale(),
      Hint{"lower the initial loss scale, use bf16 instead of f16, or keep the overflowing "
           "layer in fp32 (to_float)"});
}

namespace {
double checked_fixed(double s) {
  MIXPREC_CHECK(std::isfinite(s) && s >= 1.0 && s <= kMaxLossScale,
                "FixedLossScaleManager: loss_scale must be >= 1 and finite in f32 (at most ",
                kMaxLossScale, "), got ", s);
  return s;
}
}  // namespace

FixedLossScaleManager::FixedLossScaleManager(double s, FixedLossScaleOptions o)
    : LossScaleManager(checked_fixed(s), /*tracks_growth=*/false), drop_(o.drop_overflow_update) {}

void FixedLossScaleManager::count(bool overflow, bool loss_finite) {
  count_overflows(overflow && drop_, loss_finite);
  if (!overflow)
    ++good_steps_;
  else if (!drop_)
    ++total_overflows_;
}

std::string FixedLossScaleManager::description() const {
  return "fixed(" + std::to_string(get_loss_scale()) +
         (drop_ ? ", drop overflow updates)" : ", apply overflow updates)");
}

namespace {
double checked_init(double init, double factor, int64_t window, const DynamicLossScaleOptions& o) {
  MIXPREC_CHECK(std::isfinite(init) && init > 0 && init <= kMaxLossScale,
                "DynamicLossScaleManager: init_loss_scale must be > 0 and finite in f32 (at most ",
                kMaxLossScale, "), got ", init);
  MIXPREC_CHECK(factor > 1 && std::isfinite(factor),
                "DynamicLossScaleManager: scale_factor must be > 1, got ", factor);
  MIXPREC_CHECK(window >= 1, "DynamicLossScaleManager: scale_window must be >= 1, got ", window);
  MIXPREC_CHECK(o.min_scale >= 0 && o.min_scale <= o.max_scale,
                "DynamicLossScaleManager: expected 0 <= min_scale <= max_scale");
  return std::clamp(init, o.min_scale, o.max_scale);
}
}  // namespace

DynamicLossScaleManager::DynamicLossScaleManager(double init, double factor, int64_t window,
                                                 DynamicLossScaleOptions o)
    : LossScaleManager(checked_init(init, factor, window, o), /*tracks_growth=*/true),
      factor_(factor),
      window_(window),
      options_(o) {}

std::shared_ptr<DynamicLossScaleManager> DynamicLossScaleManager::pytorch_defaults() {
  return std::make_shared<DynamicLossScaleManager>(65536.0, 2.0, 2000,
                                                   DynamicLossScaleOptions{.min_scale = 0.0});
}

void DynamicLossScaleManager::adapt(const Tensor& found_inf) {
  ops::amp_update_scale_(scale_, tracker_, found_inf, factor_, 1.0 / factor_, window_,
                         options_.min_scale, options_.max_scale);
}

std::string DynamicLossScaleManager::description() const {
  return "dynamic(scale " + std::to_string(get_loss_scale()) + ", factor " +
         std::to_string(factor_) + ", window " + std::to_string(window_) + ")";
}

void detail::ScaleAccess::to(LossScaleManager& m, Device device) {
  if (m.scale_.device() == device) return;
  m.scale_ = m.scale_.to(device);
  if (m.tracker_.defined()) m.tracker_ = m.tracker_.to(device);
  m.flag_ = Tensor();
}

void detail::ScaleAccess::count(LossScaleManager& m, bool overflow, bool loss_finite,
                                int64_t generation) {
  if (generation == m.generation_) m.count(overflow, loss_finite);
}

// ---------------------------------------------------------------- functional scalers

Tensor LossScaler::scale(const Tensor& loss) const { return ops::mul(loss, scale_); }

Tensor LossScaler::unscale_tensor(const Tensor& loss) const {
  MIXPREC_CHECK(loss.defined(), "LossScaler::unscale: the tensor is undefined");
  return ops::mul(loss, 1.0 / scale_);
}

std::vector<Tensor> LossScaler::unscale(const std::vector<Tensor>& grads) const {
  detail::check_gradient_list(grads, "LossScaler::unscale", /*allow_empty=*/true);
  std::vector<Tensor> out;
  out.reserve(grads.size());
  for (const Tensor& g : grads) out.push_back(g.clone());
  unscale_and_check(out, scale_);
  return out;
}

bool LossScaler::unscale_(const std::vector<Tensor>& grads) const {
  detail::check_gradient_list(grads, "LossScaler::unscale_", /*allow_empty=*/false);
  return finite_on_all_ranks(unscale_and_check(grads, scale_));
}

// ---------------------------------------------------------------- consensus across ranks

namespace {
bool g_consensus = true;
}

void testing::set_overflow_consensus(bool enabled) { g_consensus = enabled; }

bool detail::ranks_agree() { return is_data_parallel() && g_consensus; }

void detail::agree_on_flags(std::span<double> flags) {
  if (ranks_agree()) comm::all_reduce_max(flags);
}

bool finite_on_all_ranks(bool local_finite) {
  double flag = local_finite ? 0.0 : 1.0;
  detail::agree_on_flags({&flag, 1});
  return flag == 0.0;
}

StaticLossScaler::StaticLossScaler(double s) : LossScaler(s) {
  MIXPREC_CHECK(std::isfinite(s) && s > 0,
                "StaticLossScaler: scale_value must be finite and > 0, got ", s);
}

DynamicLossScaler::DynamicLossScaler(double s, double factor, int64_t window)
    : LossScaler(s), factor_(factor), window_(window) {
  MIXPREC_CHECK(std::isfinite(s) && s > 0,
                "DynamicLossScaler: scale_value must be finite and > 0, got ", s);
  MIXPREC_CHECK(factor > 1, "DynamicLossScaler: scale_factor must be > 1, got ", factor);
  MIXPREC_CHECK(window >= 1, "DynamicLossScaler: scale_window must be >= 1, got ", window);
}

bool DynamicLossScaler::adjust(bool finite) {
  if (finite) {
    if (counter_ == window_ - 1) {
      // Only while finite in f32, as the manager (MindSpore: isfinite of a float32 Parameter).
      const double grown = scale_ * factor_;
      if (grown <= kMaxLossScale) scale_ = grown;
    }
    counter_ = (counter_ + 1) % window_;
  } else {
    scale_ = std::max(1.0, scale_ / factor_);
    counter_ = 0;
  }
  return true;
}

}  // namespace mixprec::amp
