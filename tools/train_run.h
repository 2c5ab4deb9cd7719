// What one `mixprec train` run records for its end: History, a callback that keeps the mean loss
// of each epoch, the per-epoch test metrics (evaluating after each epoch unless interrupted) and
// the gradient statistics; and RunResult, which adds the guard, the train step, the timings and
// the final metrics once training is over. The summary, the report (report/run_writer.h) and the
// exit status are computed from these. A resumed run counts only its own steps and skips.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "mixprec/amp/amp.h"
#include "mixprec/data/dataset.h"
#include "mixprec/train/callback.h"
#include "mixprec/train/guard.h"
#include "train_parallel.h"

namespace mixprec::cli {

class History : public train::Callback {
 public:
  // `test`: evaluate on it after each epoch (null: never).
  History(const dataset::Dataset* test, const ParallelRun& par) : test_(test), par_(par) {}
  void on_step_end(train::RunContext& c) override;
  void on_epoch_end(
      train::RunContext& c) override;             // Model::train has waited for every step by then
  bool may_lag() const override { return true; }  // records the RunContext only

  std::vector<double> epoch_losses;
  nlohmann::json epoch_metrics = nlohmann::json::array();
  nlohmann::json grad_stats = nlohmann::json::array();
  int64_t steps_this_run = 0, skipped_this_run = 0, total_steps = 0;

 private:
  const dataset::Dataset* test_;
  ParallelRun par_;
  double sum_ = 0;
  int64_t n_ = 0;
};

// "test accuracy A, test loss L" for a classifier; "validation loss L (B bits per byte)" for a
// language model, whose metrics hold the mean next-byte loss alone (nats; bits = nats / ln 2).
std::string describe_metrics(const std::map<std::string, double>& metrics);

struct RunResult {
  const History& history;
  const train::OverflowGuard& guard;
  amp::TrainOneStepCell& step;
  const std::vector<amp::PrecisionRow>& precision_rows;
  ParallelRun par{};
  std::map<std::string, double> metrics{};
  std::string optimizer{};
  nlohmann::json recipe{};  // recipe_json of the step (zoo_recipe.h); null when not made
  int threads = 0;
  int64_t resumed_at = -1;
  double train_seconds = 0, samples_per_second = 0, wall = 0;
  int64_t peak = 0;
  std::string interrupted{};  // why training stopped early ("" if it did not)
};

}  // namespace mixprec::cli
