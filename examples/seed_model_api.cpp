// The seed's "方式一" program in C++: SimpleNet, SoftmaxCrossEntropyWithLogits, Momentum,
// FixedLossScaleManager(1024, drop_overflow_update=false), Model(..., amp_level="O2") and
// model.train with LossMonitor, line for line. Unlike MindSpore, the train step unscales the
// gradients it scaled, so this code is right as written (DESIGN.md, the seed's second pitfall).
// Usage: seed_model_api [--data DIR] [--epochs N] [--samples N] [--dtype f16|bf16] [--check]
#include <cstdio>
#include <cstring>
#include <string>

#include "mixprec/mixprec.h"

using namespace mixprec;

struct SimpleNet : nn::Cell {
  // 这里的卷积层等计算密集型算子，在O2模式下会自动走FP16 (conv runs in low precision at O2)
  nn::Conv2d conv1{1, 32, 3, {.pad_mode = nn::PadMode::valid, .weight_init = init::Normal(0.02)}};
  nn::ReLU relu;
  nn::Flatten flatten;
  nn::Dense fc{32 * 26 * 26, 10};

  SimpleNet() {
    register_cell("conv1", conv1);
    register_cell("relu", relu);
    register_cell("flatten", flatten);
    register_cell("fc", fc);
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = conv1(x);
    y = relu(y);
    y = flatten(y);
    return fc(y);
  }
};

int main(int argc, char** argv) try {
  std::string dir = dataset::kFashionMnistDir, dtype = "f16";
  int64_t epochs = 1, samples = -1;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) dir = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::stoll(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::stoll(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--check") check = true;
    else { std::fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--samples N] [--dtype f16|bf16] [--check]\n", argv[0]); return 2; }
  }
  set_context({.device = Device::cpu()});
  manual_seed(0);
  SimpleNet net;

  // 1. 定义损失函数和优化器 (loss function and optimizer)
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum optimizer(net.trainable_params(), 0.01, 0.9);
  // 2. 配置Loss Scale
  auto loss_scale_manager = amp::FixedLossScaleManager(1024.0, {.drop_overflow_update = false});
  // 3. 初始化Model，传入amp_level="O2"
  train::Model model(net, loss_fn, optimizer,
                     {.metrics = {{"Accuracy", nn::Accuracy()}},
                      .amp_level = "O2",
                      .loss_scale_manager = loss_scale_manager,
                      .dtype = *parse_dtype(dtype)});
  // 4. 开始训练
  dataset::MnistOptions opts{.usage = "train"};
  if (samples > 0) opts.num_samples = samples;
  auto data = dataset::FashionMnistDataset(dir, opts)
                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                  .shuffle(0)
                  .batch(64, true);
  std::vector<double> losses;
  model.train(epochs, data, {train::LossMonitor(100), train::LambdaCallback([&](train::RunContext& c) {
                               losses.push_back(c.step.loss);
                             })});

  auto test = dataset::FashionMnistDataset(dir, {.usage = "test"})
                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                  .batch(256);
  const double acc = model.eval(test)["Accuracy"];
  std::printf("test accuracy: %.4f\n", acc);
  if (check) {
    const size_t k = std::min<size_t>(5, losses.size() / 2);
    double first = 0, last = 0;
    for (size_t i = 0; i < k; ++i) { first += losses[i]; last += losses[losses.size() - 1 - i]; }
    if (!(k > 0 && last < first)) { std::fprintf(stderr, "check failed: loss did not fall (%g -> %g)\n", first / k, last / k); return 1; }
    std::printf("check passed: mean loss of the first %zu steps %.4f, of the last %zu steps %.4f\n", k, first / k, k, last / k);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
