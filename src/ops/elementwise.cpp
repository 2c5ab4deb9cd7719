// Pointwise ops, forward and backward side by side: broadcasting arithmetic, unary math,
// clamp/where/masked_fill and the activations. Every computation is one formula of
// elementwise_problem.h run through dispatch (pointwise()): f32 compute for f32/f16/bf16 (f64
// for f64), one rounding to the output dtype. Binary ops compute in promote(a, b); their
// backward sums the gradient over broadcast dims (reduce_to_shape).
#include <cmath>
#include <string>

#include "ops/dispatch.h"
#include "ops/elementwise_problem.h"
#include "ops/layout.h"
#include "ops/layout_choice.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

namespace {
constexpr std::string_view kFnNames[] = {
    // unary
    "add_scalar", "mul_scalar", "pow_scalar", "neg", "exp", "log", "sqrt", "rsqrt", "abs", "clamp",
    "relu", "leaky_relu", "gelu_erf", "gelu_tanh", "sigmoid", "tanh", "silu", "hardswish",
    // g * f'
    "add_scalar_grad", "mul_scalar_grad", "pow_scalar_grad", "neg_grad", "exp_grad", "log_grad",
    "sqrt_grad", "rsqrt_grad", "abs_grad", "clamp_grad", "leaky_relu_grad", "gelu_erf_grad",
    "gelu_tanh_grad", "sigmoid_grad", "tanh_grad", "silu_grad", "hardswish_grad",
    // binary, ternary and their gradients
    "add", "sub", "mul", "div", "div_grad_b", "pow", "pow_da", "pow_db", "maximum",
    "maximum_grad_a", "maximum_grad_b", "minimum", "minimum_grad_a", "minimum_grad_b", "where",
    "where_grad_a", "where_grad_b", "masked_fill", "masked_fill_grad", "relu_mask", "dropout",
    // fused
    "add_relu"};
static_assert(std::size(kFnNames) == static_cast<size_t>(PointwiseFn::add_relu) + 1,
              "kFnNames must name every PointwiseFn, in order");
}  // namespace

std::string_view pointwise_fn_name(PointwiseFn fn) { return kFnNames[static_cast<size_t>(fn)]; }

std::string PointwiseProblem::describe() const {
  std::string s(pointwise_fn_name(fn));
  for (const Tensor& t : in)
    if (t.defined()) s += " " + desc(t) + (t.is_contiguous() ? "" : " (strided)");
  return s + " -> " + desc(out);
}

namespace detail {

Tensor pointwise(OpId op, std::string_view phase, PointwiseFn fn,
                 std::initializer_list<Tensor> operands, DType out_dtype, double a, double b) {
  MIXPREC_ASSERT(operands.size() >= 1 && operands.size() <= 3, "pointwise: 1 to 3 operands");
  PointwiseProblem p{fn, a, b, {}, {}};
  std::copy(operands.begin(), operands.end(), p.in.begin());
  Shape shape = p.in[0].shape();
  for (size_t k = 1; k < operands.size(); ++k)
    shape = broadcast_shapes(shape, p.in[k].shape(), op_name(op));
  p.out = empty_output(shape, out_dtype, p.in[0].device(), {&p.in[0], &p.in[1], &p.in[2]});
  // An operand laid out unlike the output (a channels-last activation beside a row-major
  // gradient that came back through a Flatten) is first copied into the output's layout (core's
  // strided copy, dims merged in the destination's order), after which every operand walks
  // memory in the same order and the dense kernels accept the problem. A strided walk over mixed
  // layouts ran ~20x slower (relu's backward in the seed's SimpleNet, 1.5 ms a step of 3.9). Exact:
  // a copy changes no value.
  if (p.out.device().is_cpu() && is_dense(p.out.shape(), p.out.strides()))
    for (size_t k = 0; k < operands.size(); ++k) {
      Tensor& t = p.in[k];
      if (t.shape() != shape || t.numel() < 4096 || !is_dense(t.shape(), t.strides())) continue;
      if (t.is_contiguous() && p.out.is_contiguous()) continue;
      t = with_strides(t, p.out.strides());
    }
  dispatch(op, phase, p);
  // The output derives from a marked convolution output it is laid out like (relu, a bias or
  // residual add): it carries the mark, so a Flatten after it can still choose that layout.
  for (const Tensor& t : operands)
    if (const uint32_t site = layout_site(t);
        site != 0 && t.shape() == shape && t.strides() == p.out.strides()) {
      mark_layout_site(p.out, site);
      break;
    }
  return p.out;
}

Tensor relu_backward(const Tensor& g, const Tensor& y) {
  return pointwise(OpId::relu, "backward", PointwiseFn::relu_mask, {g, y}, g.dtype());
}

}  // namespace detail

namespace {

void check_binary(std::string_view op, const Tensor& a, const Tensor& b) {
  check_floating(op, a, "first operand");
  check_floating(op, b, "second operand");
  check_same_device(op, {&a, &b});
}

// Shared shape of every broadcasting binary op: autocast, compute in promote(a, b), record a
// node whose backward gives (grad_a, grad_b) from (g, a, b, out), reduced to the input shapes.
template <class Bwd>
Tensor binary_op(OpId id, PointwiseFn fn, const Tensor& a0, const Tensor& b0, Bwd bwd) {
  Prepared p = autocast_inputs(id, {a0, b0});
  const Tensor& a = p.in[0];
  const Tensor& b = p.in[1];
  check_binary(op_name(id), a, b);
  const DType dt = promote(a.dtype(), b.dtype());
  Tensor out = pointwise(id, "forward", fn, {a, b}, dt);
  if (autograd::needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    SavedTensor sa(a), sb(b), so(out.detach());
    const Shape sha = a.shape(), shb = b.shape();
    record(id, {a, b}, out, [=](const std::vector<Tensor>& g) {
      const std::string_view n = op_name(id);
      auto [da, db] = bwd(g[0], sa.unpack(n), sb.unpack(n), so.unpack(n), ga, gb);
      return std::vector<Tensor>{ga ? reduce_to_shape(da, sha) : Tensor(),
                                 gb ? reduce_to_shape(db, shb) : Tensor()};
    });
  }
  return finish(id, p, out, dt);
}

// Unary op: out = F(x); backward g * F'(x, out) in one pass (formula `grad`), reading only what
// F::needs (so e.g. exp keeps its output alive, never its input).
template <class F> Tensor unary_op(OpId id, const Tensor& x0, PointwiseFn fwd, PointwiseFn grad,
                                   double a = 0, double b = 0) {
  Prepared p = autocast_inputs(id, {x0});
  const Tensor& x = p.in[0];
  check_floating(op_name(id), x, "input");
  Tensor out = pointwise(id, "forward", fwd, {x}, x.dtype(), a, b);
  if (autograd::needs_grad({&x})) {
    constexpr Needs needs = F::needs;
    constexpr bool nx = needs == Needs::x || needs == Needs::xy;
    constexpr bool ny = needs == Needs::y || needs == Needs::xy;
    SavedTensor sx(nx ? x : Tensor()), so(ny ? out.detach() : Tensor());
    record(id, {x}, out, [=](const std::vector<Tensor>& g) {
      const std::string_view n = op_name(id);
      const Tensor& gi = g[0];
      const DType dt = gi.dtype();
      switch (needs) {
        case Needs::none:
          return std::vector<Tensor>{pointwise(id, "backward", grad, {gi}, dt, a, b)};
        case Needs::x:
          return std::vector<Tensor>{pointwise(id, "backward", grad, {gi, sx.unpack(n)}, dt, a, b)};
        case Needs::y:
          return std::vector<Tensor>{pointwise(id, "backward", grad, {gi, so.unpack(n)}, dt, a, b)};
        case Needs::xy: break;
      }
      return std::vector<Tensor>{
          pointwise(id, "backward", grad, {gi, sx.unpack(n), so.unpack(n)}, dt, a, b)};
    });
  }
  return finish(id, p, out, x.dtype());
}

using Pair = std::pair<Tensor, Tensor>;
namespace pw = formulas;

}  // namespace

// ---------------------------------------------------------------- arithmetic

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::add, PointwiseFn::add, a, b,
                   [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
                     return Pair{g, g};
                   });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::sub, PointwiseFn::sub, a, b,
                   [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool gb) {
                     return Pair{g, gb ? neg(g) : Tensor()};
                   });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(
      OpId::mul, PointwiseFn::mul, a, b,
      [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
        return Pair{ga ? mul(g, b) : Tensor(), gb ? mul(g, a) : Tensor()};
      });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(
      OpId::div, PointwiseFn::div, a, b,
      [](const Tensor& g, const Tensor&, const Tensor& b, const Tensor& out, bool ga, bool gb) {
        // d(a/b)/da = 1/b; d(a/b)/db = -out/b
        Tensor da = ga ? div(g, b) : Tensor();
        Tensor db =
            gb ? pointwise(OpId::div, "backward", PointwiseFn::div_grad_b, {g, out, b}, g.dtype())
               : Tensor();
        return Pair{da, db};
      });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op(
      OpId::pow, PointwiseFn::pow, a, b,
      [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out, bool ga, bool gb) {
        // d/da = b a^(b-1); d/db = out * log(a) (0 where a == 0)
        Tensor da =
            ga ? mul(g, pointwise(OpId::pow, "backward", PointwiseFn::pow_da, {a, b}, g.dtype()))
               : Tensor();
        Tensor db =
            gb ? mul(g, pointwise(OpId::pow, "backward", PointwiseFn::pow_db, {out, a}, g.dtype()))
               : Tensor();
        return Pair{da, db};
      });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(
      OpId::maximum, PointwiseFn::maximum, a, b,
      [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
        const OpId id = OpId::maximum;
        Tensor da =
            ga ? pointwise(id, "backward", PointwiseFn::maximum_grad_a, {g, a, b}, g.dtype())
               : Tensor();
        Tensor db =
            gb ? pointwise(id, "backward", PointwiseFn::maximum_grad_b, {g, a, b}, g.dtype())
               : Tensor();
        return Pair{da, db};
      });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(
      OpId::minimum, PointwiseFn::minimum, a, b,
      [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
        const OpId id = OpId::minimum;
        Tensor da =
            ga ? pointwise(id, "backward", PointwiseFn::minimum_grad_a, {g, a, b}, g.dtype())
               : Tensor();
        Tensor db =
            gb ? pointwise(id, "backward", PointwiseFn::minimum_grad_b, {g, a, b}, g.dtype())
               : Tensor();
        return Pair{da, db};
      });
}

Tensor add(const Tensor& x, double c) {
  return unary_op<pw::AddScalar>(OpId::add_scalar, x, PointwiseFn::add_scalar,
                                 PointwiseFn::add_scalar_grad, c);
}

Tensor mul(const Tensor& x, double c) {
  return unary_op<pw::MulScalar>(OpId::mul_scalar, x, PointwiseFn::mul_scalar,
                                 PointwiseFn::mul_scalar_grad, c);
}

Tensor pow(const Tensor& x, double e) {
  return unary_op<pw::PowScalar>(OpId::pow_scalar, x, PointwiseFn::pow_scalar,
                                 PointwiseFn::pow_scalar_grad, e);
}

// ---------------------------------------------------------------- unary math

Tensor neg(const Tensor& x) {
  return unary_op<pw::Neg>(OpId::neg, x, PointwiseFn::neg, PointwiseFn::neg_grad);
}
Tensor exp(const Tensor& x) {
  return unary_op<pw::Exp>(OpId::exp, x, PointwiseFn::exp, PointwiseFn::exp_grad);
}
Tensor log(const Tensor& x) {
  return unary_op<pw::Log>(OpId::log, x, PointwiseFn::log, PointwiseFn::log_grad);
}
Tensor sqrt(const Tensor& x) {
  return unary_op<pw::Sqrt>(OpId::sqrt, x, PointwiseFn::sqrt, PointwiseFn::sqrt_grad);
}
Tensor rsqrt(const Tensor& x) {
  return unary_op<pw::Rsqrt>(OpId::rsqrt, x, PointwiseFn::rsqrt, PointwiseFn::rsqrt_grad);
}
Tensor abs(const Tensor& x) {
  return unary_op<pw::Abs>(OpId::abs, x, PointwiseFn::abs, PointwiseFn::abs_grad);
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  MIXPREC_CHECK(!(lo && hi && *lo > *hi), "clamp: min ", *lo, " is greater than max ", *hi);
  return unary_op<pw::Clamp>(OpId::clamp, x, PointwiseFn::clamp, PointwiseFn::clamp_grad,
                             lo.value_or(-INFINITY), hi.value_or(INFINITY));
}

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  MIXPREC_CHECK(cond.defined() && !is_floating(cond.dtype()),
                "where: expected a bool/u8 condition, got ",
                cond.defined() ? std::string(dtype_name(cond.dtype())) : "undefined");
  Prepared p = autocast_inputs(OpId::where, {a0, b0});
  const Tensor& a = p.in[0];
  const Tensor& b = p.in[1];
  check_binary("where", a, b);
  const DType dt = promote(a.dtype(), b.dtype());
  Tensor out = pointwise(OpId::where, "forward", PointwiseFn::where, {cond, a, b}, dt);
  if (autograd::needs_grad({&a, &b})) {
    SavedTensor sc(cond);
    const Shape sha = a.shape(), shb = b.shape();
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record(OpId::where, {a, b}, out, [=](const std::vector<Tensor>& g) {
      const Tensor c = sc.unpack("where");
      const DType gd = g[0].dtype();
      Tensor zero = zeros({}, {.dtype = gd});
      Tensor da = ga ? reduce_to_shape(pointwise(OpId::where, "backward", PointwiseFn::where_grad_a,
                                                 {c, g[0], zero}, gd),
                                       sha)
                     : Tensor();
      Tensor db = gb ? reduce_to_shape(pointwise(OpId::where, "backward", PointwiseFn::where_grad_b,
                                                 {c, g[0], zero}, gd),
                                       shb)
                     : Tensor();
      return std::vector<Tensor>{da, db};
    });
  }
  return finish(OpId::where, p, out, dt);
}

Tensor masked_fill(const Tensor& x0, const Tensor& mask, double value) {
  MIXPREC_CHECK(mask.defined() && !is_floating(mask.dtype()),
                "masked_fill: expected a bool/u8 mask, got ",
                mask.defined() ? std::string(dtype_name(mask.dtype())) : "undefined");
  Prepared p = autocast_inputs(OpId::masked_fill, {x0});
  const Tensor& x = p.in[0];
  check_floating("masked_fill", x, "input");
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  MIXPREC_CHECK(shape == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
                " must broadcast to the input shape ", shape_str(x.shape()));
  Tensor out = pointwise(OpId::masked_fill, "forward", PointwiseFn::masked_fill, {x, mask},
                         x.dtype(), value);
  if (autograd::needs_grad({&x})) {
    SavedTensor sm(mask);
    record(OpId::masked_fill, {x}, out, [sm](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{pointwise(OpId::masked_fill, "backward",
                                           PointwiseFn::masked_fill_grad,
                                           {g[0], sm.unpack("masked_fill")}, g[0].dtype())};
    });
  }
  return finish(OpId::masked_fill, p, out, x.dtype());
}

// ---------------------------------------------------------------- activations

// NaN propagates (as in PyTorch), so an overflow upstream stays visible to the finite checks.
// The gradient passes where y > 0 and is 0 elsewhere, whatever g holds there (PyTorch's
// threshold_backward; the same as the ReLU fused into conv2d and dense).
Tensor relu(const Tensor& x0) {
  Prepared p = autocast_inputs(OpId::relu, {x0});
  const Tensor& x = p.in[0];
  check_floating("relu", x, "input");
  Tensor out = pointwise(OpId::relu, "forward", PointwiseFn::relu, {x}, x.dtype());
  if (autograd::needs_grad({&x})) {
    SavedTensor so(out.detach());
    record(OpId::relu, {x}, out, [so](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{relu_backward(g[0], so.unpack("relu"))};
    });
  }
  return finish(OpId::relu, p, out, x.dtype());
}

Tensor leaky_relu(const Tensor& x, double slope) {
  return unary_op<pw::LeakyRelu>(OpId::leaky_relu, x, PointwiseFn::leaky_relu,
                                 PointwiseFn::leaky_relu_grad, slope);
}

Tensor gelu(const Tensor& x, GeluApproximation approx) {
  if (approx == GeluApproximation::tanh)
    return unary_op<pw::GeluTanh>(OpId::gelu, x, PointwiseFn::gelu_tanh,
                                  PointwiseFn::gelu_tanh_grad);
  return unary_op<pw::GeluErf>(OpId::gelu, x, PointwiseFn::gelu_erf, PointwiseFn::gelu_erf_grad);
}

Tensor sigmoid(const Tensor& x) {
  return unary_op<pw::Sigmoid>(OpId::sigmoid, x, PointwiseFn::sigmoid, PointwiseFn::sigmoid_grad);
}

Tensor tanh(const Tensor& x) {
  return unary_op<pw::Tanh>(OpId::tanh, x, PointwiseFn::tanh, PointwiseFn::tanh_grad);
}

Tensor silu(const Tensor& x) {
  return unary_op<pw::Silu>(OpId::silu, x, PointwiseFn::silu, PointwiseFn::silu_grad);
}

Tensor hardswish(const Tensor& x) {
  return unary_op<pw::Hardswish>(OpId::hardswish, x, PointwiseFn::hardswish,
                                 PointwiseFn::hardswish_grad);
}

}  // namespace mixprec::ops

namespace mixprec {
Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }
Tensor operator+(const Tensor& a, double b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, double b) { return ops::add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return ops::mul(a, 1.0 / b); }
Tensor operator*(double a, const Tensor& b) { return ops::mul(b, a); }
}  // namespace mixprec
