// The backward engine: diamond graphs, reused tensors, no-grad, has_aux, retain_graph, saved
// tensors modified in place, dtype handling of leaf gradients, and a 10^5-op chain (no stack
// overflow in backward or in graph teardown).
#include <gtest/gtest.h>

#include "mixprec/autograd/autograd.h"
#include "mixprec/ops/ops.h"
#include "op_test_util.h"

namespace mixprec {
namespace {
using testing::random;

TEST(Autograd, DiamondGraphSumsBothPaths) {
  // y = a*x + b*x with x shared: dy/dx = a + b.
  Tensor x = Tensor::from_vector<float>({2.0f}, {1}).set_requires_grad(true);
  Tensor u = ops::mul(x, 3.0);
  Tensor v = ops::mul(x, 5.0);
  Tensor y = ops::sum(ops::add(u, v));
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 8.0f);
}

TEST(Autograd, ReusedTensorAccumulates) {
  // y = x * x: dy/dx = 2x; and a second backward accumulates into .grad.
  Tensor x = Tensor::from_vector<double>({3.0, -1.5}, {2}).set_requires_grad(true);
  ops::sum(ops::mul(x, x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6.0, -3.0}));
  ops::sum(ops::mul(x, x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12.0, -6.0}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = ones({3}).set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard ng;
    y = ops::mul(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(ops::sum(y).backward(), Error);
  Tensor z = ops::mul(x, 2.0);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
}

TEST(Autograd, ValueAndGradWithAux) {
  Tensor w = Tensor::from_vector<float>({1.0f, 2.0f}, {2}).set_requires_grad(true);
  Tensor unused = ones({4}).set_requires_grad(true);
  auto forward_fn = [&](const Tensor& data, const Tensor& label) {
    Tensor logits = ops::mul(data, w);
    Tensor loss = ops::sum(ops::mul(ops::sub(logits, label), ops::sub(logits, label)));
    return std::vector<Tensor>{loss, logits};
  };
  auto grad_fn = value_and_grad(forward_fn, {w, unused}, {.has_aux = true});
  const Tensor data = Tensor::from_vector<float>({3.0f, 4.0f}, {2});
  const Tensor label = Tensor::from_vector<float>({1.0f, 1.0f}, {2});
  auto [values, grads] = grad_fn(data, label);
  ASSERT_EQ(values.size(), 2u);
  // loss = (3-1)^2 + (8-1)^2 = 53; dloss/dw = 2 (w*d - l) * d = [12, 56]
  EXPECT_FLOAT_EQ(values[0].item(), 53.0f);
  EXPECT_EQ(values[1].to_vector<float>(), (std::vector<float>{3.0f, 8.0f}));
  EXPECT_EQ(grads[0].to_vector<float>(), (std::vector<float>{12.0f, 56.0f}));
  EXPECT_EQ(grads[1].to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_FALSE(w.grad().defined()) << "value_and_grad must not touch .grad";
  auto no_aux = value_and_grad(forward_fn, {w});
  EXPECT_THROW(no_aux(data, label), Error);
}

TEST(Autograd, GraphIsFreedUnlessRetained) {
  Tensor x = ones({2}).set_requires_grad(true);
  Tensor y = ops::sum(ops::exp(x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().at({0}), 2 * std::exp(1.0), 1e-5);
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, InPlaceChangeOfSavedTensorIsAnError) {
  Tensor x = random({3}, 1, DType::f32).set_requires_grad(true);
  Tensor e = ops::exp(x);   // saves its output
  Tensor y = ops::sum(ops::mul(e, e));
  {
    NoGradGuard ng;
    e.detach().fill_(0.0);
  }
  EXPECT_THROW(y.backward(), Error);
  EXPECT_THROW(x.fill_(1.0), Error) << "in-place write into a leaf that requires grad";
}

TEST(Autograd, LeafGradientHasTheLeafDtype) {
  Tensor w = random({4}, 2, DType::f32).set_requires_grad(true);
  Tensor wb = w.astype(DType::bf16);
  ops::sum(ops::mul(wb, wb)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  Tensor h = random({4}, 3, DType::f16).set_requires_grad(true);
  ops::sum(ops::mul(h.astype(DType::f32), 2.0)).backward();
  EXPECT_EQ(h.grad().dtype(), DType::f16);
  EXPECT_EQ(h.grad().to_vector<float>(), std::vector<float>(4, 2.0f));
}

TEST(Autograd, GradReturnsWithoutTouchingDotGrad) {
  Tensor a = random({3}, 4).set_requires_grad(true);
  Tensor b = random({3}, 5).set_requires_grad(true);
  auto g = grad(ops::sum(ops::mul(a, b)), {a, b});
  EXPECT_TRUE(testing::all_close(g[0], b));
  EXPECT_TRUE(testing::all_close(g[1], a));
  EXPECT_FALSE(a.grad().defined());
}

TEST(Autograd, DeepChainOfHundredThousandOpsSlow) {
  Tensor x = Tensor::from_vector<double>({1.0}, {1}).set_requires_grad(true);
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = ops::add(y, 1e-5);
    ops::sum(y).backward();
    EXPECT_NEAR(y.item(), 2.0, 1e-9);
  }  // the chain is torn down here without recursion
  EXPECT_EQ(x.grad().item(), 1.0);
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = ops::mul(z, 1.0);
  z = Tensor();  // teardown of an un-backwarded chain
  SUCCEED();
}

TEST(Autograd, ViewsPassGradientsBack) {
  Tensor x = random({2, 3, 4}, 6).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) {
    return ops::mul(in[0].permute({2, 0, 1}).reshape({4, 6}).slice(1, 1, 5, 2), 2.0);
  };
  EXPECT_TRUE(testing::gradcheck(fn, {x}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) {
    return ops::concat({in[0], ops::mul(in[1], 3.0)}, 1);
  }, {random({2, 3}, 7), random({2, 2}, 8)}));
  EXPECT_TRUE(testing::gradcheck([](const std::vector<Tensor>& in) {
    return ops::broadcast_to(in[0], {3, 2, 4});
  }, {random({2, 1}, 9)}));
}

}  // namespace
}  // namespace mixprec
