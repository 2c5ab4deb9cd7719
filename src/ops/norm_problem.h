// The normalisation family's problems (batch_norm and layer_norm, ops/norm.cpp): tensors in,
// preallocated outputs, options. Kernels: ref::batch_norm_* / ref::layer_norm_* (the oracle),
// onednn::batch_norm_* / onednn::layer_norm_* and low_via_f32 around them.
// Invariants the op establishes: parameters and statistics are packed [C] / [M] tensors in the
// compute dtype (acc_dtype(x): f32, f64 for f64); x, y, dy and dx are dense with identical
// layouts; statistics are the biased variance (eps not yet added).
#pragma once

#include <array>
#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// x [N, C, ...] in any dense layout. Training: mean/var are outputs (batch statistics);
// eval: inputs (running statistics). y has x's dtype and strides.
// relu (set only by GRAPH_MODE's fusion, src/graph/fuse.cpp): y = relu(BatchNorm(x)) with the
// ReLU applied to the value rounded to y's dtype, as a separate relu op would (relu commutes with
// that rounding, so a kernel may apply it just before rounding); -0 becomes +0, NaN stays. Kernels
// that cannot do it decline.
struct BatchNormFwdProblem {
  Tensor x, gamma, beta, mean, var, y;
  bool training = true;
  double eps = 1e-5;
  bool relu = false;
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() { return std::array{&BatchNormFwdProblem::x}; }
  static constexpr auto outputs() { return std::array{&BatchNormFwdProblem::y}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() {
    return std::array{&BatchNormFwdProblem::y, &BatchNormFwdProblem::mean,
                      &BatchNormFwdProblem::var};
  }
};

// dx (x's dtype and strides), dgamma, dbeta [C] in the compute dtype. Eval (training false):
// mean/var are the running statistics the forward used and dx = dy * gamma / sqrt(var + eps).
// relu_y (defined only by GRAPH_MODE's fusion): the output of a ReLU that followed this
// BatchNorm, dy's dtype and strides; dy is the ReLU's incoming gradient and is masked first, as
// relu's backward does: where relu_y > 0 it is kept, elsewhere (and where relu_y is NaN) 0.
// Kernels that cannot do it decline.
struct BatchNormBwdProblem {
  Tensor x, dy, gamma, mean, var, dx, dgamma, dbeta;
  bool training = true;
  double eps = 1e-5;
  Tensor relu_y = Tensor();
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&BatchNormBwdProblem::x, &BatchNormBwdProblem::dy};
  }
  static constexpr auto outputs() { return std::array{&BatchNormBwdProblem::dx}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() {
    return std::array{&BatchNormBwdProblem::dx, &BatchNormBwdProblem::dgamma,
                      &BatchNormBwdProblem::dbeta};
  }
};

// x, y [R, M] contiguous (rows are normalised); gamma/beta [M]; mean/var [R] outputs.
struct LayerNormFwdProblem {
  Tensor x, gamma, beta, y, mean, var;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() { return std::array{&LayerNormFwdProblem::x}; }
  static constexpr auto outputs() { return std::array{&LayerNormFwdProblem::y}; }
};

struct LayerNormBwdProblem {
  Tensor x, dy, gamma, mean, var, dx, dgamma, dbeta;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&LayerNormBwdProblem::x, &LayerNormBwdProblem::dy};
  }
  static constexpr auto outputs() { return std::array{&LayerNormBwdProblem::dx}; }
};

// ---------------------------------------------------------------- shared by every CPU kernel
// A dense x [N, C, ...] (NCHW, channels-last, [N, C]) seen in memory as [outer][C][inner]: inner
// is the channel's stride (the dims laid out inside a channel), outer the rest, so channel c
// holds (o * C + c) * inner + i. Channels-last: inner = 1.
struct ChannelBlocks {
  int64_t outer, channels, inner;
};
inline ChannelBlocks channel_blocks(const Tensor& x) {
  const int64_t c = x.shape()[1], n = x.numel();
  const int64_t inner = c == 1 ? n : x.strides()[1];
  return {c > 0 && inner > 0 ? n / (c * inner) : 0, c, inner};
}

// The batch mean and biased variance of each channel of a dense x [N, C, ...] into packed
// compute-dtype mean / var [C], in one pass: the sums of d = x - shift and d^2, with the shift
// the channel's first value, in f64 over blocks fixed by the shape (thread-count independent).
// A constant channel gets its value and 0 exactly. Every batch norm kernel's training
// statistics come from here (ref and oneDNN alike, so they agree bit for bit); defined in
// ops/ref/norm_stats.cpp.
void batch_norm_statistics(const Tensor& x, const Tensor& mean, const Tensor& var);
// The same on a capped instruction set: 0 the baseline, 1 AVX2 + F16C, 2 AVX-512 where the CPU
// has them (tests compare the bits). Not in a nested `detail` namespace: files under ops/ name
// mixprec::detail's helpers as `detail::`, which an ops::detail seen here would hide.
void batch_norm_statistics_on_isa(int isa, const Tensor& x, const Tensor& mean, const Tensor& var);

}  // namespace mixprec::ops
