// Callbacks and metrics. Output goes to stdout as whole lines (flushed), so it interleaves
// cleanly with other logs; the progress bar uses \r only on a terminal.
#include "mixprec/train/callback.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "mixprec/ops/ops.h"
#include "mixprec/train/model.h"

namespace mixprec::train {

LossMonitor::LossMonitor(int64_t every) : every_(every) {
  MIXPREC_CHECK(every >= 1, "LossMonitor: per_print_times must be >= 1, got ", every);
}

void LossMonitor::on_step_end(RunContext& ctx) {
  if (ctx.step.loss_finite) {
    epoch_loss_ += ctx.step.loss;
    ++epoch_count_;
  }
  if (ctx.rank != 0 || (ctx.step_in_epoch % every_ != 0 && !ctx.step.skipped)) return;
  std::printf("epoch: %lld step: %lld, loss is %.6f", static_cast<long long>(ctx.epoch + 1),
              static_cast<long long>(ctx.step_in_epoch), ctx.step.loss);
  if (ctx.step.skipped) std::printf(" (skipped: overflow at loss scale %g)", ctx.step.loss_scale);
  std::printf("\n");
  std::fflush(stdout);
}

void LossMonitor::on_epoch_end(RunContext& ctx) {
  if (epoch_count_ > 0 && ctx.rank == 0)
    std::printf("epoch: %lld, mean loss %.6f over %lld steps\n", static_cast<long long>(ctx.epoch + 1),
                epoch_loss_ / static_cast<double>(epoch_count_), static_cast<long long>(epoch_count_));
  std::fflush(stdout);
  epoch_loss_ = 0;
  epoch_count_ = 0;
}

void TimeMonitor::on_epoch_end(RunContext& ctx) {
  if (ctx.rank != 0) return;
  const double steps = static_cast<double>(std::max<int64_t>(ctx.step_in_epoch, 1));
  std::printf("epoch: %lld, time %.2f s, per step %.2f ms, %.0f samples/s\n",
              static_cast<long long>(ctx.epoch + 1), ctx.epoch_seconds, 1e3 * ctx.epoch_seconds / steps,
              steps * static_cast<double>(ctx.batch_size * ctx.group_size) / std::max(ctx.epoch_seconds, 1e-9));
  std::fflush(stdout);
}

void LossScaleMonitor::on_step_end(RunContext& ctx) {
  skipped_ += ctx.step.skipped ? 1 : 0;
  if (ctx.rank == 0 && (ctx.global_step % every_ == 0 || ctx.step.skipped))
    std::printf("step %lld: loss scale %g, skipped %lld so far%s\n", static_cast<long long>(ctx.global_step),
                ctx.step.loss_scale, static_cast<long long>(skipped_),
                ctx.step.skipped ? (ctx.step.loss_finite ? " (gradient overflow)" : " (non-finite loss)") : "");
  std::fflush(stdout);
}

void LossScaleMonitor::on_epoch_end(RunContext& ctx) {
  if (ctx.rank != 0) return;
  std::printf("epoch %lld: loss scale %g, skipped %lld steps\n", static_cast<long long>(ctx.epoch + 1),
              ctx.step.loss_scale, static_cast<long long>(skipped_));
  std::fflush(stdout);
}

// Under a launcher (mpirun) stdout is a pseudo-terminal whatever mpirun's own output goes to (a
// file, a pipe), so the bar is drawn only for a terminal that is not one of those.
ProgressBar::ProgressBar(int64_t every)
    : every_(every), tty_(isatty(STDOUT_FILENO) != 0 && !communication::launched_by_launcher()) {
  MIXPREC_CHECK(every >= 1, "ProgressBar: every must be >= 1, got ", every);
}

void ProgressBar::on_step_end(RunContext& ctx) {
  if (ctx.step.loss_finite) ema_loss_ = ema_loss_ < 0 ? ctx.step.loss : 0.98 * ema_loss_ + 0.02 * ctx.step.loss;
  if (ctx.rank != 0) return;
  // Samples/s of the whole group (the global batch).
  const double rate =
      static_cast<double>(ctx.step_in_epoch * ctx.batch_size * ctx.group_size) / std::max(ctx.epoch_seconds, 1e-9);
  if (tty_) {
    const int width = 30;
    const int filled = static_cast<int>(width * ctx.step_in_epoch / std::max<int64_t>(ctx.steps_per_epoch, 1));
    std::printf("\repoch %lld/%lld [%.*s%*s] %lld/%lld loss %.4f scale %g %.0f samples/s ",
                static_cast<long long>(ctx.epoch + 1), static_cast<long long>(ctx.epochs), filled,
                "##############################", width - filled, "",
                static_cast<long long>(ctx.step_in_epoch),
                static_cast<long long>(ctx.steps_per_epoch),
                ema_loss_ < 0 ? ctx.step.loss : ema_loss_, ctx.step.loss_scale, rate);
  } else if (ctx.step_in_epoch % every_ == 0 || ctx.step_in_epoch == ctx.steps_per_epoch) {
    // The smoothed loss exists once a step had a finite loss (ema_loss_ < 0: none has yet).
    char smoothed[48] = "no finite loss so far";
    if (ema_loss_ >= 0) std::snprintf(smoothed, sizeof smoothed, "smoothed %.4f", ema_loss_);
    std::printf("epoch %lld/%lld step %lld/%lld loss %.4f (%s) scale %g lr %g %.0f samples/s%s\n",
                static_cast<long long>(ctx.epoch + 1), static_cast<long long>(ctx.epochs),
                static_cast<long long>(ctx.step_in_epoch),
                static_cast<long long>(ctx.steps_per_epoch), ctx.step.loss, smoothed,
                ctx.step.loss_scale, ctx.step.lr, rate, ctx.step.skipped ? " [skipped]" : "");
  }
  std::fflush(stdout);
}

void ProgressBar::on_epoch_end(RunContext& ctx) {
  if (tty_ && ctx.rank == 0) std::printf("\n");
  std::fflush(stdout);
}

RankConsistencyCheck::RankConsistencyCheck(int64_t every) : every_(every) {
  MIXPREC_CHECK(every >= 1, "RankConsistencyCheck: every must be >= 1, got ", every);
}

void RankConsistencyCheck::on_train_begin(RunContext& ctx) {
  if (ctx.model && ctx.group_size > 1)
    ctx.model->train_network().check_ranks("the start of training (step " + std::to_string(ctx.global_step) + ")");
}

void RankConsistencyCheck::on_step_end(RunContext& ctx) {
  if (ctx.model && ctx.group_size > 1 && ctx.global_step % every_ == 0)
    ctx.model->train_network().check_ranks("step " + std::to_string(ctx.global_step));
}

// ---------------------------------------------------------------- metrics

void Accuracy::update(const Tensor& logits, const Tensor& labels, const Tensor&) {
  MIXPREC_CHECK(logits.dim() == 2 && labels.dim() == 1 && logits.size(0) == labels.size(0),
                "Accuracy: expected logits [N, C] and labels [N], got ", shape_str(logits.shape()),
                " and ", shape_str(labels.shape()));
  const auto pred = ops::argmax(logits, 1).to_vector<int64_t>();
  const auto lab = labels.to_vector<int64_t>();
  for (size_t i = 0; i < pred.size(); ++i) correct_ += pred[i] == lab[i];
  total_ += static_cast<int64_t>(pred.size());
}

std::vector<double> Accuracy::sums() const { return {static_cast<double>(correct_), static_cast<double>(total_)}; }

void Accuracy::set_sums(const std::vector<double>& s) {
  MIXPREC_CHECK(s.size() == 2, "Accuracy::set_sums: expected 2 values, got ", s.size());
  correct_ = static_cast<int64_t>(s[0]);
  total_ = static_cast<int64_t>(s[1]);
}

double Accuracy::eval() const {
  MIXPREC_CHECK(total_ > 0, "Accuracy: no samples were evaluated");
  return static_cast<double>(correct_) / static_cast<double>(total_);
}

void Loss::update(const Tensor&, const Tensor& labels, const Tensor& loss) {
  MIXPREC_CHECK(loss.defined(), "Loss metric: no loss was given");
  const int64_t n = labels.size(0);
  sum_ += loss.item() * static_cast<double>(n);
  count_ += n;
}

void Loss::set_sums(const std::vector<double>& s) {
  MIXPREC_CHECK(s.size() == 2, "Loss::set_sums: expected 2 values, got ", s.size());
  sum_ = s[0];
  count_ = static_cast<int64_t>(s[1]);
}

double Loss::eval() const {
  MIXPREC_CHECK(count_ > 0, "Loss metric: no samples were evaluated");
  return sum_ / static_cast<double>(count_);
}

}  // namespace mixprec::train
