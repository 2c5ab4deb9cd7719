// Exact resume: N straight steps versus N/2 steps + save + load into fresh objects + N/2 steps
// give bit-identical weights, buffers, optimizer state and scaler state (O0 and O2/f16 with a
// dynamic scaler and dropout-free nets; a net with dropout checks the RNG state too). Refusals:
// mismatched runs, and each bad metadata value, named by file and field, restoring nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <tuple>

#include "mixprec/mixprec.h"
#include "mixprec/train/checkpoint.h"
#include "ops/kernel_choice.h"
#include "test_util.h"

namespace mixprec {
namespace {

struct RunResult {
  std::vector<std::vector<float>> state;  // weights + buffers + optimizer state
  double scale = 0;
  int64_t skipped = 0;
};

struct DropNet : nn::Cell {
  nn::Flatten flatten;
  nn::Dense fc1{784, 64};
  nn::Dropout drop{0.3};
  nn::Dense fc2{64, 10};
  DropNet() {
    register_cell("flatten", flatten);
    register_cell("fc1", fc1);
    register_cell("drop", drop);
    register_cell("fc2", fc2);
  }
  Tensor construct(const Tensor& x) override { return fc2(drop(ops::relu(fc1(flatten(x))))); }
};

std::shared_ptr<nn::Cell> make(const std::string& name) {
  if (name == "dropnet") return std::make_shared<DropNet>();
  return nn::make_model(name);
}

RunResult train(const std::string& net_name, const std::string& level, int64_t steps, const std::string& save_to,
          const std::string& resume_from) {
  manual_seed(0);
  auto net = make(net_name);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum opt(net->trainable_params(), optim::LearningRate::cosine(0.05, 40), 0.9);
  train::ModelOptions mo{.amp_level = level};
  if (level != "O0") {
    mo.dtype = DType::f16;
    mo.loss_scale_manager = amp::DynamicLossScaleManager(65536.0, 2.0, 3);
  }
  train::Model model(*net, loss_fn, opt, mo);
  const auto ds = dataset::SyntheticDataset({.num_samples = 160, .seed = 5})
                      .map(dataset::transforms::rescale(1.0 / 255, -0.5))
                      .shuffle(7)
                      .batch(16, true);  // 10 batches per epoch
  train::TrainOptions to{.max_steps = steps};
  if (!resume_from.empty()) {
    const auto info = train::load_training_state(resume_from, model);
    to.initial_epoch = info.epoch;
    to.start_batch = info.batch;
  }
  model.train(3, ds, {}, to);
  if (!save_to.empty()) train::save_training_state(save_to, model);
  RunResult r;
  for (auto& [n, t] : net->state_and_names()) r.state.push_back(t.to_vector<float>());
  for (auto& s : opt.state()) r.state.push_back(s.tensor.to_vector<float>());
  r.state.push_back({static_cast<float>(opt.global_step())});
  r.scale = model.train_network().loss_scale_manager() ? model.train_network().loss_scale_manager()->get_loss_scale() : 1.0;
  r.skipped = model.train_network().skipped_steps();
  return r;
}

TEST(Resume, HalfStepsSaveLoadHalfStepsIsBitIdentical) {
  const auto dir = std::filesystem::temp_directory_path() / ("mixprec_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& [net, level] : std::vector<std::pair<std::string, std::string>>{
           {"convnet-bn", "O0"}, {"convnet-bn", "O2"}, {"dropnet", "O2"}}) {
    const RunResult straight = train(net, level, 24, "", "");
    const auto ckpt = (dir / (net + level + ".safetensors")).string();
    (void)train(net, level, 13, ckpt, "");  // stops mid-epoch (13 = 1 epoch + 3 batches)
    const RunResult resumed = train(net, level, 24, "", ckpt);
    EXPECT_EQ(straight.state, resumed.state) << net << " " << level;
    EXPECT_EQ(straight.scale, resumed.scale) << net << " " << level;
    EXPECT_EQ(straight.skipped, resumed.skipped) << net << " " << level;
    if (level == "O2") {
      EXPECT_GT(straight.skipped, 0) << "f16 with a 2^16 start overflows at first";
    }
  }
}

TEST(Resume, BitIdenticalWithMeasuredKernelsEvenWhenTheCacheIsDeleted) {
  // The checkpoint records the kernels its run used; the resumed run, with an empty cache, pins
  // them instead of measuring again (a new measurement could choose another kernel).
  // SimpleNet also records the layout its conv1 was switched to after the first step (its output
  // is flattened: ops/layout_choice.h): the resumed run writes that layout from its first step.
  for (const char* model : {"convnet-bn", "simplenet"}) {
    SCOPED_TRACE(model);
    const auto dir = std::filesystem::temp_directory_path() / ("mixprec_resume_kc_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ::setenv("MIXPREC_CACHE_DIR", (dir / "cache").c_str(), 1);
    ops::KernelChoiceScope measure(ops::KernelChoice::measure);
    ops::choice::reset_for_testing();
    (void)train(model, "O2", 2, "", "");  // the machine's first run measures
    ASSERT_GE(ops::choice::measurements(), 1) << "nothing was measured: the test proves nothing";
    ops::choice::reset_for_testing();
    // The second confirms (ops/kernel_choice.h): from here on every run takes the same kernels.
    const RunResult straight = train(model, "O2", 24, "", "");
    ASSERT_GE(ops::choice::measurements(), 1) << "the first run's choices went unconfirmed";
    int layouts = 0;
    for (const auto& [sig, c] : ops::choice::used())
      if (sig.find("conv2d output layout") != std::string::npos && c.kernel == "contiguous") ++layouts;
    EXPECT_EQ(layouts, std::string(model) == "simplenet" ? 1 : 0);
    const auto ckpt = (dir / "kc.safetensors").string();
    ops::choice::reset_for_testing();
    (void)train(model, "O2", 13, ckpt, "");
    EXPECT_EQ(ops::choice::measurements(), 0) << "a confirmed cache was timed again";
    std::filesystem::remove_all(dir / "cache");
    ops::choice::reset_for_testing();  // a new process, its cache gone
    const RunResult resumed = train(model, "O2", 24, "", ckpt);
    EXPECT_EQ(ops::choice::measurements(), 0) << "the resumed run measured instead of using the checkpoint's kernels";
    EXPECT_EQ(straight.state, resumed.state);
    EXPECT_EQ(straight.scale, resumed.scale);
    ops::choice::reset_for_testing();
    ::unsetenv("MIXPREC_CACHE_DIR");
    std::filesystem::remove_all(dir);
  }
}

TEST(Resume, RefusesMismatchedRunsWithClearErrors) {
  const auto path = (std::filesystem::temp_directory_path() / ("mixprec_resume_bad_" + std::to_string(::getpid()) + ".safetensors")).string();
  (void)train("lenet", "O0", 2, path, "");
  manual_seed(0);
  auto net = nn::make_model("lenet");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Adam adam(net->trainable_params());
  train::Model wrong_opt(*net, loss_fn, adam, {.amp_level = "O0"});
  EXPECT_THROW(train::load_training_state(path, wrong_opt), Error);
  nn::Momentum mom(net->trainable_params(), 0.1, 0.9);
  train::Model wrong_level(*net, loss_fn, mom, {.amp_level = "O2"});
  const std::string level_err = testing::error_text([&] { train::load_training_state(path, wrong_level); });
  EXPECT_NE(level_err.find("saved at amp_level O0 but the Model's amp_level is O2"), std::string::npos) << level_err;
  EXPECT_EQ(level_err.find("--"), std::string::npos) << "the library names no CLI flag: " << level_err;
  auto other = nn::make_model("mlp");
  nn::Momentum mom2(other->trainable_params(), 0.1, 0.9);
  train::Model wrong_net(*other, loss_fn, mom2, {.amp_level = "O0"});
  EXPECT_THROW(train::load_training_state(path, wrong_net), Error);
  // A plain weights file is not a training state, but the training state is a weights file.
  EXPECT_NO_THROW(io::load_param_into_net(*net, io::load_checkpoint(path), {.strict = true}));
  const auto weights_only = path + ".weights.safetensors";
  io::save_checkpoint(*net, weights_only);
  const std::string plain_err = testing::error_text([&] { train::load_training_state(weights_only, wrong_opt); });
  EXPECT_NE(plain_err.find("not a training-state checkpoint"), std::string::npos) << plain_err;
  EXPECT_NE(plain_err.find("save_training_state"), std::string::npos) << plain_err;
  EXPECT_EQ(plain_err.find("mixprec train"), std::string::npos) << "the library names no CLI command: " << plain_err;
}

// Writes a copy of training state `from` with metadata field `key` set to `value` (or removed
// when value is null), returning its path.
std::string tampered(const std::string& from, const std::string& key, const char* value) {
  io::SafetensorsFile f = io::read_safetensors(from);
  if (value) f.metadata[key] = value;
  else f.metadata.erase(key);
  const std::string to = from + "." + key + ".safetensors";
  io::write_safetensors(to, f.tensors, f.metadata);
  return to;
}

TEST(Resume, BadMetadataValuesAreRefusedNamingFileAndFieldAndRestoreNothing) {
  const auto dir = std::filesystem::temp_directory_path() / ("mixprec_resume_meta_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.safetensors").string();
  (void)train("lenet", "O2", 3, good, "");  // O2/f16 with a dynamic loss scaler
  const std::vector<std::tuple<std::string, const char*, std::string>> cases = {
      {"global_step", "-5", "is -5, expected an integer >= 0"},
      {"epoch", "-1", "is -1, expected an integer >= 0"},
      {"batch", "-2", "expected an integer >= 0"},
      {"optimizer_step", "-1", "expected an integer >= 0"},
      {"attempted_steps", "12abc", "is '12abc', expected an integer"},
      {"skipped_steps", "-1", "expected an integer >= 0"},
      {"skipped_steps", "99", "exceeds 'attempted_steps'"},
      // Bounded (counting on from INT64_MAX overflowed), and counters of the same steps agree.
      {"global_step", "9223372036854775807", "expected an integer >= 0 and <= 2^53"},
      {"optimizer_step", "9007199254740993", "expected an integer >= 0 and <= 2^53"},
      {"loss_scale_good_steps", "9007199254740993", "expected an integer >= 0 and <= 2^53"},
      {"attempted_steps", "1000", "(1000) exceeds 'global_step' (3)"},
      {"batch", "1000", "(1000) exceeds 'global_step' (3)"},
      {"epoch", "4", "(4) exceeds 'global_step' (3)"},
      {"global_step", " 7", "expected an integer"},
      {"global_step", "+7", "expected an integer"},
      {"global_step", "", "expected an integer"},
      {"global_step", "99999999999999999999", "expected an integer"},
      {"loss_scale", "inf", "is 'inf', expected a finite number > 0"},
      {"loss_scale", "nan", "expected a finite number > 0"},
      {"loss_scale", "0", "expected a finite number > 0"},
      {"loss_scale", "-1024", "expected a finite number > 0"},
      {"loss_scale", "1e39",
       "and at most 3.40282e+38 (a loss scale must be finite in f32)"},  // inf in f32
      {"loss_scale", "1e999", "expected a number"},
      {"loss_scale", "1024x", "expected a number"},
      {"loss_scale_good_steps", "-1", "expected an integer >= 0"},
      {"loss_scale_consecutive_overflows", "-3", "expected an integer >= 0"},
      {"loss_scale_total_overflows", "-1", "expected an integer >= 0"},
      {"loss_scale_consecutive_overflows", "1000000", "exceeds 'loss_scale_total_overflows'"},
      {"rng_seed", "-1", "expected an unsigned integer"},
      {"rng_offset", "1.5", "expected an unsigned integer"},
      {"global_step", nullptr, "is missing"},
      {"loss_scale", nullptr, "is missing, but this run uses"}};
  for (const auto& [key, value, expected] : cases) {
    const std::string path = tampered(good, key, value);
    manual_seed(3);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    nn::Momentum opt(net->trainable_params(), 0.05, 0.9);
    train::Model model(*net, loss_fn, opt,
                       {.amp_level = "O2", .loss_scale_manager = amp::DynamicLossScaleManager(65536.0, 2.0, 3),
                        .dtype = DType::f16});
    const auto before = net->state_and_names().front().second.to_vector<float>();
    const std::string err = testing::error_text([&] { train::load_training_state(path, model); });
    const std::string what = key + " = " + (value ? "'" + std::string(value) + "'" : "(missing)");
    EXPECT_NE(err.find(path), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find("'" + key + "'"), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find(expected), std::string::npos) << what << ": " << err;
    EXPECT_EQ(net->state_and_names().front().second.to_vector<float>(), before) << what << ": nothing restored";
    EXPECT_EQ(model.global_step(), 0) << what;
  }
}

TEST(Resume, RngSeedAboveInt64MaxRoundTrips) {
  const auto path = (std::filesystem::temp_directory_path() /
                     ("mixprec_resume_seed_" + std::to_string(::getpid()) + ".safetensors")).string();
  auto net = nn::make_model("lenet");
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum opt(net->trainable_params(), 0.05, 0.9);
  train::Model model(*net, loss_fn, opt, {.amp_level = "O0"});
  default_generator().set_state(18446744073709551557ull, 12345);
  train::save_training_state(path, model);
  manual_seed(0);
  train::load_training_state(path, model);
  EXPECT_EQ(default_generator().seed(), 18446744073709551557ull);
  EXPECT_EQ(default_generator().offset(), 12345u);
}

}  // namespace
}  // namespace mixprec
