// CUDA kernels that work row by row: softmax / log_softmax (forward, backward), LayerNorm
// (forward, backward), softmax cross-entropy, NLL and MSE (forward, backward), embedding
// (forward, backward) and the sum and max reductions (max's backward too). The formulas are the
// reference kernels' (ops/ref/), step for step; only the order of the additions inside a row
// differs (a warp's lanes sum interleaved), which the tolerance table allows for.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/warp.cuh"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::load_elem;
using cuda_detail::store_elem;

constexpr unsigned kThreads = 256;            // every kernel here: 256 threads = 8 warps a block
constexpr unsigned kWarps = kThreads / 32;

// ------------------------------------------------------------------ warp helpers

// The first maximum of the row: the larger value wins, equal values the lower index (so the
// result is the first index holding the row's maximum, as the reference's strict `>` scan).
// NaN never wins (lanes start at -inf and take only strictly greater values).
template <class C> __device__ void warp_argmax(C& v, int64_t& k) {
  for (int o = 16; o > 0; o >>= 1) {
    const C ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t ok = __shfl_xor_sync(0xffffffffu, k, o);
    if (ov > v || (ov == v && ok < k)) v = ov, k = ok;
  }
}

// Rows handled by warps: grid_rows(rows) blocks of 8 warps, warp w of block b takes rows
// b*8 + w, then + gridDim.x*8, ... (a grid-stride loop over rows).
unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>((rows + kWarps - 1) / kWarps, 65535));
}
__device__ int64_t first_row() { return int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; }
__device__ int64_t row_step() { return int64_t{gridDim.x} * kWarps; }
__device__ int lane() { return static_cast<int>(threadIdx.x % 32); }

struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    const int64_t v = s[static_cast<size_t>(d)];
    (d < axis ? a.outer : d == axis ? a.n : a.inner) *= v;
  }
  return a;
}

// ------------------------------------------------------------------ softmax

// Grid/block: warps over rows (above); row r = (o, i) holds x[o*n*inner + k*inner + i], k < n.
// Lanes take k = lane, lane+32, ...: coalesced when inner == 1 (the last axis), strided
// otherwise. Three passes over the row (max, sum, write), all reading x from global memory.
// Invariant: x and y are contiguous with the same shape and dtype (the op's).
template <class C>
__global__ void softmax_fwd_kernel(const void* x, void* y, DType dt, AxisSplit a, bool log) {
  const C nan = std::numeric_limits<C>::quiet_NaN();
  for (int64_t r = first_row(); r < a.outer * a.inner; r += row_step()) {
    const int64_t base = (r / a.inner) * a.n * a.inner + r % a.inner;
    C mx = -std::numeric_limits<C>::infinity();
    int64_t kmax = std::numeric_limits<int64_t>::max();
    for (int64_t k = lane(); k < a.n; k += 32)
      if (const C v = load_elem<C>(x, dt, base + k * a.inner); v > mx) mx = v, kmax = k;
    warp_argmax(mx, kmax);
    if (!isfinite(mx)) {  // all -inf, or a +inf: no distribution, the whole row is NaN
      for (int64_t k = lane(); k < a.n; k += 32) store_elem<C>(y, dt, base + k * a.inner, nan);
      continue;
    }
    C rest = 0;  // sum = 1 + rest: the max's own term is exactly 1
    for (int64_t k = lane(); k < a.n; k += 32)
      if (k != kmax) rest += exp(load_elem<C>(x, dt, base + k * a.inner) - mx);
    rest = warp_sum(rest);
    const C lsum = log1p(rest), inv = C(1) / (C(1) + rest);
    for (int64_t k = lane(); k < a.n; k += 32) {
      const C v = load_elem<C>(x, dt, base + k * a.inner) - mx;
      store_elem<C>(y, dt, base + k * a.inner, log ? v - lsum : exp(v) * inv);
    }
  }
}

// Same grid and access pattern; two passes (the row's sum of dy*y or dy, then dx).
template <class C>
__global__ void softmax_bwd_kernel(const void* y, const void* dy, void* dx, DType dt, AxisSplit a,
                                   bool log) {
  for (int64_t r = first_row(); r < a.outer * a.inner; r += row_step()) {
    const int64_t base = (r / a.inner) * a.n * a.inner + r % a.inner;
    C s = 0;
    for (int64_t k = lane(); k < a.n; k += 32) {
      const C g = load_elem<C>(dy, dt, base + k * a.inner);
      s += log ? g : g * load_elem<C>(y, dt, base + k * a.inner);
    }
    s = warp_sum(s);
    for (int64_t k = lane(); k < a.n; k += 32) {
      const int64_t e = base + k * a.inner;
      const C yk = load_elem<C>(y, dt, e), gk = load_elem<C>(dy, dt, e);
      store_elem<C>(dx, dt, e, log ? gk - exp(yk) * s : yk * (gk - s));
    }
  }
}

// ------------------------------------------------------------------ LayerNorm

// Grid/block: warps over the R rows of x [R, M] (contiguous); lanes stride the row (coalesced).
// Two passes for the statistics (mean, then the sum of squared deviations: no cancellation),
// one to write y. gamma/beta are [M] in C or null; mean/var [R] in C.
template <class C>
__global__ void layer_norm_fwd_kernel(const void* x, void* y, DType dt, const C* gamma,
                                      const C* beta, C* mean, C* var, int64_t rows, int64_t m,
                                      C eps) {
  for (int64_t r = first_row(); r < rows; r += row_step()) {
    const int64_t base = r * m;
    C sum = 0;
    for (int64_t j = lane(); j < m; j += 32) sum += load_elem<C>(x, dt, base + j);
    const C mu = warp_sum(sum) / static_cast<C>(m);
    C sq = 0;
    for (int64_t j = lane(); j < m; j += 32) {
      const C d = load_elem<C>(x, dt, base + j) - mu;
      sq += d * d;
    }
    const C v = warp_sum(sq) / static_cast<C>(m);
    if (lane() == 0) mean[r] = mu, var[r] = v;
    const C rstd = C(1) / sqrt(v + eps);
    for (int64_t j = lane(); j < m; j += 32) {
      C o = (load_elem<C>(x, dt, base + j) - mu) * rstd;
      if (gamma) o *= gamma[j];
      if (beta) o += beta[j];
      store_elem<C>(y, dt, base + j, o);
    }
  }
}

// dx: warps over rows as the forward (two passes: the row sums a, b; then dx).
template <class C>
__global__ void layer_norm_bwd_dx_kernel(const void* x, const void* dy, void* dx, DType dt,
                                         const C* gamma, const C* mean, const C* var,
                                         int64_t rows, int64_t m, C eps) {
  for (int64_t r = first_row(); r < rows; r += row_step()) {
    const int64_t base = r * m;
    const C mu = mean[r], rstd = C(1) / sqrt(var[r] + eps);
    C a = 0, b = 0;
    for (int64_t j = lane(); j < m; j += 32) {
      const C dxhat = load_elem<C>(dy, dt, base + j) * (gamma ? gamma[j] : C(1));
      a += dxhat;
      b += dxhat * (load_elem<C>(x, dt, base + j) - mu) * rstd;
    }
    a = warp_sum(a) / static_cast<C>(m);
    b = warp_sum(b) / static_cast<C>(m);
    for (int64_t j = lane(); j < m; j += 32) {
      const C xhat = (load_elem<C>(x, dt, base + j) - mu) * rstd;
      const C g = load_elem<C>(dy, dt, base + j) * (gamma ? gamma[j] : C(1));
      store_elem<C>(dx, dt, base + j, rstd * (g - a - xhat * b));
    }
  }
}

// dgamma, dbeta: grid_for(m, 256) blocks, one thread per column j summing the rows in order
// (deterministic, as the reference). A warp reads 32 consecutive columns of a row: coalesced.
// dgamma/dbeta may be null (no affine parameters).
template <class C>
__global__ void layer_norm_bwd_params_kernel(const void* x, const void* dy, DType dt,
                                             const C* mean, const C* var, C* dgamma, C* dbeta,
                                             int64_t rows, int64_t m, C eps) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < m;
       j += int64_t{gridDim.x} * blockDim.x) {
    C sg = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const C g = load_elem<C>(dy, dt, r * m + j);
      sb += g;
      sg += g * (load_elem<C>(x, dt, r * m + j) - mean[r]) * (C(1) / sqrt(var[r] + eps));
    }
    if (dgamma) dgamma[j] = sg;
    if (dbeta) dbeta[j] = sb;
  }
}

// ------------------------------------------------------------------ cross-entropy

// Forward: warps over the N rows of logits [N, Cn] (contiguous, in C); lanes stride the row.
// Writes loss, row_max, row_logsum [N]. labels: i64 [N] (sparse) or C [N, Cn] (dense). The op
// does not range-check labels on the device (that would wait for it): a label outside [0, Cn)
// gives that row a NaN loss instead of a read outside the row, so a train step sees a
// non-finite loss and skips its update.
template <class C>
__global__ void cross_entropy_fwd_kernel(const C* x, const int64_t* sparse_labels,
                                         const C* dense_labels, C* loss, C* row_max,
                                         C* row_logsum, int64_t n, int64_t c) {
  for (int64_t i = first_row(); i < n; i += row_step()) {
    const C* xi = x + i * c;
    C m = -std::numeric_limits<C>::infinity();
    int64_t jmax = std::numeric_limits<int64_t>::max();
    for (int64_t j = lane(); j < c; j += 32)
      if (xi[j] > m) m = xi[j], jmax = j;
    warp_argmax(m, jmax);
    C rest = 0;
    for (int64_t j = lane(); j < c; j += 32)
      if (j != jmax) rest += exp(xi[j] - m);
    rest = warp_sum(rest);
    const C ls = isfinite(m) ? log1p(rest) : std::numeric_limits<C>::quiet_NaN();
    C out;
    if (sparse_labels) {
      const int64_t l = sparse_labels[i];
      out = l >= 0 && l < c ? (m - xi[l]) + ls : std::numeric_limits<C>::quiet_NaN();
    } else {
      const C* t = dense_labels + i * c;
      C tsum = 0, tx = 0;
      for (int64_t j = lane(); j < c; j += 32) tsum += t[j], tx += t[j] * (xi[j] - m);
      out = ls * warp_sum(tsum) - warp_sum(tx);
    }
    if (lane() == 0) loss[i] = out, row_max[i] = m, row_logsum[i] = ls;
  }
}

// Backward: same grid; dlogits[i, j] = (prob * tsum - t_ij) * g_i * factor, the label's
// element written by the lane that owns column label_i (no second write, no race).
template <class C>
__global__ void cross_entropy_bwd_kernel(const C* x, const int64_t* sparse_labels,
                                         const C* dense_labels, const C* row_max,
                                         const C* row_logsum, const C* g, int64_t g_numel,
                                         C factor, C* d, int64_t n, int64_t c) {
  for (int64_t i = first_row(); i < n; i += row_step()) {
    const C gi = g[g_numel == 1 ? 0 : i] * factor;
    const C* xi = x + i * c;
    C tsum = 1;
    if (dense_labels) {
      C s = 0;
      for (int64_t j = lane(); j < c; j += 32) s += dense_labels[i * c + j];
      tsum = warp_sum(s);
    }
    const int64_t label = sparse_labels ? sparse_labels[i] : -1;
    for (int64_t j = lane(); j < c; j += 32) {
      const C prob = exp((xi[j] - row_max[i]) - row_logsum[i]);
      C v = (prob * tsum - (dense_labels ? dense_labels[i * c + j] : C(0))) * gi;
      if (j == label) v -= gi;
      d[i * c + j] = v;
    }
  }
}

// ------------------------------------------------------------------ embedding

// Forward: grid_for(n*dim, 256), one thread per output element (i, j) = (e / dim, e % dim):
// a warp copies 32 consecutive elements of one or two weight rows (coalesced). The op does not
// range-check indices on the device (that would wait for it): an index outside [0, num) gives
// a NaN row instead of a read outside the weight, so a train step sees a non-finite loss.
__global__ void embedding_fwd_kernel(const void* w, const int64_t* idx, void* out, DType dt,
                                     int64_t n, int64_t dim, int64_t num) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * dim;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / dim, j = e % dim, row = idx[i];
    const double v = row >= 0 && row < num ? load_elem<double>(w, dt, row * dim + j)
                                           : std::numeric_limits<double>::quiet_NaN();
    store_elem<double>(out, dt, e, v);
  }
}

// Backward: grid_for(dim, 256), one thread per column j walking the n positions in order and
// adding grad[i, j] into dweight[idx[i], j]: each dweight element is written by one thread only
// (no atomics) and sums its positions in order, as the reference. dweight is zero-filled, in C.
// An index outside [0, num) adds nothing (its forward row was NaN).
template <class C>
__global__ void embedding_bwd_kernel(const void* grad, DType dt, const int64_t* idx, C* dw,
                                     int64_t n, int64_t dim, int64_t num) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < dim;
       j += int64_t{gridDim.x} * blockDim.x)
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] >= 0 && idx[i] < num) dw[idx[i] * dim + j] += load_elem<C>(grad, dt, i * dim + j);
}

// ------------------------------------------------------------------ sum reduction

struct ReduceArgs {
  int nk, nr;  // kept and reduced dims
  int64_t kept_sizes[cuda_detail::kMaxDims], kept_strides[cuda_detail::kMaxDims];
  int64_t red_sizes[cuda_detail::kMaxDims], red_strides[cuda_detail::kMaxDims];
  int64_t outputs, red_count;
  const void* x;
  DType xdt;
  void* out;
  DType odt;
  double scale;
};

// The offset in x of output o's first element (decomposed through kept_sizes / kept_strides)
// and of position t of the reduced space (through red_sizes / red_strides), last dim fastest.
__device__ int64_t kept_offset(const ReduceArgs& a, int64_t o) {
  int64_t off = 0;
  for (int d = a.nk - 1; d >= 0; --d) {
    off += (o % a.kept_sizes[d]) * a.kept_strides[d];
    o /= a.kept_sizes[d];
  }
  return off;
}
__device__ int64_t red_offset(const ReduceArgs& a, int64_t t) {
  int64_t off = 0;
  for (int d = a.nr - 1; d >= 0; --d) {
    off += (t % a.red_sizes[d]) * a.red_strides[d];
    t /= a.red_sizes[d];
  }
  return off;
}

// Grid: one block of 256 threads per output (grid-stride over outputs); the block's threads
// take reduced positions t, t+256, ... (decomposed through red_sizes/red_strides), sum them in
// A (f32, f64 or i64: acc_dtype), then a shared-memory tree halves 256 partial sums to one.
// Thread 0 writes sum * scale (in A, as the reference), rounded once into out. Invariant: blockDim.x == 256 (the tree's size).
template <class A> __global__ void reduce_sum_kernel(ReduceArgs a) {
  __shared__ A part[kThreads];
  for (int64_t o = blockIdx.x; o < a.outputs; o += gridDim.x) {
    const int64_t base = kept_offset(a, o);
    A s = 0;
    for (int64_t t = threadIdx.x; t < a.red_count; t += kThreads)
      s += load_elem<A>(a.x, a.xdt, base + red_offset(a, t));
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned h = kThreads / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
      __syncthreads();
    }
    if (threadIdx.x == 0) store_elem<A>(a.out, a.odt, o, part[0] * static_cast<A>(a.scale));
    __syncthreads();  // part[] is reused by the next output
  }
}

// Whether candidate (v, i) is the reference's answer over itself and (bv, bi): an index < 0 is
// no element; a NaN beats every number; the larger number wins; between two NaNs or two equal
// numbers the lower index (the first maximum). A strict total order on the elements, so any
// grouping of the comparisons picks the same element as the reference's scan in index order.
template <class A> __device__ bool max_better(A v, int64_t i, A bv, int64_t bi) {
  if (i < 0) return false;
  if (bi < 0) return true;
  const bool n = isnan(v), bn = isnan(bv);
  if (n != bn) return n;
  if (n || v == bv) return i < bi;
  return v > bv;
}

// Grid and access pattern as reduce_sum_kernel: each thread keeps the best of its positions,
// then a shared-memory tree of 256 (value, index) pairs. Thread 0 writes index[o] (-1 for an
// empty reduction, as the reference) and values[o] (x's dtype: the element itself) if given.
template <class A> __global__ void reduce_max_kernel(ReduceArgs a, int64_t* index) {
  __shared__ A pv[kThreads];
  __shared__ int64_t pi[kThreads];
  for (int64_t o = blockIdx.x; o < a.outputs; o += gridDim.x) {
    const int64_t base = kept_offset(a, o);
    A bv = -std::numeric_limits<A>::infinity();
    int64_t bi = -1;
    for (int64_t t = threadIdx.x; t < a.red_count; t += kThreads)
      if (const A v = load_elem<A>(a.x, a.xdt, base + red_offset(a, t)); max_better(v, t, bv, bi))
        bv = v, bi = t;
    pv[threadIdx.x] = bv, pi[threadIdx.x] = bi;
    __syncthreads();
    for (unsigned h = kThreads / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h && max_better(pv[threadIdx.x + h], pi[threadIdx.x + h], pv[threadIdx.x],
                                        pi[threadIdx.x]))
        pv[threadIdx.x] = pv[threadIdx.x + h], pi[threadIdx.x] = pi[threadIdx.x + h];
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      index[o] = pi[0];
      if (a.out) store_elem<A>(a.out, a.odt, o, pv[0]);
    }
    __syncthreads();  // pv[], pi[] are reused by the next output
  }
}

// Backward: grid_for(outputs, 256), one thread per output o writing g[o] (gx's dtype: copied
// exactly through double) into the element index[o] of its reduced space; the strides in `a`
// are gx's (contiguous). Outputs own disjoint elements: no two threads write one element. An
// index outside [0, red_count) (an empty reduction's -1) writes nothing.
__global__ void reduce_max_bwd_kernel(ReduceArgs a, const int64_t* index) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < a.outputs;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = index[o];
    if (r >= 0 && r < a.red_count)
      store_elem<double>(a.out, a.odt, kept_offset(a, o) + red_offset(a, r),
                         load_elem<double>(a.x, a.xdt, o));
  }
}

// ------------------------------------------------------------------ nll and mse

// NLL forward: grid_for(n, 256), one thread per row: loss[i] = -log_probs[i, label_i]. Labels
// are not range-checked on the device (ops/loss.cpp): one outside [0, c) gives a NaN loss
// instead of a read outside the row. Backward: one thread per element (i, j) of the zero-or-
// gradient matrix (coalesced writes): -g_i * factor at the label, 0 elsewhere (a row whose label
// is out of range is all 0).
template <class C>
__global__ void nll_fwd_kernel(const C* lp, const int64_t* labels, C* loss, int64_t n, int64_t c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = labels[i];
    loss[i] = l >= 0 && l < c ? -lp[i * c + l] : std::numeric_limits<C>::quiet_NaN();
  }
}
template <class C>
__global__ void nll_bwd_kernel(const int64_t* labels, const C* g, int64_t g_numel, C factor, C* d,
                               int64_t n, int64_t c) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * c;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / c;
    d[e] = e % c == labels[i] ? -g[g_numel == 1 ? 0 : i] * factor : C(0);
  }
}

// MSE: grid_for(n, 256), one thread per element, the reference's expressions in its order
// (loss = (p - t)(p - t); dp = 2 (p - t) g factor): no additions to contract, the same bits.
template <class C>
__global__ void mse_fwd_kernel(const C* p, const C* t, C* loss, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    loss[i] = (p[i] - t[i]) * (p[i] - t[i]);
}
template <class C>
__global__ void mse_bwd_kernel(const C* p, const C* t, const C* g, int64_t g_numel, C factor,
                               C* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    d[i] = C(2) * (p[i] - t[i]) * g[g_numel == 1 ? 0 : i] * factor;
}

template <class F> void visit_compute(DType d, F&& f) {
  if (d == DType::f64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

template <class C> const C* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const C*>(t.data_ptr()) : nullptr;
}
template <class C> C* mut_or_null(const Tensor& t) {
  return t.defined() ? static_cast<C*>(t.data_ptr()) : nullptr;
}

}  // namespace

// ------------------------------------------------------------------ launchers

void softmax_fwd(const SoftmaxFwdProblem& p) {
  const AxisSplit a = split(p.x.shape(), p.axis);
  if (p.x.numel() == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  visit_compute(p.x.dtype(), [&]<class C>() {
    softmax_fwd_kernel<C><<<grid_rows(a.outer * a.inner), kThreads, 0, s>>>(
        p.x.data_ptr(), p.y.data_ptr(), p.x.dtype(), a, p.log);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void softmax_bwd(const SoftmaxBwdProblem& p) {
  const AxisSplit a = split(p.y.shape(), p.axis);
  if (p.y.numel() == 0) return;
  cudaStream_t s = cuda_detail::activate(p.y.device());
  visit_compute(p.y.dtype(), [&]<class C>() {
    softmax_bwd_kernel<C><<<grid_rows(a.outer * a.inner), kThreads, 0, s>>>(
        p.y.data_ptr(), p.dy.data_ptr(), p.dx.data_ptr(), p.y.dtype(), a, p.log);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void layer_norm_fwd(const LayerNormFwdProblem& p) {
  const int64_t rows = p.x.shape()[0], m = p.x.shape()[1];
  if (rows == 0 || m == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  visit_compute(p.x.dtype(), [&]<class C>() {
    layer_norm_fwd_kernel<C><<<grid_rows(rows), kThreads, 0, s>>>(
        p.x.data_ptr(), p.y.data_ptr(), p.x.dtype(), ptr_or_null<C>(p.gamma),
        ptr_or_null<C>(p.beta), mut_or_null<C>(p.mean), mut_or_null<C>(p.var), rows, m,
        static_cast<C>(p.eps));
  });
  MIXPREC_CUDA_LAUNCHED();
}

void layer_norm_bwd(const LayerNormBwdProblem& p) {
  const int64_t rows = p.x.shape()[0], m = p.x.shape()[1];
  if (rows == 0 || m == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  visit_compute(p.x.dtype(), [&]<class C>() {
    layer_norm_bwd_dx_kernel<C><<<grid_rows(rows), kThreads, 0, s>>>(
        p.x.data_ptr(), p.dy.data_ptr(), p.dx.data_ptr(), p.x.dtype(), ptr_or_null<C>(p.gamma),
        ptr_or_null<C>(p.mean), ptr_or_null<C>(p.var), rows, m, static_cast<C>(p.eps));
    if (p.dgamma.defined() || p.dbeta.defined())
      layer_norm_bwd_params_kernel<C><<<cuda_detail::grid_for(m, kThreads), kThreads, 0, s>>>(
          p.x.data_ptr(), p.dy.data_ptr(), p.x.dtype(), ptr_or_null<C>(p.mean),
          ptr_or_null<C>(p.var), mut_or_null<C>(p.dgamma), mut_or_null<C>(p.dbeta), rows, m,
          static_cast<C>(p.eps));
  });
  MIXPREC_CUDA_LAUNCHED();
}

void cross_entropy_fwd(const CrossEntropyFwdProblem& p) {
  const int64_t n = p.logits.shape()[0], c = p.logits.shape()[1];
  if (n == 0) return;
  cudaStream_t s = cuda_detail::activate(p.logits.device());
  visit_compute(p.logits.dtype(), [&]<class C>() {
    cross_entropy_fwd_kernel<C><<<grid_rows(n), kThreads, 0, s>>>(
        ptr_or_null<C>(p.logits), p.sparse ? ptr_or_null<int64_t>(p.labels) : nullptr,
        p.sparse ? nullptr : ptr_or_null<C>(p.labels), mut_or_null<C>(p.loss),
        mut_or_null<C>(p.row_max), mut_or_null<C>(p.row_logsum), n, c);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void cross_entropy_bwd(const CrossEntropyBwdProblem& p) {
  const int64_t n = p.logits.shape()[0], c = p.logits.shape()[1];
  if (n == 0) return;
  cudaStream_t s = cuda_detail::activate(p.logits.device());
  visit_compute(p.logits.dtype(), [&]<class C>() {
    cross_entropy_bwd_kernel<C><<<grid_rows(n), kThreads, 0, s>>>(
        ptr_or_null<C>(p.logits), p.sparse ? ptr_or_null<int64_t>(p.labels) : nullptr,
        p.sparse ? nullptr : ptr_or_null<C>(p.labels), ptr_or_null<C>(p.row_max),
        ptr_or_null<C>(p.row_logsum), ptr_or_null<C>(p.g), p.g.numel(),
        static_cast<C>(p.factor), mut_or_null<C>(p.dlogits), n, c);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void embedding_fwd(const EmbeddingFwdProblem& p) {
  const int64_t n = p.indices.numel(), dim = p.weight.shape()[1];
  if (n * dim == 0) return;
  cudaStream_t s = cuda_detail::activate(p.weight.device());
  embedding_fwd_kernel<<<cuda_detail::grid_for(n * dim, kThreads), kThreads, 0, s>>>(
      p.weight.data_ptr(), ptr_or_null<int64_t>(p.indices), p.out.data_ptr(), p.weight.dtype(),
      n, dim, p.weight.shape()[0]);
  MIXPREC_CUDA_LAUNCHED();
}

void embedding_bwd(const EmbeddingBwdProblem& p) {
  const int64_t n = p.indices.numel(), dim = p.dweight.shape()[1];
  if (n * dim == 0) return;
  cudaStream_t s = cuda_detail::activate(p.grad.device());
  visit_compute(p.dweight.dtype(), [&]<class C>() {
    embedding_bwd_kernel<C><<<cuda_detail::grid_for(dim, kThreads), kThreads, 0, s>>>(
        p.grad.data_ptr(), p.grad.dtype(), ptr_or_null<int64_t>(p.indices),
        mut_or_null<C>(p.dweight), n, dim, p.dweight.shape()[0]);
  });
  MIXPREC_CUDA_LAUNCHED();
}

namespace {

std::string plan_declines(const ReducePlan& plan) {
  if (plan.kept_sizes.size() > cuda_detail::kMaxDims ||
      plan.red_sizes.size() > cuda_detail::kMaxDims)
    return "more than 8 kept or reduced dims";
  return {};
}

// The kernels' arguments: the plan's sizes with the given strides (x's, or gx's for max's
// backward), reading x (xdt) and writing out (odt; null allowed).
ReduceArgs reduce_args(const ReducePlan& plan, const Strides& kept_strides,
                       const Strides& red_strides, const Tensor& x, const Tensor& out,
                       int64_t outputs) {
  ReduceArgs a{};
  a.nk = static_cast<int>(plan.kept_sizes.size());
  a.nr = static_cast<int>(plan.red_sizes.size());
  for (int d = 0; d < a.nk; ++d) {
    a.kept_sizes[d] = plan.kept_sizes[static_cast<size_t>(d)];
    a.kept_strides[d] = kept_strides[static_cast<size_t>(d)];
  }
  for (int d = 0; d < a.nr; ++d) {
    a.red_sizes[d] = plan.red_sizes[static_cast<size_t>(d)];
    a.red_strides[d] = red_strides[static_cast<size_t>(d)];
  }
  a.outputs = outputs;
  a.red_count = plan.red_count;
  a.x = x.data_ptr();
  a.xdt = x.dtype();
  a.out = out.defined() ? out.data_ptr() : nullptr;
  a.odt = out.defined() ? out.dtype() : x.dtype();
  return a;
}

unsigned grid_outputs(int64_t outputs) {
  return static_cast<unsigned>(std::min<int64_t>(outputs, 65535));
}

}  // namespace

std::string reduce_sum_declines(const ReduceSumProblem& p) { return plan_declines(p.plan); }

void reduce_sum(const ReduceSumProblem& p) {
  const int64_t outputs = p.out.numel();
  if (outputs == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  ReduceArgs a = reduce_args(p.plan, p.plan.kept_strides, p.plan.red_strides, p.x, p.out, outputs);
  a.scale = p.scale;
  const unsigned grid = grid_outputs(outputs);
  const DType acc = acc_dtype(p.x.dtype());
  if (acc == DType::f64)
    reduce_sum_kernel<double><<<grid, kThreads, 0, s>>>(a);
  else if (acc == DType::f32)
    reduce_sum_kernel<float><<<grid, kThreads, 0, s>>>(a);
  else
    reduce_sum_kernel<int64_t><<<grid, kThreads, 0, s>>>(a);
  MIXPREC_CUDA_LAUNCHED();
}

std::string reduce_max_declines(const ReduceMaxProblem& p) {
  if (!is_floating(p.x.dtype())) return "not a float dtype";
  return plan_declines(p.plan);
}

void reduce_max(const ReduceMaxProblem& p) {
  const int64_t outputs = p.index.numel();
  if (outputs == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  const ReduceArgs a =
      reduce_args(p.plan, p.plan.kept_strides, p.plan.red_strides, p.x, p.values, outputs);
  int64_t* index = mut_or_null<int64_t>(p.index);
  visit_compute(p.x.dtype(), [&]<class A>() {
    reduce_max_kernel<A><<<grid_outputs(outputs), kThreads, 0, s>>>(a, index);
  });
  MIXPREC_CUDA_LAUNCHED();
}

std::string reduce_max_bwd_declines(const ReduceMaxBwdProblem& p) {
  if (!is_floating(p.gx.dtype())) return "not a float dtype";
  return plan_declines(p.plan);
}

void reduce_max_bwd(const ReduceMaxBwdProblem& p) {
  const int64_t outputs = p.index.numel();
  if (outputs == 0) return;
  cudaStream_t s = cuda_detail::activate(p.gx.device());
  // gx's (contiguous) strides split into kept and reduced dims, as the reference does.
  const Strides st = contiguous_strides(p.gx.shape());
  Strides kst, rst;
  for (size_t d = 0, r = 0; d < st.size(); ++d) {
    const bool reduced = r < p.plan.axes.size() && p.plan.axes[r] == static_cast<int64_t>(d);
    (reduced ? rst : kst).push_back(st[d]);
    r += reduced;
  }
  const ReduceArgs a = reduce_args(p.plan, kst, rst, p.g, p.gx, outputs);
  reduce_max_bwd_kernel<<<cuda_detail::grid_for(outputs, kThreads), kThreads, 0, s>>>(
      a, ptr_or_null<int64_t>(p.index));
  MIXPREC_CUDA_LAUNCHED();
}

void nll_fwd(const NllFwdProblem& p) {
  const int64_t n = p.log_probs.shape()[0], c = p.log_probs.shape()[1];
  if (n == 0) return;
  cudaStream_t s = cuda_detail::activate(p.log_probs.device());
  visit_compute(p.log_probs.dtype(), [&]<class C>() {
    nll_fwd_kernel<C><<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        ptr_or_null<C>(p.log_probs), ptr_or_null<int64_t>(p.labels), mut_or_null<C>(p.loss), n,
        c);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void nll_bwd(const NllBwdProblem& p) {
  const int64_t n = p.dlog_probs.shape()[0], c = p.dlog_probs.shape()[1];
  if (n * c == 0) return;
  cudaStream_t s = cuda_detail::activate(p.dlog_probs.device());
  visit_compute(p.dlog_probs.dtype(), [&]<class C>() {
    nll_bwd_kernel<C><<<cuda_detail::grid_for(n * c, kThreads), kThreads, 0, s>>>(
        ptr_or_null<int64_t>(p.labels), ptr_or_null<C>(p.g), p.g.numel(),
        static_cast<C>(p.factor), mut_or_null<C>(p.dlog_probs), n, c);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void mse_fwd(const MseFwdProblem& p) {
  const int64_t n = p.pred.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_detail::activate(p.pred.device());
  visit_compute(p.pred.dtype(), [&]<class C>() {
    mse_fwd_kernel<C><<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        ptr_or_null<C>(p.pred), ptr_or_null<C>(p.target), mut_or_null<C>(p.loss), n);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void mse_bwd(const MseBwdProblem& p) {
  const int64_t n = p.pred.numel();
  if (n == 0) return;
  cudaStream_t s = cuda_detail::activate(p.pred.device());
  visit_compute(p.pred.dtype(), [&]<class C>() {
    mse_bwd_kernel<C><<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        ptr_or_null<C>(p.pred), ptr_or_null<C>(p.target), ptr_or_null<C>(p.g), p.g.numel(),
        static_cast<C>(p.factor), mut_or_null<C>(p.dpred), n);
  });
  MIXPREC_CUDA_LAUNCHED();
}

}  // namespace mixprec::ops::cuda
