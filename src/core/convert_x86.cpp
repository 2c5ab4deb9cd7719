// Vector row converters for x86: AVX2+F16C and AVX-512 (F, BW, VL). Each function is compiled for
// its ISA with a target attribute, never for the whole file, so the library runs on any x86-64.
// f32->bf16 uses integer round-to-nearest-even rather than VCVTNEPS2BF16, which flushes f32
// subnormals to zero; memory bandwidth bounds both, and ours matches the scalar reference bit
// for bit. Tails go through the scalar functions of half.h, which define the bits.
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* used as a don't-care source).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "convert_internal.h"

namespace mixprec::convert_detail {

// ---------------------------------------------------------------- AVX2 + F16C
__attribute__((target("avx2,f16c"))) void f32_to_f16_avx2(const float* src, f16* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_f16(src[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_avx2(const f16* src, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* src, bf16* dst, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256 vf = _mm256_loadu_ps(src + i + 8 * k);
      const __m256i x = _mm256_castps_si256(vf);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
      const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
      const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(vf, vf, _CMP_UNORD_Q));
      r[k] = _mm256_blendv_epi8(rounded, nan, is_nan);
    }
    // packus works per 128-bit lane: [a0 a1 b0 b1] -> fix the order with a 64-bit permute.
    const __m256i packed = _mm256_packus_epi32(r[0], r[1]);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), ordered);
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const bf16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

// ---------------------------------------------------------------- AVX-512
#define MIXPREC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

MIXPREC_AVX512 void f16_to_f32_avx512(const f16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

MIXPREC_AVX512 static inline __m256i bf16_round_16(__m512 vf) {
  const __m512i x = _mm512_castps_si512(vf);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(vf, vf, _CMP_UNORD_Q);
  const __m512i nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

MIXPREC_AVX512 void f32_to_bf16_avx512(const float* src, bf16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = bf16_round_16(_mm512_loadu_ps(src + i));
    const __m256i b = bf16_round_16(_mm512_loadu_ps(src + i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), b);
  }
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16_round_16(_mm512_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

MIXPREC_AVX512 void bf16_to_f32_avx512(const bf16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(w));
  }
  for (; i < n; ++i) dst[i] = to_f32(src[i]);
}

#undef MIXPREC_AVX512

}  // namespace mixprec::convert_detail
