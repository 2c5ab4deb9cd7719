// The library route of `mixprec train --max-grad-norm --accumulation-steps` (issue 15): trains
// lenet with train::Model and TrainStepOptions{max_grad_norm, accumulation_steps} exactly as the
// command line is documented to (same seed, data order, optimizer, AMP settings), then compares
// every parameter bit for bit with the checkpoint the command line wrote, and the skipped-update
// count with its --trace. Exit 0 only when everything is identical; the first difference is named.
// Usage: library_route DATA CLI_CHECKPOINT CLI_SKIPPED DTYPE MAX_GRAD_NORM ACCUMULATION
#include <cstdio>
#include <cstring>
#include <string>

#include "mixprec/mixprec.h"

using namespace mixprec;

int main(int argc, char** argv) try {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s DATA CLI_CHECKPOINT CLI_SKIPPED DTYPE MAX_GRAD_NORM ACCUMULATION\n", argv[0]);
    return 2;
  }
  const std::string data_dir = argv[1], cli_checkpoint = argv[2];
  const int64_t cli_skipped = std::stoll(argv[3]);
  const DType low = *parse_dtype(argv[4]);
  const double max_grad_norm = std::stod(argv[5]);
  const int accumulation = std::stoi(argv[6]);

  // The command line's order: the seed, the network, the data (shuffled with the same seed), the
  // optimizer, the Model. Settings: --model lenet --train-samples 640 --batch-size 32 --epochs 1
  // --seed 1 --lr-schedule constant --amp-level O2 (momentum lr 0.01, 0.9: lenet's defaults).
  const uint64_t seed = 1;
  manual_seed(seed);
  auto net = nn::make_model("lenet");
  auto data = dataset::FashionMnistDataset(data_dir, {.usage = "train", .num_samples = 640})
                  .map(dataset::transforms::rescale(1.0 / 255.0, 0.0))
                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                  .shuffle(seed)
                  .batch(32, true);
  optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  train::Model model(*net, loss_fn, opt,
                     {.amp_level = "O2", .dtype = low,
                      .step = {.max_grad_norm = max_grad_norm, .accumulation_steps = accumulation}});
  int64_t skipped = 0;  // per batch, as the command line's trace counts them
  model.train(1, data, {train::LambdaCallback([&](train::RunContext& c) { skipped += c.step.skipped ? 1 : 0; })});

  const auto saved = io::load_checkpoint(cli_checkpoint);
  int64_t compared = 0;
  for (const auto& [name, p] : net->parameters_and_names()) {
    const auto it = saved.find(name);
    if (it == saved.end()) {
      std::printf("the command line's checkpoint has no %s\n", name.c_str());
      return 1;
    }
    const Tensor a = p.contiguous(), b = it->second.contiguous();
    if (a.shape() != b.shape() || a.dtype() != b.dtype() ||
        std::memcmp(a.data<float>(), b.data<float>(), static_cast<size_t>(a.numel()) * sizeof(float)) != 0) {
      std::printf("%s differs between the library route and the command line\n", name.c_str());
      return 1;
    }
    ++compared;
  }
  if (skipped != cli_skipped) {
    std::printf("skipped updates: library %lld, command line %lld\n", static_cast<long long>(skipped),
                static_cast<long long>(cli_skipped));
    return 1;
  }
  std::printf("%lld parameters bit-identical, %lld skipped updates in both\n", static_cast<long long>(compared),
              static_cast<long long>(skipped));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "library_route: %s\n", e.what());
  return 1;
}
