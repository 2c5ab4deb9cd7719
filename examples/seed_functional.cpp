// The seed's "方式二" functional training loop in C++, with its first pitfall fixed: the loss is
// SCALED inside the forward function, so the seed's `loss = scaler.unscale(loss)` after
// differentiation gives the true loss; the gradients are unscaled, all_finite decides whether
// the optimizer runs, and the scaler adjusts. amp::auto_mixed_precision(net, "O2", f16) makes
// the network mixed precision (the seed's alternative, amp::build_train_network(net, optimizer,
// loss_fn, "O2", {.loss_scale_manager = nullptr}), returns a whole train-step cell instead).
// Usage: seed_functional [--data DIR] [--epochs N] [--samples N] [--dtype f16|bf16] [--check]
#include <cstdio>
#include <string>

#include "mixprec/mixprec.h"

using namespace mixprec;

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
  manual_seed(0);
  nn::SimpleNet net;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum optimizer(net.trainable_params(), 0.01, 0.9);

  // 1. 构建混合精度网络 (make the network mixed precision)
  amp::auto_mixed_precision(net, "O2", *parse_dtype(dtype));
  // 启用Loss Scale: a dynamic scaler (init 2^16, factor 2, window 50 for a short run)
  amp::DynamicLossScaler scaler(65536.0, 2.0, 50);

  // 定义前向计算: returns (scaled loss, logits); the loss is scaled BEFORE differentiation
  auto forward_fn = [&](const Tensor& data, const Tensor& label) {
    Tensor logits = net(data);
    Tensor loss = loss_fn(logits, label);
    return std::vector<Tensor>{scaler.scale(loss), logits};
  };
  // 获取梯度函数: ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)
  auto grad_fn = value_and_grad(forward_fn, std::nullopt, optimizer.parameters(), {.has_aux = true});

  auto train_step = [&](const Tensor& data, const Tensor& label) {
    auto [values, grads] = grad_fn(data, label);  // 计算梯度（带缩放）: values = (scaled loss, logits)
    Tensor loss = scaler.unscale(values[0]);      // 缩放Loss: the true loss, for logging
    grads = scaler.unscale(grads);                // 缩放梯度 (unscale the gradients)
    const bool is_finite = amp::all_finite(grads);
    if (is_finite) optimizer(grads);              // 更新参数, only when finite
    scaler.adjust(is_finite);
    return std::pair{loss.item(), is_finite};
  };

  dataset::MnistOptions opts{.usage = "train"};
  if (samples > 0) opts.num_samples = samples;
  auto data = dataset::FashionMnistDataset(dir, opts)
                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                  .shuffle(0)
                  .batch(64, true);
  std::vector<double> losses;
  int64_t skipped = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (const dataset::Batch& b : data.epoch(epoch)) {
      auto [loss, finite] = train_step(b.image, b.label);
      skipped += !finite;
      if (finite) losses.push_back(loss);
      if ((b.index + 1) % 100 == 0 || !finite)
        std::printf("epoch %lld step %lld: loss %.4f, scale %g%s\n", static_cast<long long>(epoch + 1),
                    static_cast<long long>(b.index + 1), loss, scaler.scale_value(), finite ? "" : " (overflow: skipped)");
    }
  }
  std::printf("%zu updates, %lld skipped, final scale %g\n", losses.size(), static_cast<long long>(skipped), scaler.scale_value());
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
