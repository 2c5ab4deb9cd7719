// The backward engine: diamond graphs, reused tensors, no-grad, has_aux, retain_graph, saved
// tensors modified in place, dtype handling of leaf gradients, and a 10^5-op chain (no stack
// overflow in backward or in graph teardown).
#include <gtest/gtest.h>

#include <functional>
#include <tuple>

#include "mixprec/autograd/autograd.h"
#include "mixprec/ops/ops.h"
#include "op_test_util.h"

namespace mixprec {
namespace {
using testing::all_close;
using testing::random;
using testing::throws_error_with;

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

// MindSpore's grad_position, checked against MindSpore 2.10 on f(x, y) = (sum(x*y*w), x + y) with
// x = 2, y = 5, w = 3: default (0) -> [15]; 1 -> [6]; (0, 1) -> [15, 6]; None, [w] -> [10];
// 0, [w] -> ([15], [10]); None, None / out of range / duplicate / negative -> errors.
TEST(Autograd, ValueAndGradGradPositionFollowsMindSpore) {
  Tensor w = Tensor::from_vector<float>({3.0f}, {1}).set_requires_grad(true);
  auto f = [&](const Tensor& x, const Tensor& y) {
    return std::tuple{ops::sum(ops::mul(ops::mul(x, y), w)), ops::add(x, y)};
  };
  const Tensor x = Tensor::from_vector<float>({2.0f}, {1});
  const Tensor y = Tensor::from_vector<float>({5.0f}, {1});
  auto grads_of = [&](auto grad_fn) {
    auto [values, grads] = grad_fn(x, y);
    EXPECT_EQ(values.size(), 2u);
    EXPECT_EQ(values[0].item(), 30.0);
    EXPECT_EQ(values[1].item(), 7.0) << "the aux output is returned too";
    std::vector<double> out;
    for (const Tensor& g : grads) out.push_back(g.item());
    return out;
  };
  EXPECT_EQ(grads_of(value_and_grad(f, 0, {}, {.has_aux = true})), (std::vector<double>{15.0}));
  EXPECT_EQ(grads_of(value_and_grad(f, 1, {}, {.has_aux = true})), (std::vector<double>{6.0}));
  EXPECT_EQ(grads_of(value_and_grad(f, {0, 1}, {}, {.has_aux = true})), (std::vector<double>{15.0, 6.0}));
  EXPECT_EQ(grads_of(value_and_grad(f, {1, 0}, {}, {.has_aux = true})), (std::vector<double>{6.0, 15.0}));
  // The seed's form: ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True).
  EXPECT_EQ(grads_of(value_and_grad(f, std::nullopt, {w}, {.has_aux = true})), (std::vector<double>{10.0}));
  EXPECT_EQ(grads_of(value_and_grad(f, 0, {w}, {.has_aux = true})), (std::vector<double>{15.0, 10.0}));
  EXPECT_FALSE(w.grad().defined()) << "value_and_grad must not touch .grad";
  EXPECT_FALSE(x.requires_grad()) << "the caller's inputs are left as they were";
  // MindSpore's default grad_position is 0; arguments that are not Tensors pass through.
  auto scaled = [](const Tensor& a, double k) { return ops::sum(ops::mul(a, k)); };
  auto [v, g] = value_and_grad(scaled)(Tensor::from_vector<float>({1.0f, 2.0f}, {2}), 4.0);
  EXPECT_EQ(v[0].item(), 12.0);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{4.0f, 4.0f}));

  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(f, std::nullopt); }, "nothing to differentiate"));
  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(f, {0, 0}); }, "grad_position 0 is given twice"));
  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(f, -1); }, "grad_position -1 is negative"));
  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(f, 2, {}, {.has_aux = true})(x, y); },
                                "grad_position 2 is out of range: the function was called with 2 arguments"));
  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(scaled, 1)(x, 2.0); },
                                "grad_position 1 names an argument that is not a Tensor"));
  const Tensor labels = Tensor::from_vector<int32_t>({1}, {1});
  EXPECT_TRUE(throws_error_with([&] { (void)value_and_grad(f, 1, {}, {.has_aux = true})(x, labels); },
                                "floating"));
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

TEST(Autograd, UnbindPartsAreViewsAndGetTheirGradientsBack) {
  // q, k, v of a packed projection: [B, L, 3, H, D] permuted to [3, B, H, L, D], unbound (the
  // backward writes the three into one tensor laid out like the permuted input, so that the
  // permute's gradient is a view of it: MultiheadAttention's in_proj gradient without a copy).
  const Tensor base = random({2, 5, 3, 2, 4}, 11).set_requires_grad(true);
  const Tensor qkv = ops::permute(base, {2, 0, 3, 1, 4});
  const std::vector<Tensor> parts = ops::unbind(qkv, 0);
  ASSERT_EQ(parts.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parts[static_cast<size_t>(i)].shape(), (Shape{2, 2, 5, 4}));
    EXPECT_EQ(parts[static_cast<size_t>(i)].data_ptr(), qkv.slice(0, i, i + 1).data_ptr())
        << "a view";
  }
  // v gets no gradient (zeros), q and k weighted differently.
  const Tensor y =
      ops::add(ops::sum(ops::mul(parts[0], 2.0)), ops::sum(ops::mul(parts[1], parts[1])));
  y.backward();
  const Shape one{1, 2, 2, 5, 4};
  const Tensor expect = ops::concat(
      {ops::mul(ones(one, {.dtype = DType::f64}), 2.0),
       ops::mul(ops::reshape(parts[1].detach(), one), 2.0), zeros(one, {.dtype = DType::f64})},
      0);
  EXPECT_TRUE(all_close(base.grad(), ops::permute(expect, {1, 3, 0, 2, 4}), {0.0, 0.0}));
  EXPECT_TRUE(testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        const std::vector<Tensor> p = ops::unbind(ops::permute(in[0], {1, 0, 2}), 0);
        return ops::add(ops::mul(p[0], 3.0), ops::mul(p[2], p[1]));
      },
      {random({2, 3, 4}, 12)}));
  EXPECT_TRUE(throws_error_with([] { ops::unbind(Tensor::from_vector<float>({1.0f}, {})); },
                                "cannot unbind a scalar"));
}

}  // namespace
}  // namespace mixprec
