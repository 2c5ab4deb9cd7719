// The pooling family's problems (max_pool2d, avg_pool2d, adaptive_avg_pool2d; ops/pool.cpp):
// resolved geometry (PyTorch's output-size rule with ceil_mode; adaptive bins) and the
// forward/backward problems. Kernels: ref::pool_* (the oracle), cpu::pool_global_avg_* and
// cpu::pool_max_nhwc_*, onednn::pool_*. Invariants: x, y, dy, dx are dense in `layout` and share
// x's dtype; pad_b/pad_r include the ceil-mode overhang, so (h + pad_t + pad_b - kh) / stride
// + 1 == oh exactly, as oneDNN wants.
#pragma once

#include <array>
#include <string>

#include "ops/layout.h"
#include "mixprec/ops/ops.h"

namespace mixprec::ops {

using detail::ImageLayout;

enum class PoolKind { max, avg };

struct PoolGeometry {
  PoolKind kind = PoolKind::max;
  ImageLayout layout = ImageLayout::nchw;
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0;  // the symmetric padding (top = bottom, left = right)
  int64_t pad_b = 0, pad_r = 0;  // bottom/right as oneDNN sees them (>= pad_t/pad_l)
  bool count_include_pad = true;
  // Adaptive bins (PyTorch): row i covers [floor(i*h/oh), ceil((i+1)*h/oh)); kernel, stride
  // and padding are then unused. The wrapper turns uniform adaptive pooling into plain pooling.
  bool adaptive = false;

  Shape in_shape() const { return {n, c, h, w}; }
  Shape out_shape() const { return {n, c, oh, ow}; }
  bool worth_threads() const { return n * c * h * w > (1 << 15); }  // kernels' OpenMP threshold
  // Average pooling of each whole plane to 1x1 (no padding): what global-average kernels take.
  bool is_global_avg() const {
    return kind == PoolKind::avg && !adaptive && oh == 1 && ow == 1 && kh == h && kw == w &&
           pad_t == 0 && pad_l == 0;
  }
  std::string str() const;
};

// Validates options against x's shape (user errors name `op`) and resolves the output size.
PoolGeometry pool_geometry(PoolKind kind, const Shape& x, const Pool2dOptions& o, const char* op);
// Adaptive average pooling to (oh, ow); plain pooling when the bins are uniform.
PoolGeometry adaptive_geometry(const Shape& x, int64_t oh, int64_t ow);

struct PoolFwdProblem {
  Tensor x, y;  // y preallocated
  // Max pooling for training: an implementation may leave a workspace here for its backward
  // (oneDNN's argmax indices). Null when no backward will run.
  Tensor* workspace = nullptr;
  PoolGeometry g;
  Device device() const { return x.device(); }
  std::string describe() const;
};

// The tensors the kernel profile charges a forward call with (ops/dispatch.h, profile_work): x
// read, y written (a workspace the kernel leaves is not counted).
inline auto profile_tensors(const PoolFwdProblem& p) {
  return std::array<const Tensor*, 2>{&p.x, &p.y};
}

struct PoolBwdProblem {
  Tensor dy;
  Tensor x;          // the forward input (max pooling; the reference recomputes the argmax)
  Tensor workspace;  // what the forward left, if anything
  Tensor dx;         // preallocated
  PoolGeometry g;
  Device device() const { return dy.device(); }
  std::string describe() const;
  // The data tensors (GRAPH_MODE's RecordedCall reports them as held: a kernel that takes the
  // argmax from the workspace holds x without reading it).
  static constexpr auto inputs() { return std::array{&PoolBwdProblem::dy, &PoolBwdProblem::x}; }
  static constexpr auto outputs() { return std::array{&PoolBwdProblem::dx}; }
};

}  // namespace mixprec::ops
