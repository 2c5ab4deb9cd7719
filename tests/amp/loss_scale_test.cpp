// Loss scaling: every state transition of the managers and functional scalers, the fused
// unscale-and-check with inf/NaN injected into chosen gradients (first, middle, last tensor;
// f32, f16, bf16), and the train step: a skipped step leaves weights, optimizer state, step
// count and learning-rate schedule bit-identical; unscale of one tensor; all_finite refusing
// undefined and empty lists; build_train_network taking its manager as Model does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

using testing::throws_error_with;

std::vector<Tensor> make_grads(DType d) {
  return {testing::random({7}, 1, DType::f32).astype(d), testing::random({3, 33}, 2, DType::f32).astype(d),
          testing::random({5000}, 3, DType::f32).astype(d)};
}

void poison(Tensor& t, int64_t index, double value) {
  NoGradGuard ng;
  Tensor flat = t.reshape({-1});
  flat.slice(0, index, index + 1).copy_(full({1}, value, {.dtype = DType::f64}));
}

TEST(UnscaleAndCheck, UnscalesExactlyAndDetectsInjectedNonFinite) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    for (size_t which = 0; which < 3; ++which) {
      for (double bad : {INFINITY, -INFINITY, NAN}) {
        auto grads = make_grads(d);
        EXPECT_TRUE(amp::all_finite(grads));
        poison(grads[which], grads[which].numel() - 1, bad);
        EXPECT_FALSE(amp::all_finite(grads)) << dtype_name(d) << " tensor " << which;
        EXPECT_FALSE(amp::unscale_and_check(grads, 1024.0)) << dtype_name(d) << " tensor " << which;
      }
    }
    auto grads = make_grads(d);
    std::vector<double> expect = grads[2].to_vector<double>();
    for (double& v : expect) v /= 8.0;  // exact in f64; then one rounding to the gradient dtype
    expect = Tensor::from_vector<double>(expect, {static_cast<int64_t>(expect.size())}).astype(d).to_vector<double>();
    EXPECT_TRUE(amp::unscale_and_check(grads, 8.0));
    const auto after = grads[2].to_vector<double>();
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(after[i], expect[i]) << dtype_name(d);
  }
  auto g = make_grads(DType::f32);
  Tensor t = g[1].transpose(0, 1);  // non-contiguous
  EXPECT_TRUE(amp::unscale_and_check({t}, 2.0));
  EXPECT_THROW(amp::unscale_and_check(g, 0.0), Error);
}

TEST(DynamicLossScaleManager, GrowsAfterExactlyWindowCleanSteps) {
  amp::DynamicLossScaleManager m(1024.0, 2.0, 3);
  m.update_loss_scale(false);
  m.update_loss_scale(false);
  EXPECT_EQ(m.get_loss_scale(), 1024.0);
  m.update_loss_scale(false);
  EXPECT_EQ(m.get_loss_scale(), 2048.0);
  EXPECT_EQ(m.state().good_steps, 0);
  m.update_loss_scale(true);
  EXPECT_EQ(m.get_loss_scale(), 1024.0);
  m.update_loss_scale(false);
  m.update_loss_scale(false);
  EXPECT_EQ(m.get_loss_scale(), 1024.0) << "the window restarts after an overflow";
  m.update_loss_scale(false);
  EXPECT_EQ(m.get_loss_scale(), 2048.0);
  EXPECT_TRUE(m.get_drop_overflow_update());
}

TEST(DynamicLossScaleManager, FloorAtOneAndFiniteGuard) {
  amp::DynamicLossScaleManager m(4.0, 2.0, 1);
  for (int i = 0; i < 5; ++i) m.update_loss_scale(true);
  EXPECT_EQ(m.get_loss_scale(), 1.0);
  // The scale multiplies f32 values: it never grows past the largest f32, and cannot start there.
  amp::DynamicLossScaleManager big(amp::kMaxLossScale / 1.5, 2.0, 1);
  big.update_loss_scale(false);
  EXPECT_TRUE(std::isfinite(static_cast<float>(big.get_loss_scale())));
  EXPECT_EQ(big.get_loss_scale(), static_cast<float>(amp::kMaxLossScale / 1.5));  // the scale is f32
  EXPECT_THROW(amp::DynamicLossScaleManager(1e39, 2.0, 1), Error);  // finite in double, inf in f32
  amp::DynamicLossScaleManager capped(1024.0, 2.0, 1, {.max_scale = 2048.0});
  capped.update_loss_scale(false);
  capped.update_loss_scale(false);
  EXPECT_EQ(capped.get_loss_scale(), 2048.0);
  auto torch = amp::DynamicLossScaleManager::pytorch_defaults();
  EXPECT_EQ(torch->get_loss_scale(), 65536.0);
  for (int i = 0; i < 20; ++i) torch->update_loss_scale(true);
  EXPECT_LT(torch->get_loss_scale(), 1.0) << "the PyTorch preset has no floor";
}

TEST(DynamicLossScaleManager, ThousandConsecutiveOverflowsStopWithAReason) {
  amp::DynamicLossScaleManager m;
  for (int i = 0; i < 999; ++i) m.update_loss_scale(true, true);
  try {
    m.update_loss_scale(true, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GRADIENTS overflowed"), std::string::npos) << e.what();
  }
  amp::DynamicLossScaleManager n;
  n.max_consecutive_overflows = 10;
  for (int i = 0; i < 9; ++i) n.update_loss_scale(true, false);
  try {
    n.update_loss_scale(true, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite LOSS"), std::string::npos) << e.what();
  }
  amp::DynamicLossScaleManager k;
  k.max_consecutive_overflows = 3;
  k.update_loss_scale(true);
  k.update_loss_scale(true);
  k.update_loss_scale(false);  // resets the run
  k.update_loss_scale(true);
  k.update_loss_scale(true);
  EXPECT_EQ(k.state().consecutive_overflows, 2);
}

TEST(FixedLossScaleManager, DropOrApply) {
  amp::FixedLossScaleManager drop(1024.0);
  EXPECT_TRUE(drop.get_drop_overflow_update());
  drop.update_loss_scale(true);
  EXPECT_EQ(drop.get_loss_scale(), 1024.0);
  amp::FixedLossScaleManager keep(1024.0, {.drop_overflow_update = false});
  EXPECT_FALSE(keep.get_drop_overflow_update());
  for (int i = 0; i < 2000; ++i) keep.update_loss_scale(true);  // never stops: updates are applied
  EXPECT_EQ(keep.get_loss_scale(), 1024.0);
  EXPECT_THROW(amp::FixedLossScaleManager(0.5), Error);
  EXPECT_THROW(amp::FixedLossScaleManager(1e39), Error);  // inf in f32
  EXPECT_NO_THROW(amp::FixedLossScaleManager(amp::kMaxLossScale));
}

TEST(DynamicLossScaler, AdjustLikeMindSpore) {
  amp::DynamicLossScaler s(1024.0, 2.0, 2);
  s.adjust(true);
  EXPECT_EQ(s.scale_value(), 1024.0);
  s.adjust(true);
  EXPECT_EQ(s.scale_value(), 2048.0);
  s.adjust(false);
  EXPECT_EQ(s.scale_value(), 1024.0);
  EXPECT_EQ(s.counter(), 0);
  amp::DynamicLossScaler low(1.5, 2.0, 2);
  low.adjust(false);
  EXPECT_EQ(low.scale_value(), 1.0);
  amp::StaticLossScaler st(1024.0);
  const Tensor loss = Tensor::from_vector<float>({0.5f}, {});
  EXPECT_EQ(st.scale(loss).item(), 512.0);
  auto g = st.unscale({Tensor::from_vector<float>({2048.0f}, {1})});
  EXPECT_EQ(g[0].item(), 2.0);
  st.adjust(false);
  EXPECT_EQ(st.scale_value(), 1024.0);
}

// A tiny model and a step whose gradients overflow in f16 when scaled.
struct Tiny : nn::Cell {
  nn::Dense fc{4, 3};
  Tiny() { register_cell("fc", fc); }
  Tensor construct(const Tensor& x) override { return fc(x); }
};

std::vector<std::vector<float>> snapshot(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

TEST(TrainStep, SkippedStepLeavesEverythingBitIdentical) {
  manual_seed(0);
  Tiny net;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::Momentum opt(net.trainable_params(), optim::LearningRate::cosine(0.1, 100), 0.9);
  auto manager = std::make_shared<amp::DynamicLossScaleManager>(1024.0, 2.0, 1000);
  auto step = amp::build_train_network(net, opt, loss_fn, "O2",
                                       {.cast_model_type = DType::f16, .loss_scale_manager = manager});
  const Tensor x = testing::random({8, 4}, 11, DType::f32);
  const Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  (*step)(x, y);  // one clean step to create momentum state
  ASSERT_FALSE(step->last_step().skipped);
  const auto w0 = snapshot(net.trainable_params());
  std::vector<Tensor> state;
  for (auto& s : opt.state()) state.push_back(s.tensor);
  const auto s0 = snapshot(state);
  const int64_t steps0 = opt.global_step();
  const double lr0 = opt.learning_rate();
  manager->set_state({.scale = 1e30});  // scaled gradients overflow f16 -> inf
  (*step)(x, y);
  EXPECT_TRUE(step->last_step().overflow);
  EXPECT_TRUE(step->last_step().skipped);
  EXPECT_TRUE(step->last_step().loss_finite);
  EXPECT_EQ(snapshot(net.trainable_params()), w0);
  EXPECT_EQ(snapshot(state), s0);
  EXPECT_EQ(opt.global_step(), steps0);
  EXPECT_EQ(opt.learning_rate(), lr0);
  EXPECT_EQ(manager->get_loss_scale(), static_cast<float>(1e30) / 2);  // the scale is f32
  EXPECT_EQ(step->skipped_steps(), 1);
  manager->set_state({.scale = 1024.0});
  (*step)(x, y);
  EXPECT_FALSE(step->last_step().skipped);
  EXPECT_NE(snapshot(net.trainable_params()), w0);
  EXPECT_EQ(opt.global_step(), steps0 + 1);
}

TEST(TrainStep, AppliesUnscaledGradientsEqualToFp32) {
  // With a fixed scale and f32 compute the update equals the unscaled one exactly (powers of 2).
  for (double scale : {1.0, 1024.0}) {
    manual_seed(0);
    Tiny a;
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    optim::SGD opt(a.trainable_params(), 0.5);
    auto step = amp::build_train_network(a, opt, loss_fn, "O0",
                                         {.loss_scale_manager = std::make_shared<amp::FixedLossScaleManager>(scale)});
    manual_seed(0);
    Tiny b;
    optim::SGD opt_b(b.trainable_params(), 0.5);
    const Tensor x = testing::random({8, 4}, 12, DType::f32);
    const Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
    (*step)(x, y);
    ops::softmax_cross_entropy(b(x), y, {.sparse = true, .reduction = ops::Reduction::mean}).backward();
    opt_b.step();
    EXPECT_EQ(snapshot(a.trainable_params()), snapshot(b.trainable_params())) << "scale " << scale;
  }
}

TEST(TrainStep, GradientAccumulationUnscalesOnceAtTheBoundary) {
  manual_seed(0);
  Tiny a;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::SGD opt(a.trainable_params(), 0.5);
  auto step = amp::build_train_network(a, opt, loss_fn, "O0",
                                       {.loss_scale_manager = std::make_shared<amp::FixedLossScaleManager>(256.0),
                                        .step = {.accumulation_steps = 2}});
  const Tensor x = testing::random({8, 4}, 13, DType::f32);
  const Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  const auto w0 = snapshot(a.trainable_params());
  (*step)(x.slice(0, 0, 4), y.slice(0, 0, 4));
  EXPECT_EQ(snapshot(a.trainable_params()), w0) << "no update before the boundary";
  (*step)(x.slice(0, 4, 8), y.slice(0, 4, 8));
  EXPECT_EQ(opt.global_step(), 1);
  // Equals one step on the mean of the two micro-batch gradients.
  manual_seed(0);
  Tiny b;
  optim::SGD opt_b(b.trainable_params(), 0.5);
  Tensor l1 = ops::softmax_cross_entropy(b(x.slice(0, 0, 4)), y.slice(0, 0, 4), {.sparse = true, .reduction = ops::Reduction::mean});
  Tensor l2 = ops::softmax_cross_entropy(b(x.slice(0, 4, 8)), y.slice(0, 4, 8), {.sparse = true, .reduction = ops::Reduction::mean});
  ops::mul(ops::add(l1, l2), 0.5).backward();
  opt_b.step();
  const auto wa = snapshot(a.trainable_params()), wb = snapshot(b.trainable_params());
  for (size_t i = 0; i < wa.size(); ++i)
    for (size_t j = 0; j < wa[i].size(); ++j) EXPECT_NEAR(wa[i][j], wb[i][j], 1e-6);
}

TEST(TrainStep, ClippingComposesWithScaling) {
  manual_seed(0);
  Tiny a;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::SGD opt(a.trainable_params(), 1.0);
  auto step = amp::build_train_network(a, opt, loss_fn, "O0",
                                       {.loss_scale_manager = std::make_shared<amp::FixedLossScaleManager>(4096.0),
                                        .step = {.max_grad_norm = 1e-3}});
  const auto w0 = snapshot(a.trainable_params());
  (*step)(testing::random({8, 4}, 14, DType::f32), Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8}));
  EXPECT_GT(step->last_step().grad_norm, 1e-3) << "the norm is measured after unscaling";
  EXPECT_LT(step->last_step().grad_norm, 10.0);
  double moved = 0;
  const auto w1 = snapshot(a.trainable_params());
  for (size_t i = 0; i < w0.size(); ++i)
    for (size_t j = 0; j < w0[i].size(); ++j) moved += (w1[i][j] - w0[i][j]) * (w1[i][j] - w0[i][j]);
  EXPECT_NEAR(std::sqrt(moved), 1e-3, 1e-5) << "lr 1 times the clipped norm";
}

// The seed's functional loop: loss = scaler.unscale(loss), symmetric with scale(loss).
TEST(FunctionalScaler, UnscaleTakesASingleTensorLikeScale) {
  for (double s : {1024.0, 1000.0}) {
    amp::StaticLossScaler scaler(s);
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      const Tensor g = testing::random({37}, 21, DType::f32).astype(d);
      const Tensor one = scaler.unscale(g);
      static_assert(std::is_same_v<decltype(scaler.unscale(g)), Tensor>);
      EXPECT_EQ(one.dtype(), d);
      // Bit-identical to the list form (1/scale computed in f64, applied in f32).
      EXPECT_EQ(one.to_vector<double>(), scaler.unscale(std::vector<Tensor>{g})[0].to_vector<double>())
          << "scale " << s << " " << dtype_name(d);
    }
    const Tensor loss = Tensor::from_vector<float>({0.75f}, {});
    // Exact for a power of 2; a multiply by the f32 reciprocal otherwise (as MindSpore's unscale).
    EXPECT_NEAR(scaler.unscale(scaler.scale(loss)).item(), 0.75, s == 1024.0 ? 0.0 : 1e-7) << "scale " << s;
  }
  // Differentiable, like scale: d(unscale(x))/dx = 1/scale.
  amp::DynamicLossScaler dyn(512.0, 2.0, 10);
  Tensor x = Tensor::from_vector<float>({3.0f}, {1}).set_requires_grad(true);
  ops::sum(dyn.unscale(x)).backward();
  EXPECT_EQ(x.grad().item(), 1.0 / 512.0);
  // A braced list still means the list form.
  static_assert(std::is_same_v<decltype(dyn.unscale({x})), std::vector<Tensor>>);
  EXPECT_THROW((void)dyn.unscale(Tensor()), Error);
}

TEST(FunctionalScaler, AnUndefinedGradientOrAnEmptyListIsAnError) {
  const Tensor g = testing::random({5}, 22, DType::f32);
  EXPECT_TRUE(throws_error_with([] { (void)amp::all_finite({}); },
                                "all_finite: expected at least one tensor, got an empty list"));
  EXPECT_TRUE(throws_error_with([] { (void)amp::all_finite({Tensor()}); },
                                "all_finite: tensor 0 of 1 is undefined"));
  EXPECT_TRUE(throws_error_with([&] { (void)amp::all_finite({g, Tensor()}); },
                                "all_finite: tensor 1 of 2 is undefined"));
  amp::StaticLossScaler scaler(8.0);
  EXPECT_TRUE(throws_error_with([&] { (void)scaler.unscale({g, Tensor(), g}); },
                                "LossScaler::unscale: tensor 1 of 3"));
  EXPECT_TRUE(throws_error_with([&] { (void)scaler.unscale_({Tensor()}); },
                                "LossScaler::unscale_: tensor 0 of 1"));
  EXPECT_TRUE(throws_error_with([&] { (void)scaler.unscale_({}); }, "empty list"));
  EXPECT_TRUE(amp::all_finite({g}));
  EXPECT_TRUE(scaler.unscale(std::vector<Tensor>{}).empty());
}

TEST(TrainStep, AParameterNoGradientReachesIsNotAnOverflow) {
  struct WithUnused : nn::Cell {
    nn::Dense fc{4, 3}, unused{4, 3};
    WithUnused() {
      register_cell("fc", fc);
      register_cell("unused", unused);
    }
    Tensor construct(const Tensor& x) override { return fc(x); }
  };
  manual_seed(0);
  WithUnused net;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::SGD opt(net.trainable_params(), 0.5);
  auto step = amp::build_train_network(net, opt, loss_fn, "O0", {.loss_scale_manager = amp::FixedLossScaleManager(64.0)});
  const auto unused0 = net.unused.weight.to_vector<float>();
  (*step)(testing::random({8, 4}, 23, DType::f32), Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8}));
  EXPECT_FALSE(step->last_step().overflow);
  EXPECT_FALSE(step->last_step().skipped);
  EXPECT_EQ(net.unused.weight.to_vector<float>(), unused0);
}

// build_train_network takes its manager as train::Model does: the seed's value form, nullptr,
// or a shared_ptr.
TEST(TrainStep, BuildTrainNetworkTakesTheManagerAsModelDoes) {
  manual_seed(0);
  Tiny net;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  nn::Momentum optimizer(net.trainable_params(), 0.01, 0.9);
  auto loss_scale_manager = amp::FixedLossScaleManager(1024.0, {.drop_overflow_update = false});
  auto step = amp::build_train_network(net, optimizer, loss_fn, "O2",
                                       {.loss_scale_manager = loss_scale_manager});
  ASSERT_NE(step->loss_scale_manager(), nullptr);
  EXPECT_EQ(step->loss_scale_manager()->get_loss_scale(), 1024.0);
  EXPECT_FALSE(step->loss_scale_manager()->get_drop_overflow_update());
  const Tensor x = testing::random({8, 4}, 24, DType::f32);
  const Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8});
  (*step)(x, y);
  EXPECT_EQ(step->last_step().loss_scale, 1024.0);
  EXPECT_EQ(step->loss_scale_manager()->state().good_steps, 1) << "the cell's copy keeps the state";
  // The seed's functional route: loss_scale_manager=None means no scaling, even at O2.
  Tiny net2;
  nn::Momentum optimizer2(net2.trainable_params(), 0.01, 0.9);
  auto unscaled = amp::build_train_network(net2, optimizer2, loss_fn, "O2", {.loss_scale_manager = nullptr});
  EXPECT_EQ(unscaled->loss_scale_manager(), nullptr);
  // A shared_ptr is shared with the caller.
  Tiny net3;
  nn::Momentum optimizer3(net3.trainable_params(), 0.01, 0.9);
  auto shared = std::make_shared<amp::DynamicLossScaleManager>(256.0, 2.0, 1);
  auto step3 = amp::build_train_network(net3, optimizer3, loss_fn, "O2", {.loss_scale_manager = shared});
  (*step3)(x, y);
  EXPECT_EQ(shared->get_loss_scale(), 512.0) << "one clean step with window 1 doubles the caller's manager";
  EXPECT_EQ(step3->loss_scale_manager(), shared.get());
}

TEST(LossScaleManager, AForwardNanStopsWithAnApiHintNotACliFlag) {
  amp::FixedLossScaleManager m(128.0);
  m.max_consecutive_overflows = 2;
  m.update_loss_scale(true, false);
  try {
    m.update_loss_scale(true, false);
    FAIL() << "two consecutive overflows with max 2 must stop";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("non-finite LOSS"), std::string::npos) << what;
    EXPECT_NE(what.find("TrainStepOptions::check_numerics"), std::string::npos) << what;
    EXPECT_EQ(what.find("--"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace mixprec
