// The elementwise engine: out = f(in0, in1, ...) over broadcast, arbitrarily strided inputs of
// any dtypes, into a new contiguous output. Dims are merged where every operand allows; the
// inner run is processed in chunks of kChunk elements: inputs widened to the compute type (f32,
// or f64 when any operand is f64) with the vectorised converters, f applied in a plain loop the
// compiler vectorises, the result rounded once to the output dtype. Chunks are spread over
// OpenMP threads; each output element is written by one thread, so results do not depend on
// the thread count. This is both the reference and the CPU implementation of pointwise ops.
#pragma once

#include <array>
#include <cstring>

#include "mixprec/convert.h"
#include "mixprec/tensor.h"
#include "ops/dispatch.h"
#include "ops/op_common.h"

namespace mixprec::ops::detail {

inline constexpr int64_t kChunk = 512;

struct IterLayout {
  Shape sizes;                      // merged dims of the output
  std::array<Strides, 4> strides;  // per operand (0 = output), 0 on broadcast dims
};

// out_shape must be the broadcast of the input shapes; `out` must be dense (any dim order).
// Dims are visited in the output's memory order, so the innermost run is the output's
// unit-stride dim.
IterLayout make_iter_layout(const Shape& out_shape, const Tensor& out,
                            std::initializer_list<const Tensor*> inputs);

// Loads n elements (stride in elements, 0 = broadcast) of dtype dt at p, widened to C.
template <class C>
void load_chunk(const char* p, DType dt, int64_t stride, int64_t n, C* dst) {
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
        if constexpr (StorageFloat<T>) dst[i] = static_cast<C>(load(t[i * stride]));
        else dst[i] = static_cast<C>(t[i * stride]);
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
    if (t->dtype() != cdt || t->shape() != out.shape() || t->strides() != out.strides()) return false;
  const int64_t n = out.numel();
  C* const o = static_cast<C*>(out.data_ptr());
  const C* const a = static_cast<const C*>(ins[0]->data_ptr());
  const C* const b = N > 1 ? static_cast<const C*>(ins[1]->data_ptr()) : nullptr;
  const C* const c = N > 2 ? static_cast<const C*>(ins[2]->data_ptr()) : nullptr;
#pragma omp parallel if (n >= 32768)
  {
    // Thread-local restrict copies of the pointers, so the vectoriser sees no aliasing.
    C* __restrict op = o;
    const C* __restrict ap = a;
    const C* __restrict bp = b;
    const C* __restrict cp = c;
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (N == 1) op[i] = f(ap[i]);
      else if constexpr (N == 2) op[i] = f(ap[i], bp[i]);
      else op[i] = f(ap[i], bp[i], cp[i]);
    }
  }
  return true;
}

template <class C, size_t N, class F>
void run_elementwise_impl(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f);

// MIXPREC_VERBOSE line for a pointwise kernel (they have one implementation: these loops).
void log_elementwise(size_t inputs, const Tensor& out, DType in_dtype);

// The elementwise engine's entry point (timed under MIXPREC_PROFILE).
template <class C, size_t N, class F>
void run_elementwise(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f) {
  if (verbose_level() > 0) log_elementwise(N, out, ins[0]->dtype());
  if (!profiling()) return run_elementwise_impl<C, N>(out, ins, f);
  const double t0 = profile_now();
  run_elementwise_impl<C, N>(out, ins, f);
  profile_add("elementwise", std::to_string(N) + "-input", std::string(dtype_name(ins[0]->dtype())), profile_now() - t0);
}

template <class C, size_t N, class F>
void run_elementwise_impl(const Tensor& out, const std::array<const Tensor*, N>& ins, F&& f) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  if (run_flat<C, N>(out, ins, f)) return;
  IterLayout l;
  if constexpr (N == 1) l = make_iter_layout(out.shape(), out, {ins[0]});
  else if constexpr (N == 2) l = make_iter_layout(out.shape(), out, {ins[0], ins[1]});
  else l = make_iter_layout(out.shape(), out, {ins[0], ins[1], ins[2]});
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
        load_chunk<C>(ibase[k] + (off[k + 1] + start * st) * ies[k], ins[k]->dtype(), st, n, buf[k]);
      }
      // omp simd: branch-free selects (relu masks, where) instead of mispredicted jumps.
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (N == 1) res[i] = f(buf[0][i]);
        else if constexpr (N == 2) res[i] = f(buf[0][i], buf[1][i]);
        else res[i] = f(buf[0][i], buf[1][i], buf[2][i]);
      }
      // The output is dense and its dims are ordered by stride: its inner stride is 1.
      convert_row(res, cdt, obase + (off[0] + start) * oes, odt, n);
    }
  }
}

inline bool any_f64(std::initializer_list<DType> ds) {
  for (DType d : ds)
    if (d == DType::f64) return true;
  return false;
}

// A new output of `shape` that keeps the memory layout of the first input with the same shape
// whose strides are a dense permutation (channels-last stays channels-last through relu/add);
// row-major otherwise.
Tensor empty_output(const Shape& shape, DType dtype, Device device,
                    std::initializer_list<const Tensor*> inputs);

// out[i] = f(x[i]) into a new tensor of dtype out_dtype.
template <class F>
Tensor map1(const Tensor& x, DType out_dtype, F&& f) {
  Tensor out = empty_output(x.shape(), out_dtype, x.device(), {&x});
  std::array<const Tensor*, 1> ins{&x};
  if (any_f64({x.dtype(), out_dtype})) run_elementwise<double>(out, ins, f);
  else run_elementwise<float>(out, ins, f);
  return out;
}

// Broadcasting binary map.
template <class F>
Tensor map2(const Tensor& a, const Tensor& b, DType out_dtype, F&& f, std::string_view op = "map2") {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty_output(shape, out_dtype, a.device(), {&a, &b});
  std::array<const Tensor*, 2> ins{&a, &b};
  if (any_f64({a.dtype(), b.dtype(), out_dtype})) run_elementwise<double>(out, ins, f);
  else run_elementwise<float>(out, ins, f);
  return out;
}

// Broadcasting ternary map (where).
template <class F>
Tensor map3(const Tensor& a, const Tensor& b, const Tensor& c, DType out_dtype, F&& f,
            std::string_view op = "map3") {
  const Shape shape = broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), op), c.shape(), op);
  Tensor out = empty_output(shape, out_dtype, a.device(), {&a, &b, &c});
  std::array<const Tensor*, 3> ins{&a, &b, &c};
  if (any_f64({a.dtype(), b.dtype(), c.dtype(), out_dtype})) run_elementwise<double>(out, ins, f);
  else run_elementwise<float>(out, ins, f);
  return out;
}

// ---- ReLU on 16-bit floats, on the bits (no widening): one integer compare per element.
// y = relu(x) keeps x where x > 0 or x is NaN (+0 stays +0, -0 becomes +0); the gradient mask
// passes g where y > 0 (1 <= bits <= +inf's bits) and gives +0 elsewhere, NaN outputs included
// (PyTorch's threshold_backward). Exactly what the f32 path computes, without the conversions.

// True if the bit kernels apply: f16 or bf16 tensors occupying one dense block.
bool relu_bits_apply(const Tensor& x);
// out = relu(x) into a new tensor in x's layout.
Tensor relu_bits(const Tensor& x);
// ReLU's gradient from its output: y > 0 ? g : +0, in g's dtype (the separate op and the ReLU
// fused into conv2d and dense all use this). On the bits when g and y share a 16-bit dtype and
// a dense layout, else through the elementwise engine.
Tensor relu_backward(const Tensor& g, const Tensor& y);

}  // namespace mixprec::ops::detail
