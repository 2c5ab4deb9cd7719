// gemm_into: out = relu?(a @ b + bias) through the matmul implementation list (oneDNN, f16 via
// f32, reference), for kernels built on GEMM (im2col convolution). a and b may be strided
// views; out must be a contiguous 2-D (or batched) tensor, possibly wider than a and b (f32
// from bf16). Defined in matmul.cpp.
#pragma once

#include <string_view>

#include "mixprec/ops/registry.h"
#include "mixprec/tensor.h"

namespace mixprec::ops::detail {

void gemm_into(OpId op, std::string_view phase, const Tensor& a, const Tensor& b, const Tensor& bias, bool relu,
               const Tensor& out);

}  // namespace mixprec::ops::detail
