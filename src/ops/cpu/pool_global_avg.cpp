// Global average pooling (kernel = the whole input, no padding; ResNet's head), forward and
// backward, every float dtype, dense NCHW or channels-last. Memory-bound plain loops: NCHW rows
// are summed with fixed-width simd reductions (f16 widened in chunks by the vectorised
// converters first: its scalar load is slow), channels-last images accumulate channel vectors.
// Each output is reduced by one thread in a fixed order (thread-count independent). On this CPU
// they run faster than oneDNN's pooling on these shapes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "mixprec/convert.h"
#include "ops/cpu/kernels.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kRow = 256;

// Sum of n contiguous elements in the compute type with a fixed-width simd reduction; f16 is
// widened in chunks by the vectorised converters first (its scalar load is slow).
template <class T> compute_t<T> row_sum(const T* p, int64_t n) {
  using C = compute_t<T>;
  C total = 0;
  if constexpr (!std::is_same_v<T, f16>) {
#pragma omp simd reduction(+ : total)
    for (int64_t i = 0; i < n; ++i) total += load(p[i]);
  } else {
    alignas(64) float buf[kRow];
    for (int64_t s = 0; s < n; s += kRow) {
      const int64_t m = std::min(kRow, n - s);
      convert_row(p + s, dtype_of<T>(), buf, DType::f32, m);
      C part = 0;
#pragma omp simd reduction(+ : part)
      for (int64_t i = 0; i < m; ++i) part += buf[i];
      total += part;
    }
  }
  return total;
}

// acc[0, n) += row (widened).
template <class T> void add_row(compute_t<T>* acc, const T* row, int64_t n) {
  if constexpr (!std::is_same_v<T, f16>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) acc[i] += load(row[i]);
  } else {
    alignas(64) float buf[kRow];
    for (int64_t s = 0; s < n; s += kRow) {
      const int64_t m = std::min(kRow, n - s);
      convert_row(row + s, dtype_of<T>(), buf, DType::f32, m);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) acc[s + i] += buf[i];
    }
  }
}

template <class T> void gap_fwd(const PoolFwdProblem& p) {
  using C = compute_t<T>;
  const PoolGeometry& g = p.g;
  const int64_t hw = g.h * g.w;
  const T* x = static_cast<const T*>(p.x.data_ptr());
  T* y = static_cast<T*>(p.y.data_ptr());  // [n, c] in either layout
  if (g.layout == ImageLayout::nchw) {
#pragma omp parallel for schedule(static) if (g.worth_threads())
    for (int64_t nc = 0; nc < g.n * g.c; ++nc)
      y[nc] = store<T>(row_sum(x + nc * hw, hw) / static_cast<C>(hw));
    return;
  }
#pragma omp parallel if (g.worth_threads())
  {
    std::vector<C> acc(static_cast<size_t>(g.c));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t i = 0; i < hw; ++i) add_row(acc.data(), x + (n * hw + i) * g.c, g.c);
      for (int64_t c = 0; c < g.c; ++c)
        y[n * g.c + c] = store<T>(acc[static_cast<size_t>(c)] / static_cast<C>(hw));
    }
  }
}

template <class T> void gap_bwd(const PoolBwdProblem& p) {
  using C = compute_t<T>;
  const PoolGeometry& g = p.g;
  const int64_t hw = g.h * g.w;
  const T* dy = static_cast<const T*>(p.dy.data_ptr());  // [n, c] in either layout
  T* dx = static_cast<T*>(p.dx.data_ptr());
  const bool nchw = g.layout == ImageLayout::nchw;
#pragma omp parallel for schedule(static) if (g.worth_threads())
  for (int64_t n = 0; n < g.n; ++n) {
    if (nchw) {
      for (int64_t c = 0; c < g.c; ++c) {
        const T v = store<T>(load(dy[n * g.c + c]) / static_cast<C>(hw));
        std::fill(dx + (n * g.c + c) * hw, dx + (n * g.c + c + 1) * hw, v);
      }
      continue;
    }
    T* first = dx + n * hw * g.c;
    for (int64_t c = 0; c < g.c; ++c)
      first[c] = store<T>(load(dy[n * g.c + c]) / static_cast<C>(hw));
    for (int64_t i = 1; i < hw; ++i)
      std::memcpy(first + i * g.c, first, static_cast<size_t>(g.c) * sizeof(T));
  }
}

}  // namespace

std::string pool_global_avg_fwd_declines(const PoolFwdProblem& p) {
  return p.g.is_global_avg() ? "" : "not global average pooling";
}
std::string pool_global_avg_bwd_declines(const PoolBwdProblem& p) {
  return p.g.is_global_avg() ? "" : "not global average pooling";
}
void pool_global_avg_fwd(const PoolFwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() { gap_fwd<T>(p); });
}
void pool_global_avg_bwd(const PoolBwdProblem& p) {
  visit_float(p.dy.dtype(), [&]<class T>() { gap_bwd<T>(p); });
}

}  // namespace mixprec::ops::cpu
