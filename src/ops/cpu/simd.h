// The cpu backend's vector layer: one source of math for every instruction set. Each ISA is a
// namespace (simd::avx512: 16 f32 lanes, simd::avx2: 8 lanes with FMA, simd::scalar: one lane)
// holding the same primitives (fmadd, select, abs, table lookups, a fixed-order horizontal sum,
// loads and stores of f32 and of the 16-bit formats with half.h's bits; those the two vector ISAs
// write alike are in simd_vector.inc) under a `#pragma GCC target` region, and each includes
// simd_math.inc, which writes exp, erf and the activations built on them once, over those
// primitives. Every fused multiply-add is explicit and nothing else contracts (the files that
// include this header build with -ffp-contract=off, src/CMakeLists.txt), so the three ISAs give
// the same bits for every input: a kernel's result does not depend on the machine, and tests run
// all three here and compare. Kernels pick theirs with simd::best_isa().
#pragma once

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "mixprec/cpu_features.h"
#include "mixprec/half.h"

// Vectors never cross a call boundary (the primitives are inlined into the per-ISA kernels), so
// the note about the AVX-512 argument-passing ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixprec::ops::cpu::simd {

enum class Isa { scalar, avx2, avx512 };

// The widest set this CPU has (capped by MIXPREC_ISA): AVX-512 needs F, BW and VL; AVX2 needs
// FMA and F16C beside it.
inline Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.fma && f.f16c) return Isa::avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::avx2;
  return Isa::scalar;
}
inline const char* isa_name(Isa isa) {
  return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2" : "scalar";
}
// The functions with row kernels (simd_math.inc's activation_rows; erf and exp for tests and
// future kernels, the rest for the elementwise ops: gelu's forms, and the arithmetic of two
// operands (and GRAPH_MODE's fused add + ReLU), which the 16-bit rows compute without the
// engine's f32 chunks).
// clang-format off
enum class Activation { erf, exp, gelu_erf, gelu_tanh, gelu_erf_grad, gelu_tanh_grad,
                        add, sub, mul, add_relu };
// clang-format on

typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace avx512 {
using V = f32x16;
using VI = i32x16;
inline constexpr int kLanes = 16;
#include "ops/cpu/simd_vector.inc"
inline V fmadd(V a, V b, V c) { return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
// tab[k] per lane, k in [0, 8).
inline V lookup8(const float* tab, VI k) {
  return (V)_mm512_maskz_permutexvar_ps(0xFFFF, (__m512i)k, _mm512_maskz_loadu_ps(0xFF, tab));
}
// The value at p in every lane (splat(x) is V{} + x, an add and a shuffle: -0 becomes +0).
inline V broadcast(const float* p) { return (V)_mm512_set1_ps(*p); }
inline bool any(VI m) { return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0; }
inline V loadu(const bf16* p) {
  return (V)((VU)_mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)p)) << 16);
}
inline void storeu(bf16* p, V x) {
  _mm256_storeu_si256((__m256i*)p, _mm512_maskz_cvtepi32_epi16(0xFFFF, (__m512i)bf16_bits(x)));
}
// (The maskz forms: the plain ones start from an "undefined" vector that GCC 12 warns about.)
inline V widen_f16(__m256i h) { return (V)_mm512_maskz_cvtph_ps(0xFFFF, h); }
inline V loadu(const f16* p) { return widen_f16(_mm256_loadu_si256((const __m256i*)p)); }
inline __m256i f16_bits(V x) {
  return _mm512_maskz_cvtps_ph(0xFFFF, (__m512)x, _MM_FROUND_TO_NEAREST_INT);
}
inline void storeu(f16* p, V x) { _mm256_storeu_si256((__m256i*)p, f16_bits(x)); }
inline V round_f16(V x) { return widen_f16(f16_bits(x)); }
// The bits of kLanes 16-bit values, zero-extended, one a lane; tab[k] per lane (any k).
inline VI load_bits16(const void* p) {
  return (VI)_mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)p));
}
inline V gather(const float* tab, VI k) {
  return (V)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, (__m512i)k, tab, 4);
}
#include "ops/cpu/simd_math.inc"
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = f32x8;
using VI = i32x8;
inline constexpr int kLanes = 8;
#include "ops/cpu/simd_vector.inc"
inline V fmadd(V a, V b, V c) { return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
inline V lookup8(const float* tab, VI k) {
  return (V)_mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), (__m256i)k);
}
inline V broadcast(const float* p) { return (V)_mm256_set1_ps(*p); }
inline bool any(VI m) { return _mm256_movemask_ps((__m256)m) != 0; }
inline V loadu(const bf16* p) {
  return (V)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16);
}
inline void storeu(bf16* p, V x) {  // the bits are at most 0xFFFF: packus keeps them
  const __m256i u = (__m256i)bf16_bits(x);
  _mm_storeu_si128((__m128i*)p,
                   _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
}
inline V loadu(const f16* p) { return (V)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
inline __m128i f16_bits(V x) { return _mm256_cvtps_ph((__m256)x, _MM_FROUND_TO_NEAREST_INT); }
inline void storeu(f16* p, V x) { _mm_storeu_si128((__m128i*)p, f16_bits(x)); }
inline V round_f16(V x) { return (V)_mm256_cvtph_ps(f16_bits(x)); }
inline VI load_bits16(const void* p) {
  return (VI)_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
}
inline V gather(const float* tab, VI k) {
  return (V)_mm256_mask_i32gather_ps(_mm256_setzero_ps(), tab, (__m256i)k,
                                     _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
}
#include "ops/cpu/simd_math.inc"
}  // namespace avx2
#pragma GCC pop_options

// One lane, any x86-64: the reference of the vector forms (same operations, same bits), and the
// path of CPUs without AVX2 + FMA (std::fma is then a library call: correct, not fast).
namespace scalar {
using V = float;
using VI = int32_t;
inline constexpr int kLanes = 1;
inline V splat(float x) { return x; }
inline V loadu(const float* p) { return *p; }
inline void storeu(float* p, V v) { *p = v; }
inline V fmadd(V a, V b, V c) { return std::fma(a, b, c); }
inline V select(bool mask, V a, V b) { return mask ? a : b; }
inline V abs(V x) { return std::bit_cast<V>(std::bit_cast<VI>(x) & 0x7FFFFFFF); }
inline V copysign(V mag, V sgn) {
  return std::bit_cast<V>((std::bit_cast<VI>(mag) & 0x7FFFFFFF) |
                          (std::bit_cast<VI>(sgn) & INT32_MIN));
}
inline VI to_int(V x) { return static_cast<VI>(x); }
inline V to_float(VI x) { return static_cast<V>(x); }
inline V from_bits(VI x) { return std::bit_cast<V>(x); }
inline V lookup8(const float* tab, VI k) { return tab[k]; }
inline V broadcast(const float* p) { return *p; }
inline bool any(bool m) { return m; }
inline V loadu(const bf16* p) { return to_f32(*p); }
inline V loadu(const f16* p) { return to_f32(*p); }
inline void storeu(bf16* p, V x) { *p = to_bf16(x); }
inline void storeu(f16* p, V x) { *p = to_f16(x); }
inline V round_bf16(V x) { return to_f32(to_bf16(x)); }
inline V round_f16(V x) { return to_f32(to_f16(x)); }
inline VI load_bits16(const void* p) {
  uint16_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}
inline V gather(const float* tab, VI k) { return tab[k]; }
#include "ops/cpu/simd_math.inc"
}  // namespace scalar

}  // namespace mixprec::ops::cpu::simd
