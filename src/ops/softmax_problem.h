// Softmax and log-softmax along one axis: the problem structs every implementation takes and
// the reference kernels (plain loops, every float dtype). Invariants the wrapper
// (src/ops/softmax.cpp) establishes: x, y, dy, dx are contiguous with the same shape; y has
// x's dtype. The kernels subtract the row maximum first and compute in compute_t<T>.
#pragma once

#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

struct SoftmaxForward {
  Tensor x, y;
  int64_t axis = -1;  // already wrapped to [0, dim)
  bool log = false;   // log_softmax
  Device device() const { return x.device(); }
  std::string describe() const;
};

// dx from the forward output y: softmax: y * (dy - sum(dy * y)); log: dy - exp(y) * sum(dy).
struct SoftmaxBackward {
  Tensor y, dy, dx;
  int64_t axis = -1;
  bool log = false;
  Device device() const { return y.device(); }
  std::string describe() const;
};

// A row (the values along the axis) whose maximum is not finite (all -inf, a +inf, a NaN) has
// no distribution: every implementation gives NaN for its whole row of y, and so for dx, as
// the formulas and PyTorch do. The reference kernels apply this directly.
namespace ref {
void softmax_forward(const SoftmaxForward& p);
void softmax_backward(const SoftmaxBackward& p);

// For kernels that leave such a row only partly NaN (oneDNN: NaN where x is NaN, 0 or -inf
// elsewhere): fills every row of y that holds a NaN with NaN. One read of y when none does.
void fill_nan_rows(const Tensor& y, int64_t axis);
// dx = NaN wherever y is NaN (oneDNN's vector exp turns exp(NaN) into exp(88.7), so its
// log-softmax backward gives dy - 3.4e38 * sum(dy) there: -inf, or dy when sum(dy) is 0).
void nan_where_nan(const Tensor& y, const Tensor& dx);
}  // namespace ref

}  // namespace mixprec::ops
