// The attention tests' comparison (tests/ops/attention_test.cpp for the CPU kernels,
// tests/cuda/attention_test.cpp for the CUDA ones): an elementwise tolerance whose absolute part
// scales with the tensor, and the tolerance table of the fused kernels against the reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace mixprec::testing {

// |a - e| <= rel * |e| + abs_frac * max(1, max|e|) elementwise (NaN matching NaN): attention's
// outputs are weighted averages and its gradients sums of terms that cancel, so an absolute error
// relative to the tensor's scale is what a kernel's rounding produces.
inline ::testing::AssertionResult close(const Tensor& a, const Tensor& e, double rel,
                                        double abs_frac) {
  double mx = 1;  // inputs are O(1): an error floor where the result cancels to ~0
  for (double x : e.to_vector<double>())
    if (std::isfinite(x)) mx = std::max(mx, std::fabs(x));
  return all_close(a, e, {rel, abs_frac * mx});
}

// Tolerances of a fused kernel against the exact composition (the reference), from where the CPU
// kernel rounds (cpu/attention.cpp): f32 differs by summation order and a 1-ulp exp, ~sqrt(L)
// ulps; bf16 and f16 round p and dS to the dtype before the products (relative 2^-9 and 2^-12
// per term) and every output once (the reference rounds only the output). f64: summation order.
struct Tol {
  double rel, abs_frac;
};
inline Tol fused_tol(DType d) {
  switch (d) {
    case DType::bf16: return {1.6e-2, 1.6e-2};
    case DType::f16: return {4e-3, 2e-3};
    case DType::f64: return {1e-12, 1e-12};
    default: return {2e-5, 2e-5};
  }
}

}  // namespace mixprec::testing
