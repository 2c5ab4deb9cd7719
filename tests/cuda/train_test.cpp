// Training on the GPU against the same steps on the CPU: a few SimpleNet and convnet-bn steps at
// O0 and O2-f16 with dynamic loss scaling (the device step: flags, scale and skip on the GPU),
// vit-tiny and gpt-tiny steps at O0 and O2, an AdamW step,
// including steps that overflow and are skipped; moving a network there and back; the BatchNorm
// running statistics updated on the device; the optimizer's state made on the parameters'
// device; train::Model training and evaluating on the context's GPU, and a checkpoint saved from
// there; and a label out of range giving a non-finite loss instead of a read outside the row.
#include <gtest/gtest.h>

#include <cmath>

#include <filesystem>

#include "amp/train_steps_util.h"
#include "cuda_test_util.h"
#include "mixprec/context.h"
#include "mixprec/data/dataset.h"
#include "mixprec/data/transforms.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/train/model.h"

namespace mixprec {
namespace {

using namespace testing;

// Losses within `rel` (relative), weights and buffers within rel * max|value| of the CPU's,
// the same decisions.
void expect_gpu_steps_like_cpu(const StepsSpec& s, double rel) {
  const StepsRun cpu = run_steps(s, Device::cpu()), gpu = run_steps(s, kGpu);
  expect_same_decisions(gpu, cpu);
  for (size_t k = 0; k < cpu.steps.size(); ++k) {
    if (!cpu.steps[k].loss_finite) continue;
    EXPECT_NEAR(gpu.steps[k].loss, cpu.steps[k].loss, rel * std::fabs(cpu.steps[k].loss))
        << "step " << k;
  }
  expect_close(gpu.weights, cpu.weights, rel, "weight");
  expect_close(gpu.buffers, cpu.buffers, rel, "buffer");
}

Handle<amp::LossScaleManager> dynamic(double init, int64_t window) {
  return Handle<amp::LossScaleManager>(amp::DynamicLossScaleManager(init, 2.0, window));
}

TEST(CudaTrain, SimpleNetO0StepsMatchTheCpu) {
  expect_gpu_steps_like_cpu({.model = "simplenet", .level = "O0", .steps = 4}, 1e-4);
}

TEST(CudaTrain, ConvnetBnO0StepsMatchTheCpuRunningStatisticsToo) {
  expect_gpu_steps_like_cpu({.model = "convnet-bn", .level = "O0", .steps = 3}, 1e-4);
}

TEST(CudaTrain, SimpleNetO2F16DynamicScalingSkipsTheSameOverflows) {
  // 2^24 overflows f16 gradients: the first steps are skipped on the device while the scale
  // halves there; then the steps apply and a window of 2 grows the scale again.
  const StepsSpec s{.model = "simplenet", .level = "O2", .low = DType::f16,
                    .manager = [] { return dynamic(16777216.0, 2); }, .steps = 14};
  const StepsRun cpu = run_steps(s, Device::cpu());
  int64_t skipped = 0;
  for (const amp::StepInfo& i : cpu.steps) skipped += i.skipped;
  ASSERT_GT(skipped, 0);
  ASSERT_LT(skipped, static_cast<int64_t>(cpu.steps.size()));
  expect_gpu_steps_like_cpu(s, 2e-2);
}

TEST(CudaTrain, ConvnetBnO2F16DynamicScalingMatchesTheCpu) {
  expect_gpu_steps_like_cpu({.model = "convnet-bn", .level = "O2", .low = DType::f16,
                             .manager = [] { return dynamic(65536.0, 2000); }, .steps = 3},
                            2e-2);
}

// The transformers on the GPU (CUDA attention, LayerNorm, GELU, embedding, the patch conv):
// O0 steps within f32 rounding of the CPU's; O2-bf16 within bf16's (the CPU's fused attention
// also rounds p and dS to bf16, the GPU's does not).
TEST(CudaTrain, VitTinyStepsMatchTheCpuAtO0AndO2Bf16) {
  expect_gpu_steps_like_cpu({.model = "vit-tiny", .level = "O0", .steps = 3, .batch = 8}, 1e-3);
  expect_gpu_steps_like_cpu(
      {.model = "vit-tiny", .level = "O2", .low = DType::bf16, .steps = 3, .batch = 8}, 3e-2);
}

TEST(CudaTrain, GptTinyStepsMatchTheCpuAtO0AndO2F16) {
  expect_gpu_steps_like_cpu({.model = "gpt-tiny", .level = "O0", .steps = 3, .batch = 4}, 1e-3);
  // A scale of 1024 keeps every step finite on both devices (the same decisions are expected).
  expect_gpu_steps_like_cpu({.model = "gpt-tiny", .level = "O2", .low = DType::f16,
                             .manager = [] { return dynamic(1024.0, 2000); }, .steps = 3,
                             .batch = 4},
                            2e-2);
}

TEST(CudaTrain, AdamWStepOnTheGpuMatchesTheCpu) {
  // One step: Adam moves each weight by lr * g / (|g| + eps), about lr (1e-3). Gradients that
  // differ in rounding move it alike, except where |g| is near eps or 0: there the step may
  // differ by up to 2 lr. So: all within 2 lr, and 99% within 1e-3 of lr.
  const StepsSpec s{.model = "simplenet", .level = "O0", .steps = 1, .optimizer = "adamw"};
  const StepsRun cpu = run_steps(s, Device::cpu()), gpu = run_steps(s, kGpu);
  expect_same_decisions(gpu, cpu);
  size_t n = 0, off = 0;
  for (size_t i = 0; i < cpu.weights.size(); ++i)
    for (size_t j = 0; j < cpu.weights[i].size(); ++j, ++n) {
      const double d = std::fabs(static_cast<double>(gpu.weights[i][j]) - cpu.weights[i][j]);
      ASSERT_LE(d, 2e-3 + 1e-6) << "weight " << i << " at " << j;
      off += d > 1e-6;
    }
  EXPECT_LE(off, n / 100) << off << " of " << n;
}

TEST(CudaTrain, CellToTheGpuAndBackKeepsIdentityAndValues) {
  manual_seed(5);
  auto net = nn::make_model("convnet-bn");
  const Tensor w = net->trainable_params().front();  // a handle, as a layer or optimizer holds
  std::vector<std::vector<float>> before;
  for (const auto& [n, t] : net->state_and_names()) before.push_back(t.to_vector<float>());
  net->to(kGpu);
  EXPECT_TRUE(w.device().is_cuda());
  for (const auto& [n, t] : net->state_and_names()) EXPECT_TRUE(t.device().is_cuda()) << n;
  EXPECT_TRUE(net->trainable_params().front().requires_grad());
  net->to(Device::cpu());
  size_t i = 0;
  for (const auto& [n, t] : net->state_and_names()) EXPECT_EQ(t.to_vector<float>(), before[i++]) << n;
}

TEST(CudaTrain, OptimizerStateFollowsTheParametersToTheGpu) {
  manual_seed(5);
  auto net = nn::make_model("simplenet");
  optim::Momentum opt(net->trainable_params(), 0.1, 0.9);  // state made on the CPU
  net->to(kGpu);
  std::vector<Tensor> grads;
  for (const Tensor& p : net->trainable_params()) grads.push_back(full(p.shape(), 0.5, {.device = kGpu}));
  opt.step(grads);  // follows, then one multi-tensor update on the GPU
  for (const optim::NamedState& s : opt.state()) EXPECT_TRUE(s.tensor.device().is_cuda()) << s.name;
  // v = 0.5, p -= 0.1 * 0.5
  const Tensor p = net->trainable_params().back();
  const std::vector<float> v = opt.state().back().tensor.to_vector<float>();
  EXPECT_EQ(v.front(), 0.5f);
  EXPECT_EQ(opt.global_step(), 1);
  EXPECT_TRUE(p.device().is_cuda());
}

TEST(CudaTrain, ALabelOutOfRangeGivesANonFiniteLossOnTheGpu) {
  const Tensor logits = random({3, 10}, 4, DType::f32).to(kGpu);
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 12, 3}, {3}).to(kGpu);
  const Tensor loss = ops::softmax_cross_entropy(logits, labels, {.sparse = true, .reduction = ops::Reduction::none});
  const std::vector<float> l = loss.to_vector<float>();
  EXPECT_TRUE(std::isfinite(l[0]));
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_TRUE(std::isfinite(l[2]));
}

struct ModelRun {
  std::vector<std::vector<float>> weights;
  double accuracy = 0;
  bool on_gpu = false;
};

ModelRun train_with_model(Device device, const std::filesystem::path& checkpoint) {
  set_context({.device = device});
  manual_seed(11);
  auto net = nn::make_model("convnet-bn");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::Momentum opt(net->trainable_params(), 0.02, 0.9);
  train::Model model(*net, loss_fn, opt, {.metrics = {{"Accuracy", nn::Accuracy()}}});
  const dataset::Dataset ds = dataset::SyntheticDataset({.num_samples = 192})
                                  .map(dataset::transforms::rescale(1.0 / 255, -0.5))
                                  .batch(64);
  model.train(1, ds);
  ModelRun r;
  r.accuracy = model.eval(ds).at("Accuracy");
  r.on_gpu = net->trainable_params().front().device().is_cuda();
  for (const Tensor& p : net->trainable_params()) r.weights.push_back(p.to_vector<float>());
  if (!checkpoint.empty()) io::save_checkpoint(*net, checkpoint);
  set_context({.device = Device::cpu()});
  return r;
}

TEST(CudaTrain, ModelTrainsAndEvaluatesOnTheContextsGpuAndSavesFromThere) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / "mixprec_cuda_model_test.safetensors";
  const ModelRun cpu = train_with_model(Device::cpu(), {}), gpu = train_with_model(kGpu, file);
  EXPECT_TRUE(gpu.on_gpu);
  EXPECT_FALSE(cpu.on_gpu);
  expect_close(gpu.weights, cpu.weights, 1e-3, "weight");
  EXPECT_NEAR(gpu.accuracy, cpu.accuracy, 2.0 / 192);
  const std::map<std::string, Tensor> saved = io::load_checkpoint(file);
  manual_seed(11);
  auto fresh = nn::make_model("convnet-bn");
  size_t i = 0;
  for (const auto& [name, p] : fresh->parameters_and_names())
    EXPECT_EQ(saved.at(name).to_vector<float>(), gpu.weights[i++]) << name;
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace mixprec
