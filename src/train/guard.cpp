// OverflowGuard: see include/mixprec/train/guard.h.
#include "mixprec/train/guard.h"

#include <cstdio>

#include "mixprec/error.h"
#include "mixprec/nn/cell.h"
#include "mixprec/train/model.h"

namespace mixprec::train {

OnOverflow parse_on_overflow(std::string_view s) {
  if (s == "warn") return OnOverflow::warn;
  if (s == "stop") return OnOverflow::stop;
  if (s == "promote") return OnOverflow::promote;
  MIXPREC_CHECK(false, "OnOverflow: unknown value '", s, "'; valid: warn, stop, promote");
  return OnOverflow::warn;
}

std::string describe(const NonFiniteEvent& e) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "; max |input| %.4g; %lld non-finite %s values%s", e.input_max_abs,
                static_cast<long long>(e.nonfinite_count), std::string(dtype_name(e.dtype)).c_str(),
                e.has_nan ? " (NaN among them)" : "");
  const std::string note =
      nn::undone_cast_note(e.cell);  // the seed's softmax fix, undone by the level
  return e.phase + " " + e.op_name + " in " + (e.cell.empty() ? "(network)" : e.cell) + ": " +
         e.detail + buf + (note.empty() ? "" : "; note: " + note);
}

OverflowGuard::OverflowGuard(GuardOptions options) : options_(options) {
  MIXPREC_CHECK(options.window >= 1 && options.max_skip_rate >= 0 && options.max_skip_rate <= 1,
                "OverflowGuard: expected window >= 1 and max_skip_rate in [0, 1]");
}

void OverflowGuard::warn(const std::string& w) {
  if (warnings_.size() < 100) warnings_.push_back(w);
  if (options_.print) std::fprintf(stderr, "mixprec: warning: %s\n", w.c_str());
}

void OverflowGuard::act(RunContext& ctx, const OverflowRecord& r, const std::string& why) {
  if (options_.action == OnOverflow::stop) {
    stop_reason_ = "stopped at step " + std::to_string(r.step) + ": " + why + " (" + describe(r.event) + ")";
    ctx.stop_requested = true;
    return;
  }
  if (options_.action == OnOverflow::promote && ctx.model) promote(ctx, r, why);
}

namespace {

using CellList = std::vector<std::pair<std::string, nn::Cell*>>;

bool inside(const std::string& path, const std::string& ancestor) {
  return ancestor.empty() || path == ancestor || path.rfind(ancestor + ".", 0) == 0;
}

// True when `path` computes in fp32 by to_float: the nearest of it and the cells around it that
// has a to_float dtype has f32 (cells come depth first, so a nearer one comes later).
bool runs_fp32(const CellList& cells, const std::string& path) {
  bool fp32 = false;
  for (const auto& [name, cell] : cells)
    if (inside(path, name) && cell->float_dtype()) fp32 = *cell->float_dtype() == DType::f32;
  return fp32;
}

// The producer of `path`'s input: the last leaf cell before `path`'s first leaf, in registration
// order (which is execution order in sequential networks), that does not compute in fp32 yet.
// "" (the whole network) when there is none.
std::string producer_of(const CellList& cells, const std::string& path) {
  std::string found;
  for (const auto& [name, cell] : cells) {
    if (!cell->children().empty() || name.empty()) continue;
    if (inside(name, path)) break;
    if (!runs_fp32(cells, name)) found = name;
  }
  return found;
}

}  // namespace

// Promotes the offending cell to fp32. When it already computes in fp32, the last promotion did
// not remove the overflow: escalate to the producer of its input, and after kMaxEscalations such
// failures (or with no producer left) to the whole network. When the whole network is fp32 and
// the overflow persists, no promotion can help: stop.
void OverflowGuard::promote(RunContext& ctx, const OverflowRecord& r, const std::string& why) {
  constexpr int kMaxEscalations = 3;
  nn::Cell& network = ctx.model->network();
  const CellList cells = network.cells_and_names();
  std::string target = r.event.cell;
  bool known = false;
  for (const auto& [name, cell] : cells) known |= name == target;
  if (!known) target = "";  // a cell outside the network (the loss): only the whole network is left
  std::string reason = why;
  if (runs_fp32(cells, target)) {
    if (runs_fp32(cells, "")) {
      stop_reason_ = "stopped at step " + std::to_string(r.step) + ": " + why +
                     " persists with the whole network promoted to fp32; no promotion can remove it (" +
                     describe(r.event) + "); " +
                     (r.event.phase == "forward" ? "look for huge values or inf/NaN in the data or the weights"
                                                 : "lower the loss scale");
      ctx.stop_requested = true;
      return;
    }
    ++escalations_;
    reason = why + " at '" + (target.empty() ? std::string("(network)") : target) +
             "', which already computes in fp32";
    target = escalations_ <= kMaxEscalations ? producer_of(cells, target) : "";
  }
  for (const auto& [name, cell] : cells) {
    if (name != target) continue;
    const std::string shown = target.empty() ? std::string("(network)") : target;
    const std::string from = cell->float_dtype() ? std::string(dtype_name(*cell->float_dtype())) : "amp level";
    cell->to_float(DType::f32);
    promotions_.push_back({r.step, shown, from, "f32"});
    warn("promoted " + std::string(target.empty() ? "the whole network " : "cell ") + "'" + shown + "' (" +
         cell->type_name() + ") to fp32 at step " + std::to_string(r.step) + " after: " + reason);
    return;
  }
}

void OverflowGuard::on_step_end(RunContext& ctx) {
  const amp::StepInfo& s = ctx.step;
  // The skip rate is measured over steps after the warm-up only: the dynamic scale's first
  // halvings from 2^24 (a few skipped steps at the start) are the scaler settling, not a problem.
  const bool past_warmup = ctx.global_step > options_.warmup_steps;
  if (past_warmup) {
    recent_.push_back(s.skipped);
    skips_in_window_ += s.skipped;
  }
  if (static_cast<int64_t>(recent_.size()) > options_.window) {
    skips_in_window_ -= recent_.front();
    recent_.pop_front();
  }
  std::optional<OverflowRecord> rec;
  if (s.event) {
    rec = OverflowRecord{ctx.global_step, *s.event, s.loss_finite, s.loss_scale};
    ++event_count_;
    if (events_.size() < options_.max_events) events_.push_back(*rec);
    if (options_.print && event_count_ <= 10)
      std::fprintf(stderr, "mixprec: overflow at step %lld (scale %g): %s\n", static_cast<long long>(ctx.global_step),
                   s.loss_scale, describe(*s.event).c_str());
  }
  if (!s.loss_finite && nonfinite_loss_warnings_++ < 5)
    warn("the loss is not finite at step " + std::to_string(ctx.global_step) +
         ": NaN/inf already in the forward pass, which no loss scale can fix" +
         (s.event ? " (first: " + describe(*s.event) + ")" : ""));
  if (s.loss_scale < 1.0 && !scale_below_one_warned_) {
    scale_below_one_warned_ = true;
    warn("the loss scale fell below 1 (" + std::to_string(s.loss_scale) +
         "): the gradients overflow even unscaled; look at the overflow events");
  }
  const double rate = recent_.empty() ? 0.0 : static_cast<double>(skips_in_window_) / static_cast<double>(recent_.size());
  const bool rate_tripped = past_warmup && static_cast<int64_t>(recent_.size()) == options_.window &&
                            rate > options_.max_skip_rate;
  if (rate_tripped && ctx.global_step - last_rate_warning_ >= options_.window) {
    last_rate_warning_ = ctx.global_step;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f%% of the last %lld steps were skipped", 100.0 * rate,
                  static_cast<long long>(options_.window));
    warn(std::string(buf) + " (after " + std::to_string(options_.warmup_steps) + " warm-up steps)");
  }
  if (!rec) return;
  if (rec->event.phase == "forward") act(ctx, *rec, "activations overflow in the forward pass");
  else if (rate_tripped) act(ctx, *rec, "persistent gradient overflow");
}

}  // namespace mixprec::train
