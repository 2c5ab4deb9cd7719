// CUDA attention, forward and backward (ops::scaled_dot_product_attention; the problems and
// their NaN contract: ops/attention_problem.h). Plain kernels, correctness over speed: no tensor
// cores. Every intermediate (scores, probabilities, dP, dS, the statistics, the accumulators)
// is in C = f32 (f64 for f64 inputs) and each output is rounded once into its dtype, as the
// reference composition (ops/ref/attention.cpp); f16/bf16 inputs are widened exactly, so their
// products are exact in f32 and accumulate in f32. Only the order of the additions differs from
// the reference (covered by the tolerance table). A softmax forced into 16 bits (a custom list)
// is declined: the CPU kernels count its overflows on the host.
//
// Shapes and layouts: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] and o, dout, dq, dk,
// dv have a unit stride in their last dim and free strides elsewhere; lse and the backward's
// scratch delta are contiguous [B, H, Lq] in C; D, Dv <= 256.
//
// Every kernel: 256 threads = 8 warps a block, all for one (b, h). Warp w owns one row (a query
// row, or in the dk/dv kernel a key row); the block walks the other side in tiles of 32 rows
// (one per lane) that its threads copy into shared memory together (consecutive threads read
// consecutive elements of a row: coalesced), with __syncthreads() before and after each copy.
// Lane l then owns the tile's row l for the dot products (its reads of the tile's rows step by
// the padded row length D + 1: no bank conflicts) and head-dim elements e = l, l + 32, ... for
// the accumulators (registers; consecutive lanes read consecutive elements of a tile row).
// Sums over the tile's rows go in row order through __shfl_sync broadcasts: each output
// element is written by one thread (no atomics; deterministic).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/warp.cuh"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::load_elem;
using cuda_detail::store_elem;

constexpr int kRows = 8;                  // warps a block: the rows a block owns
constexpr int kThreads = kRows * 32;
constexpr int kTile = 32;                 // rows of the other side per shared-memory tile
constexpr int64_t kMaxHead = 256;         // largest D and Dv
constexpr int kSlots = kMaxHead / 32;     // head-dim elements a lane accumulates
constexpr unsigned kFull = 0xffffffffu;

struct RowStrides {  // of dims 0, 1, 2 (the last is unit)
  int64_t b = 0, h = 0, l = 0;
};
RowStrides row_strides(const Tensor& t) {
  return {t.strides()[0], t.strides()[1], t.strides()[2]};
}

struct AttnArgs {
  const void *q, *k, *v, *dout;
  void *o, *dq, *dk, *dv;
  DType dt;        // of q, k, v, o, dout, dq, dk, dv
  void* lse;       // [B, H, Lq] in C
  void* delta;     // backward: [B, H, Lq] in C, written by the dq kernel, read by dk/dv
  int64_t B, H, Lq, Lk, D, Dv, off;  // off = Lk - Lq (causal alignment)
  RowStrides sq, sk, sv, so, sdo, sdq, sdk, sdv;
  const uint8_t* mask;  // null, or u8 [B, H, Lq, Lk] with strides ms (0 on broadcast dims)
  int64_t ms[4];
  double scale;
  bool causal;
};

__device__ int64_t at(const RowStrides& s, int64_t b, int64_t h, int64_t i) {
  return b * s.b + h * s.h + i * s.l;
}

// Whether query i may attend to key j (attention_problem.h: causal bottom-right, mask nonzero).
__device__ bool visible(const AttnArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a.causal && j > i + a.off) return false;
  return !a.mask || a.mask[b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3]] != 0;
}

// All threads of the block: rows [r0, r0 + rows) of the (b, h) slice of t (rows of `width`
// elements, row stride s.l) into tile[r][e] (row length ld), zero past row n_total.
template <class C>
__device__ void load_tile(C* tile, int64_t ld, const void* t, DType dt, const RowStrides& s,
                          int64_t b, int64_t h, int64_t r0, int64_t n_total, int rows,
                          int64_t width) {
  for (int64_t x = threadIdx.x; x < rows * width; x += blockDim.x) {
    const int64_t r = x / width, e = x % width;
    tile[r * ld + e] = r0 + r < n_total ? load_elem<C>(t, dt, at(s, b, h, r0 + r) + e) : C(0);
  }
}

template <class C> __device__ C dot(const C* x, const C* y, int64_t n) {
  C s = 0;
  for (int64_t e = 0; e < n; ++e) s += x[e] * y[e];
  return s;
}

template <class C> __device__ C masked_score(const AttnArgs& a, const C* qrow, const C* krow,
                                             int64_t b, int64_t h, int64_t i, int64_t j) {
  return visible(a, b, h, i, j) ? dot(qrow, krow, a.D) * static_cast<C>(a.scale)
                                : -std::numeric_limits<C>::infinity();
}

// The (b, h, first row) of block blockIdx.x when each (b, h) has `blocks` blocks of kRows rows.
struct BlockPos {
  int64_t b, h, r0;
};
__device__ BlockPos block_pos(const AttnArgs& a, int64_t blocks) {
  const int64_t x = blockIdx.x;
  return {x / blocks / a.H, x / blocks % a.H, x % blocks * kRows};
}

// ---------------------------------------------------------------- forward

// Grid: B * H * ceil(Lq / 8) blocks; warp w owns query i = r0 + w. Shared: qs [8][D], ks
// [32][D + 1], vs [32][Dv]. Online softmax per row: the running max m and sum l and the output
// accumulator (rescaled by exp(m_old - m) when m grows), all in C; a tile where the row sees
// nothing yet is skipped. Causal: the block stops at the first key tile none of its rows sees.
// A visible NaN score, a +inf score or no visible key: the row's o and lse are NaN (the
// reference's softmax of a row without a finite max, or with a NaN). Invariant: the loop's
// trip count and break are uniform over the block (the __syncthreads are reached by all).
template <class C> __global__ void attention_fwd_kernel(AttnArgs a, int64_t blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* qs = reinterpret_cast<C*>(smem_raw);
  C* ks = qs + kRows * a.D;
  C* vs = ks + kTile * (a.D + 1);
  const BlockPos bp = block_pos(a, blocks);
  const int w = static_cast<int>(threadIdx.x / 32), ln = static_cast<int>(threadIdx.x % 32);
  const int64_t i = bp.r0 + w, i_last = std::min<int64_t>(bp.r0 + kRows, a.Lq) - 1;
  const bool live = i < a.Lq;  // uniform over the warp
  constexpr C inf = std::numeric_limits<C>::infinity();
  load_tile(qs, a.D, a.q, a.dt, a.sq, bp.b, bp.h, bp.r0, a.Lq, kRows, a.D);
  C m = -inf, l = 0, acc[kSlots] = {};
  bool nan_seen = false;
  for (int64_t j0 = 0; j0 < a.Lk; j0 += kTile) {
    if (a.causal && j0 > i_last + a.off) break;
    __syncthreads();  // the previous tile is read by every warp
    load_tile(ks, a.D + 1, a.k, a.dt, a.sk, bp.b, bp.h, j0, a.Lk, kTile, a.D);
    load_tile(vs, a.Dv, a.v, a.dt, a.sv, bp.b, bp.h, j0, a.Lk, kTile, a.Dv);
    __syncthreads();
    if (!live) continue;
    const int64_t j = j0 + ln, nc = std::min<int64_t>(kTile, a.Lk - j0);
    const C s = j < a.Lk ? masked_score(a, qs + w * a.D, ks + ln * (a.D + 1), bp.b, bp.h, i, j)
                         : -inf;
    nan_seen |= __any_sync(kFull, isnan(s));
    const C m_new = fmax(m, warp_max(s));
    if (m_new == -inf) continue;  // nothing visible yet (uniform: every lane has the max)
    const C alpha = exp(m - m_new), p = exp(s - m_new);
    l = l * alpha + warp_sum(p);
#pragma unroll
    for (int t = 0; t < kSlots; ++t) acc[t] *= alpha;
    for (int jj = 0; jj < nc; ++jj) {
      const C pj = __shfl_sync(kFull, p, jj);
#pragma unroll
      for (int t = 0; t < kSlots; ++t)
        if (const int64_t e = ln + 32 * t; e < a.Dv) acc[t] += pj * vs[jj * a.Dv + e];
    }
    m = m_new;
  }
  if (!live) return;
  const bool none = nan_seen || !isfinite(m);
  const C nan = std::numeric_limits<C>::quiet_NaN(), inv = none ? nan : C(1) / l;
  const int64_t orow = at(a.so, bp.b, bp.h, i);
#pragma unroll
  for (int t = 0; t < kSlots; ++t)
    if (const int64_t e = ln + 32 * t; e < a.Dv) store_elem<C>(a.o, a.dt, orow + e, acc[t] * inv);
  if (ln == 0) static_cast<C*>(a.lse)[(bp.b * a.H + bp.h) * a.Lq + i] = none ? nan : m + log(l);
}

// ---------------------------------------------------------------- backward

// The backward recomputes P = exp(S - lse) (S = -inf where masked: P = 0, or NaN in a row whose
// lse is NaN, which spreads NaN as attention_problem.h says) and visits every (query, key) pair
// (no causal skipping), as the reference's dense matrices do. With dP = dO v^T:
//   delta_i = sum_j P_ij dP_ij   (the reference's softmax backward sum),
//   dS = P * (dP - delta),  dq = scale * dS k,  dk = scale * dS^T q,  dv = P^T dO.

// dq and delta. Grid: B * H * ceil(Lq / 8) blocks; warp w owns query i = r0 + w. Shared: qs
// [8][D], dos [8][Dv], ks [32][D + 1], vs [32][Dv + 1]. Two sweeps over the key tiles: the
// first sums delta_i (lanes, then warp_sum), the second accumulates dq_i over the keys in order.
// Writes dq (rounded once, after the scale) and delta (C).
template <class C> __global__ void attention_bwd_dq_kernel(AttnArgs a, int64_t blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* qs = reinterpret_cast<C*>(smem_raw);
  C* dos = qs + kRows * a.D;
  C* ks = dos + kRows * a.Dv;
  C* vs = ks + kTile * (a.D + 1);
  const BlockPos bp = block_pos(a, blocks);
  const int w = static_cast<int>(threadIdx.x / 32), ln = static_cast<int>(threadIdx.x % 32);
  const int64_t i = bp.r0 + w;
  const bool live = i < a.Lq;
  load_tile(qs, a.D, a.q, a.dt, a.sq, bp.b, bp.h, bp.r0, a.Lq, kRows, a.D);
  load_tile(dos, a.Dv, a.dout, a.dt, a.sdo, bp.b, bp.h, bp.r0, a.Lq, kRows, a.Dv);
  const int64_t stat = (bp.b * a.H + bp.h) * a.Lq + i;
  const C lse = live ? static_cast<const C*>(a.lse)[stat] : C(0);
  C part = 0, delta = 0, acc[kSlots] = {};
  for (int sweep = 0; sweep < 2; ++sweep) {
    for (int64_t j0 = 0; j0 < a.Lk; j0 += kTile) {
      __syncthreads();
      load_tile(ks, a.D + 1, a.k, a.dt, a.sk, bp.b, bp.h, j0, a.Lk, kTile, a.D);
      load_tile(vs, a.Dv + 1, a.v, a.dt, a.sv, bp.b, bp.h, j0, a.Lk, kTile, a.Dv);
      __syncthreads();
      if (!live) continue;
      const int64_t j = j0 + ln, nc = std::min<int64_t>(kTile, a.Lk - j0);
      C p = 0, dp = 0;
      if (j < a.Lk) {
        p = exp(masked_score(a, qs + w * a.D, ks + ln * (a.D + 1), bp.b, bp.h, i, j) - lse);
        dp = dot(dos + w * a.Dv, vs + ln * (a.Dv + 1), a.Dv);
      }
      if (sweep == 0) {
        part += p * dp;
        continue;
      }
      const C ds = j < a.Lk ? p * (dp - delta) : C(0);
      for (int jj = 0; jj < nc; ++jj) {
        const C dsj = __shfl_sync(kFull, ds, jj);
#pragma unroll
        for (int t = 0; t < kSlots; ++t)
          if (const int64_t e = ln + 32 * t; e < a.D) acc[t] += dsj * ks[jj * (a.D + 1) + e];
      }
    }
    if (live && sweep == 0) delta = warp_sum(part);
  }
  if (!live) return;
  const int64_t row = at(a.sdq, bp.b, bp.h, i);
#pragma unroll
  for (int t = 0; t < kSlots; ++t)
    if (const int64_t e = ln + 32 * t; e < a.D)
      store_elem<C>(a.dq, a.dt, row + e, acc[t] * static_cast<C>(a.scale));
  if (ln == 0) static_cast<C*>(a.delta)[stat] = delta;
}

// dk and dv. Grid: B * H * ceil(Lk / 8) blocks; warp w owns key j = r0 + w. Shared: ks [8][D],
// vs [8][Dv], qs [32][D + 1], dos [32][Dv + 1]. One sweep over the query tiles: lane l computes
// P and dS of query i0 + l against key j; dk_j and dv_j accumulate over the queries in order.
// With Lq = 0 the sweep is empty and dk, dv are written as zeros. Reads lse and delta (written
// by the dq kernel before it on the same stream).
template <class C> __global__ void attention_bwd_dkdv_kernel(AttnArgs a, int64_t blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  C* ks = reinterpret_cast<C*>(smem_raw);
  C* vs = ks + kRows * a.D;
  C* qs = vs + kRows * a.Dv;
  C* dos = qs + kTile * (a.D + 1);
  const BlockPos bp = block_pos(a, blocks);
  const int w = static_cast<int>(threadIdx.x / 32), ln = static_cast<int>(threadIdx.x % 32);
  const int64_t j = bp.r0 + w;
  const bool live = j < a.Lk;
  load_tile(ks, a.D, a.k, a.dt, a.sk, bp.b, bp.h, bp.r0, a.Lk, kRows, a.D);
  load_tile(vs, a.Dv, a.v, a.dt, a.sv, bp.b, bp.h, bp.r0, a.Lk, kRows, a.Dv);
  const C* lse = static_cast<const C*>(a.lse) + (bp.b * a.H + bp.h) * a.Lq;
  const C* delta = static_cast<const C*>(a.delta) + (bp.b * a.H + bp.h) * a.Lq;
  C dk[kSlots] = {}, dv[kSlots] = {};
  for (int64_t i0 = 0; i0 < a.Lq; i0 += kTile) {
    __syncthreads();
    load_tile(qs, a.D + 1, a.q, a.dt, a.sq, bp.b, bp.h, i0, a.Lq, kTile, a.D);
    load_tile(dos, a.Dv + 1, a.dout, a.dt, a.sdo, bp.b, bp.h, i0, a.Lq, kTile, a.Dv);
    __syncthreads();
    if (!live) continue;
    const int64_t i = i0 + ln, nr = std::min<int64_t>(kTile, a.Lq - i0);
    C p = 0, ds = 0;
    if (i < a.Lq) {
      p = exp(masked_score(a, qs + ln * (a.D + 1), ks + w * a.D, bp.b, bp.h, i, j) - lse[i]);
      ds = p * (dot(dos + ln * (a.Dv + 1), vs + w * a.Dv, a.Dv) - delta[i]);
    }
    for (int ii = 0; ii < nr; ++ii) {
      const C pi = __shfl_sync(kFull, p, ii), dsi = __shfl_sync(kFull, ds, ii);
#pragma unroll
      for (int t = 0; t < kSlots; ++t) {
        const int64_t e = ln + 32 * t;
        if (e < a.Dv) dv[t] += pi * dos[ii * (a.Dv + 1) + e];
        if (e < a.D) dk[t] += dsi * qs[ii * (a.D + 1) + e];
      }
    }
  }
  if (!live) return;
  const int64_t krow = at(a.sdk, bp.b, bp.h, j), vrow = at(a.sdv, bp.b, bp.h, j);
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int64_t e = ln + 32 * t;
    if (e < a.D) store_elem<C>(a.dk, a.dt, krow + e, dk[t] * static_cast<C>(a.scale));
    if (e < a.Dv) store_elem<C>(a.dv, a.dt, vrow + e, dv[t]);
  }
}

// ---------------------------------------------------------------- launchers

size_t compute_size(DType dt) { return dt == DType::f64 ? sizeof(double) : sizeof(float); }

// Shared memory of each kernel: 8 own rows of widths w1 and w2 and a tile of 32 padded rows of
// each (the forward's vs is unpadded, counted padded here: at most 32 elements more).
size_t smem_bytes(DType dt, int64_t w1, int64_t w2) {
  return static_cast<size_t>(kRows * (w1 + w2) + kTile * (w1 + 1 + w2 + 1)) * compute_size(dt);
}

// The most dynamic shared memory a block of device d may opt in to (a host query, no wait).
int max_smem(Device d) {
  int v = 0;
  MIXPREC_CUDA_CHECK(
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.index));
  return v;
}

std::string declines(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                     const AttentionParams& prm) {
  const DType dt = q.dtype();
  if (dt != DType::f32 && dt != DType::f64 && dt != DType::f16 && dt != DType::bf16)
    return "not a float dtype";
  if (is_low_precision(prm.softmax_dtype))
    return "a softmax forced into 16 bits (a custom list) runs on the CPU only";
  if (q.size(3) > kMaxHead || v.size(3) > kMaxHead) return "head dim above 256";
  for (const Tensor* t : {&q, &k, &v, &dout})
    if (t->defined() && t->size(3) != 1 && t->strides()[3] != 1)
      return "a last dim that is not unit-stride";
  const int64_t rows = std::max(q.size(2), k.size(2));
  if (q.size(0) * q.size(1) * ((rows + kRows - 1) / kRows) > std::numeric_limits<int>::max())
    return "more than 2^31 - 1 blocks";
  const size_t need = smem_bytes(dt, q.size(3), v.size(3));
  if (need > static_cast<size_t>(max_smem(q.device())))
    return "needs " + std::to_string(need) + " bytes of shared memory a block, more than the "
           "device allows (head dims too large for this dtype)";
  return {};
}

AttnArgs args_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                 const AttentionParams& prm) {
  AttnArgs a{};
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.dt = q.dtype();
  a.lse = lse.data_ptr();
  a.B = q.size(0), a.H = q.size(1), a.Lq = q.size(2), a.Lk = k.size(2);
  a.D = q.size(3), a.Dv = v.size(3), a.off = a.Lk - a.Lq;
  a.sq = row_strides(q), a.sk = row_strides(k), a.sv = row_strides(v);
  if (prm.mask.defined()) {
    a.mask = static_cast<const uint8_t*>(prm.mask.data_ptr());
    for (int d = 0; d < 4; ++d) a.ms[d] = prm.mask.strides()[static_cast<size_t>(d)];
  }
  a.scale = prm.scale;
  a.causal = prm.causal;
  return a;
}

// Launches kernel on `blocks * B * H` blocks of 256 threads with `smem` bytes of dynamic shared
// memory (opting in above the default 48 KiB).
template <class K>
void launch(K kernel, const AttnArgs& a, int64_t rows, size_t smem, cudaStream_t s) {
  const int64_t blocks = (rows + kRows - 1) / kRows;
  if (blocks * a.B * a.H == 0) return;
  if (smem > 48 * 1024)
    MIXPREC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks * a.B * a.H), kThreads, smem, s>>>(a, blocks);
  MIXPREC_CUDA_LAUNCHED();
}

template <class F> void visit_compute(DType d, F&& f) {
  if (d == DType::f64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

}  // namespace

std::string attention_fwd_declines(const AttentionFwdProblem& p) {
  std::string why = declines(p.q, p.k, p.v, Tensor(), p.params);
  if (why.empty() && p.o.size(3) != 1 && p.o.strides()[3] != 1)
    why = "an output whose last dim is not unit-stride";
  return why;
}

std::string attention_bwd_declines(const AttentionBwdProblem& p) {
  std::string why = declines(p.q, p.k, p.v, p.dout, p.params);
  for (const Tensor* t : {&p.dq, &p.dk, &p.dv})
    if (why.empty() && t->size(3) != 1 && t->strides()[3] != 1)
      why = "a gradient whose last dim is not unit-stride";
  return why;
}

void attention_fwd(const AttentionFwdProblem& p) {
  cudaStream_t s = cuda_detail::activate(p.q.device());
  AttnArgs a = args_of(p.q, p.k, p.v, p.lse, p.params);
  a.o = p.o.data_ptr();
  a.so = row_strides(p.o);
  visit_compute(a.dt, [&]<class C>() {
    launch(attention_fwd_kernel<C>, a, a.Lq, smem_bytes(a.dt, a.D, a.Dv), s);
  });
}

void attention_bwd(const AttentionBwdProblem& p) {
  cudaStream_t s = cuda_detail::activate(p.q.device());
  AttnArgs a = args_of(p.q, p.k, p.v, p.lse, p.params);
  // Scratch on the device's stream: the caching allocator may hand its block to the next request
  // once this function returns, which is safe because that request's work is queued after ours.
  const Tensor delta = Tensor::empty(p.lse.shape(), {.dtype = p.lse.dtype(), .device = p.lse.device()});
  a.dout = p.dout.data_ptr();
  a.dq = p.dq.data_ptr(), a.dk = p.dk.data_ptr(), a.dv = p.dv.data_ptr();
  a.delta = delta.data_ptr();
  a.sdo = row_strides(p.dout), a.sdq = row_strides(p.dq), a.sdk = row_strides(p.dk);
  a.sdv = row_strides(p.dv);
  visit_compute(a.dt, [&]<class C>() {
    launch(attention_bwd_dq_kernel<C>, a, a.Lq, smem_bytes(a.dt, a.D, a.Dv), s);
    launch(attention_bwd_dkdv_kernel<C>, a, a.Lk, smem_bytes(a.dt, a.D, a.Dv), s);
  });
}

}  // namespace mixprec::ops::cuda
