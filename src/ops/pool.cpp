// ops::max_pool2d, avg_pool2d and adaptive_avg_pool2d, forward and backward side by side:
// geometry (PyTorch's output-size rule, ceil_mode, count_include_pad, adaptive bins), output
// layout (channels-last in, channels-last out), kernel dispatch and the backward. AMP policy
// keep: they run in the input dtype. Max pooling keeps its input (and the kernel's workspace,
// when the kernel that ran left one) for the backward.
#include <functional>

#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/op_common.h"
#include "ops/pool_problem.h"

namespace mixprec::ops {
using namespace detail;

std::string PoolGeometry::str() const {
  if (adaptive) return "adaptive " + std::to_string(oh) + "x" + std::to_string(ow);
  return std::string(kind == PoolKind::max ? "max" : "avg") + " k" + std::to_string(kh) + "x" +
         std::to_string(kw) + " s" + std::to_string(stride_h) + "x" + std::to_string(stride_w) +
         " p" + std::to_string(pad_t) + "," + std::to_string(pad_b) + "," + std::to_string(pad_l) +
         "," + std::to_string(pad_r) +
         (kind == PoolKind::avg && !count_include_pad ? " exclude_pad" : "");
}

namespace {
// PyTorch's pooling output size; `hi` gets the bottom/right padding oneDNN needs for it.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode, int64_t& hi,
                 const char* op, const char* dim) {
  const int64_t span = in + 2 * pad - k;
  MIXPREC_CHECK(span >= 0, op, ": the kernel (", k, ") is larger than the padded input ", dim, " (",
                in, " + 2 * ", pad, ")");
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;  // the last window must start inside
  hi = std::max(pad, (out - 1) * s + k - in - pad);
  return out;
}
}  // namespace

PoolGeometry pool_geometry(PoolKind kind, const Shape& x, const Pool2dOptions& o, const char* op) {
  MIXPREC_CHECK(x.size() == 4, op, ": expected input [N, C, H, W], got shape ", shape_str(x));
  PoolGeometry g;
  g.kind = kind;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.kh = o.kernel[0], g.kw = o.kernel[1];
  g.stride_h = o.stride[0] == 0 ? g.kh : o.stride[0];
  g.stride_w = o.stride[1] == 0 ? g.kw : o.stride[1];
  g.pad_t = o.padding[0], g.pad_l = o.padding[1];
  g.count_include_pad = o.count_include_pad;
  MIXPREC_CHECK(g.kh >= 1 && g.kw >= 1 && g.stride_h >= 1 && g.stride_w >= 1, op,
                ": expected kernel >= 1 and stride >= 0 (0: the kernel), got kernel {", g.kh, ", ",
                g.kw, "} stride {", o.stride[0], ", ", o.stride[1], "}");
  MIXPREC_CHECK(g.pad_t >= 0 && g.pad_l >= 0 && 2 * g.pad_t <= g.kh && 2 * g.pad_l <= g.kw, op,
                ": expected padding between 0 and half the kernel, got padding {", g.pad_t, ", ",
                g.pad_l, "} for kernel {", g.kh, ", ", g.kw, "}");
  g.oh = pool_out(g.h, g.kh, g.stride_h, g.pad_t, o.ceil_mode, g.pad_b, op, "height");
  g.ow = pool_out(g.w, g.kw, g.stride_w, g.pad_l, o.ceil_mode, g.pad_r, op, "width");
  return g;
}

PoolGeometry adaptive_geometry(const Shape& x, int64_t oh, int64_t ow) {
  MIXPREC_CHECK(x.size() == 4, "adaptive_avg_pool2d: expected input [N, C, H, W], got shape ",
                shape_str(x));
  MIXPREC_CHECK(oh >= 1 && ow >= 1, "adaptive_avg_pool2d: expected an output size >= 1, got {", oh,
                ", ", ow, "}");
  MIXPREC_CHECK(x[2] >= 1 && x[3] >= 1, "adaptive_avg_pool2d: empty input ", shape_str(x));
  if (x[2] % oh == 0 && x[3] % ow == 0) {  // uniform bins: plain average pooling
    const int64_t kh = x[2] / oh, kw = x[3] / ow;
    return pool_geometry(PoolKind::avg, x, {.kernel = {kh, kw}, .stride = {kh, kw}},
                         "adaptive_avg_pool2d");
  }
  PoolGeometry g;
  g.kind = PoolKind::avg;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.oh = oh, g.ow = ow;
  g.adaptive = true;
  return g;
}

std::string PoolFwdProblem::describe() const {
  return desc(x) + (g.layout == ImageLayout::nhwc ? " nhwc " : " ") + g.str();
}
std::string PoolBwdProblem::describe() const {
  return "dy " + desc(dy) + (g.layout == ImageLayout::nhwc ? " nhwc " : " ") + g.str();
}

namespace {

// The three ops differ only in their geometry.
Tensor pool_op(OpId id, const Tensor& x0,
               const std::function<PoolGeometry(const Shape&)>& geometry) {
  Prepared pr = autocast_inputs(id, {x0});
  const Tensor& x = pr.in[0];
  check_floating(op_name(id), x, "input");
  PoolGeometry g = geometry(x.shape());
  g.layout = layout_of(x);
  const DType dt = x.dtype();
  const bool grad = autograd::needs_grad({&x});
  Tensor workspace;
  PoolFwdProblem p{to_image(x, g.layout), empty_image(g.out_shape(), dt, g.layout, x.device()),
                   grad ? &workspace : nullptr, g};
  dispatch(id, "forward", p);
  Tensor y = p.y;
  if (grad) {
    const SavedTensor sx(g.kind == PoolKind::max ? p.x : Tensor()), sws(workspace);
    record(id, {x}, y, [id, g, dt, sx, sws](const std::vector<Tensor>& grads) {
      const std::string_view name = op_name(id);
      const Tensor dy = to_image(grads[0], g.layout, dt);
      PoolBwdProblem b{dy, sx.unpack(name), sws.unpack(name),
                       empty_image(g.in_shape(), dt, g.layout, dy.device()), g};
      dispatch(id, "backward", b);
      return std::vector<Tensor>{b.dx};
    });
  }
  return finish(id, pr, y, dt);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return pool_op(OpId::max_pool2d, x,
                 [&](const Shape& s) { return pool_geometry(PoolKind::max, s, o, "max_pool2d"); });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return pool_op(OpId::avg_pool2d, x,
                 [&](const Shape& s) { return pool_geometry(PoolKind::avg, s, o, "avg_pool2d"); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return pool_op(OpId::adaptive_avg_pool2d, x, [&](const Shape& s) {
    return adaptive_geometry(s, output_size[0], output_size[1]);
  });
}

}  // namespace mixprec::ops
