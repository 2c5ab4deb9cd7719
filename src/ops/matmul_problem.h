// The matmul family's problem (ops matmul and linear, ops/matmul.cpp) and its GEMM helpers for
// other kernels. Kernels: ref::matmul (the oracle: one sequential f32 accumulation per output,
// f64 for f64), onednn::matmul, and low_via_f32 around it.
// Invariants: a, b and out have the same rank (>= 2); a's and b's batch dims equal out's or are
// 1 (broadcast); out is contiguous and freshly allocated; a and b share one dtype.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "mixprec/ops/registry.h"
#include "mixprec/tensor.h"

namespace mixprec::ops {

// out = relu?(a @ b + bias), rounded once into out's dtype.
struct MatmulProblem {
  Tensor a;           // [..., M, K], any strides
  Tensor b;           // [..., K, N], any strides
  Tensor bias;        // undefined, or [N] in any floating dtype; added to the accumulator
  Tensor out;         // [..., M, N], contiguous; its dtype may be wider than a's (f32 from bf16)
  bool relu = false;  // applied after the bias, before the one rounding
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return out.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&MatmulProblem::a, &MatmulProblem::b, &MatmulProblem::bias};
  }
  static constexpr auto outputs() { return std::array{&MatmulProblem::out}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&MatmulProblem::out}; }
};

// The kernel profile's FLOPs of a call (ops/dispatch.h, profile_work): 2 M N K per batch.
inline double profile_flops(const MatmulProblem& p) {
  return 2.0 * static_cast<double>(p.out.numel()) * static_cast<double>(p.a.size(-1));
}

// ---------------------------------------------------------------- GEMM helpers for kernels
// The one place kernels built on GEMM (cpu/conv_im2col.cpp) and the ops get a GEMM or a column
// sum; nothing calls a matmul kernel directly.

// out = relu?(a @ b + bias) through dispatch (the matmul kernels in registration order, logged
// as `op` `phase`), whatever implementation the caller forced. a and b may be strided views;
// out must be a contiguous 2-D (or batched) tensor, possibly wider than a and b (f32 from
// bf16). Defined in ops/matmul.cpp.
void gemm_into(OpId op, std::string_view phase, const Tensor& a, const Tensor& b,
               const Tensor& bias, bool relu, const Tensor& out);

// out[c] = sum over rows r of g[r, c] for a 2-D g of any strides; out is a contiguous [C]
// tensor of any floating dtype (the bias gradient, unrounded in f32 for 16-bit g). Accumulates
// in compute_t of g's dtype, rows in order, so results do not depend on the thread count.
// CPU only; defined in ops/matmul.cpp.
void sum_rows(const Tensor& g, Tensor& out);

}  // namespace mixprec::ops
