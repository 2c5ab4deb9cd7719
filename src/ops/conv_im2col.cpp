// im2col convolution (see conv_im2col.h). Patch rows are built in parallel over output pixels
// by copying raw elements (no conversion: P has x's dtype); padding positions are zero.
#include "conv_im2col.h"

#include <cstring>

#include "gemm.h"
#include "image_layout.h"
#include "mixprec/ops/ops.h"
#include "ref/matmul.h"

namespace mixprec::ops::detail {
namespace {

constexpr int64_t kMaxK = 64;

int64_t reduction(const ConvGeometry& g) { return g.cin_g() * g.kh * g.kw; }

std::string common_declines(const ConvGeometry& g, DType dt, const Tensor& image) {
  if (g.groups != 1) return "grouped convolution";
  if (reduction(g) > kMaxK) return "reduction cin*kh*kw = " + std::to_string(reduction(g)) + " > 64";
  if (!is_floating(dt) || dt == DType::f64) return "f64 (the reference handles it)";
  if (!has_layout(image, ImageLayout::nhwc) && !image.is_contiguous()) return "neither channels-last nor contiguous";
  return "";
}

bool nchw(const Tensor& image) { return image.is_contiguous() && !has_layout(image, ImageLayout::nhwc); }

// Column layout for NCHW outputs: P [N, K, OH*OW], row (ci, i, j) of image n holds the input
// pixels that tap (i, j) of channel ci sees, in output-pixel order (a shifted copy of x).
template <class E>
void im2col_columns(const Tensor& x, const ConvGeometry& g, Tensor& P) {
  const int64_t K = reduction(g), OHW = g.oh * g.ow;
  const E* xb = static_cast<const E*>(x.data_ptr());
  E* pb = static_cast<E*>(P.data_ptr());
  const Strides& st = x.strides();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t ci = k / (g.kh * g.kw), i = (k / g.kw) % g.kh, j = k % g.kw;
      E* row = pb + (n * K + k) * OHW;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
        E* out = row + oh * g.ow;
        if (ih < 0 || ih >= g.h) {
          std::memset(out, 0, static_cast<size_t>(g.ow) * sizeof(E));
          continue;
        }
        const E* src = xb + n * st[0] + ci * st[1] + ih * st[2];
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
          out[ow] = iw < 0 || iw >= g.w ? E{} : src[iw * st[3]];
        }
      }
    }
}

Tensor im2col_nchw(const Tensor& x, const ConvGeometry& g) {
  Tensor P = Tensor::empty({g.n, reduction(g), g.oh * g.ow}, {.dtype = x.dtype(), .device = x.device()});
  if (x.itemsize() == 2) im2col_columns<uint16_t>(x, g, P);
  else im2col_columns<uint32_t>(x, g, P);
  return P;
}

// y = relu?(acc + bias) rounded once: acc is the f32 GEMM result, y the NCHW output.
void bias_relu_nchw(const Tensor& acc, const Tensor& b, bool relu, const Tensor& y) {
  const int64_t N = y.shape()[0], C = y.shape()[1], HW = y.shape()[2] * y.shape()[3];
  const Tensor bias = b.defined() ? b.astype(DType::f32).contiguous() : Tensor();
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

// P [M, K]: row (n, oh, ow), column (ci, i, j).
Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  const int64_t M = g.n * g.oh * g.ow, K = reduction(g);
  Tensor P = Tensor::empty({M, K}, {.dtype = x.dtype(), .device = x.device()});
  const auto es = static_cast<int64_t>(x.itemsize());
  const char* xb = static_cast<const char*>(x.data_ptr());
  char* pb = static_cast<char*>(P.data_ptr());
  const Strides& st = x.strides();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const int64_t n = m / (g.oh * g.ow), r = m % (g.oh * g.ow), oh = r / g.ow, ow = r % g.ow;
    char* row = pb + m * K * es;
    int64_t k = 0;
    for (int64_t ci = 0; ci < g.cin; ++ci)
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
        for (int64_t j = 0; j < g.kw; ++j, ++k) {
          const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
          char* dst = row + k * es;
          if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) std::memset(dst, 0, static_cast<size_t>(es));
          else std::memcpy(dst, xb + (n * st[0] + ci * st[1] + ih * st[2] + iw * st[3]) * es, static_cast<size_t>(es));
        }
      }
  }
  return P;
}

// A channels-last [N, C, H, W] tensor seen as the row-major matrix [N*H*W, C].
Tensor as_rows(const Tensor& t) {
  const int64_t c = t.shape()[1];
  return Tensor::from_storage(t.storage(), {t.numel() / c, c}, {c, 1}, t.offset(), t.dtype());
}

}  // namespace

std::string im2col_fwd_declines(const ConvFwdProblem& p) { return common_declines(p.g, p.x.dtype(), p.y); }

void im2col_fwd(const ConvFwdProblem& p) {
  const ConvGeometry& g = p.g;
  const Tensor w2 = p.w.contiguous().reshape({g.cout, reduction(g)});
  if (nchw(p.y)) {  // y_n = W P_n: one batched GEMM, then bias and relu in one pass
    const Tensor P = im2col_nchw(p.x, g);
    const Tensor w3 = w2.reshape({1, g.cout, reduction(g)});
    if (!p.b.defined()) {  // relu (if any) fused into the GEMM as a post-op
      const Tensor y3 = Tensor::from_storage(p.y.storage(), {g.n, g.cout, g.oh * g.ow},
                                             {g.cout * g.oh * g.ow, g.oh * g.ow, 1}, p.y.offset(), p.y.dtype());
      gemm_into(OpId::conv2d, "forward(im2col)", w3, P, {}, p.relu, y3);
      return;
    }
    // Bias and relu after the GEMM: accumulate in f32 so the output is rounded once.
    Tensor acc = Tensor::empty({g.n, g.cout, g.oh * g.ow}, {.dtype = DType::f32, .device = p.y.device()});
    gemm_into(OpId::conv2d, "forward(im2col)", w3, P, {}, false, acc);
    bias_relu_nchw(acc, p.b, p.relu, p.y);
    return;
  }
  const Tensor P = im2col(p.x, g);
  gemm_into(OpId::conv2d, "forward(im2col)", P, w2.transpose(0, 1), p.b, p.relu, as_rows(p.y));
}

std::string im2col_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (!p.dw.defined()) return "no weight gradient needed";
  return common_declines(p.g, p.x.dtype(), p.dy);
}

void im2col_bwd_weights(const ConvBwdWeightsProblem& p) {
  const ConvGeometry& g = p.g;
  if (nchw(p.dy)) {  // dW = sum_n dY_n P_n^T: per-image GEMMs in f32, summed in image order
    const int64_t K = reduction(g), OHW = g.oh * g.ow;
    const Tensor P = im2col_nchw(p.x, g);
    const Tensor dy3 = p.dy.reshape({g.n, g.cout, OHW});
    Tensor parts = Tensor::empty({g.n, g.cout, K}, {.dtype = DType::f32, .device = p.dy.device()});
    gemm_into(OpId::conv2d, "backward_weights(im2col)", dy3, P.transpose(1, 2), {}, false, parts);
    Tensor dw = p.dw.detach();
    dw.copy_(ops::sum(parts, {0}).reshape(dw.shape()));
    if (p.db.defined()) {
      Tensor db = p.db.detach();
      db.copy_(ops::sum(dy3.astype(DType::f32), {0, 2}));
    }
    return;
  }
  const Tensor dy = as_rows(p.dy);  // [M, Cout]
  const Tensor P = im2col(p.x, g);  // [M, K]
  Tensor dw2 = Tensor::from_storage(p.dw.storage(), {g.cout, reduction(g)}, {reduction(g), 1}, p.dw.offset(),
                                    p.dw.dtype());
  gemm_into(OpId::conv2d, "backward_weights(im2col)", dy.transpose(0, 1), P, {}, false, dw2);
  if (p.db.defined()) {
    Tensor db = p.db;
    sum_rows(dy, db);
  }
}

std::string im2col_bwd_data_declines(const ConvBwdDataProblem& p) {
  if (const std::string r = common_declines(p.g, p.dy.dtype(), p.dy); !r.empty()) return r;
  if (!has_layout(p.dx, ImageLayout::nhwc)) return "dx not channels-last";
  return "";
}

void im2col_bwd_data(const ConvBwdDataProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g);
  if (nchw(p.dy)) {  // dP_n = W^T dY_n, then col2im per image (column layout)
    const int64_t OHW = g.oh * g.ow;
    Tensor dP = Tensor::empty({g.n, K, OHW}, {.dtype = DType::f32, .device = p.dy.device()});
    const Tensor wt = p.w.contiguous().reshape({1, g.cout, K}).transpose(1, 2);
    gemm_into(OpId::conv2d, "backward_data(im2col)", wt, p.dy.reshape({g.n, g.cout, OHW}), {}, false, dP);
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
    dx.copy_(acc);
    return;
  }
  Tensor dP = Tensor::empty({g.n * g.oh * g.ow, K}, {.dtype = DType::f32, .device = p.dy.device()});
  gemm_into(OpId::conv2d, "backward_data(im2col)", as_rows(p.dy), p.w.contiguous().reshape({g.cout, K}), {}, false, dP);
  // col2im: each image accumulates its own patches in f32, in a fixed order.
  Tensor acc = zeros({g.n, g.h, g.w, g.cin});  // channels-last f32
  const float* dp = dP.data<float>();
  float* ab = acc.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const float* row = dp + ((n * g.oh + oh) * g.ow + ow) * K;
        int64_t k = 0;
        for (int64_t ci = 0; ci < g.cin; ++ci)
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
            for (int64_t j = 0; j < g.kw; ++j, ++k) {
              const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
              if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ab[((n * g.h + ih) * g.w + iw) * g.cin + ci] += row[k];
            }
          }
      }
  // Round once into dx (channels-last, dx's dtype).
  Tensor dx = as_rows(p.dx);
  dx.detach().copy_(acc.reshape({g.n * g.h * g.w, g.cin}));
}

}  // namespace mixprec::ops::detail
