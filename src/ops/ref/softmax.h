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

namespace ref {
void softmax_forward(const SoftmaxForward& p);
void softmax_backward(const SoftmaxBackward& p);
}  // namespace ref

}  // namespace mixprec::ops
