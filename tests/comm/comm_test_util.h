// Helpers of the data-parallel tests (run under mpirun by ctest, label mpi): a scope that turns
// data parallel on (and off again), a short training run of a zoo model over the shard of a
// synthetic dataset with the weights it ends with, and cross-rank gathers for assertions. A
// single-process reference run is the same helper outside data parallel, in the same process.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/mixprec.h"
#include "test_util.h"

namespace mixprec::testing {

inline int rank() { return communication::get_rank(); }
inline int ranks() { return communication::get_group_size(); }

// Data parallel while alive (gradients averaged), with the options given.
class DataParallelScope {
 public:
  explicit DataParallelScope(AutoParallelContext c = {}) {
    c.parallel_mode = ParallelMode::DATA_PARALLEL;
    c.gradients_mean = true;
    set_auto_parallel_context(c);
  }
  ~DataParallelScope() { reset_auto_parallel_context(); }
  DataParallelScope(const DataParallelScope&) = delete;
  DataParallelScope& operator=(const DataParallelScope&) = delete;
};

// Every rank's `value`, rank after rank (bit patterns of doubles).
inline std::vector<double> gather(double value) {
  const uint64_t bits = std::bit_cast<uint64_t>(value);
  std::vector<double> out;
  for (uint64_t b : comm::all_gather({&bits, 1})) out.push_back(std::bit_cast<double>(b));
  return out;
}

struct RunSpec {
  std::string model = "lenet";
  std::string level = "O0";
  DType dtype = DType::bf16;
  std::shared_ptr<amp::LossScaleManager> manager{};  // null: the level's default
  int64_t global_batch = 64;
  int64_t steps = 50;
  int64_t samples = 64 * 50;
  amp::TrainStepOptions step{};
  double lr = 0.05;
  // Called on each batch before the step (1-based step number), to inject values.
  std::function<void(int64_t step, dataset::Batch&)> edit{};
  // One process that runs what `ranks_like` ranks would: each global batch as micro-batches of
  // global_batch / ranks_like, shard after shard, accumulated into one update.
  int ranks_like = 0;
  // Where the step runs (the cell is moved there, each batch uploaded after `edit`).
  Device device = Device::cpu();
};

struct RunResult {
  std::vector<Tensor> weights;        // the fp32 parameters at the end
  std::vector<amp::StepInfo> steps;   // one per step
  std::shared_ptr<amp::TrainOneStepCell> cell;
  std::shared_ptr<nn::Cell> net;
  std::shared_ptr<optim::Optimizer> opt;
  std::shared_ptr<nn::Cell> loss;
};

// Trains spec.model from seed 7 for spec.steps steps of the global batch: in data-parallel mode
// each rank takes global_batch / ranks samples of its shard; otherwise one process takes them all.
// The sample order is the same (the shards of one epoch's permutation).
inline RunResult run_training(const RunSpec& spec) {
  const bool parallel = is_data_parallel();
  const int64_t n = parallel ? ranks() : 1;
  manual_seed(7);
  RunResult r;
  r.net = nn::make_model(spec.model);
  r.opt = std::make_shared<optim::Momentum>(r.net->trainable_params(), spec.lr, 0.9);
  r.loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(
      nn::SoftmaxCrossEntropyOptions{.sparse = true, .reduction = nn::Reduction::mean});
  amp::TrainStepOptions step_options = spec.step;
  if (spec.ranks_like > 0) step_options.accumulation_steps = spec.ranks_like;
  // Two calls, not an optional assigned afterwards (g++ 12 warns maybe-uninitialized on that).
  r.cell = spec.manager ? amp::build_train_network(*r.net, *r.opt, *r.loss, spec.level,
                                                   {.cast_model_type = spec.dtype, .loss_scale_manager = spec.manager,
                                                    .step = step_options})
                        : amp::build_train_network(*r.net, *r.opt, *r.loss, spec.level,
                                                   {.cast_model_type = spec.dtype, .step = step_options});
  dataset::Dataset ds = dataset::SyntheticDataset({.num_samples = spec.samples, .seed = 3})
                            .map(dataset::transforms::rescale(1.0 / 255, -0.5))
                            .shuffle(11);
  if (spec.ranks_like > 0) {
    for (int64_t b = 0; b < spec.steps; ++b)
      for (int64_t k = 0; k < spec.ranks_like; ++k) {
        const dataset::Batch batch = ds.shard(spec.ranks_like, k).batch(spec.global_batch / spec.ranks_like, true).get_batch(0, b);
        (void)(*r.cell)(batch.image, batch.label);
        if (k + 1 == spec.ranks_like) r.steps.push_back(r.cell->last_step());
      }
    for (const Tensor& p : r.opt->parameters()) r.weights.push_back(p.detach().clone());
    return r;
  }
  if (parallel) ds = ds.shard(n, rank());
  ds = ds.batch(spec.global_batch / n, true);
  if (!spec.device.is_cpu()) r.cell->to(spec.device);
  int64_t step = 0;
  for (int64_t e = 0; step < spec.steps; ++e)
    for (const dataset::Batch& batch : ds.epoch(e)) {
      if (++step > spec.steps) break;
      dataset::Batch copy = batch;
      copy.image = batch.image.clone();
      if (spec.edit) spec.edit(step, copy);
      (void)(*r.cell)(copy.image.to(spec.device), copy.label.to(spec.device));
      r.steps.push_back(r.cell->last_step());
    }
  for (const Tensor& p : r.opt->parameters()) r.weights.push_back(p.detach().to(Device::cpu()).clone());
  return r;
}

// max |a - b| / max(max |b|, 1e-3) over all weights.
inline double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double diff = 0, scale = 1e-3;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) {
      diff = std::max(diff, std::fabs(x[j] - y[j]));
      scale = std::max(scale, std::fabs(y[j]));
    }
  }
  return diff / scale;
}

}  // namespace mixprec::testing
