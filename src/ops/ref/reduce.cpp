// Reference reductions (the only ones): sum (and mean, a scaled sum), max with the index of the
// first maximal element (NaN wins) and its backward scatter. Kernels walk the input through its
// strides (no copy): each output element is reduced by one thread in a fixed order, accumulating
// in compute_t (f32 for f32/f16/bf16, f64 for f64). Large reductions into few outputs split the
// reduced space into fixed-size blocks whose partial sums are combined in block order, so results
// do not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/ref/kernels.h"

namespace mixprec::ops::ref {
namespace {

int64_t offset_of(int64_t flat, const Shape& sizes, const Strides& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    off += (flat % sizes[d]) * strides[d];
    flat /= sizes[d];
  }
  return off;
}

// Calls body(start, end, base_offset_of_output) ... through a generic walker: for output o,
// reduce elements r in [r0, r1) of the reduced index space with `step(acc, value, r)`.
template <class T, class Acc, class Step>
Acc reduce_range(const T* base, const ReducePlan& p, int64_t r0, int64_t r1, Acc acc, Step step) {
  // Innermost reduced dim runs contiguously in r; the rest is recomputed per run.
  const size_t nr = p.red_sizes.size();
  const int64_t inner = nr ? p.red_sizes[nr - 1] : 1;
  const int64_t inner_stride = nr ? p.red_strides[nr - 1] : 0;
  int64_t r = r0;
  while (r < r1) {
    const int64_t in_pos = r % inner;
    const int64_t run = std::min(inner - in_pos, r1 - r);
    int64_t off = in_pos * inner_stride;
    int64_t rest = r / inner;
    for (size_t d = nr > 0 ? nr - 1 : 0; d-- > 0;) {
      off += (rest % p.red_sizes[d]) * p.red_strides[d];
      rest /= p.red_sizes[d];
    }
    const T* q = base + off;
    for (int64_t i = 0; i < run; ++i) acc = step(acc, load(q[i * inner_stride]), r + i);
    r += run;
  }
  return acc;
}

constexpr int64_t kBlock = 1 << 16;

}  // namespace

void reduce_sum(const ReduceSumProblem& pr) {
  const Tensor& x = pr.x;
  const ReducePlan& p = pr.plan;
  const double scale = pr.scale;
  const int64_t n_out = pr.out.numel();
  visit_float(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T* xb = static_cast<const T*>(x.data_ptr());
    T* ob = static_cast<T*>(pr.out.data_ptr());
    auto add = [](A acc, A v, int64_t) { return acc + v; };
    const int64_t blocks = (p.red_count + kBlock - 1) / kBlock;
    if (blocks > 1) {  // never depends on the thread count
      std::vector<A> partial(static_cast<size_t>(n_out * blocks));
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t o = 0; o < n_out; ++o)
        for (int64_t b = 0; b < blocks; ++b)
          partial[static_cast<size_t>(o * blocks + b)] =
              reduce_range<T, A>(xb + offset_of(o, p.kept_sizes, p.kept_strides), p, b * kBlock,
                                 std::min(p.red_count, (b + 1) * kBlock), A(0), add);
      for (int64_t o = 0; o < n_out; ++o) {
        A acc = 0;
        for (int64_t b = 0; b < blocks; ++b) acc += partial[static_cast<size_t>(o * blocks + b)];
        ob[o] = store<T>(acc * static_cast<A>(scale));
      }
    } else {
#pragma omp parallel for schedule(static) if (n_out * p.red_count > 32768)
      for (int64_t o = 0; o < n_out; ++o) {
        const A acc = reduce_range<T, A>(xb + offset_of(o, p.kept_sizes, p.kept_strides), p, 0,
                                         p.red_count, A(0), add);
        ob[o] = store<T>(acc * static_cast<A>(scale));
      }
    }
  });
}

void reduce_max(const ReduceMaxProblem& pr) {
  const Tensor& x = pr.x;
  const ReducePlan& p = pr.plan;
  const int64_t n_out = pr.index.numel();
  visit_float(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    struct Best {
      A v;
      int64_t i;
    };
    const T* xb = static_cast<const T*>(x.data_ptr());
    int64_t* ib = static_cast<int64_t*>(pr.index.data_ptr());
    T* vb = pr.values.defined() ? static_cast<T*>(pr.values.data_ptr()) : nullptr;
#pragma omp parallel for schedule(static) if (n_out * p.red_count > 32768)
    for (int64_t o = 0; o < n_out; ++o) {
      const Best b = reduce_range<T, Best>(
          xb + offset_of(o, p.kept_sizes, p.kept_strides), p, 0, p.red_count,
          Best{-std::numeric_limits<A>::infinity(), -1}, [](Best acc, A v, int64_t r) {
            if (acc.i < 0 || v > acc.v || (std::isnan(v) && !std::isnan(acc.v))) return Best{v, r};
            return acc;
          });
      ib[o] = b.i;
      if (vb) vb[o] = store<T>(b.v);
    }
  });
}

void reduce_max_bwd(const ReduceMaxBwdProblem& pr) {
  const ReducePlan& p = pr.plan;
  const Shape& x_shape = pr.gx.shape();
  const DType dtype = pr.gx.dtype();
  const Tensor& gc = pr.g;
  const Tensor& index = pr.index;
  // Strides of the (contiguous) gx for kept and reduced dims.
  const Strides st = contiguous_strides(x_shape);
  Strides kst, rst;
  size_t a = 0;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (a < p.axes.size() && p.axes[a] == static_cast<int64_t>(d)) {
      rst.push_back(st[d]);
      ++a;
    } else {
      kst.push_back(st[d]);
    }
  }
  const int64_t* ib = index.data<int64_t>();
  const int64_t n_out = index.numel();
  visit_float(dtype, [&]<class T>() {
    T* gb = static_cast<T*>(pr.gx.data_ptr());
    const T* go = gc.data<T>();
    for (int64_t o = 0; o < n_out; ++o)
      gb[offset_of(o, p.kept_sizes, kst) + offset_of(ib[o], p.red_sizes, rst)] = go[o];
  });
}

}  // namespace mixprec::ops::ref
