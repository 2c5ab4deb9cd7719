// Training callbacks (MindSpore's LossMonitor, TimeMonitor, and friends) and metrics (Accuracy,
// Loss). A callback sees a RunContext at each stage of Model::train; it may ask training to
// stop. Printing callbacks write plain lines, or a progress bar when stdout is a terminal; in
// data-parallel mode only rank 0 prints (every rank sees the same, already reduced, values).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/amp/amp.h"
#include "mixprec/handle.h"
#include "mixprec/tensor.h"

namespace mixprec::train {

class Model;

struct RunContext {
  int64_t epoch = 0;             // 0-based
  int64_t epochs = 0;
  int64_t step_in_epoch = 0;     // 1-based index of the batch just trained in this epoch
  int64_t steps_per_epoch = 0;
  int64_t global_step = 0;       // micro-batches trained so far (applied + skipped)
  int64_t batch_size = 0;        // per rank in data-parallel mode
  int rank = 0;                  // data parallel: this process's rank, and the group size
  int group_size = 1;
  amp::StepInfo step;            // loss, loss scale, overflow/skip flags, lr
  double epoch_seconds = 0.0;    // since the epoch began
  double train_seconds = 0.0;    // since training began
  bool stop_requested = false;   // set by a callback to end training after this step
  Model* model = nullptr;
};

class Callback {
 public:
  virtual ~Callback() = default;
  // True when on_step_end may come after later steps were queued: on a GPU a step's outcome
  // (loss, overflow, skip) comes back asynchronously, and Model::train then lets the host queue
  // the next steps meanwhile (at most amp::TrainOneStepCell::kStepsInFlight) if every callback
  // agrees. Such a callback reads only the RunContext, not the model's weights or state, and a
  // stop it requests takes effect after the steps already queued. false (the default): each step
  // is waited for before its on_step_end, so the model is exactly as that step left it.
  virtual bool may_lag() const { return false; }
  virtual void on_train_begin(RunContext&) {}
  virtual void on_epoch_begin(RunContext&) {}
  virtual void on_step_end(RunContext&) {}
  virtual void on_epoch_end(RunContext&) {}
  virtual void on_train_end(RunContext&) {}
};
using CallbackHandle = Handle<Callback>;

// Prints "epoch: 1 step: 100, loss is 0.4321" every per_print_times steps (MindSpore's format),
// with " (skipped: overflow, scale 65536)" on skipped steps.
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(int64_t per_print_times = 1);
  bool may_lag() const override { return true; }
  void on_step_end(RunContext& ctx) override;
  void on_epoch_end(RunContext& ctx) override;

 private:
  int64_t every_;
  double epoch_loss_ = 0.0;
  int64_t epoch_count_ = 0;
};

// Prints epoch time and mean step time at the end of each epoch.
class TimeMonitor : public Callback {
 public:
  bool may_lag() const override { return true; }
  void on_epoch_end(RunContext& ctx) override;
};

// Prints the loss scale and the skipped steps every `every` steps and at epoch end.
class LossScaleMonitor : public Callback {
 public:
  explicit LossScaleMonitor(int64_t every = 100) : every_(every) {}
  bool may_lag() const override { return true; }
  void on_step_end(RunContext& ctx) override;
  void on_epoch_end(RunContext& ctx) override;

 private:
  int64_t every_;
  int64_t skipped_ = 0;
};

// A one-line progress bar redrawn in place when stdout is a terminal; plain periodic lines
// (every `every` steps) otherwise, and always under mpirun (which gives each rank a terminal of
// its own, even when mpirun's output goes to a file).
class ProgressBar : public Callback {
 public:
  explicit ProgressBar(int64_t every = 100);
  bool may_lag() const override { return true; }
  void on_step_end(RunContext& ctx) override;
  void on_epoch_end(RunContext& ctx) override;

 private:
  int64_t every_;
  bool tty_;
  double ema_loss_ = -1.0;
};

// Data parallel: every `every` steps (and before the first), compares across the ranks a hash of
// every parameter, buffer and optimizer state tensor, the loss-scale state and the step counters
// (amp::TrainOneStepCell::check_ranks); a difference stops training with comm::RankMismatchError
// naming the first value that differs and the ranks involved. Collective; nothing outside
// data-parallel mode.
class RankConsistencyCheck : public Callback {
 public:
  explicit RankConsistencyCheck(int64_t every);
  void on_train_begin(RunContext& ctx) override;
  void on_step_end(RunContext& ctx) override;

 private:
  int64_t every_;
};

// Calls a function at each step end (for tests, traces and custom logging). may_lag: the
// function reads only the RunContext (see Callback::may_lag).
class LambdaCallback : public Callback {
 public:
  explicit LambdaCallback(std::function<void(RunContext&)> on_step, bool may_lag = false)
      : fn_(std::move(on_step)), may_lag_(may_lag) {}
  void on_step_end(RunContext& ctx) override { fn_(ctx); }
  bool may_lag() const override { return may_lag_; }

 private:
  std::function<void(RunContext&)> fn_;
  bool may_lag_;
};

// ---------------------------------------------------------------- metrics

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void clear() = 0;
  // logits [N, C] (fp32), labels [N] integer, loss: scalar batch mean (undefined if unneeded).
  virtual void update(const Tensor& logits, const Tensor& labels, const Tensor& loss) = 0;
  virtual double eval() const = 0;
  virtual bool needs_loss() const { return false; }
  // Data-parallel evaluation: the running sums the metric is computed from, which Model::eval
  // adds up over the ranks and sets back. A metric that has none (empty) is evaluated on the
  // whole dataset by every rank instead.
  virtual std::vector<double> sums() const { return {}; }
  virtual void set_sums(const std::vector<double>&) {}
};
using MetricHandle = Handle<Metric>;

class Accuracy : public Metric {
 public:
  void clear() override { correct_ = total_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& s) override;

 private:
  int64_t correct_ = 0, total_ = 0;
};

class Loss : public Metric {
 public:
  void clear() override { sum_ = 0; count_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss) override;
  double eval() const override;
  bool needs_loss() const override { return true; }
  std::vector<double> sums() const override { return {sum_, static_cast<double>(count_)}; }
  void set_sums(const std::vector<double>& s) override;

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace mixprec::train

namespace mixprec::nn {
// The seed writes nn.Accuracy(): metrics are reachable from nn too.
using train::Accuracy;
using train::Loss;
}  // namespace mixprec::nn
