// Bulk row converters between f32 and the 16-bit storage types, and a general contiguous-row
// converter between any two dtypes. Vector paths (AVX2+F16C, AVX-512) are chosen at run time and
// give the same bits as the scalar reference in half.h on every input, NaN payloads included.
// Not here: strided copies (Tensor::contiguous / copy_ handle strides and call these per run).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "mixprec/dtype.h"

namespace mixprec {

void f32_to_f16_row(const float* src, f16* dst, int64_t n);
void f16_to_f32_row(const f16* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, bf16* dst, int64_t n);
void bf16_to_f32_row(const bf16* src, float* dst, int64_t n);

// Any dtype to any dtype, n contiguous elements. Float -> float conversions round to nearest
// even (f64 -> f16/bf16 without double rounding); float -> integer truncates toward zero, as
// static_cast does (NaN or out-of-range to integer is an error the caller must rule out).
void convert_row(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

// The instruction-set paths, for tests and benchmarks that compare them.
enum class ConvertIsa { scalar, avx2_f16c, avx512 };
std::string_view isa_name(ConvertIsa isa);
ConvertIsa active_convert_isa();
std::vector<ConvertIsa> available_convert_isas();

struct ConvertKernels {
  void (*f32_to_f16)(const float*, f16*, int64_t);
  void (*f16_to_f32)(const f16*, float*, int64_t);
  void (*f32_to_bf16)(const float*, bf16*, int64_t);
  void (*bf16_to_f32)(const bf16*, float*, int64_t);
};
// Throws if the CPU lacks the ISA.
const ConvertKernels& convert_kernels(ConvertIsa isa);

}  // namespace mixprec
