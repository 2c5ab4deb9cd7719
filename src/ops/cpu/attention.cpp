// FlashAttention on the CPU: ops::scaled_dot_product_attention's fused kernel, forward and
// backward, for f32, bf16 and f16 (AVX2 + FMA + F16C, picked at run time; f64 and the rest go
// to the reference kernel). It never holds the [Lq x Lk] probabilities: the forward keeps, per
// query row, a running max m and sum l (f32) and rescales its output accumulator when m grows
// (online softmax); it saves only lse = m + log(l) per row. The backward recomputes each
// probability as exp(s - lse).
//
// Work: forward, one unit per (b, h, block of kBr = 32 query rows), key tiles of kBc = 64; the
// backward, one unit per (b, h): for each key tile it sweeps the query rows in blocks of 32 and
// accumulates dK, dV of the tile and dQ of the slice in f32 (one thread per unit, fixed order:
// results do not depend on the thread count). A tile is widened to f32 (rows, and transposed)
// inside the unit: never a whole tensor.
//
// Where rounding happens, for T = bf16 or f16 (for f32 there is none beyond f32 arithmetic):
// every product is of two T values (exact in f32) accumulated in f32, i.e. the matmuls run "in
// T with f32 accumulation". Scores s = scale * (q.k), the statistics m, l, lse and the softmax
// arithmetic stay f32. Rounded to T: p before p.v (forward; l sums these same rounded p) and
// before p^T.dO (backward); dS = p * (dP - D) (from the f32 p) before dS.k and dS^T.q; the
// outputs o, dq, dk, dv once at the end (dq, dk scaled by `scale` in f32 first). D = rowsum(dO *
// o) uses the rounded o. With softmax_dtype forced to 16 bits (a custom list), s, p, dP, D and dS
// are also rounded to it, and the overflows of those roundings are counted (s in the forward,
// dP and dS in the backward).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "ops/cpu/kernels.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kBr = 32;  // query rows per block
constexpr int64_t kBc = 64;  // keys per tile: 8 vectors of 8 floats
constexpr int kNv = kBc / 8;
constexpr int64_t kMaxHead = 256;  // largest D and Dv
constexpr float kInf = std::numeric_limits<float>::infinity();

typedef float v8 __attribute__((vector_size(32)));
typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

// v8 values never cross a call boundary (helpers are always inlined into the AVX2 functions).
#pragma GCC diagnostic ignored "-Wpsabi"
#define MIXPREC_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MIXPREC_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

MIXPREC_AVX2_INLINE v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
MIXPREC_AVX2_INLINE void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }
MIXPREC_AVX2_INLINE v8 splat(float x) { return v8{} + x; }

// ---------------------------------------------------------------- rounding and exp

// Each lane rounded to bf16 (nearest even) and widened back; NaN stays NaN.
MIXPREC_AVX2_INLINE v8 round_bf16(v8 x) {
  vu8 u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  v8 y;
  std::memcpy(&y, &u, sizeof y);
  return x == x ? y : x;
}
MIXPREC_AVX2_INLINE v8 round_f16(v8 x) {
  return (v8)_mm256_cvtph_ps(_mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT));
}
template <class T> MIXPREC_AVX2_INLINE v8 round_to(v8 x) {
  if constexpr (std::is_same_v<T, bf16>)
    return round_bf16(x);
  else if constexpr (std::is_same_v<T, f16>)
    return round_f16(x);
  else
    return x;
}

// exp of each lane, Cephes' polynomial (about 1 ulp): exp(0) = 1 exactly, 0 below -87 (where
// exp < 1.7e-38; -inf included), inf above 88.37, NaN for NaN.
MIXPREC_AVX2_INLINE v8 exp8(v8 x) {
  const v8 hi = splat(88.3762626647949f), lo = splat(-87.0f);
  v8 xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = x == x ? xc : splat(0.0f);
  const v8 n = (v8)_mm256_round_ps((__m256)(xc * 1.44269504088896341f),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const v8 r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  v8 y = 1.9875691500e-4f * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  vi8 bits;
  std::memcpy(&bits, &y, sizeof bits);
  bits += __builtin_convertvector(n, vi8) << 23;
  std::memcpy(&y, &bits, sizeof y);
  y = x < lo ? splat(0.0f) : y;
  y = x > hi ? splat(kInf) : y;
  return x == x ? y : x;
}

// The largest lane (NaN lanes ignored; -inf when all are), summed lanes in a fixed order.
MIXPREC_AVX2_INLINE float hmax(const float* s) {
  v8 m = splat(-kInf);
  for (int c = 0; c < kNv; ++c) {
    const v8 v = load8(s + 8 * c);
    m = v > m ? v : m;
  }
  float r = -kInf;
  for (int i = 0; i < 8; ++i) r = m[i] > r ? m[i] : r;
  return r;
}
MIXPREC_AVX2_INLINE float hsum(const float* s) {
  v8 a = v8{};
  for (int c = 0; c < kNv; ++c) a += load8(s + 8 * c);
  float r = 0.0f;
  for (int i = 0; i < 8; ++i) r += a[i];
  return r;
}

// One value rounded to the forced softmax dtype; `bad` counts finite values that overflow.
inline float round_softmax(float x, DType sd, int64_t& bad) {
  const float y = sd == DType::f16 ? to_f32(to_f16(x)) : to_f32(to_bf16(x));
  bad += std::isfinite(x) && !std::isfinite(y);
  return y;
}
void round_softmax_row(float* x, int64_t n, DType sd, int64_t& bad) {
  for (int64_t j = 0; j < n; ++j) x[j] = round_softmax(x[j], sd, bad);
}

// ---------------------------------------------------------------- tiles and products

// Rows between T and f32 (convert_row picks the vector path; f32 is a copy).
template <class T> void widen(const T* src, float* dst, int64_t n) {
  convert_row(src, dtype_of<T>(), dst, DType::f32, n);
}
template <class T> void narrow(const float* src, T* dst, int64_t n) {
  convert_row(src, DType::f32, dst, dtype_of<T>(), n);
}

// Rows [j0, j0 + n) (n <= rows_cap) of a slice with row stride rs, widened into `rows`
// ([rows_cap][dp], zero past n rows and d columns); `cols`, if given, gets the transpose
// ([dp][rows_cap]).
template <class T> void load_rows(const T* base, int64_t rs, int64_t j0, int64_t n, int64_t d,
                                  int64_t dp, int64_t rows_cap, float* rows, float* cols) {
  for (int64_t j = 0; j < rows_cap; ++j) {
    float* r = rows + j * dp;
    if (j < n) widen(base + (j0 + j) * rs, r, d);
    std::fill(r + (j < n ? d : 0), r + dp, 0.0f);
  }
  if (cols)
    for (int64_t e = 0; e < dp; ++e)
      for (int64_t j = 0; j < rows_cap; ++j) cols[e * rows_cap + j] = rows[j * dp + e];
}

// out[0..kBc) = scale * sum_e x[e] * t[e][0..kBc) (t: [d][kBc]), accumulated over e in order.
MIXPREC_AVX2_INLINE void dot_tile(const float* x, const float* t, int64_t d, float scale,
                                  float* out) {
  v8 a[kNv];
  for (int c = 0; c < kNv; ++c) a[c] = v8{};
  for (int64_t e = 0; e < d; ++e) {
    const v8 b = splat(x[e]);
    for (int c = 0; c < kNv; ++c) a[c] += b * load8(t + e * kBc + 8 * c);
  }
  for (int c = 0; c < kNv; ++c) store8(out + 8 * c, a[c] * scale);
}

// acc[0..8 NV) += sum_j w[j * ws] * rows[j * rs + 0..8 NV), j over [0, n) in order.
template <int NV> MIXPREC_AVX2_INLINE void axpy_chunk(float* acc, const float* w, int64_t ws,
                                                      const float* rows, int64_t rs, int64_t n) {
  v8 a[NV];
  for (int c = 0; c < NV; ++c) a[c] = load8(acc + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const v8 b = splat(w[j * ws]);
    for (int c = 0; c < NV; ++c) a[c] += b * load8(rows + j * rs + 8 * c);
  }
  for (int c = 0; c < NV; ++c) store8(acc + 8 * c, a[c]);
}
// acc[0..dp) += sum_j w[j * ws] * rows[j][0..dp) (row stride dp, a multiple of 8).
MIXPREC_AVX2_INLINE void axpy_rows(float* acc, const float* w, int64_t ws, const float* rows,
                                   int64_t dp, int64_t n) {
  int64_t e = 0;
  for (; e + 32 <= dp; e += 32) axpy_chunk<4>(acc + e, w, ws, rows + e, dp, n);
  switch ((dp - e) / 8) {
    case 3: axpy_chunk<3>(acc + e, w, ws, rows + e, dp, n); break;
    case 2: axpy_chunk<2>(acc + e, w, ws, rows + e, dp, n); break;
    case 1: axpy_chunk<1>(acc + e, w, ws, rows + e, dp, n); break;
    default: break;
  }
}

// ---------------------------------------------------------------- geometry

struct Geometry {
  int64_t B, H, Lq, Lk, D, Dv, Dp, Dvp, off;
  float scale;
  bool causal;
  DType sd;             // softmax dtype: f32, or a forced f16/bf16
  const uint8_t* mask;  // null, or [B, H, Lq, Lk] with strides ms
  int64_t ms[4];
};

Geometry geometry(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  Geometry g{q.size(0), q.size(1),
             q.size(2), k.size(2),
             q.size(3), v.size(3),
             0,         0,
             0,         static_cast<float>(p.scale),
             p.causal,  p.softmax_dtype,
             nullptr,   {0, 0, 0, 0}};
  g.Dp = (g.D + 7) / 8 * 8;
  g.Dvp = (g.Dv + 7) / 8 * 8;
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

// Sets s[j] = -inf for the keys j0 + j that row i may not see (and for j >= nc).
void mask_row(float* s, const Geometry& g, int64_t b, int64_t h, int64_t i, int64_t j0,
              int64_t nc) {
  const uint8_t* mrow = g.mask ? g.mask + b * g.ms[0] + h * g.ms[1] + i * g.ms[2] : nullptr;
  for (int64_t j = 0; j < kBc; ++j) {
    const bool vis =
        j < nc && (!g.causal || j0 + j <= i + g.off) && (!mrow || mrow[(j0 + j) * g.ms[3]] != 0);
    if (!vis) s[j] = -kInf;
  }
}
bool row_needs_mask(const Geometry& g, int64_t i, int64_t j0, int64_t nc) {
  return nc < kBc || g.mask || (g.causal && j0 + nc - 1 > i + g.off);
}
// The first query row that sees any key of the tile starting at j0.
int64_t first_row(const Geometry& g, int64_t j0) {
  return g.causal ? std::max<int64_t>(0, j0 - g.off) : 0;
}

std::string declines(DType dt, DType sd, const Tensor& q, const Tensor& k, const Tensor& v) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) return "needs AVX2, FMA and F16C";
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16) return "not f32, bf16 or f16";
  if (sd != DType::f32 && !is_low_precision(sd)) return "softmax dtype not f32, f16 or bf16";
  if (q.size(3) > kMaxHead || v.size(3) > kMaxHead) return "head dim above 256";
  for (const Tensor* t : {&q, &k, &v})
    if (t->size(3) != 1 && t->strides()[3] != 1) return "a last dim that is not unit-stride";
  return "";
}

// ---------------------------------------------------------------- forward

struct FwdBuffers {  // one per thread
  std::vector<float> qb, kr, kt, vr, acc, m, l, s;
  FwdBuffers(const Geometry& g)
      : qb(kBr * g.Dp),
        kr(kBc * g.Dp),
        kt(g.Dp * kBc),
        vr(kBc * g.Dvp),
        acc(kBr * g.Dvp),
        m(kBr),
        l(kBr),
        s(kBc) {}
};

// One row's step over one key tile: scores, online softmax update, acc += p.v. Returns the
// overflow count of the forced softmax rounding.
template <class T> MIXPREC_AVX2 int64_t fwd_row_tile(const Geometry& g, FwdBuffers& w, int64_t b,
                                                     int64_t h, int64_t r, int64_t i, int64_t j0,
                                                     int64_t nc) {
  int64_t bad = 0;
  float* s = w.s.data();
  dot_tile(w.qb.data() + r * g.Dp, w.kt.data(), g.D, g.scale, s);
  if (row_needs_mask(g, i, j0, nc)) mask_row(s, g, b, h, i, j0, nc);
  const bool forced = g.sd != DType::f32;
  if (forced) round_softmax_row(s, nc, g.sd, bad);
  const float m_new = std::max(w.m[r], hmax(s));  // NaN scores never win: they make p NaN below
  if (m_new == -kInf) return bad;                 // nothing visible yet
  const float alpha = std::exp(w.m[r] - m_new);
  for (int c = 0; c < kNv; ++c) store8(s + 8 * c, round_to<T>(exp8(load8(s + 8 * c) - m_new)));
  if (forced) round_softmax_row(s, nc, g.sd, bad);
  w.l[r] = w.l[r] * alpha + hsum(s);
  float* acc = w.acc.data() + r * g.Dvp;
  if (alpha != 1.0f)
    for (int64_t e = 0; e < g.Dvp; e += 8) store8(acc + e, load8(acc + e) * alpha);
  axpy_rows(acc, s, 1, w.vr.data(), g.Dvp, nc);
  w.m[r] = m_new;
  return bad;
}

// Rows [i0, i0 + nr) of (b, h): o and lse.
template <class T> MIXPREC_AVX2 int64_t fwd_unit(const Geometry& g, FwdBuffers& w,
                                                 const Rows<const T>& q, const Rows<const T>& k,
                                                 const Rows<const T>& v, const Rows<T>& o,
                                                 float* lse, int64_t b, int64_t h, int64_t i0) {
  const int64_t nr = std::min(kBr, g.Lq - i0);
  load_rows(q.slice(b, h), q.sl, i0, nr, g.D, g.Dp, kBr, w.qb.data(), nullptr);
  std::fill(w.m.begin(), w.m.end(), -kInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  std::fill(w.acc.begin(), w.acc.end(), 0.0f);
  int64_t bad = 0;
  for (int64_t j0 = 0; j0 < g.Lk && !(g.causal && j0 > i0 + nr - 1 + g.off); j0 += kBc) {
    const int64_t nc = std::min(kBc, g.Lk - j0);
    load_rows(k.slice(b, h), k.sl, j0, nc, g.D, g.Dp, kBc, w.kr.data(), w.kt.data());
    load_rows(v.slice(b, h), v.sl, j0, nc, g.Dv, g.Dvp, kBc, w.vr.data(), nullptr);
    for (int64_t r = std::max<int64_t>(0, first_row(g, j0) - i0); r < nr; ++r)
      bad += fwd_row_tile<T>(g, w, b, h, r, i0 + r, j0, nc);
  }
  for (int64_t r = 0; r < nr; ++r) {
    float* acc = w.acc.data() + r * g.Dvp;
    const bool none = w.m[r] == -kInf;  // no key to attend to: NaN (attention_problem.h)
    const float inv = none ? std::numeric_limits<float>::quiet_NaN() : 1.0f / w.l[r];
    for (int64_t e = 0; e < g.Dvp; e += 8) store8(acc + e, load8(acc + e) * inv);
    narrow(acc, o.slice(b, h) + (i0 + r) * o.sl, g.Dv);
    lse[(b * g.H + h) * g.Lq + i0 + r] =
        none ? std::numeric_limits<float>::quiet_NaN() : w.m[r] + std::log(w.l[r]);
  }
  return bad;
}

template <class T> void fwd_typed(const AttentionFwdProblem& p) {
  const Geometry g = geometry(p.q, p.k, p.v, p.params);
  const Rows<const T> q(p.q), k(p.k), v(p.v);
  const Rows<T> o(p.o);
  float* lse = static_cast<float*>(p.lse.data_ptr());
  const int64_t nqb = (g.Lq + kBr - 1) / kBr, units = g.B * g.H * nqb;
  int64_t bad = 0;
#pragma omp parallel reduction(+ : bad) if (units > 1)
  {
    FwdBuffers w(g);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u)
      bad += fwd_unit<T>(g, w, q, k, v, o, lse, u / (g.H * nqb), u / nqb % g.H, u % nqb * kBr);
  }
  if (p.params.softmax_nonfinite) *p.params.softmax_nonfinite += bad;
}

// ---------------------------------------------------------------- backward

struct BwdBuffers {  // one per thread
  std::vector<float> qb, dob, kr, kt, vr, vt, dk, dv, pt, dst, dq, delta, tmp;
  BwdBuffers(const Geometry& g)
      : qb(kBr * g.Dp),
        dob(kBr * g.Dvp),
        kr(kBc * g.Dp),
        kt(g.Dp * kBc),
        vr(kBc * g.Dvp),
        vt(g.Dvp * kBc),
        dk(kBc * g.Dp),
        dv(kBc * g.Dvp),
        pt(kBr * kBc),
        dst(kBr * kBc),
        dq(g.Lq * g.Dp),
        delta(g.Lq),
        tmp(std::max(g.Dp, g.Dvp) * 2) {}
};

// Row r (query i) against the tile: p (rounded to T) into pt, dS (rounded to T) into dst.
template <class T> MIXPREC_AVX2 int64_t bwd_row_tile(const Geometry& g, BwdBuffers& w, float lse,
                                                     int64_t b, int64_t h, int64_t r, int64_t i,
                                                     int64_t j0, int64_t nc) {
  int64_t bad = 0, quiet = 0;
  const bool forced = g.sd != DType::f32;
  float* p = w.pt.data() + r * kBc;
  float* ds = w.dst.data() + r * kBc;
  dot_tile(w.qb.data() + r * g.Dp, w.kt.data(), g.D, g.scale, p);
  if (row_needs_mask(g, i, j0, nc)) mask_row(p, g, b, h, i, j0, nc);
  if (forced) round_softmax_row(p, kBc, g.sd, quiet);  // counted in the forward
  for (int c = 0; c < kNv; ++c) store8(p + 8 * c, exp8(load8(p + 8 * c) - lse));
  if (forced) round_softmax_row(p, kBc, g.sd, quiet);
  dot_tile(w.dob.data() + r * g.Dvp, w.vt.data(), g.Dv, 1.0f, ds);  // dP
  if (forced) round_softmax_row(ds, nc, g.sd, bad);
  const float delta = w.delta[i];
  for (int c = 0; c < kNv; ++c) store8(ds + 8 * c, load8(p + 8 * c) * (load8(ds + 8 * c) - delta));
  if (forced) round_softmax_row(ds, nc, g.sd, bad);
  for (int c = 0; c < kNv; ++c) {
    store8(p + 8 * c, round_to<T>(load8(p + 8 * c)));
    store8(ds + 8 * c, round_to<T>(load8(ds + 8 * c)));
  }
  return bad;
}

// Rows [i0, i0 + nr) against the tile [j0, j0 + nc): dV, dK of the tile and dQ of the rows.
template <class T> MIXPREC_AVX2 int64_t bwd_block(const Geometry& g, BwdBuffers& w,
                                                  const Rows<const T>& q, const Rows<const T>& dout,
                                                  const float* lse, int64_t b, int64_t h,
                                                  int64_t i0, int64_t j0, int64_t nc) {
  const int64_t nr = std::min(kBr, g.Lq - i0);
  load_rows(q.slice(b, h), q.sl, i0, nr, g.D, g.Dp, kBr, w.qb.data(), nullptr);
  load_rows(dout.slice(b, h), dout.sl, i0, nr, g.Dv, g.Dvp, kBr, w.dob.data(), nullptr);
  int64_t bad = 0;
  for (int64_t r = 0; r < nr; ++r)
    bad += bwd_row_tile<T>(g, w, lse[i0 + r], b, h, r, i0 + r, j0, nc);
  for (int64_t j = 0; j < nc; ++j) {
    axpy_rows(w.dv.data() + j * g.Dvp, w.pt.data() + j, kBc, w.dob.data(), g.Dvp, nr);
    axpy_rows(w.dk.data() + j * g.Dp, w.dst.data() + j, kBc, w.qb.data(), g.Dp, nr);
  }
  for (int64_t r = 0; r < nr; ++r)
    axpy_rows(w.dq.data() + (i0 + r) * g.Dp, w.dst.data() + r * kBc, 1, w.kr.data(), g.Dp, nc);
  return bad;
}

// delta[i] = sum_e dO[i][e] * o[i][e] (both T, f32 sums), rounded to a forced softmax dtype.
template <class T> void row_deltas(const Geometry& g, BwdBuffers& w, const Rows<const T>& o,
                                   const Rows<const T>& dout, int64_t b, int64_t h) {
  float* x = w.tmp.data();
  float* y = x + g.Dvp;
  int64_t quiet = 0;
  for (int64_t i = 0; i < g.Lq; ++i) {
    widen(o.slice(b, h) + i * o.sl, x, g.Dv);
    widen(dout.slice(b, h) + i * dout.sl, y, g.Dv);
    float d = 0.0f;
    for (int64_t e = 0; e < g.Dv; ++e) d += x[e] * y[e];
    w.delta[i] = g.sd == DType::f32 ? d : round_softmax(d, g.sd, quiet);
  }
}

// The rows [j0, j0 + n) of an f32 accumulator [.][dp], times `scale`, rounded into dst.
template <class T> void store_rows(const float* acc, int64_t dp, int64_t n, int64_t d, float scale,
                                   T* dst, int64_t rs, float* tmp) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t e = 0; e < d; ++e) tmp[e] = acc[j * dp + e] * scale;
    narrow(tmp, dst + j * rs, d);
  }
}

template <class T> void fill_nan_rows(T* base, int64_t rs, int64_t n, int64_t d) {
  const T nan = store<T>(std::numeric_limits<float>::quiet_NaN());
  for (int64_t j = 0; j < n; ++j) std::fill(base + j * rs, base + j * rs + d, nan);
}

template <class T> int64_t bwd_unit(const Geometry& g, BwdBuffers& w, const AttentionBwdProblem& p,
                                    int64_t b, int64_t h) {
  const Rows<const T> q(p.q), k(p.k), v(p.v), o(p.o), dout(p.dout);
  const Rows<T> dq(p.dq), dk(p.dk), dv(p.dv);
  const float* lse = static_cast<const float*>(p.lse.data_ptr()) + (b * g.H + h) * g.Lq;
  row_deltas(g, w, o, dout, b, h);
  std::fill(w.dq.begin(), w.dq.end(), 0.0f);
  int64_t bad = 0;
  for (int64_t j0 = 0; j0 < g.Lk; j0 += kBc) {
    const int64_t nc = std::min(kBc, g.Lk - j0);
    load_rows(k.slice(b, h), k.sl, j0, nc, g.D, g.Dp, kBc, w.kr.data(), w.kt.data());
    load_rows(v.slice(b, h), v.sl, j0, nc, g.Dv, g.Dvp, kBc, w.vr.data(), w.vt.data());
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int64_t i0 = first_row(g, j0); i0 < g.Lq; i0 += kBr)
      bad += bwd_block<T>(g, w, q, dout, lse, b, h, i0, j0, nc);
    store_rows(w.dk.data(), g.Dp, nc, g.D, g.scale, dk.slice(b, h) + j0 * dk.sl, dk.sl,
               w.tmp.data());
    store_rows(w.dv.data(), g.Dvp, nc, g.Dv, 1.0f, dv.slice(b, h) + j0 * dv.sl, dv.sl,
               w.tmp.data());
  }
  store_rows(w.dq.data(), g.Dp, g.Lq, g.D, g.scale, dq.slice(b, h), dq.sl, w.tmp.data());
  // A row without a distribution makes dK and dV of its slice NaN, as the composition does.
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
  return bad;
}

template <class T> void bwd_typed(const AttentionBwdProblem& p) {
  const Geometry g = geometry(p.q, p.k, p.v, p.params);
  const int64_t units = g.B * g.H;
  int64_t bad = 0;
#pragma omp parallel reduction(+ : bad) if (units > 1)
  {
    BwdBuffers w(g);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) bad += bwd_unit<T>(g, w, p, u / g.H, u % g.H);
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

void flash_attention_fwd(const AttentionFwdProblem& p) {
  visit_float(p.q.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) fwd_typed<T>(p);
  });
}
void flash_attention_bwd(const AttentionBwdProblem& p) {
  visit_float(p.q.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) bwd_typed<T>(p);
  });
}

}  // namespace mixprec::ops::cpu
