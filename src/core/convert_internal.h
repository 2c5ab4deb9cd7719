// Internal declarations of the per-ISA row converters (see convert_x86.cpp and convert.cpp).
#pragma once

#include <cstdint>

#include "mixprec/half.h"

namespace mixprec::convert_detail {

void f32_to_f16_scalar(const float* src, f16* dst, int64_t n);
void f16_to_f32_scalar(const f16* src, float* dst, int64_t n);
void f32_to_bf16_scalar(const float* src, bf16* dst, int64_t n);
void bf16_to_f32_scalar(const bf16* src, float* dst, int64_t n);

void f32_to_f16_avx2(const float* src, f16* dst, int64_t n);
void f16_to_f32_avx2(const f16* src, float* dst, int64_t n);
void f32_to_bf16_avx2(const float* src, bf16* dst, int64_t n);
void bf16_to_f32_avx2(const bf16* src, float* dst, int64_t n);

void f16_to_f32_avx512(const f16* src, float* dst, int64_t n);
void f32_to_bf16_avx512(const float* src, bf16* dst, int64_t n);
void bf16_to_f32_avx512(const bf16* src, float* dst, int64_t n);

}  // namespace mixprec::convert_detail
