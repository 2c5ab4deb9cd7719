// The elementwise family's problem (pointwise arithmetic, math and activations, their gradients,
// where / masked_fill / dropout; ops/elementwise.cpp) and the formulas of its ops. A formula is
// a functor over the compute type C (float for f32/f16/bf16 operands, double when any operand or
// the output is f64): the value for one element, and for a unary op its derivative. Every
// backend runs the same formulas, so a pointwise op is written once: cpu::pointwise runs them
// through the vectorised engine (cpu/elementwise.h), ref::pointwise through a plain loop, and a
// backend may add kernels for single formulas (cpu::relu_bits16). visit_pointwise maps the
// problem's PointwiseFn to its functor. Invariants the op establishes: operands broadcast to
// out's shape; out is dense, preallocated, of the op's output dtype; integer operands (where's
// condition, masks) are read as C.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>

#include "mixprec/error.h"
#include "mixprec/tensor.h"

namespace mixprec::ops {

// What a unary op's derivative reads: nothing (a constant), x, the output y, or both. Only that
// is saved for backward, so e.g. exp keeps its output alive, never its input.
enum class Needs { none, x, y, xy };

namespace formulas {

// The formulas are host and device code: nvcc compiles them into the CUDA pointwise kernel
// (ops/cuda/pointwise.cu); for every other compiler the macro is empty.
#if defined(__CUDACC__)
#define MIXPREC_HD __host__ __device__
#else
#define MIXPREC_HD
#endif

// The scalar parameters of a formula (PointwiseProblem::a, b; most use none), and its number of
// operands (1 unless the functor says otherwise).
struct Params {
  static constexpr int arity = 1;
  double a = 0, b = 0;
};

// ---------------------------------------------------------------- unary: f(v) and f'(x, y)

struct AddScalar : Params {
  static constexpr Needs needs = Needs::none;
  template <class C> MIXPREC_HD C operator()(C v) const { return v + static_cast<C>(a); }
  template <class C> MIXPREC_HD C dfdx(C, C) const { return C(1); }
};
struct MulScalar : Params {
  static constexpr Needs needs = Needs::none;
  template <class C> MIXPREC_HD C operator()(C v) const { return v * static_cast<C>(a); }
  template <class C> MIXPREC_HD C dfdx(C, C) const { return static_cast<C>(a); }
};
struct PowScalar : Params {  // a: the exponent
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::pow(v, static_cast<C>(a)); }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const {
    return a == 0 ? C(0) : static_cast<C>(a) * std::pow(xi, static_cast<C>(a - 1));
  }
};
struct Neg : Params {
  static constexpr Needs needs = Needs::none;
  template <class C> MIXPREC_HD C operator()(C v) const { return -v; }
  template <class C> MIXPREC_HD C dfdx(C, C) const { return C(-1); }
};
struct Exp : Params {
  static constexpr Needs needs = Needs::y;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::exp(v); }
  template <class C> MIXPREC_HD C dfdx(C, C y) const { return y; }
};
struct Log : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::log(v); }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const { return 1 / xi; }
};
struct Sqrt : Params {
  static constexpr Needs needs = Needs::y;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::sqrt(v); }
  template <class C> MIXPREC_HD C dfdx(C, C y) const { return C(0.5) / y; }
};
struct Rsqrt : Params {
  static constexpr Needs needs = Needs::xy;
  template <class C> MIXPREC_HD C operator()(C v) const { return 1 / std::sqrt(v); }
  template <class C> MIXPREC_HD C dfdx(C xi, C y) const { return C(-0.5) * y / xi; }
};
struct Abs : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::abs(v); }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const {
    return xi > 0 ? C(1) : (xi < 0 ? C(-1) : C(0));
  }
};
struct Clamp : Params {  // a: low, b: high (+-inf when absent)
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const {
    return v < static_cast<C>(a) ? static_cast<C>(a)
                                 : (v > static_cast<C>(b) ? static_cast<C>(b) : v);
  }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const {
    return (xi >= static_cast<C>(a) && xi <= static_cast<C>(b)) ? C(1) : C(0);
  }
};
// NaN propagates (as in PyTorch), so an overflow upstream stays visible to the finite checks.
// Its gradient is ReluMask (from the output), not a dfdx.
struct Relu : Params {
  template <class C> MIXPREC_HD C operator()(C v) const { return ((v > 0) | (v != v)) ? v : C(0); }
};
struct LeakyRelu : Params {  // a: the negative slope
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const {
    return v > 0 ? v : v * static_cast<C>(a);
  }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const { return xi > 0 ? C(1) : static_cast<C>(a); }
};
struct GeluErf : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const {
    return C(0.5) * v * (C(1) + std::erf(v * static_cast<C>(1 / std::numbers::sqrt2)));
  }
  template <class C> MIXPREC_HD C dfdx(C v, C) const {
    const C cdf = C(0.5) * (C(1) + std::erf(v * static_cast<C>(1 / std::numbers::sqrt2)));
    const C pdf = std::exp(C(-0.5) * v * v) *
                  static_cast<C>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return cdf + v * pdf;
  }
};
struct GeluTanh : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const {
    const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
    return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
  }
  template <class C> MIXPREC_HD C dfdx(C v, C) const {
    const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
    const C t = std::tanh(k * (v + C(0.044715) * v * v * v));
    return C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * k * (C(1) + C(3 * 0.044715) * v * v);
  }
};
struct Sigmoid : Params {
  static constexpr Needs needs = Needs::y;
  template <class C> MIXPREC_HD C operator()(C v) const { return 1 / (1 + std::exp(-v)); }
  template <class C> MIXPREC_HD C dfdx(C, C y) const { return y * (1 - y); }
};
struct Tanh : Params {
  static constexpr Needs needs = Needs::y;
  template <class C> MIXPREC_HD C operator()(C v) const { return std::tanh(v); }
  template <class C> MIXPREC_HD C dfdx(C, C y) const { return 1 - y * y; }
};
struct Silu : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const { return v / (1 + std::exp(-v)); }
  template <class C> MIXPREC_HD C dfdx(C v, C) const {
    const auto s = 1 / (1 + std::exp(-v));
    return s * (1 + v * (1 - s));
  }
};
// MindSpore's HSwish (PyTorch's hardswish): x * relu6(x + 3) / 6. Its derivative is 0 below -3,
// x / 3 + 1/2 on [-3, 3] and 1 above (PyTorch's choice at the kinks). NaN propagates.
struct Hardswish : Params {
  static constexpr Needs needs = Needs::x;
  template <class C> MIXPREC_HD C operator()(C v) const {
    const C r6 = std::min(std::max(v + C(3), C(0)), C(6));
    return v * r6 / C(6);
  }
  template <class C> MIXPREC_HD C dfdx(C xi, C) const {
    return xi < C(-3) ? C(0) : (xi <= C(3) ? xi / C(3) + C(0.5) : C(1));
  }
};

// f applied to its N = F::arity operand values v[0..N) (every backend's loop calls this).
template <int N, class F, class C> MIXPREC_HD C apply(const F& f, const C* v) {
  if constexpr (N == 1)
    return f(v[0]);
  else if constexpr (N == 2)
    return f(v[0], v[1]);
  else
    return f(v[0], v[1], v[2]);
}

// g * f'(x, y) for a unary formula F, reading what F::needs says was saved: (g), (g, x),
// (g, y) or (g, x, y). A one-operand derivative (x or y) is called as dfdx(s, s).
template <class F> struct Grad {
  static constexpr int arity = F::needs == Needs::none ? 1 : F::needs == Needs::xy ? 3 : 2;
  F f;
  template <class C> MIXPREC_HD C operator()(C v) const { return v * f.dfdx(C(0), C(0)); }
  template <class C> MIXPREC_HD C operator()(C v, C s) const { return v * f.dfdx(s, s); }
  template <class C> MIXPREC_HD C operator()(C v, C xi, C yi) const { return v * f.dfdx(xi, yi); }
};

// ---------------------------------------------------------------- binary and ternary

struct Add : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x + y; }
};
struct Sub : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x - y; }
};
struct Mul : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x * y; }
};
struct Div : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x / y; }
};
struct DivGradB : Params {  // (g, out, b): d(a/b)/db = -out/b
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C gi, C o, C bi) const { return -gi * o / bi; }
};
struct Pow : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return std::pow(x, y); }
};
struct PowDa : Params {  // (a, b): d/da = b a^(b-1)
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const {
    return y == 0 ? C(0) : y * std::pow(x, y - 1);
  }
};
struct PowDb : Params {  // (out, a): d/db = out * log(a) (0 where a == 0)
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C o, C x) const {
    return x == 0 ? C(0) : o * std::log(x);
  }
};
struct Maximum : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x >= y ? x : y; }
};
struct MaximumGradA : Params {  // (g, a, b)
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C gi, C x, C y) const { return x >= y ? gi : C(0); }
};
struct MaximumGradB : Params {
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C gi, C x, C y) const { return x >= y ? C(0) : gi; }
};
struct Minimum : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return x <= y ? x : y; }
};
struct MinimumGradA : Params {
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C gi, C x, C y) const { return x <= y ? gi : C(0); }
};
struct MinimumGradB : Params {
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C gi, C x, C y) const { return x <= y ? C(0) : gi; }
};
struct Where : Params {  // (cond, a, b)
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C c, C x, C y) const { return c != 0 ? x : y; }
};
struct WhereGradA : Params {  // (cond, g, zero)
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C ci, C gi, C z) const { return ci != 0 ? gi : z; }
};
struct WhereGradB : Params {
  static constexpr int arity = 3;
  template <class C> MIXPREC_HD C operator()(C ci, C gi, C z) const { return ci != 0 ? z : gi; }
};
struct MaskedFill : Params {  // (x, mask); a: the fill value
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C v, C m) const {
    return m != 0 ? static_cast<C>(a) : v;
  }
};
struct MaskedFillGrad : Params {  // (g, mask)
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C gi, C m) const { return m != 0 ? C(0) : gi; }
};
// ReLU's gradient from its output: y > 0 ? g : +0 (PyTorch's threshold_backward; NaN outputs
// give 0). g is loaded unconditionally so that the select vectorises.
// relu(x + y): GRAPH_MODE's fusion of an add and the relu of its result. The add's rounding to
// the output dtype is skipped, which is exact: relu commutes with rounding (sign and NaN kept,
// -0 and values that round to -0 become +0 either way).
struct AddRelu : Params {
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C x, C y) const { return Relu{}(x + y); }
};
struct ReluMask : Params {  // (g, y)
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C v, C yi) const {
    const C keep = v;
    return yi > 0 ? keep : C(0);
  }
};
struct Dropout : Params {  // (x, mask); a: 1 / (1 - p)
  static constexpr int arity = 2;
  template <class C> MIXPREC_HD C operator()(C v, C m) const {
    return m != 0 ? v * static_cast<C>(a) : C(0);
  }
};

}  // namespace formulas

// Every formula, forward ones named after their op, gradients after what they compute.
// (Formatted by hand: the values read in groups, several a line.)
// clang-format off
enum class PointwiseFn : uint8_t {
  // unary, and g * f'
  add_scalar, mul_scalar, pow_scalar, neg, exp, log, sqrt, rsqrt, abs, clamp, relu, leaky_relu,
  gelu_erf, gelu_tanh, sigmoid, tanh, silu, hardswish,
  add_scalar_grad, mul_scalar_grad, pow_scalar_grad, neg_grad, exp_grad, log_grad, sqrt_grad,
  rsqrt_grad, abs_grad, clamp_grad, leaky_relu_grad, gelu_erf_grad, gelu_tanh_grad,
  sigmoid_grad, tanh_grad, silu_grad, hardswish_grad,
  // binary, ternary and their gradients
  add, sub, mul, div, div_grad_b, pow, pow_da, pow_db, maximum, maximum_grad_a, maximum_grad_b,
  minimum, minimum_grad_a, minimum_grad_b, where, where_grad_a, where_grad_b, masked_fill,
  masked_fill_grad, relu_mask, dropout,
  // made only by GRAPH_MODE's fusion (src/graph/fuse.cpp)
  add_relu,
};
// clang-format on
std::string_view pointwise_fn_name(PointwiseFn fn);

// out = fn(in[0], in[1], in[2]) elementwise (as many operands as fn takes), broadcasting.
struct PointwiseProblem {
  PointwiseFn fn;
  double a = 0, b = 0;       // fn's parameters (formulas::Params)
  std::array<Tensor, 3> in;  // undefined past fn's operands
  Tensor out;
  Device device() const { return out.device(); }
  std::string describe() const;
  int arity() const { return in[2].defined() ? 3 : in[1].defined() ? 2 : 1; }
  // Dispatch times the kernels of gelu's forms on 16-bit values (a table lookup against the
  // vector formula: which wins depends on the CPU's gathers); every other pointwise problem
  // takes its first accepting kernel (ops/kernel_choice.h).
  static constexpr bool kMeasured = true;
  bool measured() const {
    return (fn == PointwiseFn::gelu_erf || fn == PointwiseFn::gelu_tanh ||
            fn == PointwiseFn::gelu_erf_grad || fn == PointwiseFn::gelu_tanh_grad) &&
           (out.dtype() == DType::bf16 || out.dtype() == DType::f16);
  }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&PointwiseProblem::out}; }
};

// The tensors the kernel profile charges a call with (ops/dispatch.h, profile_work): its operands
// (undefined past its arity: none) and its output.
inline auto profile_tensors(const PointwiseProblem& p) {
  return std::array<const Tensor*, 4>{&p.in[0], &p.in[1], &p.in[2], &p.out};
}

// Whether a formula of n operands computes p in double (the output or an operand is f64) rather
// than float: the rule at the top of this file, for every backend. Asserts p has n operands.
inline bool computes_in_f64(const PointwiseProblem& p, int n) {
  MIXPREC_ASSERT(p.arity() == n, "pointwise ", pointwise_fn_name(p.fn), ": expected ", n,
                 " operands, got ", p.arity());
  bool f64 = p.out.dtype() == DType::f64;
  for (int k = 0; k < n; ++k) f64 = f64 || p.in[static_cast<size_t>(k)].dtype() == DType::f64;
  return f64;
}

// Calls g(functor) with fn's functor, its parameters set from p.
template <class G> decltype(auto) visit_pointwise(const PointwiseProblem& p, G&& g) {
  namespace pw = formulas;
  const pw::Params prm{p.a, p.b};
  switch (p.fn) {
    case PointwiseFn::add_scalar: return g(pw::AddScalar{prm});
    case PointwiseFn::mul_scalar: return g(pw::MulScalar{prm});
    case PointwiseFn::pow_scalar: return g(pw::PowScalar{prm});
    case PointwiseFn::neg: return g(pw::Neg{prm});
    case PointwiseFn::exp: return g(pw::Exp{prm});
    case PointwiseFn::log: return g(pw::Log{prm});
    case PointwiseFn::sqrt: return g(pw::Sqrt{prm});
    case PointwiseFn::rsqrt: return g(pw::Rsqrt{prm});
    case PointwiseFn::abs: return g(pw::Abs{prm});
    case PointwiseFn::clamp: return g(pw::Clamp{prm});
    case PointwiseFn::relu: return g(pw::Relu{prm});
    case PointwiseFn::leaky_relu: return g(pw::LeakyRelu{prm});
    case PointwiseFn::gelu_erf: return g(pw::GeluErf{prm});
    case PointwiseFn::gelu_tanh: return g(pw::GeluTanh{prm});
    case PointwiseFn::sigmoid: return g(pw::Sigmoid{prm});
    case PointwiseFn::tanh: return g(pw::Tanh{prm});
    case PointwiseFn::silu: return g(pw::Silu{prm});
    case PointwiseFn::hardswish: return g(pw::Hardswish{prm});
    case PointwiseFn::add_scalar_grad: return g(pw::Grad<pw::AddScalar>{{prm}});
    case PointwiseFn::mul_scalar_grad: return g(pw::Grad<pw::MulScalar>{{prm}});
    case PointwiseFn::pow_scalar_grad: return g(pw::Grad<pw::PowScalar>{{prm}});
    case PointwiseFn::neg_grad: return g(pw::Grad<pw::Neg>{{prm}});
    case PointwiseFn::exp_grad: return g(pw::Grad<pw::Exp>{{prm}});
    case PointwiseFn::log_grad: return g(pw::Grad<pw::Log>{{prm}});
    case PointwiseFn::sqrt_grad: return g(pw::Grad<pw::Sqrt>{{prm}});
    case PointwiseFn::rsqrt_grad: return g(pw::Grad<pw::Rsqrt>{{prm}});
    case PointwiseFn::abs_grad: return g(pw::Grad<pw::Abs>{{prm}});
    case PointwiseFn::clamp_grad: return g(pw::Grad<pw::Clamp>{{prm}});
    case PointwiseFn::leaky_relu_grad: return g(pw::Grad<pw::LeakyRelu>{{prm}});
    case PointwiseFn::gelu_erf_grad: return g(pw::Grad<pw::GeluErf>{{prm}});
    case PointwiseFn::gelu_tanh_grad: return g(pw::Grad<pw::GeluTanh>{{prm}});
    case PointwiseFn::sigmoid_grad: return g(pw::Grad<pw::Sigmoid>{{prm}});
    case PointwiseFn::tanh_grad: return g(pw::Grad<pw::Tanh>{{prm}});
    case PointwiseFn::silu_grad: return g(pw::Grad<pw::Silu>{{prm}});
    case PointwiseFn::hardswish_grad: return g(pw::Grad<pw::Hardswish>{{prm}});
    case PointwiseFn::add: return g(pw::Add{prm});
    case PointwiseFn::sub: return g(pw::Sub{prm});
    case PointwiseFn::mul: return g(pw::Mul{prm});
    case PointwiseFn::div: return g(pw::Div{prm});
    case PointwiseFn::div_grad_b: return g(pw::DivGradB{prm});
    case PointwiseFn::pow: return g(pw::Pow{prm});
    case PointwiseFn::pow_da: return g(pw::PowDa{prm});
    case PointwiseFn::pow_db: return g(pw::PowDb{prm});
    case PointwiseFn::maximum: return g(pw::Maximum{prm});
    case PointwiseFn::maximum_grad_a: return g(pw::MaximumGradA{prm});
    case PointwiseFn::maximum_grad_b: return g(pw::MaximumGradB{prm});
    case PointwiseFn::minimum: return g(pw::Minimum{prm});
    case PointwiseFn::minimum_grad_a: return g(pw::MinimumGradA{prm});
    case PointwiseFn::minimum_grad_b: return g(pw::MinimumGradB{prm});
    case PointwiseFn::where: return g(pw::Where{prm});
    case PointwiseFn::where_grad_a: return g(pw::WhereGradA{prm});
    case PointwiseFn::where_grad_b: return g(pw::WhereGradB{prm});
    case PointwiseFn::masked_fill: return g(pw::MaskedFill{prm});
    case PointwiseFn::masked_fill_grad: return g(pw::MaskedFillGrad{prm});
    case PointwiseFn::relu_mask: return g(pw::ReluMask{prm});
    case PointwiseFn::dropout: return g(pw::Dropout{prm});
    case PointwiseFn::add_relu: return g(pw::AddRelu{prm});
  }
  MIXPREC_ASSERT(false, "visit_pointwise: unknown PointwiseFn ", static_cast<int>(p.fn));
  return g(pw::Neg{prm});
}

}  // namespace mixprec::ops
