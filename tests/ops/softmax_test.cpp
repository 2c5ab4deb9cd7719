// softmax and log_softmax: hand-computed values, large logits without overflow, every dtype
// against the f64 oracle, f64 gradient checks on every axis, non-contiguous input, AMP (fp32
// compute under O2), and oneDNN against the reference (f32, bf16, f16 via f32; both passes).
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/ops/autocast.h"
#include "mixprec/version.h"
#include "op_test_util.h"
#include "ops/dispatch.h"
#if MIXPREC_WITH_ONEDNN
#include "ops/onednn/context.h"
#include "ops/onednn/softmax.h"
#endif

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
  AutocastState s;
  s.level = AmpLevel::O2;
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

#if MIXPREC_WITH_ONEDNN
TEST(Softmax, OneDnnMatchesReference) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    if (d == DType::bf16 && !ops::onednn::computes_in(d)) continue;
    for (bool log : {false, true}) {
      for (int64_t axis : {1, 2}) {
        const Tensor x = random({4, 10, 6}, 7, d, -5, 5);
        const Tensor w = random(x.shape(), 8, DType::f32);
        const std::string what = std::string(dtype_name(d)) + (log ? " log" : "") + " axis " + std::to_string(axis);
        ops::SoftmaxForward f{.x = x, .y = Tensor::empty(x.shape(), {.dtype = d}), .axis = axis, .log = log};
        EXPECT_EQ(d == DType::f16 ? ops::onednn::softmax_forward_f16_declines(f)
                                  : ops::onednn::softmax_forward_declines(f), "") << what;
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
