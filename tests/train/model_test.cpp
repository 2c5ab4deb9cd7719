// End to end: the Model trains on a slice of data and its loss falls (fp32 and O2), eval gives
// metrics, predict returns fp32, callbacks see every step, max_steps stops training, resuming at
// (epoch, batch) continues bit-identically, and the AMP level applies from construction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "mixprec/mixprec.h"
#include "test_util.h"

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

// The seed's checkpoint-loading scenario: a Model at O2 loads fp32 weights and evaluates before
// it has trained. The level applies from construction: conv and dense run in bf16 in predict,
// and predict/eval give exactly what a Model that went through train() first gives.
TEST(Model, AmpLevelAppliesFromConstructionToPredictAndEval) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mixprec_model_level_" + std::to_string(::getpid()) + ".safetensors");
  manual_seed(0);
  io::save_checkpoint(*nn::make_model("lenet"), path);
  const Tensor x = dataset::SyntheticDataset({.num_samples = 8, .seed = 9})
                       .map(dataset::transforms::rescale(1.0 / 255, 0))
                       .batch(8)
                       .get_batch(0, 0)
                       .image;
  struct Result {
    Tensor out;
    std::map<std::string, double> metrics;
    std::vector<OpRecord> records;
  };
  // with_optimizer false: the eval-only Model (no train step); the same level, the same results.
  auto run = [&](const char* level, bool train_first, bool with_optimizer = true) {
    manual_seed(1);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    nn::Momentum opt(net->trainable_params(), 0.01, 0.9);
    const train::ModelOptions options{.metrics = {{"Accuracy", nn::Accuracy()}, {"Loss", nn::Loss()}},
                                      .amp_level = level};
    train::Model model = with_optimizer ? train::Model(*net, loss_fn, opt, options)
                                        : train::Model(*net, loss_fn, options);
    if (train_first) model.train(1, synthetic(64, 5), {}, {.max_steps = 1});
    io::load_param_into_net(*net, io::load_checkpoint(path), {.strict = true});
    Result r;
    {
      OpRecorder rec(&r.records);
      r.out = model.predict(x);
    }
    r.metrics = model.eval(synthetic(96, 6));
    return r;
  };
  const Result before = run("O2", false);
  const Result after = run("O2", true);
  const Result fp32 = run("O0", false);
  const Result eval_only = run("O2", false, /*with_optimizer=*/false);
  const Result eval_only_fp32 = run("O0", false, /*with_optimizer=*/false);
  std::filesystem::remove(path);
  EXPECT_EQ(eval_only.out.to_vector<float>(), before.out.to_vector<float>());
  EXPECT_EQ(eval_only.metrics, before.metrics);
  EXPECT_EQ(eval_only_fp32.out.to_vector<float>(), fp32.out.to_vector<float>());
  EXPECT_EQ(eval_only_fp32.metrics, fp32.metrics);
  int low_ops = 0;
  for (const OpRecord& r : before.records) {
    if (r.op != OpId::conv2d && r.op != OpId::linear) continue;
    ++low_ops;
    EXPECT_EQ(r.compute_dtype, DType::bf16) << op_name(r.op) << " in '" << r.cell_path << "' before train()";
  }
  EXPECT_EQ(low_ops, 5) << "lenet: 2 conv + 3 dense";
  EXPECT_EQ(before.out.dtype(), DType::f32);
  EXPECT_EQ(before.out.to_vector<float>(), after.out.to_vector<float>());
  EXPECT_EQ(before.metrics, after.metrics);
  EXPECT_NE(before.out.to_vector<float>(), fp32.out.to_vector<float>()) << "O2 must differ from fp32";
}

// A Model built without an optimizer evaluates and predicts, and refuses to train, naming the fix.
TEST(Model, WithoutAnOptimizerRefusesToTrain) {
  auto net = nn::make_model("lenet");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  train::Model model(*net, loss_fn, {.metrics = {{"Accuracy", nn::Accuracy()}}, .amp_level = "O2"});
  EXPECT_EQ(model.predict(synthetic(32, 3).get_batch(0, 0).image).dtype(), DType::f32);
  try {
    model.train(1, synthetic(64, 5));
    FAIL() << "train() without an optimizer must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without an optimizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Model(network, loss_fn, optimizer"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)model.train_network(), Error);
}

// The Model route's O0 keeps a network's own AMP configuration (MindSpore: O0 changes nothing),
// so `mixprec eval`'s auto_mixed_precision + Model(...) evaluates at the level it set.
TEST(Model, O0KeepsTheNetworksOwnAmpConfiguration) {
  manual_seed(0);
  auto net = nn::make_model("lenet");
  amp::auto_mixed_precision(*net, "O2", DType::bf16);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::SGD opt(net->trainable_params(), 0.01);
  train::Model model(*net, loss_fn, opt);
  for (bool trained : {false, true}) {
    if (trained) model.train(1, synthetic(64, 7), {}, {.max_steps = 1});
    std::vector<OpRecord> records;
    {
      OpRecorder rec(&records);
      (void)model.predict(zeros({2, 1, 28, 28}));
    }
    int conv = 0;
    for (const OpRecord& r : records)
      if (r.op == OpId::conv2d) {
        ++conv;
        EXPECT_EQ(r.compute_dtype, DType::bf16) << (trained ? "after train()" : "before train()");
      }
    EXPECT_EQ(conv, 2);
  }
}

// Library errors speak in API terms; only the CLI names its flags (it adds them to these).
TEST(LibraryErrors, NameApiTermsNotCommandLineFlags) {
  const auto& message = testing::error_text;
  const std::string oom = message([] { (void)allocator_for(Device::cpu()).allocate(size_t{1} << 62); });
  EXPECT_NE(oom.find("use a smaller batch"), std::string::npos) << oom;
  amp::DynamicLossScaleManager manager(1024.0, 2.0, 10);
  manager.max_consecutive_overflows = 1;
  const std::string nan_loss = message([&] { manager.update_loss_scale(true, /*loss_finite=*/false); });
  EXPECT_NE(nan_loss.find("TrainStepOptions::check_numerics"), std::string::npos) << nan_loss;
  EXPECT_NE(nan_loss.find("amp_level O0"), std::string::npos) << nan_loss;
  const std::string no_data = message([] { dataset::MnistDataset("/nonexistent/mixprec-data"); });
  EXPECT_NE(no_data.find("MnistDataset(dir)"), std::string::npos) << no_data;
  for (const std::string& m : {oom, nan_loss, no_data}) EXPECT_EQ(m.find("--"), std::string::npos) << m;
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
