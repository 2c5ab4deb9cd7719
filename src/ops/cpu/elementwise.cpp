// The cpu backend's pointwise kernels: cpu::pointwise runs any formula of elementwise_problem.h
// through the vectorised engine (cpu/elementwise.h), and cpu::relu_bits16 runs ReLU and its
// gradient mask on the bits of dense f16/bf16 tensors: one integer compare per element, no
// widening. y = relu(x) keeps x where x > 0 or x is NaN (+0 stays +0, -0 becomes +0); the mask
// passes g where y > 0 (1 <= bits <= +inf's bits) and gives +0 elsewhere, NaN outputs included
// (PyTorch's threshold_backward): exactly what the f32 formulas compute, without the conversions.
#include "ops/cpu/elementwise.h"

#include <cstdio>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace mixprec::ops::cpu {

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

void log_elementwise(size_t inputs, const Tensor& out, DType in_dtype) {
  std::fprintf(stderr, "mixprec: elementwise %zu-input -> cpu loops  %s -> %s%s\n", inputs,
               std::string(dtype_name(in_dtype)).c_str(), desc(out).c_str(),
               out.is_contiguous() ? "" : " (strided)");
}

// ---------------------------------------------------------------- any formula

void pointwise(const PointwiseProblem& p) {
  visit_pointwise(p, [&](const auto& f) {
    constexpr int n = std::remove_cvref_t<decltype(f)>::arity;
    const bool f64 = computes_in_f64(p, n);
    std::array<const Tensor*, n> ins;
    for (int k = 0; k < n; ++k) ins[static_cast<size_t>(k)] = &p.in[static_cast<size_t>(k)];
    if (f64)
      run_elementwise<double>(p.out, ins, f);
    else
      run_elementwise<float>(p.out, ins, f);
  });
}

// ---------------------------------------------------------------- ReLU on the bits

namespace {

bool dense_16bit(const Tensor& t) {
  return (t.dtype() == DType::bf16 || t.dtype() == DType::f16) && is_dense(t.shape(), t.strides());
}

uint16_t inf_bits(DType d) { return d == DType::bf16 ? 0x7F80 : 0x7C00; }

// The two loops below are written once and compiled per instruction set: the library's baseline
// is SSE2 (8 lanes of 16 bits), so each OpenMP chunk calls the loop through a wrapper whose target
// lets the compiler vectorise the inlined loop with AVX2 (16 lanes) or AVX-512BW (32 lanes).
// The same integer compares at every width: the bits do not depend on it.
template <class Loop>
[[gnu::target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")]] void run_avx512(
    const Loop& loop, int64_t lo, int64_t hi) {
  loop(lo, hi);
}
template <class Loop>
[[gnu::target("avx2")]] void run_avx2(const Loop& loop, int64_t lo, int64_t hi) {
  loop(lo, hi);
}

// Runs loop over [0, n) in OpenMP chunks of 4096 elements, with isa's vectors.
template <class Loop> void run_bits(int64_t n, simd::Isa isa, const Loop& loop) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < (n + 4095) / 4096; ++c) {
    const int64_t lo = c * 4096, hi = std::min(n, c * 4096 + 4096);
    if (isa == simd::Isa::avx512)
      run_avx512(loop, lo, hi);
    else if (isa == simd::Isa::avx2)
      run_avx2(loop, lo, hi);
    else
      loop(lo, hi);
  }
}

// y = relu(x) on the bits. Locals with __restrict: the uint16_t stores could otherwise alias the
// pointers, which the compiler then reloads every iteration instead of vectorising.
struct ReluForwardLoop {
  const uint16_t* x;
  uint16_t* out;
  uint16_t lim;  // +inf's bits
  [[gnu::always_inline]] inline void operator()(int64_t lo, int64_t hi) const {
    const uint16_t* __restrict src = x;
    uint16_t* __restrict dst = out;
    const uint16_t l = lim;
    for (int64_t i = lo; i < hi; ++i) {
      const uint16_t b = src[i];
      // Negative (sign set) and not NaN: 0. Everything else (positive, +0, any NaN) is kept.
      dst[i] = (b >= 0x8000 && (b & 0x7FFF) <= l) ? uint16_t{0} : b;
    }
  }
};

// out = y > 0 ? g : 0 on the bits.
struct ReluMaskLoop {
  const uint16_t* g;
  const uint16_t* y;
  uint16_t* out;
  uint16_t lim;
  [[gnu::always_inline]] inline void operator()(int64_t lo, int64_t hi) const {
    const uint16_t* __restrict gs = g;
    const uint16_t* __restrict ys = y;
    uint16_t* __restrict dst = out;
    const uint16_t l = lim;
    for (int64_t i = lo; i < hi; ++i) {
      const uint16_t keep = static_cast<uint16_t>(ys[i] - 1) < l ? 0xFFFF : 0;
      dst[i] = gs[i] & keep;  // both loads unconditional: the loop if-converts and vectorises
    }
  }
};

void relu_forward_bits(const Tensor& x, const Tensor& out, simd::Isa isa) {
  if (verbose_level() > 0) log_elementwise(1, out, x.dtype());
  run_bits(x.numel(), isa,
           ReluForwardLoop{static_cast<const uint16_t*>(x.data_ptr()),
                           static_cast<uint16_t*>(out.data_ptr()), inf_bits(x.dtype())});
}

// g, y and out share dtype, shape and strides.
void relu_mask_bits(const Tensor& g, const Tensor& y, const Tensor& out, simd::Isa isa) {
  if (verbose_level() > 0) log_elementwise(2, out, y.dtype());
  run_bits(y.numel(), isa,
           ReluMaskLoop{static_cast<const uint16_t*>(g.data_ptr()),
                        static_cast<const uint16_t*>(y.data_ptr()),
                        static_cast<uint16_t*>(out.data_ptr()), inf_bits(y.dtype())});
}

// out lies over the same elements as t (same strides, or both contiguous).
bool same_layout(const Tensor& t, const Tensor& out) {
  return t.dtype() == out.dtype() && t.shape() == out.shape() &&
         (t.strides() == out.strides() || (t.is_contiguous() && out.is_contiguous()));
}

}  // namespace

std::string relu_bits16_declines(const PointwiseProblem& p) {
  if (p.fn == PointwiseFn::relu) {
    if (!dense_16bit(p.in[0])) return "not a dense f16/bf16 tensor";
    return same_layout(p.in[0], p.out) ? "" : "output laid out differently";
  }
  if (p.fn == PointwiseFn::relu_mask) {
    const Tensor &g = p.in[0], &y = p.in[1];
    if (!dense_16bit(y)) return "not a dense f16/bf16 tensor";
    if (g.dtype() != y.dtype() || g.shape() != y.shape() || g.strides() != y.strides())
      return "gradient and output differ in dtype or layout";
    return same_layout(y, p.out) ? "" : "output laid out differently";
  }
  return "not relu";
}

void relu_bits16_isa(const PointwiseProblem& p, simd::Isa isa) {
  if (p.fn == PointwiseFn::relu)
    relu_forward_bits(p.in[0], p.out, isa);
  else
    relu_mask_bits(p.in[0], p.in[1], p.out, isa);
}

void relu_bits16(const PointwiseProblem& p) { relu_bits16_isa(p, simd::best_isa()); }

}  // namespace mixprec::ops::cpu
