// Reference pointwise kernel: every formula of elementwise_problem.h in a plain loop, one output
// element at a time. Each operand is read through its own strides (0 on broadcast dims) and
// widened to the compute type (float, double when any operand or the output is f64), the formula
// applied, the result rounded once into out. The oracle for cpu::pointwise's engine (chunking,
// dim merging, broadcast strides, vectorised conversions).
#include <array>

#include "ops/ref/kernels.h"

namespace mixprec::ops::ref {
namespace {

// Element `offset` of t (any dtype) as C.
template <class C> C load_as(const Tensor& t, int64_t offset) {
  return visit_dtype(t.dtype(), [&]<class T>() {
    const T v = static_cast<const T*>(t.data_ptr())[offset];
    if constexpr (StorageFloat<T>)
      return static_cast<C>(load(v));
    else
      return static_cast<C>(v);
  });
}

// t's strides aligned to the trailing dims of `shape`, 0 where t broadcasts.
Strides broadcast_strides(const Tensor& t, const Shape& shape) {
  Strides s(shape.size(), 0);
  const size_t lead = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return s;
}

template <class C, int N, class F> void run(const PointwiseProblem& p, const F& f) {
  const Shape& shape = p.out.shape();
  const size_t nd = shape.size();
  std::array<Strides, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(p.in[k], shape);
  const int64_t n = p.out.numel();
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    std::array<int64_t, N> off{};
    int64_t out_off = 0, rem = i;
    for (size_t d = nd; d-- > 0;) {
      const int64_t idx = rem % shape[d];
      rem /= shape[d];
      out_off += idx * p.out.strides()[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx * st[k][d];
    }
    C v[N];
    for (size_t k = 0; k < N; ++k) v[k] = load_as<C>(p.in[k], off[k]);
    const C r = formulas::apply<N>(f, v);
    visit_float(p.out.dtype(),
                [&]<class T>() { static_cast<T*>(p.out.data_ptr())[out_off] = store<T>(r); });
  }
}

}  // namespace

void pointwise(const PointwiseProblem& p) {
  visit_pointwise(p, [&](const auto& f) {
    constexpr int n = std::remove_cvref_t<decltype(f)>::arity;
    const bool f64 = computes_in_f64(p, n);
    if (f64)
      run<double, n>(p, f);
    else
      run<float, n>(p, f);
  });
}

}  // namespace mixprec::ops::ref
