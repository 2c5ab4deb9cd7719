// The device train step (src/amp/step/device.cpp) without a GPU: run on CPU tensors (the
// AMP ops' reference kernels) it must take the host step's decisions and leave the same bits
// (and report the same clipping norms and gradient statistics),
// at O0 and O2-f16 with dynamic loss scaling, through overflows that skip steps (AdamW: within
// rounding); and moving a CPU network to the CPU changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "amp/step/testing.h"
#include "amp/train_steps_util.h"
#include "mixprec/cuda.h"
#include "mixprec/data/dataset.h"
#include "mixprec/data/transforms.h"
#include "mixprec/train/model.h"

namespace mixprec {
namespace {

using testing::expect_close;
using testing::expect_same_decisions;
using testing::run_steps;
using testing::StepsRun;
using testing::StepsSpec;

// The device step on CPU tensors while in scope; `lag`: a step's outcome is back only once that
// many later steps were queued (amp::testing::set_cpu_readback_lag).
struct DeviceStepOnCpu {
  explicit DeviceStepOnCpu(int64_t lag = 0) {
    amp::testing::set_device_step_on_cpu(true);
    amp::testing::set_cpu_readback_lag(lag);
  }
  ~DeviceStepOnCpu() {
    amp::testing::set_device_step_on_cpu(false);
    amp::testing::set_cpu_readback_lag(0);
  }
};

StepsRun device_step_on_cpu(const StepsSpec& s, int64_t lag = 0) {
  DeviceStepOnCpu on(lag);
  return run_steps(s, Device::cpu());
}

void expect_same_bits(const StepsSpec& s) {
  const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s);
  expect_same_decisions(dev, host);
  for (size_t k = 0; k < host.steps.size(); ++k)
    EXPECT_EQ(dev.steps[k].loss, host.steps[k].loss) << "step " << k;
  expect_close(dev.weights, host.weights, 0.0, "weight");
  expect_close(dev.buffers, host.buffers, 0.0, "buffer");
}

TEST(DeviceStep, O0ConvnetBnEqualsTheHostStepBitForBit) {
  expect_same_bits({.model = "convnet-bn", .level = "O0", .steps = 3});
}

TEST(DeviceStep, TransformersEqualTheHostStepBitForBit) {
  // What --device cuda runs for vit-tiny and gpt-tiny (embedding tables, position tables, the
  // class token, LayerNorm in f32 at O2), on CPU tensors.
  expect_same_bits({.model = "vit-tiny", .level = "O0", .steps = 2, .batch = 4});
  expect_same_bits({.model = "gpt-tiny", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(65536.0, 2.0, 2)); },
                    .steps = 3, .batch = 2});
}

TEST(DeviceStep, O2F16DynamicScalingSkipsTheSameOverflowsAsTheHostStep) {
  // 2^24 overflows f16 gradients: the first steps are skipped while the scale halves; a window of
  // 2 then grows it again.
  const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 14};
  const StepsRun host = run_steps(s, Device::cpu());
  int64_t skipped = 0, applied = 0;
  for (const amp::StepInfo& i : host.steps) (i.skipped ? skipped : applied) += 1;
  ASSERT_GT(skipped, 0) << "the case must overflow";
  ASSERT_GT(applied, 0) << "and then train";
  expect_same_bits(s);
}

// Steps in flight: the device keeps the optimizer's step count and picks each update's learning
// rate from the table of every count it could have, so that a step is queued before the host
// knows whether the steps before it were skipped. Through f16 overflows (skipped steps) under a
// schedule that changes the rate at every step, three steps in flight must take the host step's
// decisions, learning rates and bits.
TEST(DeviceStep, StepsInFlightFollowTheScheduleThroughSkipsBitForBit) {
  for (const char* optimizer : {"momentum", "sgd"}) {
    const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                      .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                      .steps = 14, .batch = 8, .optimizer = optimizer,
                      .lr = [](double base) { return optim::LearningRate::cosine(base, 12, base / 10).with_warmup(3); },
                      .wait_each_step = false};
    const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, /*lag=*/100);
    ASSERT_GT(host.skipped, 1) << "the case must skip steps";
    ASSERT_LT(host.skipped, 10) << "and train";
    EXPECT_EQ(dev.max_in_flight, static_cast<int64_t>(amp::TrainOneStepCell::kStepsInFlight)) << optimizer;
    EXPECT_EQ(host.max_in_flight, 0);
    expect_same_decisions(dev, host);
    for (size_t k = 0; k < host.steps.size(); ++k) EXPECT_EQ(dev.steps[k].loss, host.steps[k].loss) << "step " << k;
    expect_close(dev.weights, host.weights, 0.0, "weight");
  }
}

// A resume while steps are in flight: the loss-scale state and the step count the caller sets
// stand (the steps in flight complete without overwriting them) and the next step runs with them,
// as the host step does when they are set between its steps. At 2^20, f16 overflows at steps 1
// and 4 and not at 2 and 3, so the steps in flight when the caller sets them both apply and skip
// (applying or counting them over the caller's values fails this test: checked).
TEST(DeviceStep, StateSetWhileStepsAreInFlightStands) {
  struct Run {
    std::vector<std::vector<float>> weights;
    amp::LossScaleState state;
    int64_t optimizer_step = 0, skipped = 0;
    std::vector<amp::StepInfo> last4;
  };
  auto run = [](bool device) {
    std::optional<DeviceStepOnCpu> on;
    if (device) on.emplace(100);
    const StepsSpec spec{.batch = 8};
    manual_seed(7);
    auto net = nn::make_model("simplenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    optim::Momentum opt(net->trainable_params(), optim::LearningRate::cosine(0.02, 10, 0.002).with_warmup(2), 0.9);
    auto manager = std::make_shared<amp::DynamicLossScaleManager>(1048576.0, 2.0, 2);
    auto step = amp::build_train_network(*net, opt, loss_fn, "O2",
                                         {.cast_model_type = DType::f16, .loss_scale_manager = manager});
    Run r;
    for (int k = 0; k < 8; ++k) {
      if (k == 4) {
        if (device) {
          EXPECT_EQ(step->attempted_steps() - step->poll_steps(), 3) << "three steps in flight";
        }
        manager->set_state({.scale = 1024.0});
        opt.set_global_step(1);
      }
      const auto [x, y] = steps_batch(spec, k);
      (void)(*step)(x, y);
      if (!device && k >= 4) r.last4.push_back(step->last_step());  // the host step: at once
    }
    step->sync();
    if (device)  // the last kKeptOutcomes completed steps are kept
      for (int64_t k = 5; k <= 8; ++k) r.last4.push_back(step->completed_step(k));
    for (const Tensor& p : net->trainable_params()) r.weights.push_back(p.to_vector<float>());
    r.state = manager->state();
    r.optimizer_step = opt.global_step();
    r.skipped = step->skipped_steps();
    return r;
  };
  const Run host = run(false), dev = run(true);
  ASSERT_GT(host.skipped, 0) << "the first steps must overflow";
  EXPECT_EQ(dev.skipped, host.skipped);
  EXPECT_EQ(dev.optimizer_step, host.optimizer_step);
  EXPECT_EQ(dev.state.scale, host.state.scale);
  EXPECT_EQ(dev.state.good_steps, host.state.good_steps);
  for (size_t k = 0; k < host.last4.size(); ++k) {
    EXPECT_EQ(dev.last4[k].loss, host.last4[k].loss) << "step " << k + 5;
    EXPECT_EQ(dev.last4[k].loss_scale, host.last4[k].loss_scale) << "step " << k + 5;
    EXPECT_EQ(dev.last4[k].lr, host.last4[k].lr) << "step " << k + 5;
    EXPECT_EQ(dev.last4[k].skipped, host.last4[k].skipped) << "step " << k + 5;
  }
  EXPECT_EQ(host.last4.front().loss_scale, 1024.0) << "the caller's scale is the next step's";
  expect_close(dev.weights, host.weights, 0.0, "weight");
}

TEST(DeviceStep, O2ConvnetBnWithFixedScaleAndSgdEqualsTheHostStep) {
  expect_same_bits({.model = "convnet-bn", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::FixedLossScaleManager(1024.0)); },
                    .steps = 3, .optimizer = "sgd"});
}

// AdamW's device update is the same fused kernel formula as the host's (ops::AdamStep), so the
// device step is bit for bit the host step: one f32 step, twelve through f16 overflows (O2), and
// three steps in flight under a warm-up, where Adam's bias corrections and rate come from the
// device's step count.
TEST(DeviceStep, AdamWEqualsTheHostStepBitForBit) {
  expect_same_bits({.model = "simplenet", .level = "O0", .steps = 1, .optimizer = "adamw"});
  const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 12, .batch = 8, .optimizer = "adamw"};
  const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s);
  ASSERT_GT(host.skipped, 0);
  ASSERT_LT(host.skipped, 12);
  expect_same_decisions(dev, host);
  expect_close(dev.weights, host.weights, 0.0, "weight");
  StepsSpec lagged = s;
  lagged.lr = [](double base) { return optim::LearningRate(base).with_warmup(4); };
  lagged.wait_each_step = false;
  const StepsRun host_l = run_steps(lagged, Device::cpu()), dev_l = device_step_on_cpu(lagged, 100);
  ASSERT_GT(host_l.skipped, 0);
  EXPECT_EQ(dev_l.max_in_flight, 3);
  expect_same_decisions(dev_l, host_l);
  expect_close(dev_l.weights, host_l.weights, 0.0, "weight");
}

// What a callback saw of one step.
struct Seen {
  int64_t epoch, step_in_epoch, global_step, attempt;
  double loss, scale, lr;
  bool skipped;
  bool operator==(const Seen&) const = default;
};

struct TrainRun {
  std::vector<Seen> seen;
  std::vector<int64_t> in_flight_at_step_end;  // steps queued and not complete, per on_step_end
  int64_t epoch_ends = 0, skipped = 0;
  std::vector<std::vector<float>> weights;
};

// Model::train on simplenet at O2-f16 with a dynamic scale that overflows at first, a warm-up +
// cosine schedule, 2 epochs of 5 batches: device steps on CPU tensors with `lag` (or the host
// step when lag < 0), the recording callback lagging or not.
TrainRun train_with_model(int64_t lag, bool may_lag) {
  std::optional<DeviceStepOnCpu> on;
  if (lag >= 0) on.emplace(lag);
  manual_seed(5);
  auto net = nn::make_model("simplenet");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::Momentum opt(net->trainable_params(), optim::LearningRate::cosine(0.02, 8, 0.002).with_warmup(2), 0.9);
  train::Model model(*net, loss_fn, opt,
                     {.amp_level = "O2",
                      .loss_scale_manager = Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)),
                      .dtype = DType::f16});
  const dataset::Dataset ds = dataset::SyntheticDataset({.num_samples = 40, .seed = 3})
                                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                                  .batch(8, true);
  TrainRun r;
  amp::TrainOneStepCell& step = model.train_network();
  auto record = [&](train::RunContext& c) {
    r.seen.push_back({c.epoch, c.step_in_epoch, c.global_step, c.step.step, c.step.loss, c.step.loss_scale,
                      c.step.lr, c.step.skipped});
    r.in_flight_at_step_end.push_back(step.attempted_steps() - step.poll_steps());
  };
  struct CountEpochs : train::Callback {
    int64_t* n;
    explicit CountEpochs(int64_t* n) : n(n) {}
    bool may_lag() const override { return true; }
    void on_epoch_end(train::RunContext&) override { ++*n; }
  };
  model.train(2, ds, {train::LambdaCallback(record, may_lag), CountEpochs(&r.epoch_ends)});
  r.skipped = step.skipped_steps();
  for (const Tensor& p : net->trainable_params()) r.weights.push_back(p.to_vector<float>());
  return r;
}

TEST(DeviceStep, ModelTrainDeliversTheStepsInFlightInOrder) {
  const TrainRun host = train_with_model(-1, true), waited = train_with_model(100, false),
                 lagged = train_with_model(100, true);
  ASSERT_EQ(host.seen.size(), 10u);
  ASSERT_GT(host.skipped, 0) << "the case must skip steps";
  EXPECT_EQ(host.epoch_ends, 2);
  for (const TrainRun* r : {&waited, &lagged}) {
    EXPECT_EQ(r->seen, host.seen);
    EXPECT_EQ(r->epoch_ends, 2);
    expect_close(r->weights, host.weights, 0.0, "weight");
  }
  // A callback that may not lag sees every step complete; one that may, the host queuing ahead.
  for (int64_t n : waited.in_flight_at_step_end) EXPECT_EQ(n, 0);
  EXPECT_EQ(*std::max_element(lagged.in_flight_at_step_end.begin(), lagged.in_flight_at_step_end.end()),
            static_cast<int64_t>(amp::TrainOneStepCell::kStepsInFlight));
}

// check_numerics on the device: every op's output is checked as it runs (read back to the host
// on a GPU), and the first event travels with the step in flight into its StepInfo: the host
// step's events, op for op, through overflowing steps, with two steps in flight.
TEST(DeviceStep, CheckNumericsNamesTheHostStepsEvents) {
  const StepsSpec s{.model = "lenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 6, .check_numerics = true};
  const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, 2);
  expect_same_decisions(dev, host);
  int events = 0;
  for (size_t k = 0; k < host.steps.size(); ++k) {
    const auto &h = host.steps[k].event, &d = dev.steps[k].event;
    ASSERT_EQ(d.has_value(), h.has_value()) << "step " << k;
    if (!h) continue;
    ++events;
    EXPECT_EQ(d->op_name, h->op_name) << "step " << k;
    EXPECT_EQ(d->cell, h->cell) << "step " << k;
    EXPECT_EQ(d->phase, h->phase) << "step " << k;
    EXPECT_EQ(d->detail, h->detail) << "step " << k;
    EXPECT_EQ(d->dtype, h->dtype) << "step " << k;
    EXPECT_EQ(d->nonfinite_count, h->nonfinite_count) << "step " << k;
    EXPECT_EQ(d->has_nan, h->has_nan) << "step " << k;
  }
  EXPECT_GT(events, 0) << "no step overflowed: the test proves nothing";
  expect_close(dev.weights, host.weights, 0.0, "weight");
}

// Gradient statistics on the device: taken at the host step's steps, of the same gradients with
// the same unscale, so the same numbers; none on a step whose flag is set. O2-f16 with skipped
// steps, clipping and two steps in flight.
TEST(DeviceStep, GradientStatisticsEqualTheHostSteps) {
  const StepsSpec s{.model = "lenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 8, .max_grad_norm = 0.5, .grad_stats_every = 2};
  const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, 2);
  expect_same_decisions(dev, host);
  int with_stats = 0;
  for (size_t k = 0; k < host.steps.size(); ++k) {
    const auto& h = host.steps[k].grad_stats;
    const auto& d = dev.steps[k].grad_stats;
    ASSERT_EQ(d.size(), h.size()) << "step " << k;
    for (size_t i = 0; i < h.size(); ++i) {
      EXPECT_EQ(d[i].param, h[i].param) << "step " << k;
      EXPECT_EQ(d[i].max_abs, h[i].max_abs) << "step " << k << " " << h[i].param;
      EXPECT_EQ(d[i].underflow_fraction, h[i].underflow_fraction) << "step " << k << " " << h[i].param;
      EXPECT_EQ(d[i].zero_fraction, h[i].zero_fraction) << "step " << k << " " << h[i].param;
      EXPECT_EQ(d[i].recommended_scale, h[i].recommended_scale) << "step " << k << " " << h[i].param;
    }
    with_stats += !h.empty();
    if (host.steps[k].overflow) EXPECT_TRUE(h.empty()) << "step " << k;
  }
  EXPECT_GT(with_stats, 0) << "no step took statistics: the test proves nothing";
  EXPECT_GT(host.skipped, 0) << "the case must skip a step";
}

// Clipping on the device: the global norm and the multiplier come from the same kernel family as
// the host's (ops::amp_clip_by_global_norm_), so the decisions, the reported norms and the bits
// are the host step's, for gpt-tiny's recipe (AdamW, max norm 1.0) and for an O2-f16 run with
// skipped steps and two steps in flight.
TEST(DeviceStep, ClippingEqualsTheHostStepBitForBit) {
  const StepsSpec gpt{.model = "gpt-tiny", .steps = 3, .batch = 2, .optimizer = "adamw", .max_grad_norm = 1.0};
  const StepsSpec f16{.model = "lenet", .level = "O2", .low = DType::f16,
                      .manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                      .steps = 8, .max_grad_norm = 0.5};
  for (const StepsSpec& s : {gpt, f16}) {
    SCOPED_TRACE(s.model);
    const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, 2);
    expect_same_decisions(dev, host);
    for (size_t k = 0; k < host.steps.size(); ++k) {
      EXPECT_EQ(dev.steps[k].grad_norm, host.steps[k].grad_norm) << "step " << k;
      if (!host.steps[k].overflow) EXPECT_GT(host.steps[k].grad_norm, 0.0) << "step " << k;
    }
    expect_close(dev.weights, host.weights, 0.0, "weight");
    if (s.model == "lenet") EXPECT_GT(host.skipped, 0) << "the case must skip a step";
  }
}

// Gradient accumulation on the device: the micro-batches are summed there and the update
// unscales by 1 / (scale * 2) divided there; with a power-of-two scale and count, the same bits
// as the host step, through the overflows of O2-f16 at 2^20 (skipped updates included).
TEST(DeviceStep, GradientAccumulationEqualsTheHostStepBitForBit) {
  for (const char* level : {"O0", "O2"}) {
    SCOPED_TRACE(level);
    const auto manager = [] { return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(1048576.0, 2.0, 2)); };
    const StepsSpec s{.model = "lenet", .level = level, .manager = manager, .steps = 8, .accumulation = 2};
    const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, 1);
    if (std::string(level) == "O2") ASSERT_GT(host.skipped, 0) << "the case must skip an update";
    ASSERT_LT(host.skipped, 4) << "and apply one";
    EXPECT_EQ(dev.skipped, host.skipped);
    EXPECT_EQ(dev.optimizer_step, host.optimizer_step);
    EXPECT_EQ(dev.scale.scale, host.scale.scale);
    EXPECT_EQ(dev.scale.good_steps, host.scale.good_steps);
    EXPECT_EQ(dev.scale.total_overflows, host.scale.total_overflows);
    expect_close(dev.weights, host.weights, 0.0, "weight");
  }
}

// gpt-tiny as `mixprec train --model gpt-tiny` trains it (src/nn/zoo.cpp's recipe: O2, dynamic
// loss scaling, AdamW on a warm-up cosine schedule, clipping at 1.0), with two micro-batches per
// update and steps left in flight: every piece of the device step at once. In bf16 from the CLI's
// initial scale 2^24; in f16 from 2^20, which overflows the first updates (skips, halvings) while
// a window of 2 grows the scale again, so the decisions are exercised, not only the arithmetic.
TEST(DeviceStep, GptTinyWithItsRecipeAndAccumulationEqualsTheHostStepBitForBit) {
  for (const auto& [low, scale] :
       {std::pair{DType::bf16, 16777216.0}, std::pair{DType::f16, 1048576.0}}) {
    SCOPED_TRACE(dtype_name(low));
    const StepsSpec s{
        .model = "gpt-tiny",
        .level = "O2",
        .low = low,
        .manager =
            [scale] {
              return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(scale, 2.0, 2));
            },
        .steps = 10,
        .batch = 2,
        .optimizer = "adamw",
        .lr = [](double base) { return optim::LearningRate::cosine(base, 5, 0.0).with_warmup(1); },
        .wait_each_step = false,
        .accumulation = 2,
        .max_grad_norm = 1.0};
    const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s, 2);
    expect_same_decisions(dev, host);
    for (size_t k = 0; k < host.steps.size(); ++k) {
      EXPECT_EQ(dev.steps[k].loss, host.steps[k].loss) << "step " << k;
      EXPECT_EQ(dev.steps[k].grad_norm, host.steps[k].grad_norm) << "step " << k;
    }
    EXPECT_GT(host.optimizer_step, 0) << "the case must apply an update";
    if (low == DType::f16) EXPECT_GT(host.skipped, 0) << "and skip one";
    expect_close(dev.weights, host.weights, 0.0, "weight");
  }
}

TEST(CellTo, ToTheCpuOnACpuNetworkChangesNothing) {
  manual_seed(3);
  auto net = nn::make_model("convnet-bn");
  std::vector<const void*> data;
  std::vector<std::vector<float>> values;
  for (const auto& [n, t] : net->state_and_names()) {
    data.push_back(t.data_ptr());
    values.push_back(t.to_vector<float>());
  }
  net->to(Device::cpu());
  size_t i = 0;
  for (const auto& [n, t] : net->state_and_names()) {
    EXPECT_EQ(t.data_ptr(), data[i]) << n;
    EXPECT_EQ(t.to_vector<float>(), values[i]) << n;
    ++i;
  }
}

TEST(CellTo, ToACudaDeviceWithoutOneSaysWhyAndMovesNothing) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible: tests/cuda move networks";
  manual_seed(3);
  auto net = nn::make_model("simplenet");
  const void* before = net->trainable_params().front().data_ptr();
  std::string what;
  try {
    net->to(Device::cuda());
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("cuda:0 is not available"), std::string::npos) << what;
  EXPECT_EQ(net->trainable_params().front().data_ptr(), before);
  EXPECT_TRUE(net->trainable_params().front().device().is_cpu());
}

}  // namespace
}  // namespace mixprec
