// ops::conv2d, forward and backward side by side: option checks and padding (conv_problem.h),
// the output layout (channels-last in, channels-last out), kernel dispatch, and the backward:
// the fused ReLU's mask first, then backward-data for x and backward-weights for w and b
// (gradients in acc_dtype, so bf16 and f16 convolutions give f32 weight and bias gradients).
#include "ops/conv_problem.h"
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/layout_choice.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

std::string ConvGeometry::str() const {
  return "k" + std::to_string(kh) + "x" + std::to_string(kw) + " s" + std::to_string(stride_h) +
         "x" + std::to_string(stride_w) + " d" + std::to_string(dil_h) + "x" +
         std::to_string(dil_w) + " p" + std::to_string(pad_t) + "," + std::to_string(pad_b) + "," +
         std::to_string(pad_l) + "," + std::to_string(pad_r) + " g" + std::to_string(groups);
}

namespace {
// Output size and (for PadMode::same) the total padding of one spatial dim.
void resolve_dim(int64_t in, int64_t k, int64_t stride, int64_t dil, PadMode mode, int64_t& lo,
                 int64_t& hi, int64_t& out, const char* dim) {
  const int64_t span = (k - 1) * dil + 1;
  if (mode == PadMode::same) {
    out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
    lo = total / 2;  // the extra row/column goes to the bottom/right (MindSpore, TensorFlow)
    hi = total - lo;
    return;
  }
  if (mode == PadMode::valid) lo = hi = 0;
  MIXPREC_CHECK(in + lo + hi >= span, "conv2d: the ", dim, " of the padded input (", in, " + ", lo,
                " + ", hi, ") is smaller than the dilated kernel (", span, ")");
  out = (in + lo + hi - span) / stride + 1;
}
}  // namespace

ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Conv2dOptions& o) {
  MIXPREC_CHECK(x.size() == 4, "conv2d: expected input [N, C, H, W], got shape ", shape_str(x));
  MIXPREC_CHECK(w.size() == 4, "conv2d: expected weight [Cout, Cin/groups, kh, kw], got shape ",
                shape_str(w));
  ConvGeometry g;
  g.n = x[0], g.cin = x[1], g.h = x[2], g.w = x[3];
  g.cout = w[0], g.kh = w[2], g.kw = w[3];
  g.groups = o.groups;
  MIXPREC_CHECK(g.groups >= 1 && g.cin % g.groups == 0 && g.cout % g.groups == 0,
                "conv2d: expected groups dividing Cin = ", g.cin, " and Cout = ", g.cout, ", got ",
                g.groups);
  MIXPREC_CHECK(w[1] * g.groups == g.cin, "conv2d: expected weight [", g.cout, ", ",
                g.cin / g.groups, ", kh, kw] for input ", shape_str(x), " and groups ", g.groups,
                ", got ", shape_str(w));
  MIXPREC_CHECK(g.kh >= 1 && g.kw >= 1 && g.n >= 1 && g.cout >= 1, "conv2d: empty input ",
                shape_str(x), " or weight ", shape_str(w));
  g.stride_h = o.stride[0], g.stride_w = o.stride[1];
  g.dil_h = o.dilation[0], g.dil_w = o.dilation[1];
  MIXPREC_CHECK(g.stride_h >= 1 && g.stride_w >= 1 && g.dil_h >= 1 && g.dil_w >= 1,
                "conv2d: expected stride and dilation >= 1, got stride {", g.stride_h, ", ",
                g.stride_w, "} dilation {", g.dil_h, ", ", g.dil_w, "}");
  const auto& pd = o.padding;
  if (o.pad_mode == PadMode::pad) {
    MIXPREC_CHECK(pd[0] >= 0 && pd[1] >= 0 && pd[2] >= 0 && pd[3] >= 0,
                  "conv2d: expected non-negative padding, got {", pd[0], ", ", pd[1], ", ", pd[2],
                  ", ", pd[3], "}");
    g.pad_t = pd[0], g.pad_b = pd[1], g.pad_l = pd[2], g.pad_r = pd[3];
  } else {
    MIXPREC_CHECK(pd[0] == 0 && pd[1] == 0 && pd[2] == 0 && pd[3] == 0, "conv2d: padding {", pd[0],
                  ", ", pd[1], ", ", pd[2], ", ", pd[3], "} is only used with PadMode::pad",
                  Hint{"set .pad_mode = PadMode::pad, or leave padding at zero"});
  }
  resolve_dim(g.h, g.kh, g.stride_h, g.dil_h, o.pad_mode, g.pad_t, g.pad_b, g.oh, "height");
  resolve_dim(g.w, g.kw, g.stride_w, g.dil_w, o.pad_mode, g.pad_l, g.pad_r, g.ow, "width");
  return g;
}

std::string ConvFwdProblem::describe() const {
  return desc(x) + (is_channels_last(y) ? " nhwc" : "") + " * " + desc(w) +
         (b.defined() ? " + bias" : "") + " " + g.str() + (relu ? " relu" : "");
}
std::string ConvBwdDataProblem::describe() const {
  return "dy " + desc(dy) + (is_channels_last(dx) ? " nhwc" : "") + " w " + desc(w) + " " + g.str();
}
std::string ConvBwdWeightsProblem::describe() const {
  return "x " + desc(x) + (is_channels_last(x) ? " nhwc" : "") + " dy " + desc(dy) + " -> " +
         (dw.defined() ? "dw " + desc(dw) : std::string("no dw")) + (db.defined() ? " db" : "") +
         " " + g.str();
}

namespace {

// The fused ReLU's backward, in y's layout (dy is brought to it first).
Tensor relu_mask(const Tensor& g, const Tensor& y, ImageLayout layout) {
  return relu_backward(to_image(g, layout, y.dtype()), y);
}

struct ConvSaved {
  ConvGeometry g;
  ImageLayout layout;
  DType dtype;
  bool relu, gx, gw, gb;
  SavedTensor x, w, y;  // x if gw, w if gx, y if relu
};

std::vector<Tensor> conv2d_backward(const Tensor& grad, const ConvSaved& s) {
  const std::string_view op = "conv2d";
  // A reorder (copy) only when the incoming gradient's layout differs from the output's, e.g.
  // an elementwise op downstream produced it NCHW for a channels-last output.
  Tensor dy = to_image(grad, s.layout, s.dtype);
  if (s.relu) dy = relu_mask(dy, s.y.unpack(op), s.layout);
  std::vector<Tensor> out(3);
  if (s.gx) {
    ConvBwdDataProblem p{
        dy, s.w.unpack(op),
        empty_image({s.g.n, s.g.cin, s.g.h, s.g.w}, s.dtype, s.layout, dy.device()), s.g};
    dispatch(OpId::conv2d, "backward_data", p);
    out[0] = p.dx;
  }
  if (s.gw || s.gb) {
    const TensorOptions acc{.dtype = acc_dtype(s.dtype), .device = dy.device()};
    ConvBwdWeightsProblem p{
        s.gw ? s.x.unpack(op) : Tensor(), dy,
        s.gw ? Tensor::empty({s.g.cout, s.g.cin_g(), s.g.kh, s.g.kw}, acc) : Tensor(),
        s.gb ? Tensor::empty({s.g.cout}, acc) : Tensor(), s.g};
    if (!p.x.defined()) p.x = dy;  // bias only: the kernels read x's dtype; its data is unused
    dispatch(OpId::conv2d, "backward_weights", p);
    out[1] = p.dw;
    out[2] = p.db;
  }
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dOptions& o) {
  Prepared pr = autocast_inputs(OpId::conv2d, {x0, w0, b0});
  Tensor x = pr.in[0], w = pr.in[1], b = pr.in[2];
  check_floating("conv2d", x, "input");
  check_floating("conv2d", w, "weight");
  if (b.defined()) check_floating("conv2d", b, "bias");
  check_same_device("conv2d", {&x, &w, &b});
  // One compute dtype for all operands (autocast has usually made them equal already).
  DType dt = promote(x.dtype(), w.dtype());
  if (b.defined()) dt = promote(dt, b.dtype());
  x = amp_cast(x, dt);
  w = amp_cast(w, dt);
  if (b.defined()) b = amp_cast(b, dt);
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), o);
  MIXPREC_CHECK(!b.defined() || b.shape() == Shape{g.cout}, "conv2d: expected bias [", g.cout,
                "], got shape ", shape_str(b.shape()));
  MIXPREC_CHECK(o.activation == Activation::none || o.activation == Activation::relu,
                "conv2d: unsupported fused activation");
  // Channels-last by default: the layout oneDNN's fast CPU kernels (and ours) take without
  // reorders, which the ops downstream keep. Contiguous on request, or where the library has
  // seen a Flatten transpose this convolution's output (ops/layout_choice.h).
  uint32_t site = 0;
  const ImageLayout layout = conv_output_layout(o.output_format, x, w, g, &site);
  ConvFwdProblem p{to_image(x, layout),
                   to_image(w, ImageLayout::nchw),
                   b.defined() ? b.detach().contiguous() : Tensor(),
                   empty_image(g.out_shape(), dt, layout, x.device()),
                   g,
                   o.activation == Activation::relu};
  dispatch(OpId::conv2d, "forward", p);
  Tensor y = p.y;
  mark_layout_site(y, site);
  if (autograd::needs_grad({&x, &w, &b})) {
    auto s = std::make_shared<ConvSaved>();
    *s = ConvSaved{g,
                   layout,
                   dt,
                   p.relu,
                   x.requires_grad(),
                   w.requires_grad(),
                   b.defined() && b.requires_grad(),
                   SavedTensor(),
                   SavedTensor(),
                   SavedTensor()};
    if (s->gw) s->x = SavedTensor(p.x);
    if (s->gx) s->w = SavedTensor(p.w);
    if (s->relu) s->y = SavedTensor(y);
    record(OpId::conv2d, {x, w, b}, y,
           [s](const std::vector<Tensor>& grads) { return conv2d_backward(grads[0], *s); });
  }
  const int64_t flops =
      2 * shape_numel(y.shape()) * (w.numel() / g.cout);  // 2 * outputs * (cin/groups * kh * kw)
  return finish(OpId::conv2d, pr, y, dt, flops);
}

}  // namespace mixprec::ops
