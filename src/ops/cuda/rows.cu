// CUDA kernels that work row by row: softmax / log_softmax (forward, backward), LayerNorm
// (forward, backward), softmax cross-entropy (forward, backward), embedding (forward, backward)
// and sum reductions. The formulas are the reference kernels' (ops/ref/), step for step; only
// the order of the additions inside a row differs (a warp's lanes sum interleaved), which the
// tolerance table allows for.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/cuda/kernels.h"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::load_elem;
using cuda_detail::store_elem;

constexpr unsigned kThreads = 256;            // every kernel here: 256 threads = 8 warps a block
constexpr unsigned kWarps = kThreads / 32;

// ------------------------------------------------------------------ warp helpers

template <class C> __device__ C warp_sum(C v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // every lane holds the sum
}

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

// Grid: one block of 256 threads per output (grid-stride over outputs); the block's threads
// take reduced positions t, t+256, ... (decomposed through red_sizes/red_strides), sum them in
// A (f32, f64 or i64: acc_dtype), then a shared-memory tree halves 256 partial sums to one.
// Thread 0 writes sum * scale (in A, as the reference), rounded once into out. Invariant: blockDim.x == 256 (the tree's size).
template <class A> __global__ void reduce_sum_kernel(ReduceArgs a) {
  __shared__ A part[kThreads];
  for (int64_t o = blockIdx.x; o < a.outputs; o += gridDim.x) {
    int64_t base = 0, rem = o;
    for (int d = a.nk - 1; d >= 0; --d) {
      base += (rem % a.kept_sizes[d]) * a.kept_strides[d];
      rem /= a.kept_sizes[d];
    }
    A s = 0;
    for (int64_t t = threadIdx.x; t < a.red_count; t += kThreads) {
      int64_t off = base, r = t;
      for (int d = a.nr - 1; d >= 0; --d) {
        off += (r % a.red_sizes[d]) * a.red_strides[d];
        r /= a.red_sizes[d];
      }
      s += load_elem<A>(a.x, a.xdt, off);
    }
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

std::string reduce_sum_declines(const ReduceSumProblem& p) {
  if (p.plan.kept_sizes.size() > cuda_detail::kMaxDims ||
      p.plan.red_sizes.size() > cuda_detail::kMaxDims)
    return "more than 8 kept or reduced dims";
  return {};
}

void reduce_sum(const ReduceSumProblem& p) {
  const int64_t outputs = p.out.numel();
  if (outputs == 0) return;
  cudaStream_t s = cuda_detail::activate(p.x.device());
  ReduceArgs a{};
  a.nk = static_cast<int>(p.plan.kept_sizes.size());
  a.nr = static_cast<int>(p.plan.red_sizes.size());
  for (int d = 0; d < a.nk; ++d) {
    a.kept_sizes[d] = p.plan.kept_sizes[static_cast<size_t>(d)];
    a.kept_strides[d] = p.plan.kept_strides[static_cast<size_t>(d)];
  }
  for (int d = 0; d < a.nr; ++d) {
    a.red_sizes[d] = p.plan.red_sizes[static_cast<size_t>(d)];
    a.red_strides[d] = p.plan.red_strides[static_cast<size_t>(d)];
  }
  a.outputs = outputs;
  a.red_count = p.plan.red_count;
  a.x = p.x.data_ptr();
  a.xdt = p.x.dtype();
  a.out = p.out.data_ptr();
  a.odt = p.out.dtype();
  a.scale = p.scale;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(outputs, 65535));
  const DType acc = acc_dtype(p.x.dtype());
  if (acc == DType::f64)
    reduce_sum_kernel<double><<<grid, kThreads, 0, s>>>(a);
  else if (acc == DType::f32)
    reduce_sum_kernel<float><<<grid, kThreads, 0, s>>>(a);
  else
    reduce_sum_kernel<int64_t><<<grid, kThreads, 0, s>>>(a);
  MIXPREC_CUDA_LAUNCHED();
}

}  // namespace mixprec::ops::cuda
