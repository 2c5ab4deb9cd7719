// Reference convolution: direct loops over compute-type (f32, or f64 for f64) NCHW copies of
// the operands. Forward and backward-data run one OpenMP task per output plane (n, channel) and
// keep a plane accumulator; backward-weights runs one task per (cout, cin/groups) pair. Inner
// loops walk contiguous rows (gathers only when the stride is > 1). Results do not depend on the
// thread count: each output element is summed by one task in a fixed order.
#include "ops/ref/kernels.h"

#include <algorithm>
#include <vector>

#include "ops/layout.h"

namespace mixprec::ops::ref {
using detail::ImageLayout;

namespace {

// The output columns o in [lo, hi) for which o * stride + off lands inside [0, size).
struct Span {
  int64_t lo, hi;
};
Span valid_span(int64_t off, int64_t stride, int64_t size, int64_t count) {
  const int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t hi = size - 1 - off >= 0 ? std::min(count, (size - 1 - off) / stride + 1) : 0;
  return {lo, std::max(lo, hi)};
}

// Small problems (gradient checks, tests) run on the calling thread.
bool worth_threads(const ConvGeometry& g) {
  return g.n * g.cout * g.oh * g.ow * g.cin_g() * g.kh * g.kw > (1 << 16);
}

template <class C> constexpr DType compute_dtype() {
  return std::is_same_v<C, double> ? DType::f64 : DType::f32;
}

// A row-major compute-type copy of a 4-D tensor (no copy if it already is one).
template <class C> Tensor dense(const Tensor& t) {
  return detail::to_image(t, ImageLayout::nchw, compute_dtype<C>());
}

// Writes plane [rows, cols] of compute values into element (n, c) of a strided 4-D tensor.
template <class T, class C, class F>
void store_plane(const Tensor& out, int64_t n, int64_t c, int64_t rows, int64_t cols, F value) {
  const Strides& s = out.strides();
  T* base = static_cast<T*>(out.data_ptr()) + n * s[0] + c * s[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < cols; ++q) base[r * s[2] + q * s[3]] = store<T>(value(r * cols + q));
}

template <class T> void fwd(const ConvFwdProblem& p) {
  using C = compute_t<T>;
  const ConvGeometry& g = p.g;
  const Tensor xt = dense<C>(p.x), wt = dense<C>(p.w);
  const Tensor bt = p.b.defined() ? ops::amp_cast(p.b, compute_dtype<C>()).contiguous() : Tensor();
  const C* x = static_cast<const C*>(xt.data_ptr());
  const C* w = static_cast<const C*>(wt.data_ptr());
  const C* b = bt.defined() ? static_cast<const C*>(bt.data_ptr()) : nullptr;
  const int64_t plane = g.oh * g.ow, tasks = g.n * g.cout;
#pragma omp parallel if (worth_threads(g))
  {
    std::vector<C> acc(static_cast<size_t>(plane));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / g.cout, co = task % g.cout, grp = co / g.cout_g();
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t ci = 0; ci < g.cin_g(); ++ci) {
        const C* xp = x + (n * g.cin + grp * g.cin_g() + ci) * g.h * g.w;
        const C* wp = w + (co * g.cin_g() + ci) * g.kh * g.kw;
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            const C wv = wp[i * g.kw + j];
            const int64_t off = j * g.dil_w - g.pad_l;
            const Span sp = valid_span(off, g.stride_w, g.w, g.ow);
            for (int64_t oy = 0; oy < g.oh; ++oy) {
              const int64_t iy = oy * g.stride_h - g.pad_t + i * g.dil_h;
              if (iy < 0 || iy >= g.h) continue;
              const C* xr = xp + iy * g.w + off;
              C* ar = acc.data() + oy * g.ow;
              for (int64_t o = sp.lo; o < sp.hi; ++o) ar[o] += wv * xr[o * g.stride_w];
            }
          }
      }
      const C bias = b ? b[co] : C(0);
      store_plane<T, C>(p.y, n, co, g.oh, g.ow, [&](int64_t k) {
        const C v = acc[static_cast<size_t>(k)] + bias;
        return p.relu ? (v > 0 || v != v ? v : C(0)) : v;  // NaN propagates, as ops::relu
      });
    }
  }
}

template <class T> void bwd_data(const ConvBwdDataProblem& p) {
  using C = compute_t<T>;
  const ConvGeometry& g = p.g;
  const Tensor dyt = dense<C>(p.dy), wt = dense<C>(p.w);
  const C* dy = static_cast<const C*>(dyt.data_ptr());
  const C* w = static_cast<const C*>(wt.data_ptr());
  const int64_t tasks = g.n * g.cin;
#pragma omp parallel if (worth_threads(g))
  {
    std::vector<C> acc(static_cast<size_t>(g.h * g.w));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t n = task / g.cin, ci = task % g.cin;
      const int64_t grp = ci / g.cin_g(), cil = ci % g.cin_g();
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t co = grp * g.cout_g(); co < (grp + 1) * g.cout_g(); ++co) {
        const C* dyp = dy + (n * g.cout + co) * g.oh * g.ow;
        const C* wp = w + (co * g.cin_g() + cil) * g.kh * g.kw;
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            const C wv = wp[i * g.kw + j];
            const int64_t off = j * g.dil_w - g.pad_l;
            const Span sp = valid_span(off, g.stride_w, g.w, g.ow);
            for (int64_t oy = 0; oy < g.oh; ++oy) {
              const int64_t iy = oy * g.stride_h - g.pad_t + i * g.dil_h;
              if (iy < 0 || iy >= g.h) continue;
              const C* dr = dyp + oy * g.ow;
              C* ar = acc.data() + iy * g.w + off;
              for (int64_t o = sp.lo; o < sp.hi; ++o) ar[o * g.stride_w] += wv * dr[o];
            }
          }
      }
      store_plane<T, C>(p.dx, n, ci, g.h, g.w,
                        [&](int64_t k) { return acc[static_cast<size_t>(k)]; });
    }
  }
}

// dw[co, ci, i, j] = sum over n, oy, ox of dy[n, co, oy, ox] * x[n, grp*cin_g + ci, iy, ix];
// db[co] = sum of dy[n, co]. Row sums use a fixed-width simd reduction (same on every run).
template <class T> void bwd_weights(const ConvBwdWeightsProblem& p) {
  using C = compute_t<T>;
  const ConvGeometry& g = p.g;
  const Tensor xt = p.dw.defined() ? dense<C>(p.x) : Tensor(), dyt = dense<C>(p.dy);
  const C* x = xt.defined() ? static_cast<const C*>(xt.data_ptr()) : nullptr;
  const C* dy = static_cast<const C*>(dyt.data_ptr());
  MIXPREC_ASSERT(!p.dw.defined() || p.dw.dtype() == compute_dtype<C>(), "conv2d: dw dtype");
  MIXPREC_ASSERT(!p.db.defined() || p.db.dtype() == compute_dtype<C>(), "conv2d: db dtype");
  C* dw = p.dw.defined() ? static_cast<C*>(p.dw.data_ptr()) : nullptr;
  C* db = p.db.defined() ? static_cast<C*>(p.db.data_ptr()) : nullptr;
  const int64_t tasks = dw ? g.cout * g.cin_g() : 0;
#pragma omp parallel for schedule(static) if (worth_threads(g))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t co = task / g.cin_g(), cil = task % g.cin_g();
    const int64_t ci = co / g.cout_g() * g.cin_g() + cil;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t off = j * g.dil_w - g.pad_l;
        const Span sp = valid_span(off, g.stride_w, g.w, g.ow);
        C total = 0;
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.stride_h - g.pad_t + i * g.dil_h;
            if (iy < 0 || iy >= g.h) continue;
            const C* dr = dy + ((n * g.cout + co) * g.oh + oy) * g.ow;
            const C* xr = x + ((n * g.cin + ci) * g.h + iy) * g.w + off;
            C row = 0;
#pragma omp simd reduction(+ : row)
            for (int64_t o = sp.lo; o < sp.hi; ++o) row += dr[o] * xr[o * g.stride_w];
            total += row;
          }
        dw[(task * g.kh + i) * g.kw + j] = total;
      }
  }
  if (!db) return;
#pragma omp parallel for schedule(static) if (worth_threads(g))
  for (int64_t co = 0; co < g.cout; ++co) {
    C total = 0;
    for (int64_t n = 0; n < g.n; ++n) {
      const C* dr = dy + (n * g.cout + co) * g.oh * g.ow;
      C row = 0;
#pragma omp simd reduction(+ : row)
      for (int64_t k = 0; k < g.oh * g.ow; ++k) row += dr[k];
      total += row;
    }
    db[co] = total;
  }
}

}  // namespace

void conv_fwd(const ConvFwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() { fwd<T>(p); });
}
void conv_bwd_data(const ConvBwdDataProblem& p) {
  visit_float(p.dy.dtype(), [&]<class T>() { bwd_data<T>(p); });
}
void conv_bwd_weights(const ConvBwdWeightsProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() { bwd_weights<T>(p); });
}

}  // namespace mixprec::ops::ref
