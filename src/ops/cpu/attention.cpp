// FlashAttention on the CPU: ops::scaled_dot_product_attention's fused kernel, forward and
// backward, for f32, bf16 and f16 on AVX-512 or AVX2 + FMA + F16C (simd.h, picked at run time;
// f64 and CPUs without AVX2 go to the reference kernel). It never holds the [Lq x Lk]
// probabilities: the forward keeps, per query row, a running max m and sum l (f32) and rescales
// its output accumulator when m grows (online softmax); it saves only lse = m + log(l) per row.
// The backward recomputes each probability as exp(s - lse).
//
// The products run on tiles through one register-blocked micro-kernel (attention_tiles.inc:
// rows of A broadcast, vectors of B, a block of C held in registers), compiled once per ISA.
// Forward: one unit per (b, h, group of blocks of kBr = 32 query rows; one group unless B * H is
// small), key tiles of kBc = 64, the unit's keys and values widened to f32 once; in s = k q^T
// the lanes are the block's rows, so the softmax statistics are per lane; then o += p v.
// Backward: one unit per (b, h, group of key tiles), lanes over keys (s = q k^T, dP = dO v^T);
// each unit accumulates dK, dV of its tiles over the query blocks in order and its own share of
// dQ, and the shares are summed in unit order per (b, h) afterwards: parallel over B * H and key
// groups (a group count set by the shape alone), so results do not depend on the thread count,
// and every sum is a chain over one index in order, so not on the ISA either.
//
// Where rounding happens, for T = bf16 or f16 (for f32 there is none beyond f32 arithmetic):
// every product is of two T values (exact in f32) accumulated in f32, i.e. the matmuls run "in
// T with f32 accumulation". For bf16 every product adds in pairs of its inner index (the head
// dim, the query rows or the keys), the odd one first: vdpbf16ps's order, which it runs in on
// AVX512-BF16 CPUs (pair_gemm) and the f32 kernel follows elsewhere. Scores s
// = scale * (q.k), the statistics m, l, lse and the softmax arithmetic stay f32. Rounded to T: p
// before p.v (forward; l sums these same rounded p) and before p^T.dO (backward); dS = p * (dP - D)
// (from the f32 p) before dS.k and dS^T.q; the outputs o, dq, dk, dv once at the end (dq, dk scaled
// by `scale` in f32 first). D = rowsum(dO * o) uses the rounded o. With softmax_dtype forced to 16
// bits (a custom list), s, p, dP, D and dS are also rounded to it, and the overflows of those
// roundings are counted (s in the forward, dP and dS in the backward, over the entries the kernel
// forms).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <immintrin.h>
#include <omp.h>

#include "mixprec/cpu_features.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kBr = 32;        // query rows per block (forward lanes)
constexpr int64_t kBc = 64;        // keys per tile (backward lanes)
constexpr int64_t kMaxHead = 256;  // largest D and Dv
// The backward splits the key tiles of each (b, h) into groups (its units) while B * H is below
// kMinUnits, into at most kMaxGroups; the groups' dQ shares are held in waves of slices of at
// most kScratchFloats (32 MB).
constexpr int64_t kMinUnits = 64;
constexpr int64_t kMaxGroups = 8;
constexpr int64_t kScratchFloats = int64_t{8} << 20;
// The forward splits the query blocks of each (b, h) into groups (its units) while B * H is
// below kMinUnits; a unit widens the keys and values its blocks see once when they fit in
// kWholeSliceFloats (4 MB a thread), else tile by tile.
constexpr int64_t kWholeSliceFloats = int64_t{1} << 20;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- geometry

struct Geometry {
  int64_t B, H, Lq, Lk, D, Dv, Dp, Dvp, off;  // Dp, Dvp: D, Dv rounded up to 16
  float scale;
  bool causal;
  DType sd;             // softmax dtype: f32, or a forced f16/bf16
  const uint8_t* mask;  // null, or [B, H, Lq, Lk] with strides ms
  int64_t ms[4];
  bool dp = false;  // the products through pair_gemm (use_pairs)
};

Geometry geometry(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  Geometry g{q.size(0), q.size(1),
             q.size(2), k.size(2),
             q.size(3), v.size(3),
             0,         0,
             0,         static_cast<float>(p.scale),
             p.causal,  p.softmax_dtype,
             nullptr,   {0, 0, 0, 0}};
  g.Dp = (g.D + 15) / 16 * 16;
  g.Dvp = (g.Dv + 15) / 16 * 16;
  g.off = g.Lk - g.Lq;
  if (p.mask.defined()) {
    g.mask = static_cast<const uint8_t*>(p.mask.data_ptr());
    for (int d = 0; d < 4; ++d) g.ms[d] = p.mask.strides()[static_cast<size_t>(d)];
  }
  return g;
}

// The element pointer of row (b, h, i) of a [B, H, L, d] tensor with a unit last stride.
template <class T> struct Rows {
  T* base;
  int64_t sb, sh, sl;
  Rows(const Tensor& t)
      : base(static_cast<T*>(t.data_ptr())),
        sb(t.strides()[0]),
        sh(t.strides()[1]),
        sl(t.strides()[2]) {}
  T* slice(int64_t b, int64_t h) const { return base + b * sb + h * sh; }
};

// The first query row that sees any key of the tile starting at j0.
int64_t first_row(const Geometry& g, int64_t j0) {
  return g.causal ? std::max<int64_t>(0, j0 - g.off) : 0;
}

// One value rounded to the forced softmax dtype; `bad` counts finite values that overflow.
float round_softmax(float x, DType sd, int64_t& bad) {
  const float y = sd == DType::f16 ? to_f32(to_f16(x)) : to_f32(to_bf16(x));
  bad += std::isfinite(x) && !std::isfinite(y);
  return y;
}

std::string declines(DType dt, DType sd, const Tensor& q, const Tensor& k, const Tensor& v) {
  if (simd::best_isa() == simd::Isa::scalar) return "needs AVX2, FMA and F16C";
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16) return "not f32, bf16 or f16";
  if (sd != DType::f32 && !is_low_precision(sd)) return "softmax dtype not f32, f16 or bf16";
  if (q.size(3) > kMaxHead || v.size(3) > kMaxHead) return "head dim above 256";
  for (const Tensor* t : {&q, &k, &v})
    if (t->size(3) != 1 && t->strides()[3] != 1) return "a last dim that is not unit-stride";
  return "";
}

// The rows of slice s (b * H + h) of the given [B, H, L, d] tensors, asked of the cache ahead of
// their use: a unit's first reads of q, k, v (o and dO in the backward) otherwise wait on memory
// row by row (their rows are apart: vit-tiny's q, k and v are views of one [B, L, 3, H, D]).
template <class T>
void prefetch_slice(std::initializer_list<const Tensor*> ts, int64_t H, int64_t s) {
  for (const Tensor* t : ts) {
    const Rows<const T> r(*t);
    const char* base = reinterpret_cast<const char*>(r.slice(s / H, s % H));
    const int64_t n = t->size(2), row = t->size(3) * int64_t{sizeof(T)};
    for (int64_t i = 0; i < n; ++i) {
      const char* p = base + i * r.sl * int64_t{sizeof(T)};
      __builtin_prefetch(p, 0, 2);
      if (row > 1) __builtin_prefetch(p + row - 1, 0, 2);
    }
  }
}

// ---------------------------------------------------------------- per-thread buffers

struct FwdBuffers {
  bool whole;  // kw and vw hold a slice's rows, not a tile's
  std::vector<float> qt, st, acc, kw, vw, m, mnew, l, alpha;
  std::vector<uint32_t> qw;      // q^T of the block as words (pair_gemm's B), under g.dp
  std::vector<uint32_t> pw, vp;  // p's key pairs [key / 2][row], v's [key / 2][Dvp], under g.dp
  FwdBuffers(const Geometry& g, int64_t whole_floats)
      : whole(g.Lk * (g.D + g.Dvp) <= whole_floats),
        qt(g.D * kBr),                     // q^T of the block
        st(kBc * kBr),                     // s, then p: [key][row]
        acc(kBr * g.Dvp),                  // o accumulator
        kw((whole ? g.Lk : kBc) * g.D),    // k rows widened (16-bit inputs)
        vw((whole ? g.Lk : kBc) * g.Dvp),  // v rows widened and padded (if needed)
        m(kBr),
        mnew(kBr),
        l(kBr),
        alpha(kBr),
        qw(g.dp ? g.D / 2 * kBr : 0),
        pw(g.dp ? kBc / 2 * kBr : 0),
        vp(g.dp ? kBc / 2 * g.Dvp : 0) {}
};

struct BwdBuffers {
  std::vector<float> qr, dor, orow, delta, kr, kt, vt, s, dp, dk, dv;
  std::vector<uint32_t> kw, vw;  // k^T and v^T of a tile as words (pair_gemm's B), under g.dp
  // Under g.dp: q's and dO's row pairs for the slice [Lq / 2][Dp or Dvp], k's of a tile
  // [kBc / 2][Dp]; p's and dS's row pairs [kBr / 2][kBc]; dS rows as bf16 [kBr][kBc].
  std::vector<uint32_t> qp, dop, kp, sp, dsp;
  std::vector<bf16> ds16;
  BwdBuffers(const Geometry& g)
      : qr(g.Lq * g.Dp),    // the slice's q rows (B of dK), if widened
        dor(g.Lq * g.Dvp),  // its dO rows (B of dV), if widened
        orow(g.Dvp),        // a row of o, if widened
        delta(g.Lq),        // D = rowsum(dO o)
        kr(kBc * g.Dp),     // a k tile's rows (B of dQ), if widened
        kt(g.D * kBc),      // k^T (B of s)
        vt(g.Dv * kBc),     // v^T (B of dP)
        s(kBr * kBc),       // s, then p: [row][key]
        dp(kBr * kBc),      // dP, then dS
        dk(kBc * g.Dp),
        dv(kBc * g.Dvp),
        kw(g.dp ? g.D / 2 * kBc : 0),
        vw(g.dp ? g.Dv / 2 * kBc : 0),
        qp(g.dp ? g.Lq / 2 * g.Dp : 0),
        dop(g.dp ? g.Lq / 2 * g.Dvp : 0),
        kp(g.dp ? kBc / 2 * g.Dp : 0),
        sp(g.dp ? kBr / 2 * kBc : 0),
        dsp(g.dp ? kBr / 2 * kBc : 0),
        ds16(g.dp ? kBr * kBc : 0) {}
};

// ---------------------------------------------------------------- the products in pairs (bf16)

// C (+)= A B for bf16 operands, two of the inner index a step: AVX512-BF16's vdpbf16ps adds to
// each f32 lane the two products of a pair, the odd one first, then the even one, each addition
// rounded to nearest even, with subnormal inputs and results taken as zero (numerics.md). A
// product of two bf16 values is exact in f32, so this is the f32 kernel's chain of FMAs taken in
// that order, which the f32 kernel takes for bf16 on every ISA (Gemm::pairs): the same bits but
// below 2^-126. Twice the work of an FMA an instruction, on operands of half the size. The
// scores (s = q k^T, dP = dO v^T, the forward's k q^T) pair along the head dim: q, k, dO are read
// as the words of their rows, k^T, v^T, q^T transposed as words (transpose_words). The others
// pair along the query rows (p^T dO, dS^T q) or the keys (dS k, p v), when that count is even:
// two rows of p or dS become words (pair_rows), dS's rows bf16 words, and q, dO, k, v rows are
// interleaved in pairs (interleave_rows); an odd count takes the f32 kernel, in the same order.
// A word (m, i) = the pair (A[m][2i], A[m][2i + 1]) (its low half A[m][2i]), B word (i, n) the
// pair (B[2i][n], B[2i + 1][n]); C[m][n] = c[m * cm + n]; np pairs; nv vectors of 16.
struct PairGemm {
  const uint32_t* a;
  int64_t am, ai;  // A word (m, i) = a[m * am + i * ai]
  const uint32_t* b;
  int64_t bk;
  float* c;
  int64_t cm;
  int64_t nm, np;
  int nv;
  bool accumulate = false;  // C (times mscale[m], if given) plus the sums, as Gemm
  const float* mscale = nullptr;
};
void pair_gemm(const PairGemm& g);  // below, compiled for AVX512-BF16 (use_pairs checks the CPU)

// g.dp: bf16 on AVX-512 with AVX512-BF16, even head dims, and rows whose pairs are 32-bit words
// (even strides, 4-byte aligned data).
bool use_pairs(const Geometry& g, DType dt, simd::Isa isa,
               std::initializer_list<const Tensor*> ts) {
  const CpuFeatures& f = cpu_features();
  if (dt != DType::bf16 || isa != simd::Isa::avx512 || !f.avx512_bf16) return false;
  if (g.D % 2 != 0 || g.Dv % 2 != 0) return false;
  for (const Tensor* t : ts) {
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 4 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (t->strides()[static_cast<size_t>(d)] % 2 != 0) return false;
  }
  return true;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

template <int MR, int NV> void pair_tile(const PairGemm& g, int64_t m0) {
  __m512 r[MR][NV];
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) {
      r[m][v] =
          g.accumulate ? _mm512_loadu_ps(g.c + (m0 + m) * g.cm + v * 16) : _mm512_setzero_ps();
      if (g.mscale) r[m][v] = _mm512_mul_ps(r[m][v], _mm512_set1_ps(g.mscale[m0 + m]));
    }
  const uint32_t* a = g.a + m0 * g.am;
  const uint32_t* b = g.b;
  for (int64_t i = 0; i < g.np; ++i, a += g.ai, b += g.bk) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 16);
    for (int m = 0; m < MR; ++m) {
      uint32_t w;
      std::memcpy(&w, a + m * g.am, sizeof w);
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(w));
      for (int v = 0; v < NV; ++v) r[m][v] = _mm512_dpbf16_ps(r[m][v], x, bv[v]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(g.c + (m0 + m) * g.cm + v * 16, r[m][v]);
}

template <int NV, int M> void pair_rest(const PairGemm& g, int64_t m0, int64_t rest) {
  if constexpr (M > 0) {
    if (rest == M)
      pair_tile<M, NV>(g, m0);
    else
      pair_rest<NV, M - 1>(g, m0, rest);
  }
}

template <int NV> void pair_nv(const PairGemm& g) {
  constexpr int MR = NV == 1 ? 16 : NV == 2 ? 8 : NV == 3 ? 5 : 4;  // 16 accumulators at most
  int64_t m0 = 0;
  for (; m0 + MR <= g.nm; m0 += MR) pair_tile<MR, NV>(g, m0);
  if (m0 < g.nm) pair_rest<NV, MR - 1>(g, m0, g.nm - m0);
}

void pair_gemm(const PairGemm& g) {
  for (int v0 = 0; v0 < g.nv; v0 += 4) {
    PairGemm h = g;
    h.b += v0 * 16;
    h.c += v0 * 16;
    switch (std::min(4, g.nv - v0)) {
      case 1: pair_nv<1>(h); break;
      case 2: pair_nv<2>(h); break;
      case 3: pair_nv<3>(h); break;
      default: pair_nv<4>(h); break;
    }
  }
}

#pragma GCC pop_options

// ---------------------------------------------------------------- the kernels, once per ISA

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace tiles_avx512 {
using namespace simd::avx512;
#include "ops/cpu/attention_tiles.inc"
}  // namespace tiles_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace tiles_avx2 {
using namespace simd::avx2;
#include "ops/cpu/attention_tiles.inc"
}  // namespace tiles_avx2
#pragma GCC pop_options

// ---------------------------------------------------------------- forward

template <class T>
void fwd_typed(const AttentionFwdProblem& p, simd::Isa isa, int64_t whole_floats) {
  Geometry g = geometry(p.q, p.k, p.v, p.params);
  g.dp = use_pairs(g, p.q.dtype(), isa, {&p.q, &p.k, &p.v});
  const Rows<const T> q(p.q), k(p.k), v(p.v);
  const Rows<T> o(p.o);
  float* lse = static_cast<float*>(p.lse.data_ptr());
  const int64_t slices = g.B * g.H, nqb = (g.Lq + kBr - 1) / kBr;
  if (slices == 0) return;  // B or H is 0: nothing to compute
  const int64_t want =
      std::clamp<int64_t>((kMinUnits + slices - 1) / slices, 1, std::max<int64_t>(nqb, 1));
  const int64_t per_group = std::max<int64_t>(1, (nqb + want - 1) / want);
  const int64_t groups = (nqb + per_group - 1) / per_group, units = slices * groups;
  int64_t bad = 0;
#pragma omp parallel reduction(+ : bad) if (units > 1)
  {
    FwdBuffers w(g, whole_floats);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t b = u / (g.H * groups), h = u / groups % g.H;
      const int64_t qb0 = u % groups * per_group, qb1 = std::min(nqb, qb0 + per_group);
      if (groups == 1 && u + omp_get_num_threads() < units)  // the slice this thread takes next
        prefetch_slice<T>({&p.q, &p.k, &p.v}, g.H, u + omp_get_num_threads());
      bad += isa == simd::Isa::avx512
                 ? tiles_avx512::fwd_unit<T>(g, w, q, k, v, o, lse, b, h, qb0, qb1)
                 : tiles_avx2::fwd_unit<T>(g, w, q, k, v, o, lse, b, h, qb0, qb1);
    }
  }
  if (p.params.softmax_nonfinite) *p.params.softmax_nonfinite += bad;
}

// ---------------------------------------------------------------- backward

template <class T> void fill_nan_rows(T* base, int64_t rs, int64_t n, int64_t d) {
  const T nan = store<T>(kNaN);
  for (int64_t j = 0; j < n; ++j) std::fill(base + j * rs, base + j * rs + d, nan);
}

// A row without a distribution makes its dq row, and dK and dV of its slice, NaN, as the
// composition does.
template <class T>
void bwd_nan_rows(const Geometry& g, const AttentionBwdProblem& p, int64_t b, int64_t h) {
  const Rows<T> dq(p.dq), dk(p.dk), dv(p.dv);
  const float* lse = static_cast<const float*>(p.lse.data_ptr()) + (b * g.H + h) * g.Lq;
  bool any_nan = false;
  for (int64_t i = 0; i < g.Lq; ++i)
    if (std::isnan(lse[i])) {
      any_nan = true;
      fill_nan_rows(dq.slice(b, h) + i * dq.sl, dq.sl, 1, g.D);
    }
  if (any_nan) {
    fill_nan_rows(dk.slice(b, h), dk.sl, g.Lk, g.D);
    fill_nan_rows(dv.slice(b, h), dv.sl, g.Lk, g.Dv);
  }
}

// Units: (b, h, group of key tiles). With one group per (b, h) a unit finishes its dq at once
// from a per-thread share; else slices run in waves whose shares fit scratch_floats: in a wave,
// every unit first, then the sum of each slice's shares.
template <class T>
void bwd_typed(const AttentionBwdProblem& p, simd::Isa isa, int64_t scratch_floats) {
  Geometry g = geometry(p.q, p.k, p.v, p.params);
  g.dp = use_pairs(g, p.q.dtype(), isa, {&p.q, &p.k, &p.v, &p.dout});
  const int64_t slices = g.B * g.H, tiles = (g.Lk + kBc - 1) / kBc;
  if (slices == 0) return;  // B or H is 0: nothing to compute
  const int64_t want = std::clamp<int64_t>((kMinUnits + slices - 1) / slices, 1,
                                           std::max<int64_t>(1, std::min(tiles, kMaxGroups)));
  const int64_t per_group = std::max<int64_t>(1, (tiles + want - 1) / want);
  const int64_t groups = std::max<int64_t>(1, (tiles + per_group - 1) / per_group);  // 1 if Lk = 0
  const int64_t share = std::max<int64_t>(1, g.Lq * g.Dp);
  const Rows<T> dq(p.dq);
  const bool avx512 = isa == simd::Isa::avx512;
  auto unit = [&](BwdBuffers& w, int64_t s, int64_t group, float* part) {
    const int64_t t0 = group * per_group, t1 = std::min(tiles, t0 + per_group);
    return avx512 ? tiles_avx512::bwd_unit<T>(g, w, p, s / g.H, s % g.H, t0, t1, part)
                  : tiles_avx2::bwd_unit<T>(g, w, p, s / g.H, s % g.H, t0, t1, part);
  };
  auto finish = [&](int64_t s, const float* parts, float* row) {
    if (avx512)
      tiles_avx512::bwd_finish(g, dq, parts, groups, s / g.H, s % g.H, row);
    else
      tiles_avx2::bwd_finish(g, dq, parts, groups, s / g.H, s % g.H, row);
    bwd_nan_rows<T>(g, p, s / g.H, s % g.H);
  };
  int64_t bad = 0;
  if (groups == 1) {
#pragma omp parallel reduction(+ : bad) if (slices > 1)
    {
      BwdBuffers w(g);
      std::vector<float> part(share), row(g.Dp);
#pragma omp for schedule(dynamic, 1)
      for (int64_t s = 0; s < slices; ++s) {
        if (s + omp_get_num_threads() < slices)  // the slice this thread takes next
          prefetch_slice<T>({&p.q, &p.k, &p.v, &p.o, &p.dout}, g.H, s + omp_get_num_threads());
        bad += unit(w, s, 0, part.data());
        finish(s, part.data(), row.data());
      }
    }
  }
  const int64_t wave =
      std::clamp<int64_t>(scratch_floats / (groups * share), 1, std::max<int64_t>(slices, 1));
  const std::unique_ptr<float[]> parts(
      groups == 1 ? nullptr : new float[static_cast<size_t>(wave * groups * share)]);
  for (int64_t s0 = 0; s0 < slices && groups > 1; s0 += wave) {
    const int64_t n = std::min(wave, slices - s0), units = n * groups;
#pragma omp parallel reduction(+ : bad) if (units > 1)
    {
      BwdBuffers w(g);
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u)
        bad += unit(w, s0 + u / groups, u % groups, parts.get() + u * share);
    }
#pragma omp parallel if (n > 1)
    {
      std::vector<float> row(g.Dp);
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < n; ++u) finish(s0 + u, parts.get() + u * groups * share, row.data());
    }
  }
  if (p.params.softmax_nonfinite) *p.params.softmax_nonfinite += bad;
}

}  // namespace

std::string flash_attention_declines(const AttentionFwdProblem& p) {
  return declines(p.q.dtype(), p.params.softmax_dtype, p.q, p.k, p.v);
}
std::string flash_attention_bwd_declines(const AttentionBwdProblem& p) {
  std::string why = declines(p.q.dtype(), p.params.softmax_dtype, p.q, p.k, p.v);
  if (why.empty() && p.dout.size(3) != 1 && p.dout.strides()[3] != 1)
    why = "a last dim that is not unit-stride";
  return why;
}

void flash_attention_fwd(const AttentionFwdProblem& p, simd::Isa isa, int64_t whole_floats) {
  visit_float(p.q.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) fwd_typed<T>(p, isa, whole_floats);
  });
}
void flash_attention_bwd(const AttentionBwdProblem& p, simd::Isa isa, int64_t scratch_floats) {
  visit_float(p.q.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) bwd_typed<T>(p, isa, scratch_floats);
  });
}
void flash_attention_fwd(const AttentionFwdProblem& p, simd::Isa isa) {
  flash_attention_fwd(p, isa, kWholeSliceFloats);
}
void flash_attention_fwd(const AttentionFwdProblem& p) {
  flash_attention_fwd(p, simd::best_isa(), kWholeSliceFloats);
}
void flash_attention_bwd(const AttentionBwdProblem& p) {
  flash_attention_bwd(p, simd::best_isa(), kScratchFloats);
}

}  // namespace mixprec::ops::cpu
