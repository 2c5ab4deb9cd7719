// Each optimizer's one update route (step() through fused_step and the ops-kit kernels) against
// the f32 arithmetic the optimizers have always done, written out here element by element: the
// learning rate, weight decay, bias corrections and gradient scale rounded from f64 to f32 once,
// the gradient widened and multiplied by that scale, then the formula in a fixed order. Bit for
// bit over several steps of a schedule, with 16-bit gradients and working copies; fused_step with
// the flag set writes nothing; an undefined gradient leaves its parameter alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mixprec/mixprec.h"
#include "mixprec/ops/amp_device.h"
#include "op_test_util.h"
#include "ops/cast_cache.h"

namespace mixprec {
namespace {

using testing::random;

enum class Kind { sgd, momentum, nesterov, adam, adamw };

std::unique_ptr<optim::Optimizer> make(Kind k, std::vector<Tensor> params,
                                       const optim::LearningRate& lr) {
  switch (k) {
    case Kind::sgd: return std::make_unique<optim::SGD>(params, lr, 1e-2);
    case Kind::momentum: return std::make_unique<optim::Momentum>(params, lr, 0.9, 1e-3);
    case Kind::nesterov: return std::make_unique<optim::Momentum>(params, lr, 0.9, 1e-3, true);
    case Kind::adam: return std::make_unique<optim::Adam>(params, lr, 0.9, 0.99, 1e-6, 1e-2);
    case Kind::adamw: return std::make_unique<optim::AdamW>(params, lr, 0.8, 0.995, 1e-7, 0.1);
  }
  return nullptr;
}

// Update `t` (0-based) of the optimizer above on host vectors, in f32 as written.
void expected_step(Kind k, double lr_d, int64_t t, std::vector<float>& p, std::vector<float>& s0,
                   std::vector<float>& s1, const std::vector<float>& g_in, double grad_scale) {
  const float lr = static_cast<float>(lr_d), gs = static_cast<float>(grad_scale);
  for (size_t i = 0; i < p.size(); ++i) {
    float g = g_in[i] * gs;
    if (k == Kind::sgd) {
      const float wd = static_cast<float>(1e-2);
      const float step = lr * (g + wd * p[i]);
      p[i] = p[i] - step;
    } else if (k == Kind::momentum || k == Kind::nesterov) {
      const float mu = 0.9f, wd = static_cast<float>(1e-3);
      g = g + wd * p[i];
      s0[i] = mu * s0[i] + g;
      const float dir = k == Kind::nesterov ? g + mu * s0[i] : s0[i];
      p[i] = p[i] - lr * dir;
    } else {
      const bool w = k == Kind::adamw;
      const double b1d = w ? 0.8 : 0.9, b2d = w ? 0.995 : 0.99;
      const float b1 = static_cast<float>(b1d), b2 = static_cast<float>(b2d);
      const float eps = static_cast<float>(w ? 1e-7 : 1e-6),
                  wd = static_cast<float>(w ? 0.1 : 1e-2);
      const double n = static_cast<double>(t + 1);
      const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1d, n)));
      const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2d, n)));
      if (w)
        p[i] = p[i] - (lr * wd) * p[i];
      else
        g = g + wd * p[i];
      s0[i] = b1 * s0[i] + (1.0f - b1) * g;
      s1[i] = b2 * s1[i] + ((1.0f - b2) * g) * g;
      const float num = lr * (s0[i] * c1);
      p[i] = p[i] - num / (std::sqrt(s1[i] * c2) + eps);
    }
  }
}

TEST(UpdateRoute, StepIsTheF32FormulaBitForBit) {
  const auto lr = optim::LearningRate::cosine(0.05, 6, 0.001).with_warmup(2);
  for (Kind k : {Kind::sgd, Kind::momentum, Kind::nesterov, Kind::adam, Kind::adamw})
    for (DType gd : {DType::f32, DType::bf16, DType::f16}) {
      const std::string what =
          std::to_string(static_cast<int>(k)) + " " + std::string(dtype_name(gd));
      const Tensor w = random({5000}, 7, DType::f32);
      const Tensor other = random({3}, 8, DType::f32), other0 = other.clone();
      auto opt = make(k, {w, other}, lr);
      CastCache cache;
      opt->attach_working_copies(&cache, DType::f16);
      std::vector<float> p = w.to_vector<float>(), s0(p.size(), 0.0f), s1(p.size(), 0.0f);
      for (int64_t t = 0; t < 8; ++t) {
        const Tensor g = random({5000}, 100 + static_cast<uint64_t>(t), gd, -2, 2);
        const double scale = t % 2 ? 1.0 / 512 : 1.0;
        const uint64_t version = w.storage()->version();
        opt->step({g, Tensor()}, scale);  // the second parameter has no gradient
        expected_step(k, lr.at(t), t, p, s0, s1, g.to_vector<float>(), scale);
        const std::vector<float> got = w.to_vector<float>();
        ASSERT_EQ(std::memcmp(got.data(), p.data(), p.size() * sizeof(float)), 0)
            << what << ", update " << t;
        EXPECT_GT(w.storage()->version(), version) << what;
        const Tensor low = cache.lookup(w, DType::f16);
        ASSERT_TRUE(low.defined()) << what << ": the refreshed copy is cached again";
        EXPECT_EQ(low.to_vector<float>(), w.astype(DType::f16).to_vector<float>()) << what;
      }
      EXPECT_EQ(other.to_vector<float>(), other0.to_vector<float>()) << what << ": left alone";
      EXPECT_EQ(opt->global_step(), 8);
      // fused_step with the flag set: nothing moves, on the CPU as on a GPU.
      const std::vector<float> before = w.to_vector<float>();
      const Tensor g = random({5000}, 99, gd);
      opt->fused_step({g, Tensor()}, full({1}, 1.0), Tensor(), opt->step_scalars_on(Device::cpu()));
      EXPECT_EQ(w.to_vector<float>(), before) << what << ": skipped";
      opt->fused_step({g, Tensor()}, full({1}, 0.0), Tensor(), opt->step_scalars_on(Device::cpu()));
      EXPECT_NE(w.to_vector<float>(), before) << what << ": applied";
    }
}

TEST(UpdateRoute, GradientChecksNameTheOptimizer) {
  const Tensor w = random({4}, 1, DType::f32);
  optim::Adam adam({w});
  EXPECT_TRUE(testing::throws_error_with([&] { adam.step({random({5}, 2, DType::f32)}); },
                                         "Adam: gradient 0 has shape [5], expected [4]"));
  EXPECT_TRUE(testing::throws_error_with([&] { adam.step({random({4}, 2, DType::f64)}); },
                                         "Adam: gradient 0 must be f32, bf16 or f16, got f64"));
  EXPECT_EQ(adam.global_step(), 0);
}

}  // namespace
}  // namespace mixprec
