// History (see train_run.h): per-step sums, per-epoch losses and test metrics.
#include "train_run.h"

#include <cmath>
#include <cstdio>

#include "mixprec/train/model.h"
#include "train_signals.h"

namespace mixprec::cli {

std::string describe_metrics(const std::map<std::string, double>& m) {
  char buf[160];
  if (m.contains("Accuracy"))
    std::snprintf(buf, sizeof buf, "test accuracy %.4f, test loss %.4f", m.at("Accuracy"),
                  m.at("Loss"));
  else
    std::snprintf(buf, sizeof buf, "validation loss %.4f (%.4f bits per byte)", m.at("Loss"),
                  m.at("Loss") / std::log(2.0));
  return buf;
}

void History::on_step_end(train::RunContext& c) {
  if (c.step.loss_finite) {
    sum_ += c.step.loss;
    ++n_;
  }
  skipped_this_run += c.step.skipped;
  ++steps_this_run;
  total_steps = c.global_step;
  for (const amp::GradStats& g : c.step.grad_stats)
    if (grad_stats.size() < 20000)
      grad_stats.push_back({{"step", c.global_step},
                            {"param", g.param},
                            {"max_abs", g.max_abs},
                            {"underflow_fraction", g.underflow_fraction},
                            {"zero_fraction", g.zero_fraction},
                            {"recommended_scale", g.recommended_scale}});
}

void History::on_epoch_end(train::RunContext& c) {
  const double loss = n_ ? sum_ / static_cast<double>(n_) : NAN;
  epoch_losses.push_back(loss);
  nlohmann::json e{{"epoch", c.epoch + 1}, {"train_loss", loss}};
  // Interrupted: save first, evaluate never (decided by all ranks together: eval is collective).
  if (test_ && c.model && !agreed(StopSignals::received() != 0, par_)) {
    const auto m = c.model->eval(*test_);
    if (m.contains("Accuracy"))
      e["test_accuracy"] = m.at("Accuracy");
    else
      e["test_bits_per_byte"] = m.at("Loss") / std::log(2.0);
    e["test_loss"] = m.at("Loss");
    std::printf("epoch %lld: %s\n", static_cast<long long>(c.epoch + 1),
                describe_metrics(m).c_str());
  }
  epoch_metrics.push_back(e);
  sum_ = 0;
  n_ = 0;
}

}  // namespace mixprec::cli
