// Shared test helpers: tolerance table per dtype, element-wise comparison of tensors against an
// oracle with a readable failure message (first mismatching index, values, tolerance), and the
// text of the mixprec::Error a call throws, with a matcher on it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "mixprec/mixprec.h"

namespace mixprec::testing {

struct Tolerance {
  double rel;
  double abs;
};

// The one tolerance table (STYLE.md): f32 ~1e-5, f16 ~1e-3, bf16 ~1e-2 relative.
inline Tolerance tolerance_for(DType d) {
  switch (d) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f32: return {1e-5, 1e-6};
    case DType::f16: return {2e-3, 1e-4};
    case DType::bf16: return {1.6e-2, 1e-3};
    default: return {0.0, 0.0};
  }
}

inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                            Tolerance tol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs "
                                         << shape_str(expected.shape());
  const auto a = actual.to_vector<double>();
  const auto e = expected.to_vector<double>();
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool same_inf = std::isinf(a[i]) && a[i] == e[i];
    if (both_nan || same_inf) continue;
    if (!(std::fabs(a[i] - e[i]) <= tol.abs + tol.rel * std::fabs(e[i]))) {
      if (bad++ == 0)
        first = "index " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs expected " +
                std::to_string(e[i]);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ (rel "
                                       << tol.rel << ", abs " << tol.abs << "); first at " << first;
}

inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected) {
  return all_close(actual, expected, tolerance_for(actual.dtype()));
}

// The what() of the mixprec::Error that fn throws, or "(no error)".
inline std::string error_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Success when fn throws mixprec::Error whose message contains `part`; else the message (or "no
// error") in the failure.
inline ::testing::AssertionResult throws_error_with(const std::function<void()>& fn, const std::string& part) {
  const std::string text = error_text(fn);
  if (text == "(no error)") return ::testing::AssertionFailure() << "no error";
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message lacks \"" << part << "\":\n" << text;
}

}  // namespace mixprec::testing
