// The softmax family's problems (softmax and log_softmax along one axis, ops/softmax.cpp).
// Kernels: ref::softmax_* (the oracle), onednn::softmax_* and low_via_f32 around them.
// Invariants the op establishes: x, y, dy, dx are contiguous with the same shape; y has x's
// dtype. Kernels subtract the row maximum first and compute in compute_t<T>.
#pragma once

#include <array>
#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

struct SoftmaxFwdProblem {
  Tensor x, y;
  int64_t axis = -1;                       // already wrapped to [0, dim)
  bool log = false;                        // log_softmax
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() { return std::array{&SoftmaxFwdProblem::x}; }
  static constexpr auto outputs() { return std::array{&SoftmaxFwdProblem::y}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&SoftmaxFwdProblem::y}; }
};

// dx from the forward output y: softmax: y * (dy - sum(dy * y)); log: dy - exp(y) * sum(dy).
struct SoftmaxBwdProblem {
  Tensor y, dy, dx;
  int64_t axis = -1;
  bool log = false;
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return y.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&SoftmaxBwdProblem::y, &SoftmaxBwdProblem::dy};
  }
  static constexpr auto outputs() { return std::array{&SoftmaxBwdProblem::dx}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&SoftmaxBwdProblem::dx}; }
};

// ---------------------------------------------------------------- shared by every CPU kernel
// A row (the values along the axis) whose maximum is not finite (all -inf, a +inf, a NaN) has
// no distribution: every kernel gives NaN for its whole row of y, and so for dx, as the
// formulas and PyTorch do. The reference kernels apply this directly; these two repair the
// output of kernels that do not (defined in ops/ref/softmax.cpp).

// For kernels that leave such a row only partly NaN (oneDNN: NaN where x is NaN, 0 or -inf
// elsewhere): fills every row of y that holds a NaN with NaN. One read of y when none does.
void fill_nan_rows(const Tensor& y, int64_t axis);
// dx = NaN wherever y is NaN (oneDNN's vector exp turns exp(NaN) into exp(88.7), so its
// log-softmax backward gives dy - 3.4e38 * sum(dy) there: -inf, or dy when sum(dy) is 0).
void nan_where_nan(const Tensor& y, const Tensor& dx);

}  // namespace mixprec::ops
