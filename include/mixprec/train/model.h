// train::Model: the seed's high-level API. Model(net, loss_fn, optimizer, {.metrics,
// .amp_level, .loss_scale_manager}) builds the train step with amp::build_train_network when it
// is constructed (as MindSpore's Model does), so the level applies to eval and predict before
// any training; train(epochs, dataset, callbacks) runs it over a Dataset; eval(dataset) computes
// the metrics; predict(x) runs the network in eval mode. The Model does not own the network,
// loss or optimizer (as in the seed, the caller creates and keeps them). Built while the parallel
// context is DATA_PARALLEL, it trains data parallel by itself (model.cpp); give train() each
// rank's shard (MnistDataset {.num_shards, .shard_id}). With set_context({.device =
// Device::cuda()}) train, eval and predict first move the network, the optimizer's state and the
// loss-scaling state to that GPU (amp::TrainOneStepCell::to) and upload each batch there.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/amp/amp.h"
#include "mixprec/data/dataset.h"
#include "mixprec/nn/cell.h"
#include "mixprec/optim/optimizer.h"
#include "mixprec/handle.h"
#include "mixprec/train/callback.h"

namespace mixprec::train {

struct ModelOptions {
  std::map<std::string, MetricHandle> metrics{};
  std::string amp_level = "O0";
  std::optional<bool> keep_batchnorm_fp32{};      // level default (true at O2)
  // Level default when unset (dynamic at O2); nullptr for none. A value is copied in (read its
  // state with train_network().loss_scale_manager()); a shared_ptr is shared with the caller.
  std::optional<Handle<amp::LossScaleManager>> loss_scale_manager{};
  std::optional<DType> dtype{};                    // the low dtype (default bf16 on CPU)
  amp::TrainStepOptions step{};                    // clipping, gradient accumulation
};

struct TrainOptions {
  int64_t max_steps = -1;       // stop after this many micro-batches in total (-1: no limit)
  int64_t initial_epoch = 0;    // resume: first epoch to run
  int64_t start_batch = 0;      // resume: first batch of initial_epoch
};

class Model {
 public:
  // Applies options.amp_level to `network` now (amp::build_train_network; at O0 the network's
  // own AMP configuration, if any, is kept).
  Model(nn::Cell& network, nn::Cell& loss_fn, optim::Optimizer& optimizer, ModelOptions options = {});
  // For eval() and predict() only (MindSpore's Model without an optimizer): applies
  // options.amp_level to `network` as the constructor above does, builds no train step; train()
  // and train_network() refuse. options.loss_scale_manager and options.step are not used.
  Model(nn::Cell& network, nn::Cell& loss_fn, ModelOptions options = {});

  void train(int64_t epochs, const dataset::Dataset& train_dataset,
             std::vector<CallbackHandle> callbacks = {}, TrainOptions options = {});
  // Metric name -> value over the whole dataset (the network in eval mode, no gradients). Data
  // parallel: collective, the same values on every rank.
  std::map<std::string, double> eval(const dataset::Dataset& dataset);
  // Network output in eval mode (fp32 at every AMP level), on the network's device.
  Tensor predict(const Tensor& x);

  // The train step (refused by a Model built without an optimizer).
  amp::TrainOneStepCell& train_network();
  nn::Cell& network() { return network_; }
  const ModelOptions& options() const { return options_; }
  // Where training stopped: the next (epoch, batch) to run, and steps run so far.
  int64_t next_epoch() const { return next_epoch_; }
  int64_t next_batch() const { return next_batch_; }
  int64_t global_step() const { return global_step_; }
  void set_position(int64_t epoch, int64_t batch, int64_t global_step);

 private:
  Device device() const;  // where the Model runs (model.cpp)
  void place();           // the network and the step's state onto that device
  void reduce_metric_sums();
  static void check_sharding(const dataset::Dataset& ds, int group_size);
  nn::Cell& network_;
  nn::Cell& loss_fn_;
  optim::Optimizer* optimizer_;  // null: eval and predict only
  ModelOptions options_;
  std::shared_ptr<amp::TrainOneStepCell> train_net_;
  int64_t next_epoch_ = 0, next_batch_ = 0, global_step_ = 0;
};

}  // namespace mixprec::train
