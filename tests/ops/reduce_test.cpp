// Reductions: values by hand, every dtype against f64, gradients, keepdims, strided inputs,
// first-maximum tie-breaking, and thread-count independence of large sums.
#include <gtest/gtest.h>
#include <omp.h>

#include "kernel_test_util.h"
#include "op_test_util.h"
#include "ops/reduce_problem.h"

namespace mixprec {
namespace {
using testing::gradcheck;
using testing::matches_f64_in_all_dtypes;
using testing::random;
using V = std::vector<Tensor>;

TEST(Sum, HandComputedAxesAndKeepdims) {
  const Tensor x = arange(6.0).reshape({2, 3});
  EXPECT_EQ(ops::sum(x).item(), 15.0);
  EXPECT_EQ(ops::sum(x, {0}).to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(ops::sum(x, {-1}).to_vector<float>(), (std::vector<float>{3, 12}));
  EXPECT_EQ(ops::sum(x, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(ops::mean(x, {0, 1}).item(), 2.5);
  EXPECT_EQ(ops::max(x, {0}).to_vector<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(ops::argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ops::sum(x.transpose(0, 1), {1}).to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_THROW(ops::sum(x, {0, 0}), Error);
  EXPECT_THROW(ops::sum(x, {2}), Error);
}

TEST(Sum, MatchesF64InEveryDtype) {
  const Tensor x = random({5, 7, 9}, 61);
  for (auto axes : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
    EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return ops::sum(in[0], axes); }, {x}, 4.0));
    EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return ops::mean(in[0], axes, true); }, {x}));
    EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return ops::max(in[0], axes); }, {x}));
  }
}

TEST(Sum, GradCheck) {
  for (auto axes : std::vector<std::vector<int64_t>>{{}, {0}, {1, 2}}) {
    EXPECT_TRUE(gradcheck([&](const V& in) { return ops::sum(in[0], axes); }, {random({2, 3, 4}, 62)}));
    EXPECT_TRUE(gradcheck([&](const V& in) { return ops::mean(in[0], axes, true); }, {random({2, 3, 4}, 63)}));
    EXPECT_TRUE(gradcheck([&](const V& in) { return ops::max(in[0], axes); }, {random({2, 3, 4}, 64)}));
  }
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::sum(in[0].transpose(0, 2), {1}); }, {random({3, 2, 4}, 65)}));
}

TEST(Max, FirstMaximumTakesTheGradient) {
  Tensor x = Tensor::from_vector<float>({1, 5, 5, 2}, {4}).set_requires_grad(true);
  ops::max(x).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 1, 0, 0}));
  EXPECT_EQ(ops::argmax(x.detach(), 0).item(), 1.0);
}

TEST(Sum, LargeSumIndependentOfThreadCount) {
  const Tensor x = random({3, 400000}, 66, DType::f32);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = ops::sum(x, {1}).to_vector<float>();
  const float full1 = static_cast<float>(ops::sum(x).item());
  omp_set_num_threads(2);
  const auto b = ops::sum(x, {1}).to_vector<float>();
  const float full2 = static_cast<float>(ops::sum(x).item());
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
  EXPECT_EQ(full1, full2);
  EXPECT_NEAR(full1, ops::sum(x.astype(DType::f64)).item(), 1e-2);
}

// The cpu kernel for sums over leading axes (ops/cpu/reduce.cpp) gives the reference's bits:
// every dtype, one and several reduced dims, column counts around its block of 2048, sum and mean,
// inf and NaN; and it declines what it does not do (trailing axes, strided input).
TEST(Sum, LeadingAxesKernelGivesTheReferencesBits) {
  auto run = [](const char* impl, const Tensor& x, const std::vector<int64_t>& axes, bool mean) {
    ops::ForceImpl f(impl);
    return mean ? ops::mean(x, axes) : ops::sum(x, axes);
  };
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64})
    for (const Shape& shape : {Shape{32, 128, 128}, Shape{3, 2049}, Shape{5, 4, 2048}, Shape{1, 7}})
      for (int lead = 1; lead < static_cast<int>(shape.size()); ++lead) {
        std::vector<int64_t> axes;
        for (int a = 0; a < lead; ++a) axes.push_back(a);
        Tensor x = random(shape, 67 + lead, DType::f32);
        if (x.numel() > 10) {
          std::vector<float> v = x.to_vector<float>();
          v[3] = INFINITY;
          v[9] = std::nanf("");
          x = Tensor::from_vector(v, shape);
        }
        x = x.astype(d);
        for (bool mean : {false, true}) {
          const Tensor fast = run("leading_rows", x, axes, mean), ref = run("ref", x, axes, mean);
          const auto a = fast.astype(DType::f64).to_vector<double>();
          const auto b = ref.astype(DType::f64).to_vector<double>();
          ASSERT_EQ(a.size(), b.size());
          for (size_t i = 0; i < a.size(); ++i)
            ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))
                << dtype_name(d) << " " << shape_str(shape) << " lead " << lead << " mean " << mean
                << " at " << i << ": " << a[i] << " vs " << b[i];
        }
      }
  // Declined (the reference runs): a trailing axis, a transposed input.
  const auto kernel = testing::kernel_named<ops::ReduceSumProblem>("leading_rows");
  const Tensor x = random({4, 6}, 70, DType::f32);
  // A 2-D plan over `axis` of a [rows, cols] tensor with strides {rs, cs}.
  auto plan = [](int64_t axis, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    ops::ReducePlan p;
    p.axes = {axis};
    p.out_shape = {axis == 0 ? cols : rows};
    p.kept_sizes = p.out_shape;
    p.kept_strides = {axis == 0 ? cs : rs};
    p.red_sizes = {axis == 0 ? rows : cols};
    p.red_strides = {axis == 0 ? rs : cs};
    p.red_count = p.red_sizes[0];
    return p;
  };
  EXPECT_NE(kernel.declines({x, Tensor::empty({4}), plan(1, 4, 6, 6, 1), 1.0}), "");
  const ops::ReducePlan leading = plan(0, 6, 4, 4, 1);
  const Tensor xt = random({6, 4}, 71, DType::f32);
  EXPECT_EQ(kernel.declines({xt, Tensor::empty({4}), leading, 1.0}), "");
  EXPECT_NE(kernel.declines({x.transpose(0, 1), Tensor::empty({4}), leading, 1.0}), "");
}

}  // namespace
}  // namespace mixprec
