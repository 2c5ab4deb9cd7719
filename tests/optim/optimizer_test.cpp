// Optimizers against hand-computed updates, learning-rate schedules, gradient dtypes, and the
// low-precision working copies written in the same pass.
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/mixprec.h"
#include "ops/cast_cache.h"

namespace mixprec {
namespace {

Tensor param(std::vector<float> v) { return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}).set_requires_grad(true); }
Tensor grad(std::vector<float> v, DType d = DType::f32) { return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}).astype(d); }

TEST(Momentum, HandComputedSteps) {
  Tensor p = param({1.0f});
  optim::Momentum opt({p}, 0.1, 0.9);
  opt({grad({0.5f})});
  EXPECT_FLOAT_EQ(static_cast<float>(p.item()), 0.95f);  // v = 0.5
  opt({grad({0.5f})});
  EXPECT_FLOAT_EQ(static_cast<float>(p.item()), 0.855f);  // v = 0.95
  EXPECT_EQ(opt.global_step(), 2);
  Tensor q = param({1.0f});
  optim::Momentum nesterov({q}, 0.1, 0.9, 0.0, true);
  nesterov({grad({0.5f})});
  EXPECT_FLOAT_EQ(static_cast<float>(q.item()), 0.905f);  // 1 - 0.1 * (0.5 + 0.9 * 0.5)
}

TEST(SGD, WeightDecay) {
  Tensor p = param({2.0f});
  optim::SGD opt({p}, 0.5, 0.1);
  opt({grad({1.0f})});
  EXPECT_FLOAT_EQ(static_cast<float>(p.item()), 1.4f);  // 2 - 0.5 * (1 + 0.1 * 2)
}

TEST(Adam, BiasCorrectedFirstSteps) {
  Tensor p = param({1.0f, -1.0f});
  optim::Adam opt({p}, 0.1);
  opt({grad({2.0f, -0.5f})});
  EXPECT_NEAR(p.at({0}), 0.9, 1e-6);   // m_hat / sqrt(v_hat) = sign(g)
  EXPECT_NEAR(p.at({1}), -0.9, 1e-6);
  opt({grad({2.0f, -0.5f})});
  EXPECT_NEAR(p.at({0}), 0.8, 1e-5);  // f32 arithmetic in the bias corrections
}

TEST(AdamW, DecoupledWeightDecay) {
  Tensor p = param({1.0f});
  optim::AdamW opt({p}, 0.1, 0.9, 0.999, 1e-8, 0.1);
  opt({grad({2.0f})});
  EXPECT_NEAR(p.item(), 1.0 - 0.1 * 0.1 * 1.0 - 0.1, 1e-6);
}

TEST(Optimizer, AcceptsLowPrecisionGradientsAndChecksShapes) {
  Tensor p = param({1.0f, 2.0f});
  optim::SGD opt({p}, 1.0);
  opt({grad({0.5f, 0.25f}, DType::bf16)});
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 1.75f}));
  opt({grad({0.5f, 0.25f}, DType::f16)});
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.0f, 1.5f}));
  EXPECT_THROW(opt({grad({1.0f})}), Error);
  EXPECT_THROW(opt({grad({1.0f, 2.0f}), grad({1.0f, 2.0f})}), Error);
  Tensor h = Tensor::from_vector<float>({1.0f}, {1}).astype(DType::f16).set_requires_grad(true);
  EXPECT_THROW(optim::SGD({h}, 0.1), Error) << "master weights must be fp32";
}

TEST(Optimizer, StepFromDotGradAndZeroGrad) {
  Tensor p = param({3.0f});
  optim::SGD opt({p}, 0.5);
  ops::sum(ops::mul(p, p)).backward();  // grad 6
  opt.step();
  EXPECT_FLOAT_EQ(static_cast<float>(p.item()), 0.0f);
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(Optimizer, WorkingCopiesAreWrittenInTheSamePassAndCached) {
  Tensor p = param({1.0f, 1.0f / 3.0f});
  CastCache cache;
  optim::SGD opt({p}, 0.5);
  opt.attach_working_copies(&cache, DType::bf16);
  Tensor low = cache.lookup(p, DType::bf16);
  ASSERT_TRUE(low.defined());
  EXPECT_EQ(low.data<bf16>()[1].bits, to_bf16(1.0f / 3.0f).bits);
  opt({grad({1.0f, 0.0f})});
  low = cache.lookup(p, DType::bf16);
  ASSERT_TRUE(low.defined()) << "the update re-registers the refreshed copy";
  EXPECT_EQ(low.to_vector<float>()[0], 0.5f);
  {
    NoGradGuard ng;
    p.detach().fill_(7.0);  // an in-place change outside the optimizer
  }
  EXPECT_FALSE(cache.lookup(p, DType::bf16).defined()) << "stale after an in-place write";
}

TEST(LearningRate, Schedules) {
  const auto cos = optim::LearningRate::cosine(1.0, 100, 0.1);
  EXPECT_DOUBLE_EQ(cos.at(0), 1.0);
  EXPECT_NEAR(cos.at(50), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(cos.at(100), 0.1);
  const auto warm = optim::LearningRate(0.4).with_warmup(4);
  EXPECT_DOUBLE_EQ(warm.at(0), 0.1);
  EXPECT_DOUBLE_EQ(warm.at(3), 0.4);
  EXPECT_DOUBLE_EQ(warm.at(10), 0.4);
  const auto step = optim::LearningRate::step_decay(1.0, 10, 0.5);
  EXPECT_DOUBLE_EQ(step.at(9), 1.0);
  EXPECT_DOUBLE_EQ(step.at(10), 0.5);
  EXPECT_DOUBLE_EQ(step.at(25), 0.25);
  EXPECT_THROW(optim::LearningRate(-1.0), Error);
}

}  // namespace
}  // namespace mixprec
