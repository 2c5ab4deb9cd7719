// Batch and layer normalisation: the problem structs every implementation takes (tensors in,
// preallocated outputs, options) and the reference kernels, plain loops for every float dtype.
// Invariants the wrappers (src/ops/norm.cpp) establish: parameters and statistics are packed
// [C] / [M] tensors in the compute dtype (acc_dtype(x): f32, f64 for f64); x, y, dy and dx are
// dense with identical layouts; statistics are the biased variance (eps not yet added).
#pragma once

#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// x [N, C, ...] in any dense layout. Training: mean/var are outputs (batch statistics);
// eval: inputs (running statistics). y has x's dtype and strides.
struct BatchNormForward {
  Tensor x, gamma, beta, mean, var, y;
  bool training = true;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
};

// dx (x's dtype and strides), dgamma, dbeta [C] in the compute dtype. Eval (training false):
// mean/var are the running statistics the forward used and dx = dy * gamma / sqrt(var + eps).
struct BatchNormBackward {
  Tensor x, dy, gamma, mean, var, dx, dgamma, dbeta;
  bool training = true;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
};

// x, y [R, M] contiguous (rows are normalised); gamma/beta [M]; mean/var [R] outputs.
struct LayerNormForward {
  Tensor x, gamma, beta, y, mean, var;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
};

struct LayerNormBackward {
  Tensor x, dy, gamma, mean, var, dx, dgamma, dbeta;
  double eps = 1e-5;
  Device device() const { return x.device(); }
  std::string describe() const;
};

namespace ref {
// The batch mean and biased variance of each channel of a dense x [N, C, ...] into packed
// compute-dtype mean / var [C], in one pass: the sums of d = x - shift and d^2, with the shift
// the channel's first value, in f64 over blocks fixed by the shape (thread-count independent).
// A constant channel gets its value and 0 exactly. Every batch norm implementation's training
// statistics come from here.
void batch_norm_statistics(const Tensor& x, const Tensor& mean, const Tensor& var);
void batch_norm_forward(const BatchNormForward& p);
void batch_norm_backward(const BatchNormBackward& p);
void layer_norm_forward(const LayerNormForward& p);
void layer_norm_backward(const LayerNormBackward& p);
}  // namespace ref

}  // namespace mixprec::ops
