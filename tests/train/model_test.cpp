// End to end: the Model trains on a slice of data and its loss falls (fp32 and O2), eval gives
// metrics, predict returns fp32, callbacks see every step, max_steps stops training, and
// resuming at (epoch, batch) continues bit-identically.
#include <gtest/gtest.h>

#include "mixprec/mixprec.h"

namespace mixprec {
namespace {

dataset::Dataset synthetic(int64_t n, uint64_t seed) {
  // Random images and labels (not learnable): enough to exercise the loop.
  return dataset::SyntheticDataset({.num_samples = n, .seed = seed})
      .map(dataset::transforms::rescale(1.0 / 255, 0))
      .shuffle(seed)
      .batch(32, true);
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

TEST(Model, LossFallsOnRealDataSliceInFp32AndO2Slow) {
  const bool have = std::filesystem::exists(std::string(dataset::kFashionMnistDir) + "/train-labels-idx1-ubyte.gz");
  if (!have) GTEST_SKIP() << "Fashion-MNIST not installed";
  for (const char* level : {"O0", "O2"}) {
    manual_seed(0);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    nn::Momentum opt(net->trainable_params(), 0.01, 0.9);
    train::Model model(*net, loss_fn, opt, {.metrics = {{"Accuracy", nn::Accuracy()}, {"Loss", nn::Loss()}}, .amp_level = level});
    auto ds = dataset::MnistDataset(dataset::kFashionMnistDir, {.usage = "train", .num_samples = 4096})
                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                  .shuffle(1)
                  .batch(64, true);
    std::vector<double> losses;
    model.train(2, ds, {train::LambdaCallback([&](train::RunContext& c) { losses.push_back(c.step.loss); })});
    ASSERT_EQ(losses.size(), 128u);
    EXPECT_LT(mean(losses, 118, 128), 0.7 * mean(losses, 0, 10)) << level;
    const auto m = model.eval(dataset::MnistDataset(dataset::kFashionMnistDir, {.usage = "test", .num_samples = 1000})
                                  .map(dataset::transforms::rescale(1.0 / 255, 0))
                                  .map(dataset::transforms::normalize(0.2860, 0.3530))
                                  .batch(250));
    EXPECT_GT(m.at("Accuracy"), 0.6) << level;
    EXPECT_GT(m.at("Loss"), 0.0);
    const Tensor p = model.predict(zeros({2, 1, 28, 28}));
    EXPECT_EQ(p.dtype(), DType::f32);
    EXPECT_EQ(p.shape(), (Shape{2, 10}));
  }
}

TEST(Model, MaxStepsAndCallbacks) {
  manual_seed(0);
  auto net = nn::make_model("mlp");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::SGD opt(net->trainable_params(), 0.01);
  train::Model model(*net, loss_fn, opt);
  int64_t seen = 0;
  model.train(3, synthetic(256, 2), {train::LambdaCallback([&](train::RunContext&) { ++seen; })}, {.max_steps = 5});
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(model.global_step(), 5);
  EXPECT_EQ(model.next_epoch(), 0);
  EXPECT_EQ(model.next_batch(), 5);
  EXPECT_THROW(model.eval(synthetic(64, 3)), Error) << "no metrics were given";
  EXPECT_THROW(train::Model(*net, loss_fn, opt, {.amp_level = "O7"}), Error);
}

std::vector<std::vector<float>> weights(nn::Cell& net) {
  std::vector<std::vector<float>> w;
  for (const Tensor& p : net.trainable_params()) w.push_back(p.to_vector<float>());
  return w;
}

TEST(Model, ResumeAtEpochAndBatchIsBitIdentical) {
  const auto ds = synthetic(320, 4);  // 10 batches per epoch
  auto run = [&](bool split) {
    manual_seed(0);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    nn::Momentum opt(net->trainable_params(), 0.01, 0.9);
    train::Model model(*net, loss_fn, opt, {.amp_level = "O2"});
    if (!split) {
      model.train(2, ds);
    } else {
      model.train(2, ds, {}, {.max_steps = 13});
      model.train(2, ds, {}, {.initial_epoch = model.next_epoch(), .start_batch = model.next_batch()});
    }
    return std::pair{weights(*net), model.train_network().loss_scale_manager()->get_loss_scale()};
  };
  const auto straight = run(false);
  const auto resumed = run(true);
  EXPECT_EQ(straight.first, resumed.first);
  EXPECT_EQ(straight.second, resumed.second);
}

}  // namespace
}  // namespace mixprec
