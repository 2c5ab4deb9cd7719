// hardswish (MindSpore's HSwish), the op added by following docs/design.md "Adding an op": hand
// values at and around the kinks, forward in f32/f16/bf16 against the f64 oracle, the vector
// kernel against the reference kernel in every dtype, the f64 gradient check, PyTorch's
// gradient at the kinks, a non-contiguous (channels-last) input, and its AMP policy (keep).
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/amp/level.h"
#include "op_test_util.h"
#include "ops/dispatch.h"

namespace mixprec {
namespace {
using testing::random;
using V = std::vector<Tensor>;

TEST(Hardswish, HandComputedValuesAroundTheKinks) {
  const Tensor x = Tensor::from_vector<double>({-4, -3, -1.5, 0, 1.5, 3, 4, NAN}, {8});
  const std::vector<double> y = ops::hardswish(x).to_vector<double>();
  const std::vector<double> want{0, 0, -1.5 * 1.5 / 6, 0, 1.5 * 4.5 / 6, 3, 4};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_DOUBLE_EQ(y[i], want[i]) << "x = " << x.at({int64_t(i)});
  EXPECT_TRUE(std::isnan(y[7]));
}

TEST(Hardswish, ForwardMatchesF64InEveryDtype) {
  const Tensor x = random({513}, 21, DType::f64, -5, 5);
  EXPECT_TRUE(testing::matches_f64_in_all_dtypes([](const V& in) { return ops::hardswish(in[0]); }, {x}));
}

TEST(Hardswish, VectorKernelMatchesTheReferenceKernelInEveryDtype) {
  // Same formula, same rounding: the engine (chunks, vector converters) and the plain loop agree
  // bit for bit, forward and backward.
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor x0 = random({7, 300}, 22, d, -5, 5), w = random({7, 300}, 23, d);
    std::vector<double> y[2], dx[2];
    for (int k = 0; k < 2; ++k) {
      ops::ForceImpl force(k == 0 ? "" : "ref");
      const Tensor x = x0.detach().set_requires_grad(true);
      const Tensor out = ops::hardswish(x);
      y[k] = out.to_vector<double>();
      dx[k] = grad(ops::sum(ops::mul(out, w)), {x})[0].to_vector<double>();
    }
    EXPECT_EQ(y[0], y[1]) << dtype_name(d);
    EXPECT_EQ(dx[0], dx[1]) << dtype_name(d);
  }
}

TEST(Hardswish, GradCheckInF64) {
  auto v = random({4, 9}, 24, DType::f64, -5, 5).to_vector<double>();
  for (double& e : v)  // keep the kinks at -3 and 3 away from the finite-difference steps
    if (std::fabs(std::fabs(e) - 3) < 1e-3) e += 0.01;
  EXPECT_TRUE(testing::gradcheck([](const V& in) { return ops::hardswish(in[0]); },
                                 {Tensor::from_vector<double>(v, {4, 9})}));
}

TEST(Hardswish, GradientAtTheKinksIsPyTorchs) {
  // PyTorch's hardswish_backward: 0 below -3, x / 3 + 1/2 on [-3, 3] (so -1/2 at -3, 3/2 at 3),
  // 1 above.
  const Tensor x = Tensor::from_vector<double>({-3.5, -3, 0, 3, 3.5}, {5}).set_requires_grad(true);
  const std::vector<double> g = grad(ops::sum(ops::hardswish(x)), {x})[0].to_vector<double>();
  EXPECT_EQ(g, (std::vector<double>{0, -0.5, 0.5, 1.5, 1}));
}

TEST(Hardswish, ChannelsLastInputKeepsItsLayout) {
  const Tensor x = random({2, 5, 4, 3}, 25, DType::f32, -5, 5).permute({0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  const Tensor y = ops::hardswish(x);
  EXPECT_EQ(y.strides(), x.strides());
  EXPECT_TRUE(testing::all_close(y, ops::hardswish(x.contiguous())));
  EXPECT_TRUE(testing::gradcheck([](const V& in) { return ops::hardswish(in[0].permute({0, 3, 1, 2})); },
                                 {random({2, 3, 2, 2}, 26, DType::f64, -5, 5)}));
}

TEST(Hardswish, AmpPolicyKeepRunsInTheInputDtype) {
  EXPECT_EQ(find_op("hardswish"), OpId::hardswish);
  EXPECT_EQ(op_info(OpId::hardswish).policy, AmpPolicy::keep);
  for (AmpLevel level : {AmpLevel::O1, AmpLevel::O2}) {
    std::vector<OpRecord> trace;
    OpRecorder rec(&trace);
    AutocastState s = amp::level_state(level);
    AutocastScope scope(s);
    // O1 leaves it in f32 (not on the white list); O2 casts it to the low dtype, like every
    // op that is not on the black list.
    const Tensor y = ops::hardswish(random({4, 4}, 27, DType::f32));
    const DType want = level == AmpLevel::O1 ? DType::f32 : DType::bf16;
    EXPECT_EQ(y.dtype(), want) << amp_level_name(level);
    ASSERT_FALSE(trace.empty());
    EXPECT_EQ(trace.back().op, OpId::hardswish);
    EXPECT_EQ(trace.back().compute_dtype, want) << amp_level_name(level);
  }
}

}  // namespace
}  // namespace mixprec
