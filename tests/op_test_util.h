// Helpers for op tests: seeded random inputs, the f64 central-difference gradient check, and
// the dtype sweep that compares an op in f32/f16/bf16 with the same op run in f64 (the oracle)
// using the tolerance table of test_util.h.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mixprec/autograd/autograd.h"
#include "mixprec/mixprec.h"
#include "mixprec/ops/ops.h"
#include "test_util.h"

namespace mixprec::testing {

inline Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double lo = -1.0,
                     double hi = 1.0) {
  Generator g(seed);
  return uniform(shape, lo, hi, g, {.dtype = dtype});
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the analytic gradient of sum(w * fn(inputs)) (w random, fixed) against central
// differences in f64, for every input marked in `check` (default: all floating inputs).
inline ::testing::AssertionResult gradcheck(const OpFn& fn, std::vector<Tensor> inputs,
                                            double eps = 1e-6, double tol = 1e-6,
                                            std::vector<bool> check = {}) {
  if (check.empty()) {
    for (const Tensor& t : inputs) check.push_back(t.defined() && is_floating(t.dtype()));
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (check[i]) {
      if (inputs[i].dtype() != DType::f64)
        return ::testing::AssertionFailure() << "gradcheck input " << i << " must be f64";
      inputs[i] = inputs[i].detach().clone().set_requires_grad(true);
    }
  const Tensor out0 = fn(inputs);
  const Tensor w = random(out0.shape(), 999, DType::f64);
  auto objective = [&](const std::vector<Tensor>& in) {
    NoGradGuard ng;
    return ops::sum(ops::mul(fn(in), w)).item();
  };
  std::vector<Tensor> wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (check[i]) wrt.push_back(inputs[i]);
  const Tensor loss = ops::sum(ops::mul(out0, w));
  const std::vector<Tensor> analytic = grad(loss, wrt);
  size_t k = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!check[i]) continue;
    const Tensor& an = analytic[k++];
    Tensor x = inputs[i].detach().clone();
    std::vector<Tensor> in = inputs;
    in[i] = x;
    double* xp = x.data<double>();
    const auto av = an.defined() ? an.to_vector<double>() : std::vector<double>(static_cast<size_t>(x.numel()), 0.0);
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = xp[j];
      xp[j] = orig + eps;
      const double fp = objective(in);
      xp[j] = orig - eps;
      const double fm = objective(in);
      xp[j] = orig;
      const double numeric = (fp - fm) / (2 * eps);
      const double a = av[static_cast<size_t>(j)];
      if (std::fabs(a - numeric) > tol * (1 + std::fabs(numeric)))
        return ::testing::AssertionFailure() << "input " << i << " element " << j << ": analytic "
                                             << a << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs fn on `inputs` cast to each low dtype and compares with the f64 result (inputs first
// rounded to that dtype, so only the op's own error is measured).
inline ::testing::AssertionResult matches_f64_in_all_dtypes(const OpFn& fn,
                                                            const std::vector<Tensor>& inputs,
                                                            double tol_scale = 1.0) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<Tensor> low, ref;
    for (const Tensor& t : inputs) {
      if (t.defined() && is_floating(t.dtype())) {
        low.push_back(t.astype(d));
        ref.push_back(low.back().astype(DType::f64));
      } else {
        low.push_back(t);
        ref.push_back(t);
      }
    }
    NoGradGuard ng;
    const Tensor out = fn(low);
    const Tensor expect = fn(ref);
    if (out.dtype() != d && is_floating(out.dtype()))
      return ::testing::AssertionFailure() << "output dtype " << dtype_name(out.dtype())
                                           << " for inputs in " << dtype_name(d);
    Tolerance tol = tolerance_for(d);
    tol.rel *= tol_scale;
    tol.abs *= tol_scale;
    auto r = all_close(out, expect, tol);
    if (!r) return ::testing::AssertionFailure() << dtype_name(d) << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mixprec::testing
