// History (see train_run.h): per-step sums, per-epoch losses and test metrics.
#include "train_run.h"

#include <cmath>
#include <cstdio>

#include "mixprec/train/model.h"
#include "train_signals.h"

namespace mixprec::cli {

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
      grad_stats.push_back({{"step", c.global_step}, {"param", g.param}, {"max_abs", g.max_abs},
                            {"underflow_fraction", g.underflow_fraction}, {"zero_fraction", g.zero_fraction},
                            {"recommended_scale", g.recommended_scale}});
}

void History::on_epoch_end(train::RunContext& c) {
  const double loss = n_ ? sum_ / static_cast<double>(n_) : NAN;
  epoch_losses.push_back(loss);
  nlohmann::json e{{"epoch", c.epoch + 1}, {"train_loss", loss}};
  // Interrupted: save first, evaluate never (decided by all ranks together: eval is collective).
  if (test_ && c.model && !agreed(StopSignals::received() != 0, par_)) {
    const auto m = c.model->eval(*test_);
    e["test_accuracy"] = m.at("Accuracy");
    e["test_loss"] = m.at("Loss");
    std::printf("epoch %lld: test accuracy %.4f, test loss %.4f\n", static_cast<long long>(c.epoch + 1),
                m.at("Accuracy"), m.at("Loss"));
  }
  epoch_metrics.push_back(e);
  sum_ = 0;
  n_ = 0;
}

}  // namespace mixprec::cli
