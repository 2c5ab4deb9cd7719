// Reductions: values by hand, every dtype against f64, gradients, keepdims, strided inputs,
// first-maximum tie-breaking, and thread-count independence of large sums.
#include <gtest/gtest.h>
#include <omp.h>

#include "op_test_util.h"

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

}  // namespace
}  // namespace mixprec
