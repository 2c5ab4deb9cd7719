// The elementwise engine: out = f(in0, in1, ...) over broadcast, arbitrarily strided inputs of
// any dtypes, into a new contiguous output. Dims are merged where every operand allows; the
// inner run is processed in chunks of kChunk elements: inputs widened to the compute type (f32,
// or f64 when any operand is f64) with the vectorised converters, f applied in a plain loop the
// compiler vectorises, the result rounded once to the output dtype. Chunks are spread over
// OpenMP threads; each output element is written by one thread, so results do not depend on
// the thread count. cpu::pointwise (cpu/elementwise.cpp) runs every pointwise formula through it;
// a RowFormula (below) takes whole chunks instead of single elements.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>

#include "mixprec/convert.h"
#include "mixprec/tensor.h"
#include "ops/dispatch.h"

namespace mixprec::ops::cpu {

inline constexpr int64_t kChunk = 512;

// A formula computed a row at a time (cpu/activations.cpp's vector kernels) instead of element
// by element: f.rows(in, out, n) with in[k] the k-th operand's n values in the compute type
// (in[k] for k >= the arity is unspecified).
template <class F>
concept RowFormula = requires {
  std::remove_cvref_t<F>::kRows;
};

struct IterLayout {
  Shape sizes;                     // merged dims of the output
  std::array<Strides, 4> strides;  // per operand (0 = output), 0 on broadcast dims
};

// out_shape must be the broadcast of the input shapes; `out` must be dense (any dim order).
// Dims are visited in the output's memory order, so the innermost run is the output's
// unit-stride dim.
IterLayout make_iter_layout(const Shape& out_shape, const Tensor& out,
                            std::initializer_list<const Tensor*> inputs);

// Loads n elements (stride in elements, 0 = broadcast) of dtype dt at p, widened to C.
template <class C> void load_chunk(const char* p, DType dt, int64_t stride, int64_t n, C* dst) {
  constexpr DType cdt = std::is_same_v<C, double> ? DType::f64 : DType::f32;
  if (stride == 1) {
    convert_row(p, dt, dst, cdt, n);
  } else if (stride == 0) {
    C v;
    convert_row(p, dt, &v, cdt, 1);
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
  } else {
    visit_dtype(dt, [&]<class T>() {
      const T* t = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (StorageFloat<T>)
          dst[i] = static_cast<C>(load(t[i * stride]));
        else
          dst[i] = static_cast<C>(t[i * stride]);
      }
    });
  }
}

// All operands dense in the same layout and already in the compute type: one flat loop.
template <class C, size_t N, class F>
bool run_flat(const Tensor& out, const std::array<const Tensor*, N>& ins, F& f) {
  constexpr DType cdt = std::is_same_v<C, double> ? DType::f64 : DType::f32;
  if (out.dtype() != cdt) return false;
  for (const Tensor* t : ins)
    if (t->dtype() != cdt || t->shape() != out.shape() || t->strides() != out.strides())
      return false;
  const int64_t n = out.numel();
  C* const o = static_cast<C*>(out.data_ptr());
  const C* const a = static_cast<const C*>(ins[0]->data_ptr());
  const C* const b = N > 1 ? static_cast<const C*>(ins[1]->data_ptr()) : nullptr;
  const C* const c = N > 2 ? static_cast<const C*>(ins[2]->data_ptr()) : nullptr;
  if constexpr (RowFormula<F>) {
    const int64_t blocks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t lo = k * kChunk;
      const std::array<const C*, 3> in{a + lo, b ? b + lo : nullptr, c ? c + lo : nullptr};
      f.rows(in, o + lo, std::min(kChunk, n - lo));
    }
    return true;
  } else {
#pragma omp parallel if (n >= 32768)
    {
      // Thread-local restrict copies of the pointers, so the vectoriser sees no aliasing.
      C* __restrict op = o;
      const C* __restrict ap = a;
      const C* __restrict bp = b;
      const C* __restrict cp = c;
#pragma omp for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (N == 1)
          op[i] = f(ap[i]);
        else if constexpr (N == 2)
          op[i] = f(ap[i], bp[i]);
        else
          op[i] = f(ap[i], bp[i], cp[i]);
      }
    }
    return true;
  }
}

template <class C, size_t N, class F>
void run_elementwise_impl(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f);

// MIXPREC_VERBOSE line for a pointwise kernel (besides dispatch's).
void log_elementwise(size_t inputs, const Tensor& out, DType in_dtype);

// The elementwise engine's entry point.
template <class C, size_t N, class F>
void run_elementwise(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f) {
  if (verbose_level() > 0) log_elementwise(N, out, ins[0]->dtype());
  run_elementwise_impl<C, N>(out, ins, f);
}

template <class C, size_t N, class F>
void run_elementwise_impl(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (run_flat<C, N>(out, ins, f)) return;
  IterLayout l;
  if constexpr (N == 1)
    l = make_iter_layout(out.shape(), out, {ins[0]});
  else if constexpr (N == 2)
    l = make_iter_layout(out.shape(), out, {ins[0], ins[1]});
  else
    l = make_iter_layout(out.shape(), out, {ins[0], ins[1], ins[2]});
  const int64_t nd = static_cast<int64_t>(l.sizes.size());
  const int64_t inner = l.sizes[static_cast<size_t>(nd - 1)];
  const int64_t outer = numel / inner;
  const int64_t chunks_per_row = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = outer * chunks_per_row;
  constexpr DType cdt = std::is_same_v<C, double> ? DType::f64 : DType::f32;
  char* obase = static_cast<char*>(out.data_ptr());
  const int64_t oes = static_cast<int64_t>(out.itemsize());
  std::array<const char*, N> ibase;
  std::array<int64_t, N> ies;
  for (size_t k = 0; k < N; ++k) {
    ibase[k] = static_cast<const char*>(ins[k]->data_ptr());
    ies[k] = static_cast<int64_t>(ins[k]->itemsize());
  }
  const DType odt = out.dtype();
#pragma omp parallel if (numel >= 32768)
  {
    alignas(64) C buf[N][kChunk];
    alignas(64) C res[kChunk];
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t o = task / chunks_per_row;
      const int64_t start = (task % chunks_per_row) * kChunk;
      const int64_t n = std::min(kChunk, inner - start);
      std::array<int64_t, N + 1> off{};
      int64_t rem = o;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t idx = rem % l.sizes[static_cast<size_t>(d)];
        rem /= l.sizes[static_cast<size_t>(d)];
        for (size_t k = 0; k <= N; ++k) off[k] += idx * l.strides[k][static_cast<size_t>(d)];
      }
      for (size_t k = 0; k < N; ++k) {
        const int64_t st = l.strides[k + 1][static_cast<size_t>(nd - 1)];
        load_chunk<C>(ibase[k] + (off[k + 1] + start * st) * ies[k], ins[k]->dtype(), st, n,
                      buf[k]);
      }
      if constexpr (RowFormula<F>) {
        f.rows({buf[0], buf[N > 1 ? 1 : 0], buf[N > 2 ? 2 : 0]}, res, n);
      } else {
        // omp simd: branch-free selects (relu masks, where) instead of mispredicted jumps.
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (N == 1)
            res[i] = f(buf[0][i]);
          else if constexpr (N == 2)
            res[i] = f(buf[0][i], buf[1][i]);
          else
            res[i] = f(buf[0][i], buf[1][i], buf[2][i]);
        }
      }
      // The output is dense and its dims are ordered by stride: its inner stride is 1.
      convert_row(res, cdt, obase + (off[0] + start) * oes, odt, n);
    }
  }
}

}  // namespace mixprec::ops::cpu
