// BackwardOptions::on_capture_ready, the hook the data-parallel reducer starts its all-reduces
// from: once per captured leaf, as soon as its gradient is final (a leaf used twice only after
// both uses delivered, with the sum), before backward returns, in the order gradients complete,
// never for a leaf no gradient reaches.
#include <gtest/gtest.h>

#include <vector>

#include "mixprec/autograd/autograd.h"
#include "mixprec/ops/ops.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

TEST(CaptureReady, FiresOncePerLeafWithTheFinalGradientAsSoonAsItIsComplete) {
  // y = sum(w2 * relu(w1 * x)) + sum(w1 * 0.5): w1 is used twice (early and late in the graph),
  // w2 once, w3 not at all.
  Tensor x = testing::random({6}, 1, DType::f32);
  Tensor w1 = testing::random({6}, 2, DType::f32).set_requires_grad(true);
  Tensor w2 = testing::random({6}, 3, DType::f32).set_requires_grad(true);
  Tensor w3 = testing::random({6}, 4, DType::f32).set_requires_grad(true);
  Tensor y;
  {
    EnableGradGuard g(true);
    y = ops::add(ops::sum(ops::mul(w2, ops::relu(ops::mul(w1, x)))), ops::sum(ops::mul(w1, 0.5)));
  }
  const std::vector<Tensor> wrt{w1, w2, w3};
  std::vector<std::pair<size_t, std::vector<double>>> calls;
  const std::vector<Tensor> grads = run_backward(
      {y}, {Tensor()}, {.capture = &wrt, .on_capture_ready = [&](size_t i, const Tensor& g) {
                          calls.emplace_back(i, g.to_vector<double>());
                        }});
  ASSERT_EQ(calls.size(), 2u) << "w1 and w2 once each; w3 never";
  EXPECT_EQ(calls[0].first, 1u) << "w2's gradient is final first (nearest the loss)";
  EXPECT_EQ(calls[1].first, 0u);
  EXPECT_EQ(calls[0].second, grads[1].to_vector<double>());
  EXPECT_EQ(calls[1].second, grads[0].to_vector<double>()) << "w1's hook sees the sum of both uses";
  EXPECT_FALSE(grads[2].defined());
  // The sum of both uses: d/dw1 = w2 * x * (w1 * x > 0) + 0.5.
  const auto g1 = grads[0].to_vector<double>(), xv = x.to_vector<double>(), a = w1.to_vector<double>(),
             b = w2.to_vector<double>();
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g1[i], (a[i] * xv[i] > 0 ? b[i] * xv[i] : 0.0) + 0.5, 1e-6);
}

}  // namespace
}  // namespace mixprec
