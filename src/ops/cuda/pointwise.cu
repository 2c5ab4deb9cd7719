// The CUDA pointwise kernel: every formula of ops/elementwise_problem.h (the same functors the
// CPU kernels run, compiled for the device), any operand dtypes, broadcasting, any dense out.
// Computes in float, or double when an operand or out is f64 (computes_in_f64), rounds once.
#include <type_traits>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/cuda/kernels.h"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::kMaxDims;
using cuda_detail::load_elem;
using cuda_detail::store_elem;

struct PointwiseArgs {
  int nd;
  int64_t sizes[kMaxDims];           // out's shape
  int64_t in_strides[3][kMaxDims];   // each operand's strides aligned to out's dims, 0 = broadcast
  int64_t out_strides[kMaxDims];
  const void* in[3];                 // element 0 of each operand (offset applied)
  DType in_dt[3];
  void* out;
  DType out_dt;
  int64_t n;
  bool flat;  // every operand and out packed row-major with out's shape: offset == index
};

// Grid: grid_for(n, 256) blocks of 256 threads, a grid-stride loop over out's n elements in
// row-major order. flat: element i of every tensor is at offset i, so a warp reads and writes
// 32 consecutive elements of each (fully coalesced; the dtype switch is warp-uniform). Otherwise
// each thread decomposes i into per-dim indices and adds each tensor's strides (0 on broadcast
// dims: a broadcast operand is re-read from cache). Invariant: out does not overlap an operand
// except exactly (in-place ops write the element they read), and each out element is written
// by one thread.
template <class C, int N, class F> __global__ void pointwise_kernel(PointwiseArgs a, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[N];
    int64_t out_off = i;
    for (int k = 0; k < N; ++k) off[k] = i;
    if (!a.flat) {
      out_off = 0;
      for (int k = 0; k < N; ++k) off[k] = 0;
      int64_t rem = i;
      for (int d = a.nd - 1; d >= 0; --d) {
        const int64_t idx = rem % a.sizes[d];
        rem /= a.sizes[d];
        out_off += idx * a.out_strides[d];
        for (int k = 0; k < N; ++k) off[k] += idx * a.in_strides[k][d];
      }
    }
    C v[N];
    for (int k = 0; k < N; ++k) v[k] = load_elem<C>(a.in[k], a.in_dt[k], off[k]);
    store_elem<C>(a.out, a.out_dt, out_off, formulas::apply<N>(f, v));
  }
}

PointwiseArgs make_args(const PointwiseProblem& p, int n) {
  const Shape& shape = p.out.shape();
  PointwiseArgs a{};
  a.nd = static_cast<int>(shape.size());
  a.n = p.out.numel();
  a.out = p.out.data_ptr();
  a.out_dt = p.out.dtype();
  a.flat = p.out.is_contiguous();
  for (int d = 0; d < a.nd; ++d) {
    a.sizes[d] = shape[static_cast<size_t>(d)];
    a.out_strides[d] = p.out.strides()[static_cast<size_t>(d)];
  }
  for (int k = 0; k < n; ++k) {
    const Tensor& t = p.in[static_cast<size_t>(k)];
    a.in[k] = t.data_ptr();
    a.in_dt[k] = t.dtype();
    a.flat = a.flat && t.shape() == shape && t.is_contiguous();
    const int lead = a.nd - static_cast<int>(t.dim());
    for (int d = 0; d < a.nd; ++d) {
      const int td = d - lead;
      a.in_strides[k][d] = td < 0 || t.shape()[static_cast<size_t>(td)] == 1
                               ? 0
                               : t.strides()[static_cast<size_t>(td)];
    }
  }
  return a;
}

}  // namespace

std::string pointwise_declines(const PointwiseProblem& p) {
  if (p.out.dim() > kMaxDims) return "more than 8 dims";
  return {};
}

void pointwise(const PointwiseProblem& p) {
  if (p.out.numel() == 0) return;
  cudaStream_t s = cuda_detail::activate(p.out.device());
  visit_pointwise(p, [&](const auto& f) {
    using F = std::remove_cvref_t<decltype(f)>;
    constexpr int n = F::arity;
    const PointwiseArgs a = make_args(p, n);
    const unsigned grid = cuda_detail::grid_for(a.n, 256);
    if (computes_in_f64(p, n))
      pointwise_kernel<double, n, F><<<grid, 256, 0, s>>>(a, f);
    else
      pointwise_kernel<float, n, F><<<grid, 256, 0, s>>>(a, f);
    MIXPREC_CUDA_LAUNCHED();
  });
}

}  // namespace mixprec::ops::cuda
