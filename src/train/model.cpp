// Model: builds the train step when constructed, runs epochs of batches through it with
// callbacks, and evaluates metrics. Position bookkeeping (next epoch/batch, global step) lets a
// checkpoint resume training exactly where it stopped. Data parallel (the context's
// DATA_PARALLEL when the Model is built): the train step reduces and agrees by itself; here a
// stop asked for on any rank stops every rank after the same step, and eval() splits the
// batches over the ranks and adds up the metrics' sums, so it reports what one process would.
#include "mixprec/train/model.h"

#include <chrono>
#include <cstdio>
#include <deque>

#include "amp/apply_level.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/context.h"
#include "mixprec/cuda.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/ops/ops.h"

namespace mixprec::train {

namespace {
// Batches onto the device: through pinned staging on a GPU (images and labels each their own
// pair of buffers, so one batch's upload overlaps the previous step), as they are on the CPU.
class BatchUpload {
 public:
  explicit BatchUpload(Device device) {
    if (!device.is_cuda()) return;
    images_.emplace(device);
    labels_.emplace(device);
  }
  std::pair<Tensor, Tensor> operator()(const dataset::Batch& b) {
    if (!images_) return {b.image, b.label};
    return {images_->upload(b.image), labels_->upload(b.label)};
  }

 private:
  std::optional<cuda::Staging> images_, labels_;
};
}  // namespace

// Where the Model runs: the context's device when it is a GPU (set_context), else where the
// network's parameters are (the CPU, unless the caller moved them).
Device Model::device() const {
  const Device context = get_context().device;
  if (context.is_cuda()) return context;
  if (train_net_) return train_net_->device();
  const std::vector<nn::NamedTensor> params = network_.parameters_and_names();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

void Model::place() {
  const Device d = device();
  if (train_net_ && train_net_->device() != d) train_net_->to(d);
  if (!train_net_) network_.to(d);  // nothing when the parameters are there already
}

Model::Model(nn::Cell& network, nn::Cell& loss_fn, optim::Optimizer& optimizer, ModelOptions options)
    : network_(network), loss_fn_(loss_fn), optimizer_(&optimizer), options_(std::move(options)) {
  amp::BuildOptions b;
  b.keep_batchnorm_fp32 = options_.keep_batchnorm_fp32;
  b.cast_model_type = options_.dtype;
  b.loss_scale_manager = options_.loss_scale_manager;
  b.step = options_.step;
  train_net_ = amp::build_train_network(network_, optimizer, loss_fn_, options_.amp_level, b);
}

Model::Model(nn::Cell& network, nn::Cell& loss_fn, ModelOptions options)
    : network_(network), loss_fn_(loss_fn), optimizer_(nullptr), options_(std::move(options)) {
  // The level's casts as build_train_network applies them; no manager, no step.
  (void)amp::detail::apply_level(network_, options_.amp_level, options_.dtype,
                                 options_.keep_batchnorm_fp32, "Model: dtype");
}

amp::TrainOneStepCell& Model::train_network() {
  MIXPREC_CHECK(train_net_ != nullptr, "Model: this Model has no train step (it was built without an optimizer)",
                Hint{"build it with an optimizer: Model(network, loss_fn, optimizer, options)"});
  return *train_net_;
}

void Model::set_position(int64_t epoch, int64_t batch, int64_t global_step) {
  next_epoch_ = epoch;
  next_batch_ = batch;
  global_step_ = global_step;
}

void Model::train(int64_t epochs, const dataset::Dataset& ds, std::vector<CallbackHandle> callbacks,
                  TrainOptions options) {
  MIXPREC_CHECK(epochs >= 1, "Model.train: epochs must be >= 1, got ", epochs);
  MIXPREC_CHECK(ds.num_batches() > 0, "Model.train: the dataset has no batches (",
                ds.num_samples(), " samples, batch size ", ds.batch_size(), ")");
  MIXPREC_CHECK(options.initial_epoch >= 0 && options.initial_epoch <= epochs && options.start_batch >= 0 &&
                    options.start_batch <= ds.num_batches(),
                "Model.train: resume position (epoch ", options.initial_epoch, ", batch ",
                options.start_batch, ") is outside ", epochs, " epochs of ", ds.num_batches(), " batches");
  MIXPREC_CHECK(train_net_ != nullptr, "Model.train: this Model was built without an optimizer",
                Hint{"build it with one: Model(network, loss_fn, optimizer, options)"});
  amp::TrainOneStepCell& step = *train_net_;
  place();
  BatchUpload upload(step.device());
  network_.set_train(true);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto epoch_t0 = t0;  // when the current epoch began
  RunContext ctx;
  ctx.epochs = epochs;
  ctx.steps_per_epoch = ds.num_batches();
  ctx.batch_size = ds.batch_size();
  ctx.global_step = global_step_;
  ctx.model = this;
  const bool parallel = step.grad_reducer() != nullptr;
  if (parallel) {
    ctx.rank = communication::get_rank();
    ctx.group_size = communication::get_group_size();
    check_sharding(ds, ctx.group_size);
  }
  for (auto& cb : callbacks) cb->on_train_begin(ctx);
  // A device step returns before its outcome is known. When every callback can take its
  // on_step_end late (Callback::may_lag), the steps' outcomes are delivered as they come back, in
  // order, and the host queues the next step meanwhile; otherwise each step is waited for.
  bool lag = step.steps_complete_later();
  for (auto& cb : callbacks) lag = lag && cb->may_lag();
  struct Queued {  // what a step's RunContext says besides its outcome, kept until it is delivered
    int64_t attempt, step_in_epoch, global_step;
  };
  std::deque<Queued> queued;
  auto deliver = [&](bool wait) {
    if (queued.empty()) return;
    if (wait) step.sync();
    const int64_t done = step.poll_steps();
    while (!queued.empty() && queued.front().attempt <= done) {
      const Queued q = queued.front();
      queued.pop_front();
      ctx.step = step.completed_step(q.attempt);
      ctx.step_in_epoch = q.step_in_epoch;
      ctx.global_step = q.global_step;
      ctx.epoch_seconds = std::chrono::duration<double>(clock::now() - epoch_t0).count();
      ctx.train_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      for (auto& cb : callbacks) cb->on_step_end(ctx);
    }
  };
  for (int64_t e = options.initial_epoch; e < epochs && !ctx.stop_requested; ++e) {
    ctx.epoch = e;
    epoch_t0 = clock::now();
    for (auto& cb : callbacks) cb->on_epoch_begin(ctx);
    const int64_t first = e == options.initial_epoch ? options.start_batch : 0;
    for (const dataset::Batch& batch : ds.epoch(e, first)) {
      const auto [x, y] = upload(batch);
      (void)step(x, y);
      ++global_step_;
      queued.push_back({step.attempted_steps(), batch.index + 1, global_step_});
      next_epoch_ = batch.index + 1 == ds.num_batches() ? e + 1 : e;
      next_batch_ = batch.index + 1 == ds.num_batches() ? 0 : batch.index + 1;
      deliver(/*wait=*/!lag);  // a device step without lag: waits for its flag and loss (amp.h)
      if (options.max_steps >= 0 && global_step_ >= options.max_steps) ctx.stop_requested = true;
      if (parallel) {  // a stop on one rank (a signal, a callback) stops all after this step
        double stop = ctx.stop_requested ? 1.0 : 0.0;
        comm::all_reduce_max({&stop, 1});
        ctx.stop_requested = stop != 0.0;
      }
      if (ctx.stop_requested) break;
    }
    deliver(/*wait=*/true);
    ctx.global_step = global_step_;
    ctx.epoch_seconds = std::chrono::duration<double>(clock::now() - epoch_t0).count();
    for (auto& cb : callbacks) cb->on_epoch_end(ctx);
  }
  ctx.train_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  for (auto& cb : callbacks) cb->on_train_end(ctx);
}

std::map<std::string, double> Model::eval(const dataset::Dataset& ds) {
  MIXPREC_CHECK(!options_.metrics.empty(), "Model.eval: no metrics were given",
                Hint{"pass {.metrics = {{\"Accuracy\", nn::Accuracy()}}} to the Model"});
  bool needs_loss = false;
  for (auto& [name, m] : options_.metrics) {
    m->clear();
    needs_loss |= m->needs_loss();
  }
  const bool was_training = network_.training();
  place();
  BatchUpload upload(device());
  network_.set_train(false);
  NoGradGuard ng;
  // On a GPU the metrics read the logits and the loss copied back to the host (with the batch's
  // own host labels): one small copy per batch, and the metrics stay host code.
  auto update = [&](const dataset::Batch& batch) {
    const auto [x, y] = upload(batch);
    Tensor logits = network_(x);
    logits = ops::amp_cast(logits, DType::f32);
    const Tensor loss = needs_loss ? loss_fn_(logits, y) : Tensor();
    const Tensor mean_loss = loss.defined() && loss.numel() > 1 ? ops::mean(loss) : loss;
    const Device cpu = Device::cpu();
    for (auto& [name, m] : options_.metrics)
      m->update(logits.to(cpu), batch.label, mean_loss.defined() ? mean_loss.to(cpu) : mean_loss);
  };
  // Data parallel: rank r evaluates batches r, r + n, ... (the very batches one process would),
  // or its own shard of a sharded dataset, and the metrics' sums are added up over the ranks.
  const bool parallel = train_net_ ? train_net_->grad_reducer() != nullptr : is_data_parallel();
  const int n = parallel ? communication::get_group_size() : 1;
  bool summable = n > 1;
  for (auto& [name, m] : options_.metrics) summable &= !m->sums().empty();
  if (summable && ds.num_shards() == 1) {
    for (int64_t b = communication::get_rank(); b < ds.num_batches(); b += n) update(ds.get_batch(0, b));
  } else {
    for (const dataset::Batch& batch : ds.epoch(0)) update(batch);
  }
  if (summable) reduce_metric_sums();
  network_.set_train(was_training);
  std::map<std::string, double> out;
  for (auto& [name, m] : options_.metrics) out[name] = m->eval();
  return out;
}

void Model::reduce_metric_sums() {
  std::vector<double> all;
  for (auto& [name, m] : options_.metrics) {
    const std::vector<double> v = m->sums();
    all.insert(all.end(), v.begin(), v.end());
  }
  comm::all_reduce_sum(all);
  size_t at = 0;
  for (auto& [name, m] : options_.metrics) {
    const size_t k = m->sums().size();
    m->set_sums(std::vector<double>(all.begin() + static_cast<int64_t>(at), all.begin() + static_cast<int64_t>(at + k)));
    at += k;
  }
}

void Model::check_sharding(const dataset::Dataset& ds, int group_size) {
  MIXPREC_CHECK(ds.num_shards() == 1 || ds.num_shards() == group_size, "Model.train: the dataset is shard ",
                ds.shard_id(), " of ", ds.num_shards(), " but the data-parallel group has ", group_size, " ranks",
                Hint{"shard with {.num_shards = communication::get_group_size(), .shard_id = communication::get_rank()}"});
  if (ds.num_shards() == 1 && group_size > 1 && communication::get_rank() == 0)
    std::fprintf(stderr, "mixprec: warning: data parallel over %d ranks with an unsharded training dataset: every rank "
                 "trains on the same samples (shard it with {.num_shards, .shard_id})\n", group_size);
}

Tensor Model::predict(const Tensor& x) {
  const bool was_training = network_.training();
  place();
  network_.set_train(false);
  NoGradGuard ng;
  Tensor out = network_(x.to(device()));
  network_.set_train(was_training);
  return ops::amp_cast(out, DType::f32);
}

}  // namespace mixprec::train
