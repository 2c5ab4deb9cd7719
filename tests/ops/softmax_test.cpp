// softmax and log_softmax: hand-computed values, large logits without overflow, every dtype
// against the f64 oracle, f64 gradient checks on every axis, non-contiguous input, AMP (fp32
// compute under O2), and oneDNN against the reference (f32, bf16, f16 via f32; both passes).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixprec/amp/level.h"
#include "mixprec/version.h"
#include "kernel_test_util.h"
#include "op_test_util.h"
#include "ops/dispatch.h"
#include "ops/softmax_problem.h"

namespace mixprec {
namespace {
using testing::all_close;
using testing::gradcheck;
using testing::random;
using V = std::vector<Tensor>;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }

TEST(Softmax, HandComputed) {
  // exp(x) = {1, 2, 3}: softmax = {1, 2, 3} / 6.
  const Tensor x = f32({0, std::log(2.0f), std::log(3.0f)}, {1, 3});
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    EXPECT_TRUE(all_close(ops::softmax(x), f32({1 / 6.0f, 2 / 6.0f, 3 / 6.0f}, {1, 3}))) << impl;
    EXPECT_TRUE(all_close(ops::log_softmax(x),
                          f32({std::log(1 / 6.0f), std::log(2 / 6.0f), std::log(3 / 6.0f)}, {1, 3})))
        << impl;
    // Along axis 0 of a column: the same numbers.
    EXPECT_TRUE(all_close(ops::softmax(x.reshape({3, 1}), 0), f32({1 / 6.0f, 2 / 6.0f, 3 / 6.0f}, {3, 1})));
  }
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const char* impl : {"", "ref"}) {
      ops::ForceImpl force(impl);
      const Tensor x = f32({1e4f, 1e4f, -1e4f, 0}, {1, 4}).astype(d);
      const Tensor y = ops::softmax(x).astype(DType::f32);
      EXPECT_TRUE(all_close(y, f32({0.5f, 0.5f, 0, 0}, {1, 4}), {1e-6, 1e-6})) << dtype_name(d) << impl;
      const Tensor ly = ops::log_softmax(x).astype(DType::f32);
      EXPECT_NEAR(ly.at({0, 0}), -std::log(2.0), 1e-2) << dtype_name(d) << impl;
      // Finite, not -inf: -1e4 - log 2, within the output dtype's rounding.
      EXPECT_NEAR(ly.at({0, 3}), -1e4 - std::log(2.0), 1e4 * testing::tolerance_for(d).rel)
          << dtype_name(d) << impl;
    }
  }
}

TEST(Softmax, ForwardMatchesF64InEveryDtype) {
  const Tensor x = random({3, 7, 5}, 1, DType::f64, -4, 4);
  for (int64_t axis : {0, 1, -1}) {
    EXPECT_TRUE(testing::matches_f64_in_all_dtypes([=](const V& in) { return ops::softmax(in[0], axis); }, {x}))
        << axis;
    // tol x3: oneDNN's f32 log-softmax has absolute errors up to ~1.5e-6 (its vector log); the
    // reference is within 1 ulp.
    EXPECT_TRUE(testing::matches_f64_in_all_dtypes([=](const V& in) { return ops::log_softmax(in[0], axis); }, {x}, 3))
        << axis;
    ops::ForceImpl ref("ref");
    EXPECT_TRUE(testing::matches_f64_in_all_dtypes([=](const V& in) { return ops::log_softmax(in[0], axis); }, {x}))
        << axis;
  }
}

TEST(Softmax, GradCheck) {
  for (int64_t axis : {0, 1, 2}) {
    EXPECT_TRUE(gradcheck([=](const V& in) { return ops::softmax(in[0], axis); }, {random({2, 3, 4}, 2, DType::f64, -2, 2)}))
        << axis;
    EXPECT_TRUE(gradcheck([=](const V& in) { return ops::log_softmax(in[0], axis); }, {random({2, 3, 4}, 3, DType::f64, -2, 2)}))
        << axis;
  }
}

TEST(Softmax, NonContiguousInput) {
  const Tensor x = random({5, 4}, 4, DType::f32, -3, 3).transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(all_close(ops::softmax(x), ops::softmax(x.contiguous())));
  EXPECT_TRUE(all_close(ops::log_softmax(x, 0), ops::log_softmax(x.contiguous(), 0)));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::log_softmax(in[0].transpose(0, 1)); }, {random({3, 4}, 5)}));
  EXPECT_THROW(ops::softmax(x, 2), Error);
}

TEST(Softmax, ComputesInF32UnderO2) {
  std::vector<OpRecord> trace;
  OpRecorder rec(&trace);
  AutocastState s = amp::level_state(AmpLevel::O2);
  AutocastScope scope(s);
  const Tensor y = ops::softmax(random({2, 8}, 6, DType::bf16));
  EXPECT_EQ(y.dtype(), DType::bf16);  // black-list op: f32 inside, cast back to low after
  bool seen = false;
  for (const OpRecord& r : trace)
    if (r.op == OpId::softmax) {
      seen = true;
      EXPECT_EQ(r.compute_dtype, DType::f32);
    }
  EXPECT_TRUE(seen);
}

// Rows 0, 2, 3 have no finite maximum (all -inf; a NaN; a +inf); row 1 is ordinary, with one
// -inf entry (y 0, log -inf there; finite gradients).
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
const std::vector<double> kDegenerateRows{-kInf, -kInf, -kInf, -kInf, 1, 2, 3, -kInf,
                                          1,     kNan,  2,     3,     kInf, 1, 2, 3};

TEST(Softmax, RowsWithoutFiniteMaxAreNanForwardAndBackwardOnEveryPath) {
  // exp(x - max) with max = -inf (or +inf) is exp(NaN): such a row has no distribution, and
  // PyTorch 1.13 gives NaN for its whole y and dx (softmax and log_softmax, f32, f64, bf16).
  // Before: the oneDNN and f16 paths gave dx = -inf on an all -inf row of log_softmax on
  // AVX-512 CPUs (its jit backward's exp(NaN) is 3.4e38), and y = {0, NaN, 0, 0} for a NaN.
  const Tensor x64 = Tensor::from_vector<double>(kDegenerateRows, {4, 4});
  const Tensor dy64 = Tensor::from_vector<double>({1, -2, 0.5, 3, 1, -2, 0.5, 3, 1, -2, 0.5, 3, 1, -2, 0.5, 3}, {4, 4});
  // Row 1 by the f64 formulas: y = x - lse (log) or exp(x - lse); dx = dy - exp(y) * sum(dy)
  // (log) or y * (dy - sum(dy * y)).
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const std::vector<double> g{1, -2, 0.5, 3};
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const Tensor x = x64.astype(d), dy = dy64.astype(d);
    for (bool log : {false, true}) {
      std::vector<double> y1(4), dx1(4);
      double s = 0;
      for (int j = 0; j < 4; ++j) {
        const double lp = j == 3 ? -kInf : (j + 1) - lse;
        y1[j] = log ? lp : std::exp(lp);
        s += log ? g[j] : g[j] * y1[j];
      }
      for (int j = 0; j < 4; ++j) dx1[j] = log ? g[j] - std::exp(y1[j]) * s : y1[j] * (g[j] - s);
      const ops::SoftmaxFwdProblem f0{.x = x, .y = Tensor::empty(x.shape(), {.dtype = d}), .axis = 1, .log = log};
      const auto paths = testing::accepting_kernels(f0);  // ref, oneDNN or low_via_f32, ...
      EXPECT_GE(paths.size(), d == DType::f64 || !MIXPREC_WITH_ONEDNN ? 1u : 2u) << dtype_name(d) << ": a fast path and ref";
      for (const auto& k : paths) {
        const std::string what = std::string(k.name) + " " + std::string(dtype_name(d)) + (log ? " log" : "");
        ops::SoftmaxFwdProblem f{.x = x, .y = Tensor::empty(x.shape(), {.dtype = d}), .axis = 1, .log = log};
        k.run(f);
        ops::SoftmaxBwdProblem b{.y = f.y, .dy = dy, .dx = Tensor::empty(x.shape(), {.dtype = d}), .axis = 1, .log = log};
        const auto bk = testing::kernel_named<ops::SoftmaxBwdProblem>(k.name);
        ASSERT_EQ(bk.declines(b), "") << what;
        bk.run(b);
        for (int64_t r : {0, 2, 3})
          for (int64_t j = 0; j < 4; ++j) {
            EXPECT_TRUE(std::isnan(f.y.at({r, j}))) << what << " y[" << r << ", " << j << "] = " << f.y.at({r, j});
            EXPECT_TRUE(std::isnan(b.dx.at({r, j}))) << what << " dx[" << r << ", " << j << "] = " << b.dx.at({r, j});
          }
        const double tol = 4 * testing::tolerance_for(d).rel;
        for (int64_t j = 0; j < 4; ++j) {
          const size_t u = static_cast<size_t>(j);
          if (std::isinf(y1[u])) EXPECT_EQ(f.y.at({1, j}), y1[u]) << what;
          else EXPECT_NEAR(f.y.at({1, j}), y1[u], tol * (1 + std::fabs(y1[u]))) << what << " y[1, " << j << "]";
          EXPECT_NEAR(b.dx.at({1, j}), dx1[u], tol * (1 + std::fabs(dx1[u]))) << what << " dx[1, " << j << "]";
        }
      }
    }
  }
}

TEST(Softmax, NanRowRepairsForKernelsThatLeaveRowsPartlyFinite) {
  // What oneDNN leaves (y {0, NaN, 0, 0} for x {1, NaN, 2, 3}; on AVX-512 its log-softmax
  // backward gives dx = dy - 3.4e38 * sum(dy), here -inf, or dy when sum(dy) = 0) becomes NaN
  // throughout the row; other rows and columns are untouched.
  for (DType d : {DType::f32, DType::bf16}) {
    Tensor y = Tensor::from_vector<double>({0, kNan, 0, 0, 0.25, 0.25, 0.5, 0}, {2, 4}).astype(d);
    ops::fill_nan_rows(y, 1);
    for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(y.at({0, j}))) << dtype_name(d) << " " << j;
    EXPECT_EQ(y.to_vector<double>()[6], 0.5);
    Tensor yc = Tensor::from_vector<double>({kNan, 0.5, kNan, 0.5}, {2, 2}).astype(d);
    ops::fill_nan_rows(yc, 0);  // along axis 0: column 0 holds the NaNs
    EXPECT_TRUE(std::isnan(yc.at({0, 0})) && std::isnan(yc.at({1, 0})) && yc.at({0, 1}) == 0.5 && yc.at({1, 1}) == 0.5)
        << dtype_name(d) << yc;
    const Tensor dx = Tensor::from_vector<double>({-kInf, -kInf, -kInf, -kInf, 1, -2, 0.5, 3}, {2, 4}).astype(d);
    ops::nan_where_nan(y, dx);
    for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(dx.at({0, j}))) << dtype_name(d) << " " << j;
    EXPECT_EQ(dx.to_vector<double>()[5], -2);
  }
}

TEST(Softmax, AllMinusInfRowThroughAutogradIsNanInEveryDtype) {
  // The same through the op (default dispatch, autograd) as a user reaches it.
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (bool log : {false, true}) {
      Tensor x = Tensor::from_vector<double>(kDegenerateRows, {4, 4}).astype(d).set_requires_grad(true);
      const Tensor y = log ? ops::log_softmax(x) : ops::softmax(x);
      y.backward(ones({4, 4}, {.dtype = d}));
      const std::string what = std::string(dtype_name(d)) + (log ? " log" : "");
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_TRUE(std::isnan(y.at({0, j}))) << what;
        EXPECT_TRUE(std::isnan(x.grad().at({0, j}))) << what;
        EXPECT_FALSE(std::isnan(x.grad().at({1, j}))) << what;
      }
    }
  }
}

#if MIXPREC_WITH_ONEDNN
TEST(Softmax, OneDnnMatchesReference) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (bool log : {false, true}) {
      for (int64_t axis : {1, 2}) {
        const Tensor x = random({4, 10, 6}, 7, d, -5, 5);
        const Tensor w = random(x.shape(), 8, DType::f32);
        const std::string what = std::string(dtype_name(d)) + (log ? " log" : "") + " axis " + std::to_string(axis);
        ops::SoftmaxFwdProblem f{.x = x, .y = Tensor::empty(x.shape(), {.dtype = d}), .axis = axis, .log = log};
        EXPECT_NE(testing::chosen_kernel(f), "ref") << what;
        Tensor y[2], dx[2];
        for (int k = 0; k < 2; ++k) {
          ops::ForceImpl force(k == 0 ? "" : "ref");
          Tensor xg = x.detach().set_requires_grad(true);
          y[k] = log ? ops::log_softmax(xg, axis) : ops::softmax(xg, axis);
          ops::sum(ops::mul(y[k].astype(DType::f32), w)).backward();
          dx[k] = xg.grad();
        }
        // oneDNN's f32 log-softmax carries an absolute error of a few 1e-6 (its vector log), so
        // log-probs near 0 need an absolute tolerance.
        const testing::Tolerance tol = d == DType::f32 ? testing::Tolerance{1e-5, log ? 1e-5 : 1e-6}
                                                       : testing::tolerance_for(d);
        EXPECT_TRUE(all_close(y[0], y[1], tol)) << what;
        EXPECT_TRUE(all_close(dx[0], dx[1], {tol.rel, tol.abs * 10})) << what;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace mixprec
