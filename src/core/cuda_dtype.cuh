// Device-side element access for every DType, shared by the .cu files (core/cuda_copy.cu,
// ops/cuda/*.cu): load an element as float/double, store a float/double rounded once (round to
// nearest even, as the CPU converters do). The dtype is a runtime value: the switch is uniform
// across a warp (one dtype per tensor), so it costs no divergence.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "mixprec/dtype.h"

namespace mixprec::cuda_detail {

template <class C> __device__ inline C load_elem(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::f32: return static_cast<C>(static_cast<const float*>(base)[i]);
    case DType::f64: return static_cast<C>(static_cast<const double*>(base)[i]);
    case DType::f16:
      return static_cast<C>(__half2float(__ushort_as_half(static_cast<const uint16_t*>(base)[i])));
    case DType::bf16:  // exact: bf16 is the top half of an f32
      return static_cast<C>(__uint_as_float(uint32_t{static_cast<const uint16_t*>(base)[i]} << 16));
    case DType::i32: return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case DType::i64: return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
    case DType::boolean: return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
  }
  return C(0);
}

// Floating destinations only for C = float (the compute type of f32/f16/bf16 formulas); any
// destination for C = double.
template <class C> __device__ inline void store_elem(void* base, DType dt, int64_t i, C v) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(base)[i] = static_cast<double>(v); return;
    case DType::f16:
      if constexpr (sizeof(C) == 8)
        static_cast<uint16_t*>(base)[i] = __half_as_ushort(__double2half(v));
      else
        static_cast<uint16_t*>(base)[i] = __half_as_ushort(__float2half_rn(v));
      return;
    case DType::bf16:
      if constexpr (sizeof(C) == 8)
        static_cast<uint16_t*>(base)[i] = __bfloat16_as_ushort(__double2bfloat16(v));
      else
        static_cast<uint16_t*>(base)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
      return;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = v != C(0) ? 1 : 0; return;
  }
}

// The most dims a kernel's index arithmetic handles (launchers check it).
inline constexpr int kMaxDims = 8;

}  // namespace mixprec::cuda_detail
