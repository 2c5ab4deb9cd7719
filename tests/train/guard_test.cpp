// OverflowGuard with OnOverflow::promote never gets stuck: a promotion that does not remove the
// overflow escalates (to the producer of the cell's input, then to the whole network in fp32),
// and when even the whole network in fp32 overflows, the guard stops training with a reason. So a
// run trains again when fp32 has room for its values, and otherwise stops within a bounded number
// of steps.
#include <gtest/gtest.h>

#include "mixprec/mixprec.h"
#include "mixprec/train/guard.h"

namespace mixprec {
namespace {

// SimpleNet's layout (conv1, relu, flatten, fc) on 8x8 images, so that a step is quick; `gain`
// is the standard deviation of fc's weights (1e38 makes its output overflow even in fp32).
struct TinyNet : nn::Cell {
  nn::Conv2d conv1{1, 4, 3, {.pad_mode = nn::PadMode::valid, .weight_init = init::Normal(0.02)}};
  nn::ReLU relu;
  nn::Flatten flatten;
  nn::Dense fc;
  explicit TinyNet(double gain) : fc(4 * 6 * 6, 10, {.weight_init = init::Normal(gain)}) {
    register_cell("conv1", conv1);
    register_cell("relu", relu);
    register_cell("flatten", flatten);
    register_cell("fc", fc);
  }
  Tensor construct(const Tensor& x) override { return fc(flatten(relu(conv1(x)))); }
};

struct Outcome {
  std::vector<bool> skipped;  // per step
  std::vector<train::Promotion> promotions;
  std::string stop_reason;
};

// O2-f16 with a fixed loss scale that drops overflowing updates; the guard acts after a 4-step
// window (no warm-up) so that the test stays short.
Outcome train_tiny(double gain, double scale, int64_t max_steps) {
  manual_seed(0);
  TinyNet net(gain);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum opt(net.trainable_params(), 0.01, 0.9);
  train::ModelOptions mo{.amp_level = "O2", .dtype = DType::f16};
  mo.loss_scale_manager = amp::FixedLossScaleManager(scale, {.drop_overflow_update = true});
  train::Model model(net, loss_fn, opt, mo);
  auto guard = std::make_shared<train::OverflowGuard>(train::GuardOptions{
      .action = train::OnOverflow::promote, .warmup_steps = 0, .window = 4, .max_skip_rate = 0.25, .print = false});
  Outcome out;
  auto record = train::LambdaCallback([&](train::RunContext& c) { out.skipped.push_back(c.step.skipped); });
  const auto ds = dataset::SyntheticDataset({.num_samples = 8 * max_steps, .image_shape = {1, 8, 8}, .seed = 1})
                      .map(dataset::transforms::rescale(1.0 / 255, 0))
                      .batch(8, true);
  model.train(1, ds, {guard, record}, {.max_steps = max_steps});
  out.promotions = guard->promotions();
  out.stop_reason = guard->stop_reason();
  return out;
}

std::string describe(const Outcome& o) {
  std::string s = "promotions:";
  for (const auto& p : o.promotions) s += " " + p.cell + "@" + std::to_string(p.step);
  s += "; skipped:";
  for (bool b : o.skipped) s += b ? " 1" : " 0";
  return s + "; stop: " + o.stop_reason;
}

TEST(OverflowGuard, PromoteEscalatesUntilTrainingResumesWhenFp32HasRoom) {
  // The issue's run: a scale of 1e9 overflows f16 gradients everywhere. Promoting fc, then
  // flatten, used to leave every later step skipped with no further action. Here fp32 has room
  // for a scale of 1e9 (gradients ~1e9 * 1e-2), so escalation must end in training, not in a
  // stop: the stop is for a network that overflows in fp32 too (the next test).
  const Outcome o = train_tiny(0.02, 1e9, 30);
  ASSERT_FALSE(o.promotions.empty()) << describe(o);
  EXPECT_TRUE(o.stop_reason.empty()) << "stopped although fp32 does not overflow: " << describe(o);
  ASSERT_EQ(o.skipped.size(), 30u) << describe(o);
  for (size_t i = 20; i < 30; ++i) EXPECT_FALSE(o.skipped[i]) << "step " << i + 1 << ": " << describe(o);
  // Bounded: each of the four cells and the whole network at most once.
  EXPECT_LE(o.promotions.size(), 5u) << describe(o);
  for (size_t i = 0; i < o.promotions.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_NE(o.promotions[i].cell, o.promotions[j].cell) << describe(o);
}

TEST(OverflowGuard, PromoteStopsWhenTheWholeNetworkInFp32StillOverflows) {
  // fc's output overflows even in fp32: promotion escalates to the whole network, then stops.
  const Outcome o = train_tiny(1e38, 1.0, 30);
  ASSERT_FALSE(o.stop_reason.empty()) << describe(o);
  EXPECT_NE(o.stop_reason.find("whole network"), std::string::npos) << o.stop_reason;
  EXPECT_LE(o.skipped.size(), 10u) << describe(o);
  for (bool skipped : o.skipped) EXPECT_TRUE(skipped);
  ASSERT_FALSE(o.promotions.empty());
  EXPECT_EQ(o.promotions.back().cell, "(network)") << describe(o);
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

// The skip rate counts only steps after the warm-up: the dynamic scale's first halvings (skips at
// steps 1-4 here) are the scaler settling and never warn, however the window falls; skips after
// the warm-up above the rate do. (The window used to include the warm-up steps, so a run whose
// only skips were its first few warned once the warm-up ended.)
TEST(OverflowGuard, SkipsDuringTheWarmupDoNotCountTowardTheSkipRate) {
  train::OverflowGuard guard({.warmup_steps = 4, .window = 4, .max_skip_rate = 0.25, .print = false});
  train::RunContext ctx;
  auto step = [&](int64_t n, bool skipped) {
    ctx.global_step = n;
    ctx.step.skipped = skipped;
    ctx.step.overflow = skipped;
    guard.on_step_end(ctx);
  };
  for (int64_t n = 1; n <= 12; ++n) step(n, n <= 4);
  EXPECT_TRUE(guard.warnings().empty()) << guard.warnings().front();
  step(13, true);
  step(14, true);
  ASSERT_EQ(guard.warnings().size(), 1u);
  EXPECT_NE(guard.warnings().front().find("50.0% of the last 4 steps were skipped"), std::string::npos)
      << guard.warnings().front();
}

}  // namespace
}  // namespace mixprec
