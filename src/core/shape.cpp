// Shape helpers: element counts with overflow checks, contiguous strides, dim wrapping.
#include "mixprec/shape.h"

#include <algorithm>

#include "mixprec/error.h"

namespace mixprec {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    MIXPREC_CHECK(s >= 0, "shape ", shape_str(shape), ": sizes must be non-negative");
    MIXPREC_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(shape),
                  ": element count overflows int64");
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return st;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool is_dense(const Shape& shape, const Strides& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size), size > 1 only
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1) dims.emplace_back(strides[i], shape[i]);
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (const auto& [st, sz] : dims) {
    if (st != expect) return false;
    expect *= sz;
  }
  return true;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  MIXPREC_CHECK(dim >= lo && dim <= hi, what, " ", dim, " is out of range for a tensor with ",
                ndim, " dimensions (expected ", lo, "..", hi, ")");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

}  // namespace mixprec
