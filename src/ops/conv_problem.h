// The conv2d family's problems (ops/conv.cpp): resolved geometry (padding made explicit for
// every PadMode) and the three problems (forward, backward-data, backward-weights) with their
// preallocated outputs. Kernels: ref::conv_* (the oracle), cpu::conv_direct_c1_* and
// cpu::conv_im2col_*, onednn::conv_* and low_via_f32 around them.
// Invariants: x, w, b (and dy) share one dtype; x, y, dy and dx are NCHW or channels-last
// (ops/layout.h); dw and db are row-major in acc_dtype(x.dtype()).
#pragma once

#include <array>
#include <string>

#include "mixprec/ops/ops.h"

namespace mixprec::ops {

struct ConvGeometry {
  int64_t n = 0, cin = 0, h = 0, w = 0;  // input
  int64_t cout = 0, kh = 0, kw = 0;      // weight [cout, cin / groups, kh, kw]
  int64_t oh = 0, ow = 0;                // output
  int64_t groups = 1;
  int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int64_t pad_t = 0, pad_b = 0, pad_l = 0, pad_r = 0;

  int64_t cin_g() const { return cin / groups; }
  int64_t cout_g() const { return cout / groups; }
  Shape out_shape() const { return {n, cout, oh, ow}; }
  std::string str() const;  // "k3x3 s1x1 d1x1 p0,0,0,0 g1"
};

// Validates shapes and options (user errors throw naming the op) and resolves the padding.
ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Conv2dOptions& o);

struct ConvFwdProblem {
  Tensor x, w, b;  // b may be undefined
  Tensor y;        // preallocated, x's dtype and layout
  ConvGeometry g;
  bool relu = false;
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&ConvFwdProblem::x, &ConvFwdProblem::w, &ConvFwdProblem::b};
  }
  static constexpr auto outputs() { return std::array{&ConvFwdProblem::y}; }
  static constexpr std::array<Tensor ConvFwdProblem::*, 0> batch_sums() { return {}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&ConvFwdProblem::y}; }
};

struct ConvBwdDataProblem {
  Tensor dy, w;
  Tensor dx;  // preallocated, x's dtype and layout
  ConvGeometry g;
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return dy.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&ConvBwdDataProblem::dy, &ConvBwdDataProblem::w};
  }
  static constexpr auto outputs() { return std::array{&ConvBwdDataProblem::dx}; }
  static constexpr std::array<Tensor ConvBwdDataProblem::*, 0> batch_sums() { return {}; }
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&ConvBwdDataProblem::dx}; }
};

struct ConvBwdWeightsProblem {
  Tensor x, dy;
  Tensor dw, db;  // preallocated in acc dtype; either may be undefined (not needed)
  ConvGeometry g;
  static constexpr bool kMeasured = true;  // dispatch may time its kernels (kernel_choice.h)
  Device device() const { return x.device(); }
  std::string describe() const;
  static constexpr auto inputs() {
    return std::array{&ConvBwdWeightsProblem::x, &ConvBwdWeightsProblem::dy};
  }
  static constexpr auto outputs() {
    return std::array{&ConvBwdWeightsProblem::dw, &ConvBwdWeightsProblem::db};
  }
  static constexpr auto batch_sums() { return outputs(); }  // summed over the images
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() {
    return std::array{&ConvBwdWeightsProblem::dw, &ConvBwdWeightsProblem::db};
  }
};

// The kernel profile's FLOPs of a call (ops/dispatch.h, profile_work): each of the three phases
// does the forward's products, 2 N OH OW Cout (Cin / groups) KH KW.
inline double conv_flops(const ConvGeometry& g) {
  return 2.0 * static_cast<double>(g.n * g.oh * g.ow * g.cout) *
         static_cast<double>(g.cin_g() * g.kh * g.kw);
}
inline double profile_flops(const ConvFwdProblem& p) { return conv_flops(p.g); }
inline double profile_flops(const ConvBwdDataProblem& p) { return conv_flops(p.g); }
inline double profile_flops(const ConvBwdWeightsProblem& p) { return conv_flops(p.g); }

// The batch of a conv problem and the problem of its images [n0, n1) (views: the image tensors
// sliced, the weights and the batch sums as they are), for low_via_f32_batched.
inline int64_t batch_size(const ConvFwdProblem& p) { return p.g.n; }
inline int64_t batch_size(const ConvBwdDataProblem& p) { return p.g.n; }
inline int64_t batch_size(const ConvBwdWeightsProblem& p) { return p.g.n; }
inline ConvFwdProblem slice_batch(ConvFwdProblem p, int64_t n0, int64_t n1) {
  p.x = p.x.slice(0, n0, n1);
  p.y = p.y.slice(0, n0, n1);
  p.g.n = n1 - n0;
  return p;
}
inline ConvBwdDataProblem slice_batch(ConvBwdDataProblem p, int64_t n0, int64_t n1) {
  p.dy = p.dy.slice(0, n0, n1);
  p.dx = p.dx.slice(0, n0, n1);
  p.g.n = n1 - n0;
  return p;
}
inline ConvBwdWeightsProblem slice_batch(ConvBwdWeightsProblem p, int64_t n0, int64_t n1) {
  p.x = p.x.slice(0, n0, n1);
  p.dy = p.dy.slice(0, n0, n1);
  p.g.n = n1 - n0;
  return p;
}

}  // namespace mixprec::ops
