// Skip guardrails and overflow handling for training (issue: numerics you can see). The guard
// watches every step: it keeps the overflow events the train step's provenance found, warns
// when the skip rate after warm-up passes a threshold, when the loss itself is non-finite (a
// forward NaN/inf, which no loss scale can fix) and when the scale falls below 1; and on a
// persistent overflow it warns, stops training, or promotes the offending cell to fp32. A
// promotion that does not remove the overflow escalates: to the producer of the cell's input,
// then to the whole network; if that does not help either, the guard stops training.
// "Persistent": a forward-pass overflow (any time), or skip-rate trips after warm-up — the
// dynamic scaler's first skips while it finds its scale are normal and trigger nothing.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "mixprec/train/callback.h"

namespace mixprec::train {

enum class OnOverflow { warn, stop, promote };
OnOverflow parse_on_overflow(std::string_view s);  // warn | stop | promote

struct GuardOptions {
  OnOverflow action = OnOverflow::warn;
  int64_t warmup_steps = 100;    // skips before this are the scaler settling
  int64_t window = 100;          // steps over which the skip rate is measured
  double max_skip_rate = 0.05;   // warn (and act) above this
  size_t max_events = 1000;      // events kept (counts continue beyond)
  bool print = true;             // print warnings and events to stderr
};

struct OverflowRecord {
  int64_t step = 0;
  NonFiniteEvent event;
  bool loss_finite = true;
  double loss_scale = 1.0;
};

struct Promotion {
  int64_t step = 0;
  std::string cell;
  std::string from, to;
};

class OverflowGuard : public Callback {
 public:
  explicit OverflowGuard(GuardOptions options = {});
  void on_step_end(RunContext& ctx) override;
  // warn and stop read only the RunContext; promote changes the network, so it waits each step.
  bool may_lag() const override { return options_.action != OnOverflow::promote; }
  const std::vector<OverflowRecord>& events() const { return events_; }
  int64_t event_count() const { return event_count_; }
  const std::vector<Promotion>& promotions() const { return promotions_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Set when the guard stopped training: the action was stop, or promote could not remove the
  // overflow even with the whole network in fp32.
  const std::string& stop_reason() const { return stop_reason_; }

 private:
  void warn(const std::string& w);
  void act(RunContext& ctx, const OverflowRecord& r, const std::string& why);
  void promote(RunContext& ctx, const OverflowRecord& r, const std::string& why);
  GuardOptions options_;
  std::vector<OverflowRecord> events_;
  int64_t event_count_ = 0;
  std::vector<Promotion> promotions_;
  std::vector<std::string> warnings_;
  std::deque<bool> recent_;
  int64_t skips_in_window_ = 0;
  int64_t last_rate_warning_ = -1000000;
  int64_t nonfinite_loss_warnings_ = 0;
  bool scale_below_one_warned_ = false;
  int escalations_ = 0;  // promotions that did not remove the overflow
  std::string stop_reason_;
};

std::string describe(const NonFiniteEvent& e);

}  // namespace mixprec::train
