// Pointwise ops, forward and backward side by side: broadcasting arithmetic, unary math,
// clamp/where/masked_fill and the activations. Forward and backward both run through the
// elementwise engine (elementwise_kernels.h): f32 compute for f32/f16/bf16 (f64 for f64), one
// rounding to the output dtype. Binary ops compute in promote(a, b); their backward sums the
// gradient over broadcast dims (reduce_to_shape).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "ops/cpu/elementwise.h"

namespace mixprec::ops {
using namespace detail;

namespace detail {

IterLayout make_iter_layout(const Shape& out_shape, const Tensor& out,
                            std::initializer_list<const Tensor*> inputs) {
  const size_t nd = out_shape.size();
  const size_t nops = inputs.size() + 1;
  std::array<Strides, 4> full;
  full[0] = out.strides();
  size_t k = 1;
  for (const Tensor* t : inputs) {
    Strides s(nd, 0);
    const size_t lead = nd - t->shape().size();
    for (size_t i = 0; i < t->shape().size(); ++i)
      s[lead + i] = t->shape()[i] == 1 ? 0 : t->strides()[i];
    full[k++] = std::move(s);
  }
  // Visit dims in decreasing output stride (stable: ties keep logical order).
  std::vector<size_t> order(nd);
  for (size_t d = 0; d < nd; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return full[0][x] > full[0][y]; });
  IterLayout l;
  for (size_t d : order) {
    if (out_shape[d] == 1) continue;
    bool merge = !l.sizes.empty();
    for (size_t op = 0; merge && op < nops; ++op)
      merge = l.strides[op].back() == full[op][d] * out_shape[d];
    if (merge) {
      l.sizes.back() *= out_shape[d];
      for (size_t op = 0; op < nops; ++op) l.strides[op].back() = full[op][d];
    } else {
      l.sizes.push_back(out_shape[d]);
      for (size_t op = 0; op < nops; ++op) l.strides[op].push_back(full[op][d]);
    }
  }
  if (l.sizes.empty()) {
    l.sizes.push_back(1);
    for (size_t op = 0; op < nops; ++op) l.strides[op].push_back(0);
  }
  return l;
}

bool relu_bits_apply(const Tensor& x) {
  return (x.dtype() == DType::bf16 || x.dtype() == DType::f16) && is_dense(x.shape(), x.strides());
}

namespace {
uint16_t inf_bits(DType d) { return d == DType::bf16 ? 0x7F80 : 0x7C00; }

// Runs body over [0, n) in OpenMP chunks, timed under MIXPREC_PROFILE as (op, phase, "bits16").
template <class Body>
void run_bits(std::string_view phase, int64_t n, Body&& body) {
  const double t0 = profiling() ? profile_now() : 0.0;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < (n + 4095) / 4096; ++c) body(c * 4096, std::min(n, c * 4096 + 4096));
  if (profiling()) profile_add("relu", phase, "bits16", profile_now() - t0);
}
}  // namespace

Tensor relu_bits(const Tensor& x) {
  Tensor out = empty_output(x.shape(), x.dtype(), x.device(), {&x});
  MIXPREC_ASSERT(out.strides() == x.strides() || x.is_contiguous(), "relu_bits: layouts differ");
  const auto* xp = static_cast<const uint16_t*>(x.data_ptr());
  auto* op = static_cast<uint16_t*>(out.data_ptr());
  const uint16_t inf = inf_bits(x.dtype());
  if (verbose_level() > 0) log_elementwise(1, out, x.dtype());
  run_bits("forward", x.numel(), [=](int64_t lo, int64_t hi) {
    // Locals with __restrict: the uint16_t stores could otherwise alias the captured values,
    // which the compiler then reloads every iteration instead of vectorising.
    const uint16_t* __restrict src = xp;
    uint16_t* __restrict dst = op;
    const uint16_t lim = inf;
    for (int64_t i = lo; i < hi; ++i) {
      const uint16_t b = src[i];
      // Negative (sign set) and not NaN: 0. Everything else (positive, +0, any NaN) is kept.
      dst[i] = (b >= 0x8000 && (b & 0x7FFF) <= lim) ? uint16_t{0} : b;
    }
  });
  return out;
}

namespace {
// out = y > 0 ? g : 0 on the bits; g and y share dtype, shape and strides.
Tensor relu_mask_bits(const Tensor& g, const Tensor& y) {
  Tensor out = empty_output(y.shape(), y.dtype(), y.device(), {&y});
  const auto* gp = static_cast<const uint16_t*>(g.data_ptr());
  const auto* yp = static_cast<const uint16_t*>(y.data_ptr());
  auto* op = static_cast<uint16_t*>(out.data_ptr());
  const uint16_t inf = inf_bits(y.dtype());
  if (verbose_level() > 0) log_elementwise(2, out, y.dtype());
  run_bits("backward", y.numel(), [=](int64_t lo, int64_t hi) {
    const uint16_t* __restrict gs = gp;
    const uint16_t* __restrict ys = yp;
    uint16_t* __restrict dst = op;
    const uint16_t lim = inf;
    for (int64_t i = lo; i < hi; ++i) {
      const uint16_t keep = static_cast<uint16_t>(ys[i] - 1) < lim ? 0xFFFF : 0;
      dst[i] = gs[i] & keep;  // both loads unconditional: the loop if-converts and vectorises
    }
  });
  return out;
}
}  // namespace

Tensor relu_backward(const Tensor& g, const Tensor& y) {
  if (relu_bits_apply(y) && g.dtype() == y.dtype() && g.shape() == y.shape() && g.strides() == y.strides())
    return relu_mask_bits(g, y);
  return map2(g, y, g.dtype(), [](auto v, auto yi) {
    const decltype(v) keep = v;  // loaded unconditionally: the select vectorises
    return yi > 0 ? keep : decltype(v)(0);
  }, "relu");
}

void log_elementwise(size_t inputs, const Tensor& out, DType in_dtype) {
  std::fprintf(stderr, "mixprec: elementwise %zu-input -> cpu loops  %s -> %s%s\n", inputs,
               std::string(dtype_name(in_dtype)).c_str(), desc(out).c_str(), out.is_contiguous() ? "" : " (strided)");
}

Tensor empty_output(const Shape& shape, DType dtype, Device device,
                    std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (t->shape() != shape || t->is_contiguous()) continue;
    if (!is_dense(t->shape(), t->strides())) continue;
    auto storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
    return Tensor::from_storage(std::move(storage), shape, t->strides(), 0, dtype);
  }
  return Tensor::empty(shape, {.dtype = dtype, .device = device});
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
template <class Fwd, class Bwd>
Tensor binary_op(OpId id, const Tensor& a0, const Tensor& b0, Fwd fwd, Bwd bwd) {
  Prepared p = autocast_inputs(id, {a0, b0});
  const Tensor& a = p.in[0];
  const Tensor& b = p.in[1];
  check_binary(op_name(id), a, b);
  const DType dt = promote(a.dtype(), b.dtype());
  Tensor out = map2(a, b, dt, fwd, op_name(id));
  if (graph::needs_grad({&a, &b})) {
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

// What a unary op's derivative reads: nothing (a constant), x, the output y, or both. Only
// that is saved for backward, so e.g. relu keeps its output alive, never its input.
enum class Needs { none, x, y, xy };

// Unary op: out = f(x); backward g * f'(x, out) in one elementwise pass.
template <class Fwd, class Dfdx>
Tensor unary_op(OpId id, const Tensor& x0, Fwd fwd, Dfdx dfdx, Needs needs) {
  Prepared p = autocast_inputs(id, {x0});
  const Tensor& x = p.in[0];
  check_floating(op_name(id), x, "input");
  Tensor out = map1(x, x.dtype(), fwd);
  if (graph::needs_grad({&x})) {
    const bool nx = needs == Needs::x || needs == Needs::xy, ny = needs == Needs::y || needs == Needs::xy;
    SavedTensor sx(nx ? x : Tensor()), so(ny ? out.detach() : Tensor());
    record(id, {x}, out, [=](const std::vector<Tensor>& g) {
      const std::string_view n = op_name(id);
      const Tensor& gi = g[0];
      const DType dt = gi.dtype();
      switch (needs) {
        case Needs::none:
          return std::vector<Tensor>{map1(gi, dt, [dfdx](auto v) { return v * dfdx(decltype(v)(0), decltype(v)(0)); })};
        case Needs::x:
          return std::vector<Tensor>{map2(gi, sx.unpack(n), dt, [dfdx](auto v, auto xi) { return v * dfdx(xi, xi); }, n)};
        case Needs::y:
          return std::vector<Tensor>{map2(gi, so.unpack(n), dt, [dfdx](auto v, auto yi) { return v * dfdx(yi, yi); }, n)};
        case Needs::xy:
          break;
      }
      return std::vector<Tensor>{map3(gi, sx.unpack(n), so.unpack(n), dt,
                                      [dfdx](auto v, auto xi, auto yi) { return v * dfdx(xi, yi); }, n)};
    });
  }
  return finish(id, p, out, x.dtype());
}

using Pair = std::pair<Tensor, Tensor>;

}  // namespace

// ---------------------------------------------------------------- arithmetic

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::add, a, b, [](auto x, auto y) { return x + y; },
                   [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool) {
                     return Pair{g, g};
                   });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::sub, a, b, [](auto x, auto y) { return x - y; },
                   [](const Tensor& g, const Tensor&, const Tensor&, const Tensor&, bool, bool gb) {
                     return Pair{g, gb ? neg(g) : Tensor()};
                   });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::mul, a, b, [](auto x, auto y) { return x * y; },
                   [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
                     return Pair{ga ? mul(g, b) : Tensor(), gb ? mul(g, a) : Tensor()};
                   });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::div, a, b, [](auto x, auto y) { return x / y; },
                   [](const Tensor& g, const Tensor&, const Tensor& b, const Tensor& out, bool ga, bool gb) {
                     // d(a/b)/da = 1/b; d(a/b)/db = -out/b
                     Tensor da = ga ? div(g, b) : Tensor();
                     Tensor db = gb ? map3(g, out, b, g.dtype(), [](auto gi, auto o, auto bi) { return -gi * o / bi; }) : Tensor();
                     return Pair{da, db};
                   });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::pow, a, b, [](auto x, auto y) { return std::pow(x, y); },
                   [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out, bool ga, bool gb) {
                     // d/da = b a^(b-1); d/db = out * log(a) (0 where a == 0)
                     Tensor da = ga ? mul(g, map2(a, b, g.dtype(), [](auto x, auto y) {
                                          return y == 0 ? decltype(x)(0) : y * std::pow(x, y - 1);
                                        })) : Tensor();
                     Tensor db = gb ? mul(g, map2(out, a, g.dtype(), [](auto o, auto x) {
                                          return x == 0 ? decltype(x)(0) : o * std::log(x);
                                        })) : Tensor();
                     return Pair{da, db};
                   });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::maximum, a, b, [](auto x, auto y) { return x >= y ? x : y; },
                   [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
                     Tensor da = ga ? map3(g, a, b, g.dtype(), [](auto gi, auto x, auto y) { return x >= y ? gi : decltype(gi)(0); }) : Tensor();
                     Tensor db = gb ? map3(g, a, b, g.dtype(), [](auto gi, auto x, auto y) { return x >= y ? decltype(gi)(0) : gi; }) : Tensor();
                     return Pair{da, db};
                   });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(OpId::minimum, a, b, [](auto x, auto y) { return x <= y ? x : y; },
                   [](const Tensor& g, const Tensor& a, const Tensor& b, const Tensor&, bool ga, bool gb) {
                     Tensor da = ga ? map3(g, a, b, g.dtype(), [](auto gi, auto x, auto y) { return x <= y ? gi : decltype(gi)(0); }) : Tensor();
                     Tensor db = gb ? map3(g, a, b, g.dtype(), [](auto gi, auto x, auto y) { return x <= y ? decltype(gi)(0) : gi; }) : Tensor();
                     return Pair{da, db};
                   });
}

Tensor add(const Tensor& x, double c) {
  return unary_op(OpId::add_scalar, x, [c](auto v) { return v + static_cast<decltype(v)>(c); },
                  [](auto xi, auto) { return decltype(xi)(1); }, Needs::none);
}

Tensor mul(const Tensor& x, double c) {
  return unary_op(OpId::mul_scalar, x, [c](auto v) { return v * static_cast<decltype(v)>(c); },
                  [c](auto xi, auto) { return static_cast<decltype(xi)>(c); }, Needs::none);
}

Tensor pow(const Tensor& x, double e) {
  return unary_op(OpId::pow_scalar, x, [e](auto v) { return std::pow(v, static_cast<decltype(v)>(e)); },
                  [e](auto xi, auto) {
                    using C = decltype(xi);
                    return e == 0 ? C(0) : static_cast<C>(e) * std::pow(xi, static_cast<C>(e - 1));
                  }, Needs::x);
}

// ---------------------------------------------------------------- unary math

Tensor neg(const Tensor& x) {
  return unary_op(OpId::neg, x, [](auto v) { return -v; }, [](auto xi, auto) { return decltype(xi)(-1); }, Needs::none);
}
Tensor exp(const Tensor& x) {
  return unary_op(OpId::exp, x, [](auto v) { return std::exp(v); }, [](auto, auto y) { return y; }, Needs::y);
}
Tensor log(const Tensor& x) {
  return unary_op(OpId::log, x, [](auto v) { return std::log(v); }, [](auto xi, auto) { return 1 / xi; }, Needs::x);
}
Tensor sqrt(const Tensor& x) {
  return unary_op(OpId::sqrt, x, [](auto v) { return std::sqrt(v); },
                  [](auto, auto y) { return decltype(y)(0.5) / y; }, Needs::y);
}
Tensor rsqrt(const Tensor& x) {
  return unary_op(OpId::rsqrt, x, [](auto v) { return 1 / std::sqrt(v); },
                  [](auto xi, auto y) { return decltype(y)(-0.5) * y / xi; }, Needs::xy);
}
Tensor abs(const Tensor& x) {
  return unary_op(OpId::abs, x, [](auto v) { return std::abs(v); }, [](auto xi, auto) {
    using C = decltype(xi);
    return xi > 0 ? C(1) : (xi < 0 ? C(-1) : C(0));
  }, Needs::x);
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  MIXPREC_CHECK(!(lo && hi && *lo > *hi), "clamp: min ", *lo, " is greater than max ", *hi);
  const double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
  return unary_op(OpId::clamp, x,
                  [l, h](auto v) {
                    using C = decltype(v);
                    return v < static_cast<C>(l) ? static_cast<C>(l) : (v > static_cast<C>(h) ? static_cast<C>(h) : v);
                  },
                  [l, h](auto xi, auto) {
                    using C = decltype(xi);
                    return (xi >= static_cast<C>(l) && xi <= static_cast<C>(h)) ? C(1) : C(0);
                  }, Needs::x);
}

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  MIXPREC_CHECK(cond.defined() && !is_floating(cond.dtype()), "where: expected a bool/u8 condition, got ",
                cond.defined() ? std::string(dtype_name(cond.dtype())) : "undefined");
  Prepared p = autocast_inputs(OpId::where, {a0, b0});
  const Tensor& a = p.in[0];
  const Tensor& b = p.in[1];
  check_binary("where", a, b);
  const DType dt = promote(a.dtype(), b.dtype());
  Tensor out = map3(cond, a, b, dt, [](auto c, auto x, auto y) { return c != 0 ? x : y; }, "where");
  if (graph::needs_grad({&a, &b})) {
    SavedTensor sc(cond);
    const Shape sha = a.shape(), shb = b.shape();
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    record(OpId::where, {a, b}, out, [=](const std::vector<Tensor>& g) {
      const Tensor c = sc.unpack("where");
      Tensor zero = zeros({}, {.dtype = g[0].dtype()});
      Tensor da = ga ? reduce_to_shape(map3(c, g[0], zero, g[0].dtype(), [](auto ci, auto gi, auto z) { return ci != 0 ? gi : z; }), sha) : Tensor();
      Tensor db = gb ? reduce_to_shape(map3(c, g[0], zero, g[0].dtype(), [](auto ci, auto gi, auto z) { return ci != 0 ? z : gi; }), shb) : Tensor();
      return std::vector<Tensor>{da, db};
    });
  }
  return finish(OpId::where, p, out, dt);
}

Tensor masked_fill(const Tensor& x0, const Tensor& mask, double value) {
  MIXPREC_CHECK(mask.defined() && !is_floating(mask.dtype()), "masked_fill: expected a bool/u8 mask, got ",
                mask.defined() ? std::string(dtype_name(mask.dtype())) : "undefined");
  Prepared p = autocast_inputs(OpId::masked_fill, {x0});
  const Tensor& x = p.in[0];
  check_floating("masked_fill", x, "input");
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  MIXPREC_CHECK(shape == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
                " must broadcast to the input shape ", shape_str(x.shape()));
  Tensor out = map2(x, mask, x.dtype(), [value](auto v, auto m) {
    return m != 0 ? static_cast<decltype(v)>(value) : v;
  }, "masked_fill");
  if (graph::needs_grad({&x})) {
    SavedTensor sm(mask);
    record(OpId::masked_fill, {x}, out, [sm](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{map2(g[0], sm.unpack("masked_fill"), g[0].dtype(),
                                      [](auto gi, auto m) { return m != 0 ? decltype(gi)(0) : gi; })};
    });
  }
  return finish(OpId::masked_fill, p, out, x.dtype());
}

// ---------------------------------------------------------------- activations

// NaN propagates (as in PyTorch), so an overflow upstream stays visible to the finite checks.
// The gradient passes where y > 0 and is 0 elsewhere, whatever g holds there (PyTorch's
// threshold_backward; the same as the ReLU fused into conv2d and dense). f16/bf16 tensors in
// one dense block take the bit kernels above (the same results, no widening to f32).
Tensor relu(const Tensor& x0) {
  Prepared p = autocast_inputs(OpId::relu, {x0});
  const Tensor& x = p.in[0];
  check_floating("relu", x, "input");
  Tensor out = relu_bits_apply(x)
                         ? relu_bits(x)
                         : map1(x, x.dtype(), [](auto v) { return (v > 0) | (v != v) ? v : decltype(v)(0); });
  if (graph::needs_grad({&x})) {
    SavedTensor so(out.detach());
    record(OpId::relu, {x}, out, [so](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{relu_backward(g[0], so.unpack("relu"))};
    });
  }
  return finish(OpId::relu, p, out, x.dtype());
}

Tensor leaky_relu(const Tensor& x, double slope) {
  return unary_op(OpId::leaky_relu, x,
                  [slope](auto v) { return v > 0 ? v : v * static_cast<decltype(v)>(slope); },
                  [slope](auto xi, auto) { return xi > 0 ? decltype(xi)(1) : static_cast<decltype(xi)>(slope); }, Needs::x);
}

Tensor gelu(const Tensor& x, GeluApproximation approx) {
  if (approx == GeluApproximation::tanh) {
    return unary_op(OpId::gelu, x,
                    [](auto v) {
                      using C = decltype(v);
                      const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
                      return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
                    },
                    [](auto v, auto) {
                      using C = decltype(v);
                      const C k = static_cast<C>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
                      const C t = std::tanh(k * (v + C(0.044715) * v * v * v));
                      return C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * k * (C(1) + C(3 * 0.044715) * v * v);
                    }, Needs::x);
  }
  return unary_op(OpId::gelu, x,
                  [](auto v) {
                    using C = decltype(v);
                    return C(0.5) * v * (C(1) + std::erf(v * static_cast<C>(1 / std::numbers::sqrt2)));
                  },
                  [](auto v, auto) {
                    using C = decltype(v);
                    const C cdf = C(0.5) * (C(1) + std::erf(v * static_cast<C>(1 / std::numbers::sqrt2)));
                    const C pdf = std::exp(C(-0.5) * v * v) * static_cast<C>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
                    return cdf + v * pdf;
                  }, Needs::x);
}

Tensor sigmoid(const Tensor& x) {
  return unary_op(OpId::sigmoid, x, [](auto v) { return 1 / (1 + std::exp(-v)); },
                  [](auto, auto y) { return y * (1 - y); }, Needs::y);
}

Tensor tanh(const Tensor& x) {
  return unary_op(OpId::tanh, x, [](auto v) { return std::tanh(v); }, [](auto, auto y) { return 1 - y * y; }, Needs::y);
}

Tensor silu(const Tensor& x) {
  return unary_op(OpId::silu, x, [](auto v) { return v / (1 + std::exp(-v)); },
                  [](auto v, auto) {
                    const auto s = 1 / (1 + std::exp(-v));
                    return s * (1 + v * (1 - s));
                  }, Needs::x);
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
