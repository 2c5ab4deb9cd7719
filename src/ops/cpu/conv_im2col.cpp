// Convolution as im2col + GEMM, for convolutions with a small reduction (cin * kh * kw <= 64,
// one group): the first layers of image networks (1 input channel), where oneDNN 2.6 has no
// fast channels-last kernel. Forward: patches P [N*OH*OW, K] times W^T gives the channels-last
// output directly; backward-weights: dY^T P in f32; backward-data: dY W, scattered back with
// col2im (per image, in a fixed order: deterministic). The GEMMs go through dispatch (gemm_into,
// ops/matmul_problem.h). The patch matrix is built in column layout, P [N, K, OH*OW]: row (ci, i,
// j) of image n is a shifted copy of input channel ci (raw elements, no conversion; padding
// positions are zero), so building it is a series of row copies. Both output layouts are one
// batched GEMM over it: NCHW y_n = W P_n, channels-last y_n = P_n^T W^T.
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <cstring>

#include "mixprec/ops/ops.h"
#include "ops/layout.h"
#include "ops/matmul_problem.h"

namespace mixprec::ops::cpu {
using namespace detail;
namespace {

constexpr int64_t kMaxK = 64;

int64_t reduction(const ConvGeometry& g) { return g.cin_g() * g.kh * g.kw; }

std::string common_declines(const ConvGeometry& g, DType dt, const Tensor& image) {
  if (g.groups != 1) return "grouped convolution";
  if (reduction(g) > kMaxK)
    return "reduction cin*kh*kw = " + std::to_string(reduction(g)) + " > 64";
  if (!is_floating(dt) || dt == DType::f64) return "f64 (the reference handles it)";
  if (!has_layout(image, ImageLayout::nhwc) && !image.is_contiguous())
    return "neither channels-last nor contiguous";
  return "";
}

bool nchw(const Tensor& image) {
  return image.is_contiguous() && !has_layout(image, ImageLayout::nhwc);
}

template <class E> void im2col_columns(const Tensor& x, const ConvGeometry& g, Tensor& P) {
  const int64_t K = reduction(g), OHW = g.oh * g.ow;
  const E* xb = static_cast<const E*>(x.data_ptr());
  E* pb = static_cast<E*>(P.data_ptr());
  const Strides& st = x.strides();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t ci = k / (g.kh * g.kw), i = (k / g.kw) % g.kh, j = k % g.kw;
      E* row = pb + (n * K + k) * OHW;
      // Output columns ow whose input column iw = ow*s - pad + j*d lies inside [0, w).
      const int64_t off = j * g.dil_w - g.pad_l;
      int64_t lo = 0, hi = g.ow;
      while (lo < g.ow && lo * g.stride_w + off < 0) ++lo;
      while (hi > lo && (hi - 1) * g.stride_w + off >= g.w) --hi;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
        E* out = row + oh * g.ow;
        if (ih < 0 || ih >= g.h) {
          std::fill(out, out + g.ow, E{});
          continue;
        }
        const E* src = xb + n * st[0] + ci * st[1] + ih * st[2] + off * st[3];
        std::fill(out, out + lo, E{});
        const int64_t step = g.stride_w * st[3];
        if (step == 1)
          std::memcpy(out + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(E));
        else
          for (int64_t ow = lo; ow < hi; ++ow) out[ow] = src[ow * step];
        std::fill(out + hi, out + g.ow, E{});
      }
    }
}

Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  Tensor P =
      Tensor::empty({g.n, reduction(g), g.oh * g.ow}, {.dtype = x.dtype(), .device = x.device()});
  if (x.itemsize() == 2)
    im2col_columns<uint16_t>(x, g, P);
  else
    im2col_columns<uint32_t>(x, g, P);
  return P;
}

// An image tensor as [N, C, OH*OW] (NCHW) or its channels-last memory as [N, OH*OW, C].
Tensor as_nc_hw(const Tensor& t) {
  const int64_t n = t.shape()[0], c = t.shape()[1], hw = t.shape()[2] * t.shape()[3];
  return Tensor::from_storage(t.storage(), {n, c, hw}, {c * hw, hw, 1}, t.offset(), t.dtype());
}
Tensor as_n_hw_c(const Tensor& t) {
  const int64_t n = t.shape()[0], c = t.shape()[1], hw = t.shape()[2] * t.shape()[3];
  return Tensor::from_storage(t.storage(), {n, hw, c}, {c * hw, c, 1}, t.offset(), t.dtype());
}

// y = relu?(acc + bias) rounded once: acc is the f32 GEMM result [N, C, HW], y NCHW.
void bias_relu_nchw(const Tensor& acc, const Tensor& b, bool relu, const Tensor& y) {
  const int64_t N = y.shape()[0], C = y.shape()[1], HW = y.shape()[2] * y.shape()[3];
  const Tensor bias = b.defined() ? amp_cast(b, DType::f32).contiguous() : Tensor();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  const float* ap = acc.data<float>();
  visit_float(y.dtype(), [&]<class T>() {
    T* yp = static_cast<T*>(y.data_ptr());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const float* in = ap + (n * C + c) * HW;
        T* row = yp + (n * C + c) * HW;
        const float add = bp ? bp[c] : 0.0f;
        for (int64_t i = 0; i < HW; ++i) {
          float v = in[i] + add;
          if (relu && v <= 0) v = 0;  // NaN propagates, as ops::relu
          row[i] = store<T>(v);
        }
      }
  });
}

}  // namespace

std::string conv_im2col_fwd_declines(const ConvFwdProblem& p) {
  return common_declines(p.g, p.x.dtype(), p.y);
}

void conv_im2col_fwd(const ConvFwdProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g);
  const Tensor w2 = p.w.contiguous().reshape({1, g.cout, K});
  const Tensor P = im2col(p.x, g);  // [N, K, OHW]
  if (!nchw(p.y)) {  // channels-last: y_n [OHW, Cout] = P_n^T W^T, bias and relu as post-ops
    gemm_into(OpId::conv2d, "forward(im2col)", P.transpose(1, 2), w2.transpose(1, 2), p.b, p.relu,
              as_n_hw_c(p.y));
    return;
  }
  if (!p.b.defined()) {  // NCHW: y_n [Cout, OHW] = W P_n, relu (if any) as a post-op
    gemm_into(OpId::conv2d, "forward(im2col)", w2, P, {}, p.relu, as_nc_hw(p.y));
    return;
  }
  // NCHW with a (per-row) bias: accumulate in f32, add bias and relu, round once.
  Tensor acc =
      Tensor::empty({g.n, g.cout, g.oh * g.ow}, {.dtype = DType::f32, .device = p.y.device()});
  gemm_into(OpId::conv2d, "forward(im2col)", w2, P, {}, false, acc);
  bias_relu_nchw(acc, p.b, p.relu, p.y);
}

std::string conv_im2col_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (!p.dw.defined()) return "no weight gradient needed";
  return common_declines(p.g, p.x.dtype(), p.dy);
}

// dW = sum_n dY_n P_n^T: per-image GEMMs into f32, summed in image order (deterministic).
void conv_im2col_bwd_weights(const ConvBwdWeightsProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g);
  const Tensor P = im2col(p.x, g);  // [N, K, OHW]
  const Tensor dy3 =
      nchw(p.dy) ? as_nc_hw(p.dy) : as_n_hw_c(p.dy).transpose(1, 2);  // [N, Cout, OHW]
  Tensor parts = Tensor::empty({g.n, g.cout, K}, {.dtype = DType::f32, .device = p.dy.device()});
  gemm_into(OpId::conv2d, "backward_weights(im2col)", dy3, P.transpose(1, 2), {}, false, parts);
  Tensor dw = p.dw.detach();
  dw.copy_(ops::sum(parts, {0}).reshape(dw.shape()));
  if (p.db.defined()) {  // accumulated in f32 (a bf16 sum would round the bias gradient)
    Tensor db = p.db.detach();
    if (nchw(p.dy)) {
      db.copy_(ops::sum(amp_cast(dy3, DType::f32), {0, 2}));
    } else {
      const int64_t c = g.cout;
      sum_rows(Tensor::from_storage(p.dy.storage(), {p.dy.numel() / c, c}, {c, 1}, p.dy.offset(),
                                    p.dy.dtype()),
               db);
    }
  }
}

std::string conv_im2col_bwd_data_declines(const ConvBwdDataProblem& p) {
  if (const std::string r = common_declines(p.g, p.dy.dtype(), p.dy); !r.empty()) return r;
  if (!has_layout(p.dx, ImageLayout::nhwc) && !p.dx.is_contiguous())
    return "dx neither channels-last nor contiguous";
  return "";
}

// dP_n = W^T dY_n, then col2im: each image accumulates its own columns in f32, in a fixed order.
void conv_im2col_bwd_data(const ConvBwdDataProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g), OHW = g.oh * g.ow;
  const Tensor dy3 =
      nchw(p.dy) ? as_nc_hw(p.dy) : as_n_hw_c(p.dy).transpose(1, 2);           // [N, Cout, OHW]
  const Tensor wt = p.w.contiguous().reshape({1, g.cout, K}).transpose(1, 2);  // [1, K, Cout]
  Tensor dP = Tensor::empty({g.n, K, OHW}, {.dtype = DType::f32, .device = p.dy.device()});
  gemm_into(OpId::conv2d, "backward_data(im2col)", wt, dy3, {}, false, dP);
  Tensor acc = zeros({g.n, g.cin, g.h, g.w});
  const float* dp = dP.data<float>();
  float* ab = acc.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t ci = k / (g.kh * g.kw), i = (k / g.kw) % g.kh, j = k % g.kw;
      const float* row = dp + (n * K + k) * OHW;
      float* img = ab + (n * g.cin + ci) * g.h * g.w;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
          if (iw >= 0 && iw < g.w) img[ih * g.w + iw] += row[oh * g.ow + ow];
        }
      }
    }
  Tensor dx = p.dx.detach();
  dx.copy_(acc);  // rounds once, into dx's dtype and layout
}

}  // namespace mixprec::ops::cpu
