// GEMMs with one small dimension (at most 16), in bf16 or f16, without a widened copy of the large
// operand (f32 stays with oneDNN, which measured as fast or faster on these shapes): SimpleNet's
// Dense layer (in 21632, out 10) is the case. Forward is [256, 21632] x [21632, 10]; backward-data
// [256, 10] x [10, 21632]; backward-weights [10, 256] x [256, 21632]. Through low_via_f32, each
// widened its 11 MB bf16 operand to a 22 MB f32 copy first and then ran an f32 GEMM that a width of
// 10 suits poorly (kernels_bench BM_skinny_gemm, bf16, one run: 2.4, 2.5 and 2.5 ms through
// low_via_f32; 1.2, 1.8 and 1.1 ms here; oneDNN's f32 on f32 data: 1.5, 1.8 and 1.5 ms).
//
// Two kernels, AVX2 + FMA (F16C for f16), each output computed by one thread in an order fixed by
// the shape, so results do not depend on the thread count:
//  - dot (small N, both operands contiguous along K: a row-major, b = W^T of a row-major W):
//    out[m, n] = a[m, :] . w[n, :]. Micro-tile: 2 rows x up to 6 columns, 12 accumulators of 8
//    lanes, each 8-wide slice of a widened in registers. K runs in blocks of kKc (the 6 weight
//    rows' block, 48 KiB in f32, stays in L2 across a block of rows); a block's 8 lanes are summed
//    in a fixed tree, and the blocks' sums in K order, into an f32 total per output.
//  - rows (b row-major, with M or K at most 16): out[i, :] = sum over r of a[i, r] * b[r, :].
//    Micro-tile: 6 rows x 16 columns (12 accumulators, BLAS's AVX2 shape, unpacked); each output's
//    sum runs over r in order, one FMA per term. Columns in blocks of kNc so that a block of b
//    stays in cache across the row tiles; a is widened once to a small f32 copy (M or K <= 16).
// Bias (any float dtype, added in f32) and ReLU are applied to the f32 total, which is then
// rounded once into out's dtype, as in the reference. A 16-bit weight panel (dot) is widened once
// per call into an f32 buffer of N * K floats (at most 16 rows).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/matmul_problem.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kSmall = 16;   // the small dimension's limit
constexpr int64_t kKc = 2048;    // dot: K per block
constexpr int64_t kMc = 32;      // dot: rows per parallel task
constexpr int64_t kNc = 256;     // rows: columns per parallel task
constexpr int64_t kDotCols = 6;  // dot: columns per micro-tile
constexpr int64_t kRowsMr = 6;   // rows: rows per micro-tile

// The kernels use simd.h's AVX2 vectors (8 f32 lanes; loadu widens 8 bf16 or f16 values exactly,
// hsum is its fixed-order horizontal sum), each multiply-add an explicit fmadd (this file builds
// without contraction, as every file on simd.h does). Accumulator arrays are indexed with
// constants (the fold expressions below), so GCC keeps every accumulator in a register.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
using namespace simd::avx2;

// ------------------------------------------------------------------------------- dot

// total[r][c] += a[r, k0:k1] . w[c, k0:k1] for R rows (a rows at stride lda) and C columns
// (w rows at stride ldw), k1 - k0 a multiple of 8. Accumulator e is (row e / C, column e % C);
// the fold expressions index it with constants, so GCC keeps every accumulator in a register.
template <class T, int R, int C, int... E>
void dot_tile(const T* a, int64_t lda, const float* w, int64_t ldw, int64_t len, float* total,
              int64_t ldt, std::integer_sequence<int, E...>) {
  V acc[R * C];
  ((acc[E] = splat(0.0f)), ...);
  for (int64_t k = 0; k < len; k += 8) {
    const V x0 = loadu(a + k);
    const V x1 = R > 1 ? loadu(a + lda + k) : splat(0.0f);
    ((acc[E] = fmadd(E / C == 0 ? x0 : x1, loadu(w + (E % C) * ldw + k), acc[E])), ...);
  }
  ((total[(E / C) * ldt + E % C] += hsum(acc[E])), ...);
}

template <class T, int R, int... C>
void dot_tile_any(int cols, const T* a, int64_t lda, const float* w, int64_t ldw, int64_t len,
                  float* total, int64_t ldt, std::integer_sequence<int, C...>) {
  ((cols == C + 1 ? dot_tile<T, R, C + 1>(a, lda, w, ldw, len, total, ldt,
                                          std::make_integer_sequence<int, R*(C + 1)>{})
                  : void()),
   ...);
}

template <class T> void dot_run(const MatmulProblem& p, float* total) {
  const int64_t M = p.a.size(-2), K = p.a.size(-1), N = p.b.size(-1);
  const int64_t lda = p.a.strides()[p.a.dim() - 2], ldb = p.b.strides()[p.b.dim() - 1];
  const T* a = static_cast<const T*>(p.a.data_ptr());
  // The weight rows widened to f32 (w[n] = column n of b), contiguous along K.
  std::vector<float> wbuf(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    convert_row(static_cast<const T*>(p.b.data_ptr()) + n * ldb, p.b.dtype(), wbuf.data() + n * K,
                DType::f32, K);
  const float* w = wbuf.data();
  const int64_t ldw = K;
  const int64_t k8 = K / 8 * 8, tasks = (M + kMc - 1) / kMc;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t m0 = t * kMc, m1 = std::min(M, m0 + kMc);
    float* tot = total + m0 * N;
    std::fill(tot, tot + (m1 - m0) * N, 0.0f);
    for (int64_t k0 = 0; k0 < k8; k0 += kKc) {
      const int64_t len = std::min(k8 - k0, kKc);
      for (int64_t n0 = 0; n0 < N; n0 += kDotCols) {
        const int cols = static_cast<int>(std::min(N - n0, kDotCols));
        for (int64_t m = m0; m < m1; m += 2) {
          const T* ar = a + m * lda + k0;
          const float* wr = w + n0 * ldw + k0;
          float* tr = total + m * N + n0;
          if (m + 1 < m1)
            dot_tile_any<T, 2>(cols, ar, lda, wr, ldw, len, tr, N,
                               std::make_integer_sequence<int, kDotCols>{});
          else
            dot_tile_any<T, 1>(cols, ar, lda, wr, ldw, len, tr, N,
                               std::make_integer_sequence<int, kDotCols>{});
        }
      }
    }
    for (int64_t m = m0; m < m1; ++m)  // K's last (k mod 8) terms, in order
      for (int64_t n = 0; n < N; ++n) {
        float s = 0.0f;
        for (int64_t k = k8; k < K; ++k)
          s += static_cast<float>(load(a[m * lda + k])) * w[n * ldw + k];
        total[m * N + n] += s;
      }
  }
}

// ------------------------------------------------------------------------------- rows

// tot[i, 0..8V) = sum over r of af[i, r] * b[r, 0..8V) for R rows; af is the f32 copy of a
// ([M][K], row-major), b rows at stride ldb, tot rows at stride ldt. Accumulator e is (row e / V,
// vector e % V), indexed with constants as in dot_tile.
template <class T, int R, int NV, int... E> void rows_tile(const float* af, int64_t K, const T* b,
                                                           int64_t ldb, float* tot, int64_t ldt,
                                                           std::integer_sequence<int, E...>) {
  static_assert(NV == 1 || NV == 2);
  V acc[R * NV];
  ((acc[E] = splat(0.0f)), ...);
  for (int64_t r = 0; r < K; ++r) {
    const V b0 = loadu(b + r * ldb);
    const V b1 = NV > 1 ? loadu(b + r * ldb + 8) : splat(0.0f);
    ((acc[E] = fmadd(broadcast(af + (E / NV) * K + r), E % NV == 0 ? b0 : b1, acc[E])), ...);
  }
  ((storeu(tot + (E / NV) * ldt + 8 * (E % NV), acc[E])), ...);
}

template <class T, int NV, int... R>
void rows_tile_any(int rows, const float* af, int64_t K, const T* b, int64_t ldb, float* tot,
                   int64_t ldt, std::integer_sequence<int, R...>) {
  ((rows == R + 1 ? rows_tile<T, R + 1, NV>(af, K, b, ldb, tot, ldt,
                                            std::make_integer_sequence<int, (R + 1) * NV>{})
                  : void()),
   ...);
}

// Rounds a row of f32 totals (plus bias, ReLU) into out.
void finish_row(float* t, int64_t n, const float* bias, bool relu, void* out, DType odt) {
  if (bias)
    for (int64_t j = 0; j < n; ++j) t[j] += bias[j];
  if (relu)
    for (int64_t j = 0; j < n; ++j) t[j] = t[j] <= 0.0f ? 0.0f : t[j];  // NaN propagates
  convert_row(t, DType::f32, out, odt, n);
}

template <class T>
void rows_run(const MatmulProblem& p, const std::vector<float>& af, const float* bias) {
  const int64_t M = p.a.size(-2), K = p.a.size(-1), N = p.b.size(-1);
  const int64_t ldb = p.b.strides()[p.b.dim() - 2];
  const T* b = static_cast<const T*>(p.b.data_ptr());
  const DType odt = p.out.dtype();
  const int64_t osz = static_cast<int64_t>(dtype_size(odt));
  char* out = static_cast<char*>(p.out.data_ptr());
  const int64_t tasks = (N + kNc - 1) / kNc;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t j0 = t * kNc, j1 = std::min(N, j0 + kNc), w = j1 - j0;
    float tot[kRowsMr * kNc];
    for (int64_t i0 = 0; i0 < M; i0 += kRowsMr) {
      const int rows = static_cast<int>(std::min(M - i0, kRowsMr));
      const float* ai = af.data() + i0 * K;
      int64_t j = 0;
      for (; j + 16 <= w; j += 16)
        rows_tile_any<T, 2>(rows, ai, K, b + j0 + j, ldb, tot + j, kNc,
                            std::make_integer_sequence<int, kRowsMr>{});
      for (; j + 8 <= w; j += 8)
        rows_tile_any<T, 1>(rows, ai, K, b + j0 + j, ldb, tot + j, kNc,
                            std::make_integer_sequence<int, kRowsMr>{});
      for (; j < w; ++j)  // the last (N mod 8) columns: the same sums, one lane at a time
        for (int i = 0; i < rows; ++i) {
          float s = 0.0f;
          for (int64_t r = 0; r < K; ++r)
            s = std::fma(ai[i * K + r], static_cast<float>(load(b[r * ldb + j0 + j])), s);
          tot[i * kNc + j] = s;
        }
      for (int i = 0; i < rows; ++i)
        finish_row(tot + i * kNc, w, bias ? bias + j0 : nullptr, p.relu,
                   out + ((i0 + i) * N + j0) * osz, odt);
    }
  }
}

#pragma GCC pop_options

// ------------------------------------------------------------------------------- shared

std::string common_declines(const MatmulProblem& p) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) return "needs AVX2, FMA and F16C";
  const DType dt = p.a.dtype();
  if (dt == DType::f32) return "f32 (oneDNN measured as fast or faster)";
  if (dt != DType::bf16 && dt != DType::f16) return "not bf16 or f16";
  if (p.b.dtype() != dt) return "operands of different dtypes";
  if (p.out.dtype() != dt && p.out.dtype() != DType::f32) return "output neither f32 nor a's dtype";
  // bf16 is native in oneDNN with AVX-512.
  if (dt == DType::bf16 && f.avx512f) return "bf16 is computed natively on AVX-512 (oneDNN)";
  for (int64_t d = 0; d + 2 < p.out.dim(); ++d)
    if (p.out.size(d) != 1) return "batched";
  if (p.out.numel() == 0 || p.a.size(-1) == 0) return "empty";
  if (p.bias.defined() && !p.bias.is_contiguous()) return "bias not contiguous";
  return "";
}

// fn.template operator()<T>() for T = bf16 or f16, the dtypes common_declines lets through.
template <class F> void visit_16bit(DType d, F&& fn) {
  if (d == DType::bf16)
    fn.template operator()<bf16>();
  else
    fn.template operator()<f16>();
}

std::vector<float> f32_bias(const MatmulProblem& p) {
  std::vector<float> out;
  if (!p.bias.defined()) return out;
  out.resize(static_cast<size_t>(p.bias.numel()));
  convert_row(p.bias.data_ptr(), p.bias.dtype(), out.data(), DType::f32, p.bias.numel());
  return out;
}

}  // namespace

std::string gemm_skinny_dot_declines(const MatmulProblem& p) {
  if (auto why = common_declines(p); !why.empty()) return why;
  const int64_t K = p.a.size(-1), N = p.b.size(-1);
  if (N > kSmall) return "more than 16 columns";
  if (K < 64) return "reduction shorter than 64";
  if (p.a.strides()[p.a.dim() - 1] != 1) return "a not contiguous along K";
  if (p.b.strides()[p.b.dim() - 2] != 1) return "b not contiguous along K";
  return "";
}

void gemm_skinny_dot(const MatmulProblem& p) {
  const int64_t M = p.a.size(-2), N = p.b.size(-1);
  std::vector<float> total(static_cast<size_t>(M * N));
  visit_16bit(p.a.dtype(), [&]<class T>() { dot_run<T>(p, total.data()); });
  const std::vector<float> bias = f32_bias(p);
  const int64_t osz = static_cast<int64_t>(dtype_size(p.out.dtype()));
  for (int64_t m = 0; m < M; ++m)
    finish_row(total.data() + m * N, N, bias.empty() ? nullptr : bias.data(), p.relu,
               static_cast<char*>(p.out.data_ptr()) + m * N * osz, p.out.dtype());
}

std::string gemm_skinny_rows_declines(const MatmulProblem& p) {
  if (auto why = common_declines(p); !why.empty()) return why;
  const int64_t M = p.a.size(-2), K = p.a.size(-1), N = p.b.size(-1);
  if (M > kSmall && K > kSmall) return "neither M nor K at most 16";
  if (N < 16) return "fewer than 16 columns";
  if (p.b.strides()[p.b.dim() - 1] != 1) return "b not row-major";
  return "";
}

void gemm_skinny_rows(const MatmulProblem& p) {
  const int64_t M = p.a.size(-2), K = p.a.size(-1);
  // a as a row-major f32 [M][K] copy: small, since M or K is at most 16 (a [256, 10] gradient).
  std::vector<float> af(static_cast<size_t>(M * K));
  const int64_t s0 = p.a.strides()[p.a.dim() - 2], s1 = p.a.strides()[p.a.dim() - 1];
  const std::vector<float> bias = f32_bias(p);
  visit_16bit(p.a.dtype(), [&]<class T>() {
    const T* a = static_cast<const T*>(p.a.data_ptr());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t r = 0; r < K; ++r)
        af[static_cast<size_t>(i * K + r)] = static_cast<float>(load(a[i * s0 + r * s1]));
    rows_run<T>(p, af, bias.empty() ? nullptr : bias.data());
  });
}

}  // namespace mixprec::ops::cpu
