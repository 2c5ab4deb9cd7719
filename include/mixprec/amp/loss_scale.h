// Loss scaling (DESIGN.md "Loss scaling"): the managers the Model/train-step route uses
// (FixedLossScaleManager, DynamicLossScaleManager), the functional scalers of the seed's custom
// loop (StaticLossScaler, DynamicLossScaler with scale/unscale/adjust), all_finite, and the fused
// pass that unscales every gradient and detects inf/NaN in one sweep (inverse scale computed in
// f64, applied in f32). Managers are small, fully tested state machines whose state lives in
// one-element tensors where the step runs; state()/set_state() give it as plain data, so
// checkpoints save and restore it exactly.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::amp {

// ---------------------------------------------------------------- fused unscale + check

// Multiplies every gradient by 1/scale in place (skipped when scale == 1) and returns true if
// all values are finite. One pass over each tensor; f32, f16 and bf16 gradients; contiguous or
// not. Non-finite values are left as they are (the step is skipped anyway). Undefined entries
// (no gradient reached that parameter) are skipped: this is the train step's internal pass.
bool unscale_and_check(const std::vector<Tensor>& grads, double scale);
// True if every element of every tensor is finite (MindSpore's amp.all_finite). An undefined
// tensor is an error naming its index (a gradient that was never computed is not "finite"), and
// so is an empty list (MindSpore cannot stack an empty list either; an empty gradient list is a
// mistake upstream, e.g. an optimizer with no parameters).
// In data-parallel mode (is_data_parallel()) all_finite and LossScaler::unscale_ answer for every
// rank at once: the local answer is combined with a MAX all-reduce of the non-finite flag, so all
// ranks skip, and adjust their scalers, together. They are then collective calls.
bool all_finite(const std::vector<Tensor>& tensors);

// True only if `local_finite` holds on every rank (the MAX all-reduce above); the local value
// outside data-parallel mode.
bool finite_on_all_ranks(bool local_finite);

// ---------------------------------------------------------------- managers (Model route)

struct LossScaleState {
  double scale = 1.0;
  int64_t good_steps = 0;  // consecutive clean steps since the last change
  int64_t consecutive_overflows = 0;
  int64_t total_overflows = 0;
};

class LossScaleManager;
namespace detail {
struct ScaleAccess;  // the train step's access to the state tensors (src/amp/step/)
}

// The state a manager keeps is one copy, where the train step runs: the scale (f32) and, for the
// dynamic manager, its growth tracker (i32) are one-element tensors on the parameters' device
// (the CPU until a step moves them); the dynamic rule is one kernel (ops::DynamicScaleRule) that
// the host step, the device step and update_loss_scale() all run. The overflow counters are
// host bookkeeping, counted as each step's outcome is known. Reading the state (get_loss_scale,
// state) on a device waits for the steps queued there.
class LossScaleManager {
 public:
  virtual ~LossScaleManager() = default;
  // The current scale (f32: the value the loss is multiplied by).
  double get_loss_scale() const;
  // true: an overflowing step is skipped (its update dropped).
  virtual bool get_drop_overflow_update() const = 0;
  // Records the outcome of a step and adapts the scale. Throws after too many consecutive
  // overflows; `loss_finite` tells a forward-pass NaN/inf apart from gradient overflow.
  void update_loss_scale(bool overflow, bool loss_finite = true);
  virtual std::string description() const = 0;
  LossScaleState state() const;
  // Sets the whole state (a resume). The scale is rounded to f32. Steps still in flight on a
  // device when it is set neither change it nor count towards its counters.
  void set_state(const LossScaleState& s);
  // Stop with an error after this many overflows in a row (DESIGN.md: 1000).
  int64_t max_consecutive_overflows = 1000;

 protected:
  explicit LossScaleManager(double scale, bool tracks_growth);
  // The scale's adaptation on the state tensors, from `found_inf` (f32 [], same device), queued
  // where they live without a host read. Nothing for a fixed scale.
  virtual void adapt(const Tensor& found_inf) { (void)found_inf; }
  // Host bookkeeping of one step's outcome (the overflow counters, a fixed scale's clean steps);
  // throws after max_consecutive_overflows.
  virtual void count(bool overflow, bool loss_finite);
  void count_overflows(bool overflow, bool loss_finite);
  Tensor scale_, tracker_;  // f32 [], i32 [] (undefined for a fixed scale)
  int64_t good_steps_ = 0;  // a fixed scale's clean steps (it has no tracker)
  int64_t consecutive_overflows_ = 0, total_overflows_ = 0;
  int64_t generation_ =
      0;  // bumped by set_state: outcomes of steps queued before it are not counted

 private:
  friend struct detail::ScaleAccess;
  Tensor flag_;  // update_loss_scale's found_inf, on the state's device
};

struct FixedLossScaleOptions {
  bool drop_overflow_update = true;
};

// Scales by a constant. drop_overflow_update=true skips an overflowing update; false applies it
// anyway (MindSpore's meaning) and the train step logs a warning naming the step.
class FixedLossScaleManager : public LossScaleManager {
 public:
  explicit FixedLossScaleManager(double loss_scale = 128.0, FixedLossScaleOptions options = {});
  bool get_drop_overflow_update() const override { return drop_; }
  std::string description() const override;

 protected:
  void count(bool overflow, bool loss_finite) override;

 private:
  bool drop_;
};

// The largest loss scale: the scale multiplies f32 (and f16/bf16) values, so it must be finite
// in f32 (1e39 is finite in double but inf in f32, and every update would be non-finite).
inline constexpr double kMaxLossScale = std::numeric_limits<float>::max();

struct DynamicLossScaleOptions {
  double min_scale = 1.0;  // MindSpore floors at 1
  double max_scale = kMaxLossScale;
};

// On overflow: skip, scale = max(scale / factor, min_scale). After `window` consecutive clean
// steps: scale *= factor if the result is finite and <= max_scale. In f32 (ops::DynamicScaleRule).
class DynamicLossScaleManager : public LossScaleManager {
 public:
  explicit DynamicLossScaleManager(double init_loss_scale = 16777216.0, double scale_factor = 2.0,
                                   int64_t scale_window = 2000,
                                   DynamicLossScaleOptions options = {});
  // PyTorch GradScaler's defaults: 2^16, growth 2, backoff 0.5, interval 2000, no floor.
  static std::shared_ptr<DynamicLossScaleManager> pytorch_defaults();
  bool get_drop_overflow_update() const override { return true; }
  std::string description() const override;
  double scale_factor() const { return factor_; }
  int64_t scale_window() const { return window_; }
  const DynamicLossScaleOptions& options() const { return options_; }

 protected:
  void adapt(const Tensor& found_inf) override;

 private:
  double factor_;
  int64_t window_;
  DynamicLossScaleOptions options_;
};

// ---------------------------------------------------------------- functional scalers (seed)

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  // loss * scale (differentiable: scale the loss inside the forward function).
  Tensor scale(const Tensor& loss) const;
  // loss / scale (differentiable), the inverse of scale(): the seed's `loss = scaler.unscale(loss)`
  // after a forward function that returned the scaled loss. Same rounding as the list form (a
  // multiply by 1/scale computed in f64). A template only so that `unscale({g})` still picks the
  // list form.
  template <std::same_as<Tensor> T> Tensor unscale(const T& loss) const {
    return unscale_tensor(loss);
  }
  // grads / scale, as new tensors. An undefined gradient is an error naming its index.
  std::vector<Tensor> unscale(const std::vector<Tensor>& grads) const;
  // Same, in place and fused with the finite check; returns all_finite.
  bool unscale_(const std::vector<Tensor>& grads) const;
  // Adapts the scale after a step. Returns whether the scaler adapts its scale at all, as
  // MindSpore's adjust does: true for the dynamic scaler, false for the static one (a no-op).
  virtual bool adjust(bool grads_finite) = 0;
  double scale_value() const { return scale_; }
  void set_scale_value(double s) { scale_ = s; }

 protected:
  explicit LossScaler(double s) : scale_(s) {}
  double scale_;

 private:
  Tensor unscale_tensor(const Tensor& loss) const;
};

class StaticLossScaler : public LossScaler {
 public:
  explicit StaticLossScaler(double scale_value);
  bool adjust(bool) override { return false; }
};

// MindSpore's amp.DynamicLossScaler: adjust(finite) grows the scale by scale_factor after
// scale_window clean steps (if the result is finite in f32: at most kMaxLossScale, as
// DynamicLossScaleManager) and on overflow divides it (floor 1). adjust returns true.
class DynamicLossScaler : public LossScaler {
 public:
  DynamicLossScaler(double scale_value, double scale_factor, int64_t scale_window);
  bool adjust(bool grads_finite) override;
  int64_t counter() const { return counter_; }
  void set_counter(int64_t c) { counter_ = c; }

 private:
  double factor_;
  int64_t window_;
  int64_t counter_ = 0;
};

}  // namespace mixprec::amp
