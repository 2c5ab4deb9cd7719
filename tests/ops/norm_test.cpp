// batch_norm and layer_norm: hand-computed values and running statistics, eval mode, f64
// gradient checks (training and eval), every dtype against the f64 oracle, bf16 activations with
// f32 parameters (mixed io), AMP decisions, channels-last and non-contiguous inputs, oneDNN
// against the reference (f32, bf16, f16 via f32; forward and backward), and the error messages.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>

#include "mixprec/amp/level.h"
#include "mixprec/cpu_features.h"
#include "mixprec/graph/plan.h"
#include "mixprec/version.h"
#include "kernel_test_util.h"
#include "ops/kernel_choice.h"
#include "op_test_util.h"
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/norm_problem.h"
#include "ops/op_common.h"

namespace mixprec {
namespace {
using testing::all_close;
using testing::gradcheck;
using testing::random;
using V = std::vector<Tensor>;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }

// batch_norm with fresh running statistics (mean 0.1, var 1.3), so fn(inputs) is pure.
Tensor bn(const V& in, bool training) {
  Tensor rm = full({in[0].shape()[1]}, 0.1), rv = full({in[0].shape()[1]}, 1.3);
  return ops::batch_norm(in[0], in[1], in[2], rm, rv, {.training = training});
}

// The f64 oracle of batch norm, computed here with plain loops on an [N, C, S] view.
Tensor bn_oracle(const Tensor& x, const Tensor& gamma, const Tensor& beta, bool training,
                 double rm, double rv, double eps = 1e-5) {
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  const auto xv = x.astype(DType::f64).contiguous().to_vector<double>();
  const auto g = gamma.to_vector<double>(), b = beta.to_vector<double>();
  std::vector<double> y(xv.size());
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = rm, var = rv;
    if (training) {
      mean = var = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) mean += xv[static_cast<size_t>((i * c + ch) * s + k)];
      mean /= static_cast<double>(n * s);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) {
          const double d = xv[static_cast<size_t>((i * c + ch) * s + k)] - mean;
          var += d * d;
        }
      var /= static_cast<double>(n * s);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const size_t j = static_cast<size_t>((i * c + ch) * s + k);
        y[j] = (xv[j] - mean) / std::sqrt(var + eps) * g[static_cast<size_t>(ch)] + b[static_cast<size_t>(ch)];
      }
  }
  return Tensor::from_vector<double>(y, x.shape());
}

// ---------------------------------------------------------------- batch norm

TEST(BatchNorm, HandComputedWithRunningStatUpdate) {
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    // channel 0: {1, 3} (mean 2, var 1); channel 1: {2, 6} (mean 4, var 4).
    const Tensor x = f32({1, 2, 3, 6}, {2, 2});
    Tensor rm = f32({0, 0}, {2}), rv = f32({1, 1}, {2});
    const Tensor y = ops::batch_norm(x, f32({2, 1}, {2}), f32({0.5f, 0}, {2}), rm, rv,
                                     {.training = true, .momentum = 0.9, .eps = 0});
    EXPECT_TRUE(all_close(y, f32({-1.5f, -1, 2.5f, 1}, {2, 2}))) << impl << y;
    // running = 0.9 running + 0.1 batch; the variance is the unbiased one (n / (n - 1) = 2).
    EXPECT_TRUE(all_close(rm, f32({0.2f, 0.4f}, {2}))) << rm;
    EXPECT_TRUE(all_close(rv, f32({0.9f + 0.1f * 2, 0.9f + 0.1f * 8}, {2}))) << rv;
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThemAlone) {
  const Tensor x = random({4, 3, 2, 2}, 1, DType::f32, -2, 2);
  const Tensor gamma = random({3}, 2, DType::f32, 0.5, 1.5), beta = random({3}, 3, DType::f32);
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    Tensor rm = full({3}, 0.1), rv = full({3}, 1.3);
    const Tensor y = ops::batch_norm(x, gamma, beta, rm, rv, {.training = false});
    EXPECT_TRUE(all_close(y.astype(DType::f64), bn_oracle(x, gamma, beta, false, 0.1, 1.3),
                          {1e-5, 1e-6})) << impl;
    EXPECT_TRUE(all_close(rm, full({3}, 0.1)));
    EXPECT_TRUE(all_close(rv, full({3}, 1.3)));
  }
}

TEST(BatchNorm, GradCheckTraining) {
  EXPECT_TRUE(gradcheck([](const V& in) { return bn(in, true); },
                        {random({3, 2, 2, 2}, 4), random({2}, 5, DType::f64, 0.5, 1.5), random({2}, 6)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return bn(in, true); },  // [N, C] (dense layer input)
                        {random({5, 3}, 7), random({3}, 8, DType::f64, 0.5, 1.5), random({3}, 9)}));
}

TEST(BatchNorm, GradCheckEval) {
  EXPECT_TRUE(gradcheck([](const V& in) { return bn(in, false); },
                        {random({3, 2, 2, 2}, 10), random({2}, 11, DType::f64, 0.5, 1.5), random({2}, 12)}));
}

TEST(BatchNorm, ForwardMatchesF64InEveryDtype) {
  const V in{random({4, 3, 3, 3}, 13, DType::f64, -2, 2), random({3}, 14, DType::f64, 0.5, 1.5),
             random({3}, 15)};
  EXPECT_TRUE(testing::matches_f64_in_all_dtypes([](const V& v) { return bn(v, true); }, in));
  EXPECT_TRUE(testing::matches_f64_in_all_dtypes([](const V& v) { return bn(v, false); }, in));
}

TEST(BatchNorm, Bf16ActivationsWithF32ParametersMatchF64) {
  // "BatchNorm in fp32 with activations in bf16": statistics and arithmetic in f32 from the
  // bf16 input; the only bf16 rounding is the output's.
  const Tensor x = random({8, 4, 5, 5}, 16, DType::bf16, -3, 3);
  const Tensor gamma = random({4}, 17, DType::f32, 0.5, 1.5), beta = random({4}, 18, DType::f32);
  for (bool training : {true, false}) {
    for (const char* impl : {"", "ref"}) {
      ops::ForceImpl force(impl);
      Tensor rm = full({4}, 0.1), rv = full({4}, 1.3);
      const Tensor y = ops::batch_norm(x, gamma, beta, rm, rv, {.training = training});
      ASSERT_EQ(y.dtype(), DType::bf16);
      EXPECT_TRUE(all_close(y, bn_oracle(x, gamma.astype(DType::f64), beta.astype(DType::f64),
                                         training, 0.1, 1.3))) << impl << " training " << training;
      ASSERT_EQ(rm.dtype(), DType::f32);
    }
  }
}

TEST(BatchNorm, ChannelsLastInputKeepsItsLayout) {
  const Tensor x_nhwc = random({3, 4, 5, 6}, 19, DType::f32);  // N, H, W, C
  const Tensor x = x_nhwc.permute({0, 3, 1, 2});                // N, C, H, W view, channels-last
  ASSERT_FALSE(x.is_contiguous());
  const Tensor gamma = random({6}, 20, DType::f32, 0.5, 1.5), beta = random({6}, 21, DType::f32);
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    Tensor xa = x.detach().set_requires_grad(true);
    Tensor xb = x.contiguous().detach().set_requires_grad(true);
    Tensor rm = zeros({6}), rv = ones({6});
    const Tensor ya = ops::batch_norm(xa, gamma, beta, rm, rv);
    const Tensor yb = ops::batch_norm(xb, gamma, beta, rm, rv);
    EXPECT_EQ(ya.strides(), x.strides()) << impl;  // channels-last in, channels-last out
    EXPECT_TRUE(all_close(ya, yb)) << impl;
    const Tensor w = random(ya.shape(), 22, DType::f32);
    ops::sum(ops::mul(ya, w)).backward();
    ops::sum(ops::mul(yb, w)).backward();
    EXPECT_TRUE(all_close(xa.grad(), xb.grad(), {1e-4, 1e-5})) << impl;
  }
  // A strided (non-dense) input is packed first.
  const Tensor sliced = random({4, 3, 6, 6}, 23, DType::f64).slice(3, 0, 6, 2);
  EXPECT_TRUE(gradcheck([](const V& in) { return bn({in[0].slice(3, 0, 6, 2), in[1], in[2]}, true); },
                        {random({2, 2, 3, 4}, 24), random({2}, 25, DType::f64, 0.5, 1.5), random({2}, 26)}));
  Tensor rm = zeros({3}), rv = ones({3});
  EXPECT_TRUE(all_close(ops::batch_norm(sliced, ones({3}), zeros({3}), rm, rv),
                        bn_oracle(sliced, ones({3}), zeros({3}), true, 0, 1)));
}

TEST(BatchNorm, AmpDecisionsAndRecordedComputeDtype) {
  const Tensor x = random({4, 3, 2, 2}, 27, DType::f32);
  const Tensor gamma = ones({3}), beta = zeros({3});
  struct Case { AmpLevel level; bool keep; DType out, compute; };
  for (const Case c : {Case{AmpLevel::O2, true, DType::f32, DType::f32},   // x stays f32 at O2
                       Case{AmpLevel::O3, true, DType::bf16, DType::f32},  // mixed io
                       Case{AmpLevel::O3, false, DType::bf16, DType::bf16}}) {
    std::vector<OpRecord> trace;
    OpRecorder rec(&trace);
    AutocastState s = amp::level_state(c.level, DType::bf16, c.keep);
    AutocastScope scope(s);
    Tensor rm = zeros({3}), rv = ones({3});
    const Tensor xin = c.level == AmpLevel::O2 ? x : x.astype(DType::bf16);
    const Tensor y = ops::batch_norm(xin, gamma, beta, rm, rv);
    EXPECT_EQ(y.dtype(), c.out) << amp_level_name(c.level);
    ASSERT_FALSE(trace.empty());
    EXPECT_EQ(trace.back().op, OpId::batch_norm);
    EXPECT_EQ(trace.back().compute_dtype, c.compute) << amp_level_name(c.level) << " keep " << c.keep;
    EXPECT_EQ(rm.dtype(), DType::f32);
  }
}

TEST(BatchNorm, GammaGradientIsF32ForBf16Activations) {
  Tensor x = random({4, 3, 2, 2}, 28, DType::bf16).set_requires_grad(true);
  Tensor gamma = ones({3}).set_requires_grad(true), beta = zeros({3}).set_requires_grad(true);
  Tensor rm = zeros({3}), rv = ones({3});
  ops::sum(ops::batch_norm(x, gamma, beta, rm, rv)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
  EXPECT_EQ(gamma.grad().dtype(), DType::f32);
  EXPECT_TRUE(all_close(beta.grad(), full({3}, 16.0)));  // dbeta = sum of ones over N*H*W
}

TEST(BatchNorm, ClearErrors) {
  const Tensor x = random({4, 3}, 29, DType::f32);
  Tensor rm = zeros({3}), rv = ones({3}), none;
  EXPECT_THROW(ops::batch_norm(x, ones({4}), zeros({3}), rm, rv), Error);
  EXPECT_THROW(ops::batch_norm(x, ones({3}), zeros({3}), none, rv, {.training = false}), Error);
  Tensor bad = zeros({2});
  EXPECT_THROW(ops::batch_norm(x, ones({3}), zeros({3}), bad, rv), Error);
  try {
    ops::batch_norm(random({1, 3}, 30, DType::f32), ones({3}), zeros({3}), rm, rv);
    FAIL() << "expected an error for one value per channel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
  }
}

TEST(BatchNorm, ReferenceIsThreadCountIndependent) {
  // Large enough for the parallel loops to engage; every result bit must match.
  const Tensor x = random({16, 8, 24, 24}, 60, DType::f32, -2, 2);
  const Tensor w = random(x.shape(), 61, DType::f32);
  std::vector<float> out[2];
  const int saved = omp_get_max_threads();
  for (int k = 0; k < 2; ++k) {
    omp_set_num_threads(k == 0 ? 1 : 2);
    ops::ForceImpl force("ref");
    Tensor xg = x.detach().set_requires_grad(true);
    Tensor g = ones({8}).set_requires_grad(true), b = zeros({8}).set_requires_grad(true);
    Tensor rm = zeros({8}), rv = ones({8});
    ops::sum(ops::mul(ops::batch_norm(xg, g, b, rm, rv), w)).backward();
    Tensor lg = ones({8 * 24 * 24}).set_requires_grad(true);
    const Tensor yl = ops::layer_norm(x.reshape({16, 8 * 24 * 24}), lg, Tensor());
    ops::sum(ops::mul(yl, w.reshape({16, 8 * 24 * 24}))).backward();
    out[k] = xg.grad().to_vector<float>();
    for (const Tensor& t : {g.grad(), rm, rv, yl, lg.grad()}) {
      const auto v = t.to_vector<float>();
      out[k].insert(out[k].end(), v.begin(), v.end());
    }
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(out[0], out[1]);
}

// x [64, 8, 28, 28] (NCHW or channels-last) with channel 2 constant 0.7 and channel 5 constant
// 3.1, the others random; the sizes of a real first BatchNorm layer (50176 values a channel).
Tensor with_constant_channels(DType d, bool channels_last) {
  const Shape nhwc{64, 28, 28, 8};
  Tensor x = random(channels_last ? nhwc : Shape{64, 8, 28, 28}, 62, DType::f64, -2, 3);
  if (channels_last) x = x.permute({0, 3, 1, 2});
  for (auto [c, v] : {std::pair{2, 0.7}, std::pair{5, 3.1}}) x.slice(1, c, c + 1).fill_(v);
  return ops::detail::with_strides(x.astype(d), x.strides());
}

TEST(BatchNorm, ConstantChannelGivesBetaAndZeroGammaGradientOnEveryPath) {
  // A constant channel has mean == its value and variance 0, so x - mean is 0 exactly: y is
  // beta (rounded to y's dtype) and dgamma = sum(dy * xhat) is 0, both exactly. PyTorch 1.13's
  // f32 CPU kernel gives |y - beta| up to 4.5e-5 and dgamma 0 here; an f32 running sum of the
  // 50176 values gave 1.1e-4 and -5.1e-4. dbeta stays the sum of dy.
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (bool channels_last : {false, true}) {
      const Tensor x = with_constant_channels(d, channels_last);
      const Tensor dy = ops::detail::with_strides(random(x.shape(), 63, d), x.strides());
      const Tensor gamma = random({8}, 64, acc_dtype(d), 0.5, 1.5), beta = random({8}, 65, acc_dtype(d));
      // Every kernel that accepts the problem (the reference; oneDNN or low_via_f32; ...).
      ops::BatchNormFwdProblem f0{.x = x, .gamma = gamma, .beta = beta,
                                  .mean = Tensor::empty({8}, {.dtype = acc_dtype(d)}),
                                  .var = Tensor::empty({8}, {.dtype = acc_dtype(d)}),
                                  .y = ops::detail::empty_strided(x.shape(), x.strides(), d, x.device())};
      const auto paths = testing::accepting_kernels(f0);
      EXPECT_GE(paths.size(), d == DType::f64 || !MIXPREC_WITH_ONEDNN ? 1u : 2u) << dtype_name(d) << ": a fast path and ref";
      for (const auto& k : paths) {
        const std::string what = std::string(k.name) + " " + std::string(dtype_name(d)) +
                                 (channels_last ? " channels-last" : " nchw");
        ops::BatchNormFwdProblem f = f0;
        f.mean = Tensor::empty({8}, {.dtype = acc_dtype(d)});
        f.var = Tensor::empty({8}, {.dtype = acc_dtype(d)});
        f.y = ops::detail::empty_strided(x.shape(), x.strides(), d, x.device());
        k.run(f);
        ops::BatchNormBwdProblem b{.x = x, .dy = dy, .gamma = gamma, .mean = f.mean, .var = f.var,
                                 .dx = ops::detail::empty_strided(x.shape(), x.strides(), d, x.device()),
                                 .dgamma = Tensor::empty({8}, {.dtype = acc_dtype(d)}),
                                 .dbeta = Tensor::empty({8}, {.dtype = acc_dtype(d)})};
        const auto bk = testing::kernel_named<ops::BatchNormBwdProblem>(k.name);
        ASSERT_EQ(bk.declines(b), "") << what;
        bk.run(b);
        for (int64_t c : {2, 5}) {
          const double value = x.at({0, c, 0, 0});
          EXPECT_EQ(f.mean.at({c}), value) << what << " channel " << c;
          EXPECT_EQ(f.var.at({c}), 0.0) << what << " channel " << c;
          const Tensor yc = f.y.slice(1, c, c + 1).astype(DType::f64);
          const double beta_c = beta.astype(d).astype(DType::f64).at({c});
          EXPECT_TRUE(all_close(yc, full(yc.shape(), beta_c, {.dtype = DType::f64}), {0, 0}))
              << what << " channel " << c;
          EXPECT_EQ(b.dgamma.at({c}), 0.0) << what << " channel " << c;
          const double sum_dy = ops::sum(dy.slice(1, c, c + 1).astype(DType::f64)).item();
          EXPECT_NEAR(b.dbeta.at({c}), sum_dy, 1e-5 * (1 + std::fabs(sum_dy))) << what << " channel " << c;
        }
      }
    }
  }
}

TEST(BatchNorm, StatisticsMatchF64ForLargeMeanSmallSpread) {
  // 1000 + U(-1, 1) (100 in bf16): an f32 sum of squares would cancel catastrophically (E[x^2] - E[x]^2 loses
  // all of var = 1/3 to rounding of 1e6); the shifted f64 sums keep mean and var to f32 rounding.
  // C = 19 and 5x5 images reach every loop tail (blocks of 16 and 4 channels, runs of 8).
  for (DType d : {DType::f32, DType::bf16, DType::f64}) {
    for (bool channels_last : {false, true}) {
      const double mid = d == DType::bf16 ? 100 : 1000;  // bf16 keeps 2 bits below 100's unit
      Tensor x = random(channels_last ? Shape{12, 5, 5, 19} : Shape{12, 19, 5, 5}, 66, DType::f64,
                        mid - 1, mid + 1);
      if (channels_last) x = x.permute({0, 3, 1, 2});
      x = ops::detail::with_strides(x.astype(d), x.strides());
      const Tensor xd = x.astype(DType::f64), mean = Tensor::empty({19}, {.dtype = acc_dtype(d)}),
                   var = Tensor::empty({19}, {.dtype = acc_dtype(d)});
      ops::batch_norm_statistics(x, mean, var);
      const Tensor m64 = ops::mean(xd, {0, 2, 3});
      const Tensor dev = ops::sub(xd, m64.reshape({1, 19, 1, 1}));
      const Tensor v64 = ops::mean(ops::mul(dev, dev), {0, 2, 3});
      const testing::Tolerance tol = d == DType::f64 ? testing::Tolerance{1e-12, 0} : testing::Tolerance{2e-7, 0};
      EXPECT_TRUE(all_close(mean.astype(DType::f64), m64, tol)) << dtype_name(d) << channels_last;
      EXPECT_TRUE(all_close(var.astype(DType::f64), v64, tol)) << dtype_name(d) << channels_last;
    }
  }
}

// The statistics' clones (baseline, AVX2 + F16C, AVX-512 with eight channels a vector) give the
// same bits: each lane is one channel adding its values in one order. Channel counts reach every
// column path (32 and 8 at a time, then 16, 4 and 1), in f32, bf16 and f16, channels-last and
// NCHW, with a large mean (the shifted sums).
TEST(BatchNorm, StatisticsAreTheSameBitsOnEveryInstructionSet) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (int64_t c : {3, 8, 19, 32, 45, 64}) {
      for (bool channels_last : {true, false}) {
        Tensor x = random(channels_last ? Shape{6, 7, 5, c} : Shape{6, c, 7, 5}, 67, DType::f32, 20, 23);
        if (channels_last) x = x.permute({0, 3, 1, 2});
        x = ops::detail::with_strides(x.astype(d), x.strides());
        std::vector<std::vector<float>> means, vars;
        for (int isa : {0, 1, 2}) {
          const Tensor mean = Tensor::empty({c}), var = Tensor::empty({c});
          ops::batch_norm_statistics_on_isa(isa, x, mean, var);
          means.push_back(mean.to_vector<float>());
          vars.push_back(var.to_vector<float>());
        }
        const std::string what = std::string(dtype_name(d)) + " C=" + std::to_string(c) +
                                 (channels_last ? " channels-last" : " NCHW");
        for (int isa : {1, 2}) {
          EXPECT_EQ(means[static_cast<size_t>(isa)], means[0]) << what << " isa " << isa;
          EXPECT_EQ(vars[static_cast<size_t>(isa)], vars[0]) << what << " isa " << isa;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- layer norm

TEST(LayerNorm, HandComputed) {
  // {1, 2, 3, 4}: mean 2.5, biased var 1.25.
  // A constant row normalises to 0 (eps keeps 0 / 0 away), leaving beta.
  const Tensor x = f32({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4});
  const Tensor y = ops::layer_norm(x, f32({1, 1, 2, 2}, {4}), f32({0, 0, 0, 1}, {4}), 1, 1e-5);
  const float s = 1.0f / std::sqrt(1.25f + 1e-5f);
  EXPECT_TRUE(all_close(y, f32({-1.5f * s, -0.5f * s, 2 * 0.5f * s, 2 * 1.5f * s + 1, 0, 0, 0, 1}, {2, 4}))) << y;
}

TEST(LayerNorm, GradCheck) {
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::layer_norm(in[0], in[1], in[2], 2); },
                        {random({3, 2, 4}, 31), random({2, 4}, 32, DType::f64, 0.5, 1.5), random({2, 4}, 33)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::layer_norm(in[0], in[1], in[2]); },
                        {random({2, 3, 5}, 34), random({5}, 35, DType::f64, 0.5, 1.5), random({5}, 36)}));
}

TEST(LayerNorm, ForwardMatchesF64InEveryDtype) {
  EXPECT_TRUE(testing::matches_f64_in_all_dtypes(
      [](const V& in) { return ops::layer_norm(in[0], in[1], in[2], 1); },
      {random({6, 37}, 37, DType::f64, -3, 3), random({37}, 38, DType::f64, 0.5, 1.5), random({37}, 39)}));
}

TEST(LayerNorm, Bf16ActivationsWithF32ParametersMatchF64) {
  const Tensor x = random({5, 64}, 40, DType::bf16, -3, 3);
  const Tensor gamma = random({64}, 41, DType::f32, 0.5, 1.5), beta = random({64}, 42, DType::f32);
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    const Tensor y = ops::layer_norm(x, gamma, beta);
    ASSERT_EQ(y.dtype(), DType::bf16);
    const Tensor expect = ops::layer_norm(x.astype(DType::f64), gamma.astype(DType::f64),
                                          beta.astype(DType::f64));
    EXPECT_TRUE(all_close(y, expect)) << impl;
  }
}

TEST(LayerNorm, NonContiguousInput) {
  const Tensor x = random({6, 4}, 43, DType::f32).transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  const Tensor g = random({6}, 44, DType::f32), b = random({6}, 45, DType::f32);
  EXPECT_TRUE(all_close(ops::layer_norm(x, g, b), ops::layer_norm(x.contiguous(), g, b)));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::layer_norm(in[0].transpose(0, 1), in[1], in[2]); },
                        {random({5, 3}, 46), random({5}, 47), random({5}, 48)}));
  EXPECT_THROW(ops::layer_norm(x, random({4}, 49, DType::f32), b), Error);
  EXPECT_THROW(ops::layer_norm(x, g, b, 3), Error);
}

// ---------------------------------------------------------------- oneDNN against the reference

#if MIXPREC_WITH_ONEDNN
struct NormRun {
  Tensor y, dx, dgamma, dbeta;
};

NormRun run_bn(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, const Tensor& w,
               bool training, const char* impl) {
  ops::ForceImpl force(impl);
  Tensor x = x0.detach().set_requires_grad(true);
  Tensor gamma = gamma0.detach().clone().set_requires_grad(true);
  Tensor beta = beta0.detach().clone().set_requires_grad(true);
  Tensor rm = full({x.shape()[1]}, 0.1), rv = full({x.shape()[1]}, 1.3);
  Tensor y = ops::batch_norm(x, gamma, beta, rm, rv, {.training = training});
  ops::sum(ops::mul(y.astype(DType::f32), w)).backward();
  return {y, x.grad(), gamma.grad(), beta.grad()};
}

TEST(BatchNorm, AFastKernelAcceptsF32Bf16AndF16) {
  // f32 (and bf16 where oneDNN computes in it) in the oneDNN primitive, f16 (and bf16 elsewhere)
  // through low_via_f32: never the reference kernel.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (bool training : {true, false}) {
      const Tensor x = random({2, 3, 4, 4}, 50, d);
      ops::BatchNormFwdProblem f{.x = x, .gamma = ones({3}), .beta = zeros({3}), .mean = zeros({3}),
                              .var = ones({3}), .y = Tensor::empty(x.shape(), {.dtype = d}),
                              .training = training};
      ops::BatchNormBwdProblem b{.x = x, .dy = x, .gamma = ones({3}), .mean = zeros({3}),
                               .var = ones({3}), .dx = Tensor::empty(x.shape(), {.dtype = d}),
                               .dgamma = zeros({3}), .dbeta = zeros({3}), .training = training};
      if (!MIXPREC_WITH_ONEDNN) continue;
      EXPECT_NE(testing::chosen_kernel(f), "ref") << dtype_name(d) << " training " << training;
      EXPECT_NE(testing::chosen_kernel(b), "ref") << dtype_name(d) << " training " << training;
    }
  }
}

TEST(BatchNorm, OneDnnMatchesReference) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (bool training : {true, false}) {
      for (bool channels_last : {false, true}) {
        Tensor x = random({8, 16, 7, 7}, 51, d, -2, 3);
        if (channels_last) x = random({8, 7, 7, 16}, 51, d, -2, 3).permute({0, 3, 1, 2});
        const Tensor gamma = random({16}, 52, DType::f32, 0.5, 1.5), beta = random({16}, 53, DType::f32);
        const Tensor w = random(x.shape(), 54, DType::f32);
        const NormRun a = run_bn(x, gamma, beta, w, training, "");
        const NormRun r = run_bn(x, gamma, beta, w, training, "ref");
        const std::string what = std::string(dtype_name(d)) + (training ? " training" : " eval") +
                                 (channels_last ? " channels-last" : " nchw");
        const testing::Tolerance tol = d == DType::f32 ? testing::Tolerance{1e-4, 1e-5}
                                                       : testing::tolerance_for(d);
        EXPECT_TRUE(all_close(a.y, r.y, tol)) << what;
        EXPECT_TRUE(all_close(a.dx, r.dx, {tol.rel, tol.abs * 10})) << what;
        EXPECT_TRUE(all_close(a.dgamma, r.dgamma, {1e-3, 1e-3})) << what;
        EXPECT_TRUE(all_close(a.dbeta, r.dbeta, {1e-4, 1e-4})) << what;
      }
    }
  }
}

TEST(LayerNorm, OneDnnMatchesReference) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor x = random({4, 6, 48}, 55, d, -2, 3);
    const Tensor gamma = random({48}, 56, DType::f32, 0.5, 1.5), beta = random({48}, 57, DType::f32);
    const Tensor w = random(x.shape(), 58, DType::f32);
    ops::LayerNormFwdProblem f{.x = x.reshape({24, 48}), .gamma = gamma, .beta = beta,
                            .y = Tensor::empty({24, 48}, {.dtype = d}), .mean = zeros({24}),
                            .var = zeros({24})};
    if (MIXPREC_WITH_ONEDNN) {
      EXPECT_NE(testing::chosen_kernel(f), "ref") << dtype_name(d);
    }
    NormRun runs[2];
    for (int k = 0; k < 2; ++k) {
      ops::ForceImpl force(k == 0 ? "" : "ref");
      Tensor xg = x.detach().set_requires_grad(true);
      Tensor gg = gamma.clone().set_requires_grad(true), bg = beta.clone().set_requires_grad(true);
      Tensor y = ops::layer_norm(xg, gg, bg);
      ops::sum(ops::mul(y.astype(DType::f32), w)).backward();
      runs[k] = {y, xg.grad(), gg.grad(), bg.grad()};
    }
    const testing::Tolerance tol = d == DType::f32 ? testing::Tolerance{1e-4, 1e-5}
                                                   : testing::tolerance_for(d);
    EXPECT_TRUE(all_close(runs[0].y, runs[1].y, tol)) << dtype_name(d);
    EXPECT_TRUE(all_close(runs[0].dx, runs[1].dx, {tol.rel, tol.abs * 10})) << dtype_name(d);
    EXPECT_TRUE(all_close(runs[0].dgamma, runs[1].dgamma, {1e-3, 1e-3})) << dtype_name(d);
    EXPECT_TRUE(all_close(runs[0].dbeta, runs[1].dbeta, {1e-4, 1e-4})) << dtype_name(d);
  }
}
#endif

}  // namespace
}  // namespace mixprec

// ---------------------------------------------------------------- cpu::batch_norm16 (tiles16)
namespace mixprec {
namespace {

struct Bn16Case {
  Shape nchw;
  bool channels_last;
};

// x [N, C, H, W] of dtype d, NCHW or channels-last, values in [-2, 3].
Tensor bn16_input(const Bn16Case& k, DType d, uint64_t seed) {
  const Shape& s = k.nchw;
  if (!k.channels_last) return random(s, seed, d, -2, 3);
  return random({s[0], s[2], s[3], s[1]}, seed, d, -2, 3).permute({0, 3, 1, 2});
}

ops::BatchNormFwdProblem bn16_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  bool training) {
  const int64_t c = x.shape()[1];
  return {.x = x, .gamma = gamma, .beta = beta,
          .mean = training ? Tensor::empty({c}) : random({c}, 71, DType::f32, -0.5, 0.5),
          .var = training ? Tensor::empty({c}) : random({c}, 72, DType::f32, 0.5, 2),
          .y = ops::detail::empty_strided(x.shape(), x.strides(), x.dtype(), x.device()),
          .training = training};
}

ops::BatchNormBwdProblem bn16_bwd(const ops::BatchNormFwdProblem& f, const Tensor& dy) {
  const int64_t c = f.x.shape()[1];
  return {.x = f.x, .dy = dy, .gamma = f.gamma, .mean = f.mean, .var = f.var,
          .dx = ops::detail::empty_strided(f.x.shape(), f.x.strides(), f.x.dtype(), f.x.device()),
          .dgamma = Tensor::empty({c}), .dbeta = Tensor::empty({c}), .training = f.training};
}

// Shapes that reach every tile edge: C = 19 (4096 / 19 rows a tile, a ragged last tile), runs of
// 70 x 70 = 4900 values (two tiles a channel run, the second short), [N, C] (BatchNorm1d).
const Bn16Case kBn16Cases[] = {{{6, 19, 9, 9}, false}, {{6, 19, 9, 9}, true}, {{3, 2, 70, 70}, false},
                               {{40, 5, 70, 1}, true}, {{33, 7, 1, 1}, false}};

TEST(BatchNorm16, ForwardBitIdenticalToReferenceBackwardWithinTolerance) {
  // Which dtypes tiles16 takes is the fixed order's rule (measured choice also offers it bf16).
  const ops::KernelChoiceScope fixed(ops::KernelChoice::first);
  // The forward is the reference's formula on the same statistics, so every bit matches; the
  // backward sums in another order (tiles in f32, f64 across tiles), so it matches the f64-exact
  // gradient within the 16-bit tolerance.
  for (DType d : {DType::f16, DType::bf16}) {
    for (const Bn16Case& k : kBn16Cases) {
      for (bool training : {true, false}) {
        const Tensor x = bn16_input(k, d, 81);
        const Tensor gamma = random({k.nchw[1]}, 82, DType::f32, 0.5, 1.5);
        const Tensor beta = random({k.nchw[1]}, 83, DType::f32);
        const Tensor dy = ops::detail::with_strides(bn16_input(k, d, 84), x.strides());
        ops::BatchNormFwdProblem f = bn16_fwd(x, gamma, beta, training), r = bn16_fwd(x, gamma, beta, training);
        const auto tiles = testing::kernel_named<ops::BatchNormFwdProblem>("tiles16");
        const std::string what = std::string(dtype_name(d)) + shape_str(k.nchw) +
                                 (k.channels_last ? " channels-last" : " nchw") + (training ? " training" : " eval");
        if (d == DType::bf16 && cpu_features().avx512f) {
          EXPECT_NE(tiles.declines(f), "") << what;  // oneDNN computes in bf16 there
          continue;
        }
        ASSERT_EQ(tiles.declines(f), "") << what;
        tiles.run(f);
        testing::kernel_named<ops::BatchNormFwdProblem>("ref").run(r);
        EXPECT_EQ(f.y.to_vector<float>(), r.y.to_vector<float>()) << what;
        EXPECT_EQ(f.mean.to_vector<float>(), r.mean.to_vector<float>()) << what;
        ops::BatchNormBwdProblem b = bn16_bwd(f, dy), rb = bn16_bwd(r, dy);
        rb.x = x.astype(DType::f64);  // the f64 reference of the gradients: no rounding but dx's
        rb.dy = dy.astype(DType::f64);
        rb.gamma = gamma.astype(DType::f64);
        rb.mean = f.mean.astype(DType::f64);
        rb.var = f.var.astype(DType::f64);
        rb.dx = ops::detail::empty_strided(x.shape(), rb.x.strides(), DType::f64, x.device());
        rb.dgamma = Tensor::empty({k.nchw[1]}, {.dtype = DType::f64});
        rb.dbeta = Tensor::empty({k.nchw[1]}, {.dtype = DType::f64});
        testing::kernel_named<ops::BatchNormBwdProblem>("tiles16").run(b);
        testing::kernel_named<ops::BatchNormBwdProblem>("ref").run(rb);
        const testing::Tolerance tol = testing::tolerance_for(d);
        EXPECT_TRUE(all_close(b.dx.astype(DType::f64), rb.dx, {tol.rel, tol.abs * 10})) << what;
        EXPECT_TRUE(all_close(b.dgamma.astype(DType::f64), rb.dgamma, {1e-4, 1e-4})) << what;
        EXPECT_TRUE(all_close(b.dbeta.astype(DType::f64), rb.dbeta, {1e-5, 1e-5})) << what;
      }
    }
  }
}

TEST(BatchNorm16, ThreadCountIndependentAndNoWholeTensorWidened) {
  // [32, 64, 28, 28] f16 channels-last: 3.2 MB of data, 6.4 MB as f32. The kernel's extra memory is
  // its per-tile partial sums, never an f32 copy of x, y, dy or dx (low_via_f32 makes three).
  const Bn16Case k{{32, 64, 28, 28}, true};
  const Tensor x = bn16_input(k, DType::f16, 91);
  const Tensor dy = ops::detail::with_strides(bn16_input(k, DType::f16, 92), x.strides());
  const Tensor gamma = random({64}, 93, DType::f32, 0.5, 1.5), beta = random({64}, 94, DType::f32);
  std::vector<float> out[2];
  const int saved = omp_get_max_threads();
  for (int t = 0; t < 2; ++t) {
    omp_set_num_threads(t == 0 ? 1 : 3);
    ops::BatchNormFwdProblem f = bn16_fwd(x, gamma, beta, true);
    ops::BatchNormBwdProblem b = bn16_bwd(f, dy);
    const int64_t added = graph::measure_peak([&] {
      testing::kernel_named<ops::BatchNormFwdProblem>("tiles16").run(f);
      testing::kernel_named<ops::BatchNormBwdProblem>("tiles16").run(b);
    });
    EXPECT_LT(added, x.nbytes() / 4) << "bytes allocated by the kernels, threads " << (t == 0 ? 1 : 3);
    for (const Tensor& r : {f.y, b.dx, b.dgamma, b.dbeta}) {
      const auto v = r.to_vector<float>();
      out[t].insert(out[t].end(), v.begin(), v.end());
    }
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(out[0], out[1]);
}

// Raw bits of t in logical (NCHW) order: NaN payloads and the sign of zero count.
std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data_ptr(), c.nbytes());
  return out;
}
std::vector<uint32_t> bits32(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.contiguous().to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// x as bn16_input, with -0, NaN and a tiny negative value among the first elements of memory (the
// first is channel 0 in either layout; a NaN poisons its channel's batch statistics in training).
Tensor bn_fusion_input(const Bn16Case& k, DType d) {
  Tensor x = bn16_input(k, d, 85).astype(DType::f32);
  float* v = static_cast<float*>(x.data_ptr());
  v[0] = -0.0f;
  v[2] = std::nanf("");
  v[3] = -1e-30f;
  return x.astype(d);
}

TEST(BatchNormFusedRelu, EveryAcceptingKernelGivesBatchNormThenReluBitForBit) {
  // GRAPH_MODE fuses a ReLU into the BatchNorm before it (norm_problem.h): forward y = relu(bn(x))
  // and backward dx = bn_backward(relu_mask(g, y)) must equal the two eager ops bit for bit, in
  // every kernel that accepts the fused problem; the rest must decline it. Eval with mean 0 and
  // beta -0 turns x = -0 into y = -0 (relu: +0) and -1e-30 into a negative that rounds to -0.
  int fused_kernels_run = 0;
  for (DType d : {DType::f16, DType::bf16, DType::f32}) {
    for (const Bn16Case& k : kBn16Cases) {
      for (bool training : {true, false}) {
        const int64_t c = k.nchw[1];
        const Tensor x = bn_fusion_input(k, d);
        const Tensor gamma = random({c}, 86, DType::f32, 0.5, 1.5);
        const Tensor beta = training ? random({c}, 87, DType::f32) : full({c}, -0.0);
        const Tensor g = ops::detail::with_strides(bn16_input(k, d, 88), x.strides());
        ops::BatchNormFwdProblem plain = bn16_fwd(x, gamma, beta, training);
        if (!training) plain.mean = zeros({c});
        ops::BatchNormFwdProblem fused = plain;
        fused.relu = true;
        const std::string what = std::string(dtype_name(d)) + shape_str(k.nchw) +
                                 (k.channels_last ? " channels-last" : " nchw") + (training ? " training" : " eval");
        for (const ops::Impl<ops::BatchNormFwdProblem>& kernel : testing::accepting_kernels(fused)) {
          SCOPED_TRACE(what + " " + std::string(kernel.name));
          ops::BatchNormFwdProblem a = plain, b = fused;
          a.y = ops::detail::empty_strided(x.shape(), x.strides(), d, x.device());
          b.y = ops::detail::empty_strided(x.shape(), x.strides(), d, x.device());
          if (training) {
            a.mean = Tensor::empty({c}), a.var = Tensor::empty({c});
            b.mean = Tensor::empty({c}), b.var = Tensor::empty({c});
          }
          kernel.run(a);
          kernel.run(b);
          const Tensor z = ops::relu(a.y);  // the eager op
          if (d == DType::f32) {
            EXPECT_EQ(bits32(b.y), bits32(z));
          } else {
            EXPECT_EQ(bits16(b.y), bits16(z));
          }
          EXPECT_EQ(bits32(b.mean), bits32(a.mean));

          ops::BatchNormBwdProblem pb = bn16_bwd(a, g), fb = bn16_bwd(a, g);
          pb.dy = ops::detail::relu_backward(g, z);  // the eager op
          fb.relu_y = z;
          const std::vector<ops::Impl<ops::BatchNormBwdProblem>> bwd = testing::accepting_kernels(fb);
          const bool same_kernel = std::any_of(bwd.begin(), bwd.end(), [&](const auto& i) { return i.name == kernel.name; });
          ASSERT_TRUE(same_kernel) << "the backward of a fused forward's kernel must accept the mask too";
          const auto bk = testing::kernel_named<ops::BatchNormBwdProblem>(kernel.name);
          ASSERT_EQ(bk.declines(pb), "");
          bk.run(pb);
          bk.run(fb);
          if (d == DType::f32) {
            EXPECT_EQ(bits32(fb.dx), bits32(pb.dx));
          } else {
            EXPECT_EQ(bits16(fb.dx), bits16(pb.dx));
          }
          EXPECT_EQ(bits32(fb.dgamma), bits32(pb.dgamma));
          EXPECT_EQ(bits32(fb.dbeta), bits32(pb.dbeta));
          ++fused_kernels_run;
        }
      }
    }
  }
  EXPECT_GT(fused_kernels_run, 0);
}

TEST(BatchNormFusedRelu, OneDnnDeclinesTheFusedProblems) {
  const Tensor x = random({2, 3, 4, 4}, 89, DType::f32);
  ops::BatchNormFwdProblem f = bn16_fwd(x, ones({3}), zeros({3}), true);
  f.relu = true;
  ops::BatchNormBwdProblem b = bn16_bwd(f, x);
  b.relu_y = x;
  for (const auto& k : ops::kernels<ops::BatchNormFwdProblem>()) {
    if (k.name != "onednn") continue;
    EXPECT_NE(k.declines(f), "");
  }
  for (const auto& k : ops::kernels<ops::BatchNormBwdProblem>()) {
    if (k.name != "onednn") continue;
    EXPECT_NE(k.declines(b), "");
  }
  EXPECT_EQ(testing::chosen_kernel(f), "ref") << "f32 fused: only the reference takes it";
}

TEST(BatchNorm16, OverflowRoundsToInfinityAsTheEmulationDid) {
  // gamma 1e5 on unit-variance data: |y| passes f16's 65504, and the f16 output is +-inf, exactly
  // where rounding the f32 result once would put it (the f32 emulation's contract).
  const Tensor x = random({4, 3, 8, 8}, 95, DType::f16, -2, 2);
  const Tensor gamma = full({3}, 1e5), beta = zeros({3});
  ops::BatchNormFwdProblem f = bn16_fwd(x, gamma, beta, true), r = bn16_fwd(x, gamma, beta, true);
  testing::kernel_named<ops::BatchNormFwdProblem>("tiles16").run(f);
  testing::kernel_named<ops::BatchNormFwdProblem>("ref").run(r);
  const auto y = f.y.to_vector<float>();
  EXPECT_GT(std::count_if(y.begin(), y.end(), [](float v) { return std::isinf(v); }), 0);
  EXPECT_EQ(y, r.y.to_vector<float>());
}

}  // namespace
}  // namespace mixprec
