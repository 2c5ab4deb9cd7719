// The matmul problem that matmul and linear dispatch (src/ops/matmul.cpp), and its reference
// kernels: plain loops for every float dtype, accumulating in compute_t (f32 for f32/f16/bf16,
// f64 for f64), rounding each output once. They are the test oracle for the oneDNN kernels.
// Invariants: a, b and out have the same rank (>= 2); a's and b's batch dims equal out's or are
// 1 (broadcast); out is contiguous and freshly allocated; a and b share one dtype.
#pragma once

#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

struct MatmulProblem {
  Tensor a;     // [..., M, K], any strides
  Tensor b;     // [..., K, N], any strides
  Tensor bias;  // undefined, or [N] in any floating dtype; added to the accumulator
  Tensor out;   // [..., M, N], contiguous; its dtype may be wider than a's (f32 from bf16)
  bool relu = false;  // applied after the bias, before the one rounding
  Device device() const { return out.device(); }
  std::string describe() const;
};

// out = relu?(a @ b + bias) with one sequential accumulation per output element, so results
// do not depend on the thread count. Threads split the rows.
void matmul_ref(const MatmulProblem& p);

// out[c] = sum over rows r of g[r, c] for a 2-D g of any strides; out is a contiguous [C]
// tensor of any floating dtype. Accumulates in compute_t of g's dtype, rows in order.
void sum_rows(const Tensor& g, Tensor& out);

}  // namespace mixprec::ops
