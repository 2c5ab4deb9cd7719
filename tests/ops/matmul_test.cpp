// matmul: hand-computed products, every dtype against the f64 oracle (2-D, batched, broadcast
// batch dims, numpy's 1-D promotion), f64 gradient checks, transposed and strided operands,
// oneDNN against the reference in f32 and bf16, dtype promotion and shape errors.
#include <gtest/gtest.h>

#include "gemm_test_util.h"
#include "mixprec/version.h"
#if MIXPREC_WITH_ONEDNN
#include "ops/onednn/context.h"
#endif

namespace mixprec {
namespace {
using testing::gemm_close;
using testing::gemm_matches_f64;
using testing::gradcheck;
using testing::random;
using V = std::vector<Tensor>;

Tensor mm(const V& in) { return ops::matmul(in[0], in[1]); }

struct Case {
  Shape a, b, out;
};

// numpy.matmul's shapes: batched, broadcast on either side, 1-D on either side.
std::vector<Case> shape_cases() {
  return {{{7, 13}, {13, 5}, {7, 5}},
          {{3, 7, 13}, {3, 13, 5}, {3, 7, 5}},
          {{2, 1, 4, 6}, {3, 6, 5}, {2, 3, 4, 5}},
          {{4, 6}, {2, 6, 3}, {2, 4, 3}},
          {{2, 3, 4, 6}, {6, 3}, {2, 3, 4, 3}},
          {{6}, {6, 4}, {4}},
          {{3, 6}, {6}, {3}},
          {{6}, {6}, {}},
          {{2, 3, 6}, {6}, {2, 3}},
          {{6}, {2, 6, 4}, {2, 4}}};
}

TEST(Matmul, HandComputed) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}, d);
    const Tensor b = Tensor::from_vector<float>({5, 6, 7, 8}, {2, 2}, d);
    const Tensor c = ops::matmul(a, b);
    EXPECT_EQ(c.dtype(), d);
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{19, 22, 43, 50})) << dtype_name(d);
    EXPECT_EQ(ops::matmul(a.transpose(0, 1), b).to_vector<float>(), (std::vector<float>{26, 30, 38, 44}));
    const Tensor v = Tensor::from_vector<float>({1, -1}, {2}, d);
    EXPECT_EQ(ops::matmul(a, v).to_vector<float>(), (std::vector<float>{-1, -1}));
    EXPECT_EQ(ops::matmul(v, b).to_vector<float>(), (std::vector<float>{-2, -2}));
    EXPECT_EQ(ops::matmul(v, v).item(), 2.0);
  }
}

TEST(Matmul, OutputShapesFollowNumpy) {
  for (const Case& c : shape_cases())
    EXPECT_EQ(ops::matmul(random(c.a, 1, DType::f32), random(c.b, 2, DType::f32)).shape(), c.out)
        << shape_str(c.a) << " x " << shape_str(c.b);
}

TEST(Matmul, ForwardMatchesF64InEveryDtype) {
  uint64_t seed = 10;
  for (const Case& c : shape_cases()) {
    const int64_t K = c.a.back();
    EXPECT_TRUE(gemm_matches_f64(mm, {random(c.a, seed), random(c.b, seed + 1)}, K))
        << shape_str(c.a) << " x " << shape_str(c.b);
    seed += 2;
  }
  // The mlp zoo layer's GEMM, with fewer rows (the f64 oracle is a plain loop).
  EXPECT_TRUE(gemm_matches_f64(mm, {random({48, 784}, 3), random({784, 2048}, 4)}, 784));
}

TEST(Matmul, GradCheck) {
  for (const Case& c : shape_cases()) {
    // Small dims keep the finite differences cheap; the shapes' structure is what matters.
    Shape a = c.a, b = c.b;
    for (int64_t& v : a) v = std::min<int64_t>(v, 3);
    for (int64_t& v : b) v = std::min<int64_t>(v, 3);
    EXPECT_TRUE(gradcheck(mm, {random(a, 20), random(b, 21)})) << shape_str(a) << " x " << shape_str(b);
  }
}

TEST(Matmul, TransposedAndStridedOperands) {
  const Tensor a = random({5, 9}, 30, DType::f32);
  const Tensor b = random({9, 4}, 31, DType::f32);
  const Tensor expect = ops::matmul(a, b);
  const Tensor at = a.transpose(0, 1).contiguous().transpose(0, 1);  // column-major a
  const Tensor bt = b.transpose(0, 1).contiguous().transpose(0, 1);
  ASSERT_FALSE(at.is_contiguous());
  EXPECT_TRUE(testing::all_close(ops::matmul(at, bt), expect));
  // Every other column of a wider matrix: neither dim has unit stride.
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor wide = random({9, 8}, 32, d);
    const Tensor cols = wide.slice(1, 0, 8, 2);
    const Tensor ad = a.astype(d), adt = at.astype(d).transpose(0, 1).contiguous().transpose(0, 1);
    EXPECT_TRUE(testing::all_close(ops::matmul(ad, cols), ops::matmul(ad, cols.contiguous()))) << dtype_name(d);
    EXPECT_TRUE(testing::all_close(ops::matmul(adt, cols), ops::matmul(ad, cols.contiguous()))) << dtype_name(d);
  }
  // Batched operands with permuted batch/matrix dims.
  const Tensor p = random({4, 3, 5}, 33, DType::bf16).permute({1, 2, 0});  // [3, 5, 4]
  const Tensor q = random({3, 4, 6}, 34, DType::bf16);
  EXPECT_TRUE(testing::all_close(ops::matmul(p, q), ops::matmul(p.contiguous(), q)));
  // Gradients through transposed views.
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::matmul(in[0].transpose(0, 1), in[1].transpose(-2, -1)); },
                        {random({4, 3}, 35), random({2, 5, 4}, 36)}));
}

TEST(Matmul, OneDnnMatchesReference) {
#if MIXPREC_WITH_ONEDNN
  for (DType d : {DType::f32, DType::bf16}) {
    if (!ops::onednn::computes_in(d)) continue;
    for (const Case& c : shape_cases()) {
      Tensor a = random(c.a, 40, d).set_requires_grad(true);
      Tensor b = random(c.b, 41, d).set_requires_grad(true);
      const Tensor w = random(c.out, 42, d);
      auto [fast, ref] = testing::fast_and_ref([&] {
        a.set_grad({});
        b.set_grad({});
        const Tensor y = ops::matmul(a, b);
        ops::sum(ops::mul(y, w)).backward();
        return V{y.detach(), a.grad(), b.grad()};
      });
      const int64_t K = c.a.back();
      EXPECT_TRUE(gemm_close(fast[0], ref[0], K, d)) << dtype_name(d) << " " << shape_str(c.a) << " x " << shape_str(c.b);
      // Backward GEMMs sum over at most every output element.
      const int64_t n = shape_numel(c.out);
      EXPECT_TRUE(gemm_close(fast[1], ref[1], n, d)) << "grad a " << shape_str(c.a);
      EXPECT_TRUE(gemm_close(fast[2], ref[2], n, d)) << "grad b " << shape_str(c.b);
    }
  }
  const Tensor a = random({256, 784}, 43, DType::bf16), b = random({784, 512}, 44, DType::bf16);
  auto [fast, ref] = testing::fast_and_ref([&] { return V{ops::matmul(a, b)}; });
  EXPECT_TRUE(gemm_close(fast[0], ref[0], 784, DType::bf16));
#else
  GTEST_SKIP() << "built without oneDNN";
#endif
}

TEST(Matmul, BroadcastOperandGradientIsSummedOverTheBatch) {
  // b [K, N] shared by a batch of a: db = sum_i a_i^T g_i, accumulated before any rounding.
  Tensor a = random({4, 3, 5}, 50, DType::bf16).set_requires_grad(true);
  Tensor b = random({5, 2}, 51, DType::bf16).set_requires_grad(true);
  ops::sum(ops::matmul(a, b)).backward();
  EXPECT_EQ(b.grad().dtype(), DType::bf16);
  const Tensor a64 = a.detach().astype(DType::f64);
  const Tensor expect = ops::sum(ops::matmul(a64.transpose(-2, -1), ones({4, 3, 2}, {.dtype = DType::f64})), {0});
  EXPECT_TRUE(testing::all_close(b.grad(), expect));
  // a broadcast against b's batch.
  Tensor a2 = random({3, 5}, 52, DType::f32).set_requires_grad(true);
  const Tensor b2 = random({6, 5, 2}, 53, DType::f32);
  ops::sum(ops::matmul(a2, b2)).backward();
  const Tensor expect2 = ops::sum(ops::matmul(ones({6, 3, 2}, {.dtype = DType::f64}), b2.astype(DType::f64).transpose(-2, -1)), {0});
  EXPECT_TRUE(testing::all_close(a2.grad(), expect2));
}

TEST(Matmul, MixedDtypesPromote) {
  EXPECT_EQ(ops::matmul(random({2, 3}, 1, DType::bf16), random({3, 2}, 2, DType::f32)).dtype(), DType::f32);
  EXPECT_EQ(ops::matmul(random({2, 3}, 1, DType::bf16), random({3, 2}, 2, DType::f16)).dtype(), DType::f32);
  EXPECT_EQ(ops::matmul(random({2, 3}, 1, DType::f16), random({3, 2}, 2, DType::f64)).dtype(), DType::f64);
}

TEST(Matmul, F16AccumulatesInF32AndOverflowsLikeAnAccelerator) {
  // 4096 terms of 1 * 1: an f16 accumulator would stop at 2048; f32 accumulation does not.
  const Tensor a = ones({1, 4096}, {.dtype = DType::f16}), b = ones({4096, 1}, {.dtype = DType::f16});
  EXPECT_EQ(ops::matmul(a, b).item(), 4096.0);
  const Tensor big = full({1, 2}, 200.0, {.dtype = DType::f16});
  EXPECT_TRUE(std::isinf(ops::matmul(big, full({2, 1}, 200.0, {.dtype = DType::f16})).item()));
}

TEST(Matmul, EmptyDims) {
  const Tensor z = ops::matmul(random({3, 0}, 1, DType::f32), random({0, 4}, 2, DType::f32));
  EXPECT_EQ(z.shape(), (Shape{3, 4}));
  EXPECT_EQ(testing::max_abs(z), 0.0);
  EXPECT_EQ(ops::matmul(random({0, 5}, 1, DType::f32), random({5, 4}, 2, DType::f32)).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::matmul(random({1, 2, 5}, 1, DType::f32), random({0, 5, 4}, 2, DType::f32)).shape(), (Shape{0, 2, 4}));
}

TEST(Matmul, ShapeErrorsNameTheShapes) {
  try {
    ops::matmul(random({2, 3}, 1), random({4, 5}, 2));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 vs 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::matmul(random({2, 3, 4}, 1), random({3, 4, 5}, 2)), Error);  // batch 2 vs 3
  EXPECT_THROW(ops::matmul(ones({}), random({3}, 2)), Error);
  EXPECT_THROW(ops::matmul(random({3}, 1), Tensor::from_vector<int64_t>({1, 2, 3}, {3})), Error);
}

}  // namespace
}  // namespace mixprec
