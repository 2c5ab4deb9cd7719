// Reference softmax / log-softmax, forward and backward: for each (outer, inner) position the
// axis is walked with stride `inner`; max first, then the sum of exp(x - max), all in
// compute_t<T>; each output rounded once. One thread per outer index: thread-count independent.
// A row without a finite max is NaN throughout; fill_nan_rows / nan_where_nan repair other
// kernels' outputs to that rule.
#include <cmath>
#include <limits>

#include "ops/ref/kernels.h"

namespace mixprec::ops {
namespace {

struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisSplit split(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis)
      a.outer *= s[static_cast<size_t>(d)];
    else if (d == axis)
      a.n = s[static_cast<size_t>(d)];
    else
      a.inner *= s[static_cast<size_t>(d)];
  }
  return a;
}

}  // namespace

namespace ref {

void softmax_fwd(const SoftmaxFwdProblem& p) {
  const AxisSplit a = split(p.x.shape(), p.axis);
  if (a.n == 0) return;
  visit_float(p.x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const T* xb = static_cast<const T*>(p.x.data_ptr());
    T* yb = static_cast<T*>(p.y.data_ptr());
#pragma omp parallel for schedule(static) if (p.x.numel() > 32768)
    for (int64_t o = 0; o < a.outer; ++o) {
      for (int64_t i = 0; i < a.inner; ++i) {
        const T* x = xb + o * a.n * a.inner + i;
        T* y = yb + o * a.n * a.inner + i;
        C mx = -std::numeric_limits<C>::infinity();
        int64_t kmax = 0;
        for (int64_t k = 0; k < a.n; ++k)
          if (const C v = load(x[k * a.inner]); v > mx) mx = v, kmax = k;
        if (!std::isfinite(mx)) {  // all -inf, or a +inf: no distribution
          for (int64_t k = 0; k < a.n; ++k)
            y[k * a.inner] = store<T>(std::numeric_limits<C>::quiet_NaN());
          continue;
        }
        // sum = 1 + rest (the max's own term is exactly 1); log1p(rest) keeps log-probs near 0
        // accurate to their last digit. A NaN in the row makes rest, and so the row, NaN.
        C rest = 0;
        for (int64_t k = 0; k < a.n; ++k)
          if (k != kmax) rest += std::exp(load(x[k * a.inner]) - mx);
        const C sum = 1 + rest;
        if (p.log) {
          const C lsum = std::log1p(rest);
          for (int64_t k = 0; k < a.n; ++k)
            y[k * a.inner] = store<T>((load(x[k * a.inner]) - mx) - lsum);
        } else {
          const C inv = C(1) / sum;
          for (int64_t k = 0; k < a.n; ++k)
            y[k * a.inner] = store<T>(std::exp(load(x[k * a.inner]) - mx) * inv);
        }
      }
    }
  });
}

void softmax_bwd(const SoftmaxBwdProblem& p) {
  const AxisSplit a = split(p.y.shape(), p.axis);
  if (a.n == 0) return;
  visit_float(p.y.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const T* yb = static_cast<const T*>(p.y.data_ptr());
    const T* gb = static_cast<const T*>(p.dy.data_ptr());
    T* db = static_cast<T*>(p.dx.data_ptr());
#pragma omp parallel for schedule(static) if (p.y.numel() > 32768)
    for (int64_t o = 0; o < a.outer; ++o) {
      for (int64_t i = 0; i < a.inner; ++i) {
        const int64_t base = o * a.n * a.inner + i;
        const T *y = yb + base, *g = gb + base;
        T* dx = db + base;
        C s = 0;
        for (int64_t k = 0; k < a.n; ++k)
          s += p.log ? load(g[k * a.inner]) : load(g[k * a.inner]) * load(y[k * a.inner]);
        for (int64_t k = 0; k < a.n; ++k) {
          const C yk = load(y[k * a.inner]), gk = load(g[k * a.inner]);
          dx[k * a.inner] = store<T>(p.log ? gk - std::exp(yk) * s : yk * (gk - s));
        }
      }
    }
  });
}

}  // namespace ref

// ---------------------------------------------------------------- shared (softmax_problem.h)

namespace {
// True when any element of t (contiguous) is NaN.
template <class T> bool any_nan(const T* p, int64_t n) {
  int any = 0;
#pragma omp parallel for simd reduction(| : any) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const auto v = load(p[i]);
    any |= v != v;
  }
  return any != 0;
}
}  // namespace

void fill_nan_rows(const Tensor& y, int64_t axis) {
  const AxisSplit a = split(y.shape(), axis);
  visit_float(y.dtype(), [&]<class T>() {
    T* yb = static_cast<T*>(y.data_ptr());
    if (!any_nan(yb, y.numel())) return;
    const T nan = store<T>(std::numeric_limits<float>::quiet_NaN());
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        T* row = yb + o * a.n * a.inner + i;
        bool has = false;
        for (int64_t k = 0; k < a.n && !has; ++k) has = std::isnan(load(row[k * a.inner]));
        if (has)
          for (int64_t k = 0; k < a.n; ++k) row[k * a.inner] = nan;
      }
  });
}

void nan_where_nan(const Tensor& y, const Tensor& dx) {
  visit_float(y.dtype(), [&]<class T>() {
    const T* yb = static_cast<const T*>(y.data_ptr());
    T* db = static_cast<T*>(dx.data_ptr());
    if (!any_nan(yb, y.numel())) return;
    for (int64_t i = 0; i < y.numel(); ++i)
      if (std::isnan(load(yb[i]))) db[i] = yb[i];
  });
}

}  // namespace mixprec::ops
