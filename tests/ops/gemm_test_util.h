// Helpers for the matmul/linear tests: the dtype sweep against the f64 oracle with a GEMM error
// model (the tolerance table for the output rounding, plus f32 accumulation error that grows
// like sqrt(K) times the result's scale), and fast-vs-reference comparisons under ForceImpl.
#pragma once

#include <algorithm>
#include <cmath>

#include "op_test_util.h"
#include "ops/dispatch.h"

namespace mixprec::testing {

// The tolerance for a GEMM result of dtype d with inner dim K whose values reach `scale`:
// the table's, with the absolute part widened by the accumulation error of K f32 terms.
inline Tolerance gemm_tolerance(DType d, int64_t K, double scale) {
  Tolerance tol = tolerance_for(d);
  const double acc_eps = d == DType::f64 ? 0x1p-53 : 0x1p-24;
  tol.abs = std::max(tol.abs, 4.0 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))) * acc_eps * scale);
  return tol;
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

inline ::testing::AssertionResult gemm_close(const Tensor& actual, const Tensor& expected, int64_t K,
                                             DType d) {
  return all_close(actual, expected, gemm_tolerance(d, K, max_abs(expected)));
}

// Like matches_f64_in_all_dtypes, with the GEMM error model for inner dim K.
inline ::testing::AssertionResult gemm_matches_f64(const OpFn& fn, const std::vector<Tensor>& inputs,
                                                   int64_t K) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<Tensor> low, ref;
    for (const Tensor& t : inputs) {
      const bool fl = t.defined() && is_floating(t.dtype());
      low.push_back(fl ? t.astype(d) : t);
      ref.push_back(fl ? low.back().astype(DType::f64) : t);
    }
    NoGradGuard ng;
    const Tensor out = fn(low);
    const Tensor expect = fn(ref);
    if (out.dtype() != d)
      return ::testing::AssertionFailure() << "output dtype " << dtype_name(out.dtype()) << " for "
                                           << dtype_name(d) << " inputs";
    auto r = gemm_close(out, expect, K, d);
    if (!r) return ::testing::AssertionFailure() << dtype_name(d) << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// fn's outputs with the default implementations and with the reference forced.
inline std::pair<std::vector<Tensor>, std::vector<Tensor>> fast_and_ref(
    const std::function<std::vector<Tensor>()>& fn) {
  std::vector<Tensor> fast = fn();
  ops::ForceImpl force("ref");
  return {fast, fn()};
}

}  // namespace mixprec::testing
