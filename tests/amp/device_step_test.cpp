// The device train step (src/amp/train_step_device.cpp) without a GPU: run on CPU tensors (the
// AMP ops' reference kernels) it must take the host step's decisions and leave the same bits,
// at O0 and O2-f16 with dynamic loss scaling, through overflows that skip steps (AdamW: within
// rounding); and moving a CPU network to the CPU changes nothing.
#include <gtest/gtest.h>

#include "amp/train_steps_util.h"
#include "mixprec/cuda.h"

namespace mixprec {
namespace {

using testing::expect_close;
using testing::expect_same_decisions;
using testing::run_steps;
using testing::StepsRun;
using testing::StepsSpec;

StepsRun device_step_on_cpu(const StepsSpec& s) {
  amp::testing::set_device_step_on_cpu(true);
  StepsRun r;
  try {
    r = run_steps(s, Device::cpu());
  } catch (...) {
    amp::testing::set_device_step_on_cpu(false);
    throw;
  }
  amp::testing::set_device_step_on_cpu(false);
  return r;
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
                    .manager = [] { return Ref<amp::LossScaleManager>(amp::DynamicLossScaleManager(65536.0, 2.0, 2)); },
                    .steps = 3, .batch = 2});
}

TEST(DeviceStep, O2F16DynamicScalingSkipsTheSameOverflowsAsTheHostStep) {
  // 2^24 overflows f16 gradients: the first steps are skipped while the scale halves; a window of
  // 2 then grows it again.
  const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Ref<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 14};
  const StepsRun host = run_steps(s, Device::cpu());
  int64_t skipped = 0, applied = 0;
  for (const amp::StepInfo& i : host.steps) (i.skipped ? skipped : applied) += 1;
  ASSERT_GT(skipped, 0) << "the case must overflow";
  ASSERT_GT(applied, 0) << "and then train";
  expect_same_bits(s);
}

TEST(DeviceStep, O2ConvnetBnWithFixedScaleAndSgdEqualsTheHostStep) {
  expect_same_bits({.model = "convnet-bn", .level = "O2", .low = DType::f16,
                    .manager = [] { return Ref<amp::LossScaleManager>(amp::FixedLossScaleManager(1024.0)); },
                    .steps = 3, .optimizer = "sgd"});
}

// Largest |a - b| over every value.
double max_abs_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) d = std::max(d, std::fabs(static_cast<double>(a[i][j]) - b[i][j]));
  return d;
}

TEST(DeviceStep, AdamWFollowsTheHostStepWithinRounding) {
  // Adam's device update is pointwise ops, not the host's fused loop. One f32 step: within
  // rounding. Over steps Adam's normalisation (m / sqrt(v) for gradients near 0) lets rounding
  // differences grow up to about the learning rate per applied step, so through f16 overflows
  // (O2) the test asks for the same decisions and weights within 3 * lr per applied step.
  const StepsSpec o0{.model = "simplenet", .level = "O0", .steps = 1, .optimizer = "adamw"};
  const StepsRun host0 = run_steps(o0, Device::cpu()), dev0 = device_step_on_cpu(o0);
  expect_same_decisions(dev0, host0);
  EXPECT_LE(max_abs_diff(dev0.weights, host0.weights), 1e-4 * 1e-3);  // 1e-4 of the step (lr)
  const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return Ref<amp::LossScaleManager>(amp::DynamicLossScaleManager(16777216.0, 2.0, 2)); },
                    .steps = 12, .batch = 8, .optimizer = "adamw"};
  const StepsRun host = run_steps(s, Device::cpu()), dev = device_step_on_cpu(s);
  ASSERT_GT(host.skipped, 0);
  ASSERT_LT(host.skipped, 12);
  expect_same_decisions(dev, host);
  EXPECT_LE(max_abs_diff(dev.weights, host.weights), 3e-3 * static_cast<double>(12 - host.skipped));
  EXPECT_GT(max_abs_diff(dev.weights, host.weights), 0.0);  // the device path did run
}

TEST(DeviceStep, RefusesWhatItDoesNotSupportYet) {
  manual_seed(1);
  auto net = nn::make_model("simplenet");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
  auto step = amp::build_train_network(*net, opt, loss_fn, "O0", {.step = {.max_grad_norm = 1.0}});
  amp::testing::set_device_step_on_cpu(true);
  const Tensor x = testing::random({2, 1, 28, 28}, 1, DType::f32);
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2});
  std::string clip;
  try {
    (void)(*step)(x, y);
  } catch (const Error& e) {
    clip = e.what();
  }
  step->options().max_grad_norm = 0;
  step->options().accumulation_steps = 2;
  std::string accumulate;
  try {
    (void)(*step)(x, y);
  } catch (const Error& e) {
    accumulate = e.what();
  }
  amp::testing::set_device_step_on_cpu(false);
  EXPECT_NE(clip.find("gradient clipping (max_grad_norm > 0) is not available on a device"),
            std::string::npos)
      << clip;
  EXPECT_NE(accumulate.find("gradient accumulation (accumulation_steps > 1) is not available"),
            std::string::npos)
      << accumulate;
  EXPECT_EQ(step->attempted_steps(), 0);
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
