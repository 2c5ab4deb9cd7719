// Direct small convolution (see conv_direct.h).
#include "conv_direct.h"

#include <algorithm>
#include <vector>

#include "image_layout.h"
#include "mixprec/convert.h"

namespace mixprec::ops::detail {
namespace {

constexpr int64_t kMaxK = 64;

int64_t reduction(const ConvGeometry& g) { return g.cin * g.kh * g.kw; }

std::string declines(const ConvGeometry& g, DType dt, const Tensor& image) {
  if (g.groups != 1) return "grouped convolution";
  if (reduction(g) > kMaxK) return "reduction cin*kh*kw = " + std::to_string(reduction(g)) + " > 64";
  if (dt == DType::f64) return "f64 (the reference handles it)";
  if (!has_layout(image, ImageLayout::nhwc) && !image.is_contiguous()) return "neither channels-last nor contiguous";
  return "";
}

bool channels_last(const Tensor& t) { return has_layout(t, ImageLayout::nhwc) && !(t.is_contiguous() && t.shape()[1] > 1); }

// The input rows of image n that the taps of output row oh read, widened to f32:
// rows[(ci * kh + i) * W + iw]; `valid[ci*kh+i]` is false for rows in the padding.
void load_rows(const Tensor& x, const ConvGeometry& g, int64_t n, int64_t oh, std::vector<float>& rows,
               std::vector<char>& valid) {
  const Strides& st = x.strides();
  visit_float(x.dtype(), [&]<class T>() {
    const T* xb = static_cast<const T*>(x.data_ptr());
    for (int64_t ci = 0; ci < g.cin; ++ci)
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = oh * g.stride_h - g.pad_t + i * g.dil_h;
        const size_t r = static_cast<size_t>(ci * g.kh + i);
        valid[r] = ih >= 0 && ih < g.h;
        if (!valid[r]) continue;
        const T* src = xb + n * st[0] + ci * st[1] + ih * st[2];
        float* dst = rows.data() + r * static_cast<size_t>(g.w);
        for (int64_t iw = 0; iw < g.w; ++iw) dst[iw] = static_cast<float>(load(src[iw * st[3]]));
      }
  });
}

}  // namespace

std::string direct_fwd_declines(const ConvFwdProblem& p) { return declines(p.g, p.x.dtype(), p.y); }

void direct_fwd(const ConvFwdProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g), C = g.cout, OW = g.ow;
  const bool cl = channels_last(p.y);
  // Weights as f32: wt[k][co] (channels-last: vector over co) and w[co][k] (NCHW: vector over ow).
  const Tensor w32 = p.w.astype(DType::f32).contiguous();
  const float* wp = w32.data<float>();
  std::vector<float> wt(static_cast<size_t>(K * C));
  for (int64_t co = 0; co < C; ++co)
    for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * C + co)] = wp[co * K + k];
  std::vector<float> bias(static_cast<size_t>(C), 0.0f);
  if (p.b.defined()) {
    const Tensor b32 = p.b.astype(DType::f32).contiguous();
    std::copy(b32.data<float>(), b32.data<float>() + C, bias.begin());
  }
  char* yb = static_cast<char*>(p.y.data_ptr());
  const int64_t es = static_cast<int64_t>(p.y.itemsize());
  const DType dt = p.y.dtype();
  const Strides& ys = p.y.strides();
#pragma omp parallel
  {
    std::vector<float> rows(static_cast<size_t>(g.cin * g.kh * g.w)), acc(static_cast<size_t>(OW * C));
    std::vector<char> valid(static_cast<size_t>(g.cin * g.kh));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        load_rows(p.x, g, n, oh, rows, valid);
        float* a = acc.data();
        if (cl) {  // acc[ow][co]
          for (int64_t ow = 0; ow < OW; ++ow) std::copy(bias.begin(), bias.end(), a + ow * C);
          for (int64_t ci = 0; ci < g.cin; ++ci)
            for (int64_t i = 0; i < g.kh; ++i) {
              if (!valid[static_cast<size_t>(ci * g.kh + i)]) continue;
              const float* row = rows.data() + (ci * g.kh + i) * g.w;
              for (int64_t j = 0; j < g.kw; ++j) {
                const float* w = wt.data() + ((ci * g.kh + i) * g.kw + j) * C;
                for (int64_t ow = 0; ow < OW; ++ow) {
                  const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
                  if (iw < 0 || iw >= g.w) continue;
                  const float xv = row[iw];
                  float* ao = a + ow * C;
#pragma omp simd
                  for (int64_t co = 0; co < C; ++co) ao[co] += xv * w[co];
                }
              }
            }
          if (p.relu)
            for (int64_t e = 0; e < OW * C; ++e) a[e] = a[e] <= 0 ? 0.0f : a[e];
          convert_row(a, DType::f32, yb + (n * ys[0] + oh * ys[2]) * es, dt, OW * C);
        } else {  // acc[co][ow]
          for (int64_t co = 0; co < C; ++co) std::fill(a + co * OW, a + (co + 1) * OW, bias[static_cast<size_t>(co)]);
          for (int64_t ci = 0; ci < g.cin; ++ci)
            for (int64_t i = 0; i < g.kh; ++i) {
              if (!valid[static_cast<size_t>(ci * g.kh + i)]) continue;
              const float* row = rows.data() + (ci * g.kh + i) * g.w;
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t k = (ci * g.kh + i) * g.kw + j;
                int64_t lo = 0, hi = OW;  // columns whose tap is inside the image
                while (lo < OW && lo * g.stride_w - g.pad_l + j * g.dil_w < 0) ++lo;
                while (hi > lo && (hi - 1) * g.stride_w - g.pad_l + j * g.dil_w >= g.w) --hi;
                const float* src = row - g.pad_l + j * g.dil_w;
                for (int64_t co = 0; co < C; ++co) {
                  const float wv = wp[co * K + k];
                  float* ao = a + co * OW;
#pragma omp simd
                  for (int64_t ow = lo; ow < hi; ++ow) ao[ow] += wv * src[ow * g.stride_w];
                }
              }
            }
          for (int64_t co = 0; co < C; ++co) {
            float* ao = a + co * OW;
            if (p.relu)
              for (int64_t ow = 0; ow < OW; ++ow) ao[ow] = ao[ow] <= 0 ? 0.0f : ao[ow];
            convert_row(ao, DType::f32, yb + (n * ys[0] + co * ys[1] + oh * ys[2]) * es, dt, OW);
          }
        }
      }
  }
}

std::string direct_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (!p.dw.defined()) return "no weight gradient needed";
  return declines(p.g, p.x.dtype(), p.dy);
}

void direct_bwd_weights(const ConvBwdWeightsProblem& p) {
  const ConvGeometry& g = p.g;
  const int64_t K = reduction(g), C = g.cout, OW = g.ow;
  const bool cl = channels_last(p.dy);
  // Per image: part[n][k][co] and bias part[n][co], in f32; summed over images in order below.
  std::vector<float> part(static_cast<size_t>(g.n * K * C), 0.0f), bpart(static_cast<size_t>(g.n * C), 0.0f);
  const char* db = static_cast<const char*>(p.dy.data_ptr());
  const int64_t es = static_cast<int64_t>(p.dy.itemsize());
  const Strides& ds = p.dy.strides();
  const DType dt = p.dy.dtype();
#pragma omp parallel
  {
    std::vector<float> rows(static_cast<size_t>(g.cin * g.kh * g.w)), dyr(static_cast<size_t>(OW * C));
    std::vector<char> valid(static_cast<size_t>(g.cin * g.kh));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      float* pn = part.data() + n * K * C;
      float* bn = bpart.data() + n * C;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        load_rows(p.x, g, n, oh, rows, valid);
        if (cl) {
          convert_row(db + (n * ds[0] + oh * ds[2]) * es, dt, dyr.data(), DType::f32, OW * C);  // [ow][co]
        } else {
          for (int64_t co = 0; co < C; ++co)
            convert_row(db + (n * ds[0] + co * ds[1] + oh * ds[2]) * es, dt, dyr.data() + co * OW, DType::f32, OW);
        }
        for (int64_t ci = 0; ci < g.cin; ++ci)
          for (int64_t i = 0; i < g.kh; ++i) {
            if (!valid[static_cast<size_t>(ci * g.kh + i)]) continue;
            const float* row = rows.data() + (ci * g.kh + i) * g.w;
            for (int64_t j = 0; j < g.kw; ++j) {
              float* pk = pn + ((ci * g.kh + i) * g.kw + j) * C;
              for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t iw = ow * g.stride_w - g.pad_l + j * g.dil_w;
                if (iw < 0 || iw >= g.w) continue;
                const float xv = row[iw];
                if (cl) {
                  const float* d = dyr.data() + ow * C;
#pragma omp simd
                  for (int64_t co = 0; co < C; ++co) pk[co] += xv * d[co];
                } else {
                  for (int64_t co = 0; co < C; ++co) pk[co] += xv * dyr[static_cast<size_t>(co * OW + ow)];
                }
              }
            }
          }
        if (p.db.defined())
          for (int64_t ow = 0; ow < OW; ++ow)
            for (int64_t co = 0; co < C; ++co) bn[co] += cl ? dyr[static_cast<size_t>(ow * C + co)] : dyr[static_cast<size_t>(co * OW + ow)];
      }
    }
  }
  // Sum the images in order, into dw [co][k] and db [co] (acc dtype f32).
  float* dw = p.dw.data<float>();
  for (int64_t co = 0; co < C; ++co)
    for (int64_t k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int64_t n = 0; n < g.n; ++n) s += part[static_cast<size_t>((n * K + k) * C + co)];
      dw[co * K + k] = s;
    }
  if (p.db.defined()) {
    float* dbp = p.db.data<float>();
    for (int64_t co = 0; co < C; ++co) {
      float s = 0.0f;
      for (int64_t n = 0; n < g.n; ++n) s += bpart[static_cast<size_t>(n * C + co)];
      dbp[co] = s;
    }
  }
}

}  // namespace mixprec::ops::detail
