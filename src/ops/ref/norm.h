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
void batch_norm_forward(const BatchNormForward& p);
void batch_norm_backward(const BatchNormBackward& p);
void layer_norm_forward(const LayerNormForward& p);
void layer_norm_backward(const LayerNormBackward& p);
}  // namespace ref

}  // namespace mixprec::ops
