// Direct convolution for layers with few input channels (2 to 16) and 8, 16, 24 or 32 output
// channels, channels-last, stride 1: LeNet's second conv (6 -> 16 channels, 5x5 on 14x14), on AVX2
// machines without AVX-512. There the 16-bit convolutions go through f32 (no native bf16), and
// oneDNN's f32 kernels reached about half the GEMM rate on this shape (a reduction of
// cin x kh x kw = 150 that its channel blocking of 8 does not divide well).
//
// The kernels widen one image at a time to an f32 copy in L1 and accumulate in f32 registers:
//  - Forward: xp = the image zero-padded by the convolution's padding, [ph][pw][cin]; weights
//    repacked [kh][kw][cin][cout]. A block of P output pixels of a row x CB registers of 8 output
//    channels keeps P x CB accumulators, the CB weight vectors of the current (tap, input channel)
//    and one broadcast input value: P x CB + CB + 1 registers (CB 1: P 8, CB 2: P 6, CB 3: P 4, all
//    <= 16; CB 4: P 3 needs 17, one more than AVX2 has; not measured). Each (tap, input channel)
//    costs CB + P loads for P x CB FMAs. Bias first, ReLU (NaN kept) after, then the row is rounded
//    once into y's dtype.
//  - Backward-weights: for each image, dW[(i, j, ci)][co] = sum over the output pixels of
//    xp[oh + i][ow + j][ci] * dy[oh][ow][co], T (tap, channel) pairs at a time with CB registers
//    each; db = the sum of dy. Each image leaves its partial sums in its own slot; the slots are
//    summed in image order, so the result does not depend on the number of threads.
//  - Backward-data: for each output pixel, col[(i, j, ci)] = sum over co of dy[co] *
//  w[co][ci][i][j]
//    (2 pixels x 5 vectors of (i, j, ci) a block, the lanes now running over (i, j, ci)), then each
//    pixel's col row is added into a zero-padded f32 image at the inputs it read, in pixel order,
//    and the image's interior is rounded once into dx's dtype. (Computed as a convolution of the
//    padded dy instead, the padding would double the work on LeNet's 14x14 images.)
// Forward and backward-weights visit only the output pixels, and backward-data adds only real
// products: no lane multiplies an input the reference does not (padding lanes of col are never
// added).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/error.h"
#include "mixprec/ops/ops.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/slot_sum.h"
#include "ops/layout.h"

namespace mixprec::ops::cpu {
using namespace detail;
namespace {

constexpr int64_t kMaxCin = 16, kMaxCout = 32, kMaxK = 7;

#define MIXPREC_ALWAYS_INLINE [[gnu::always_inline]] inline

struct Geo {
  int64_t kh, kw, cin, cout, h, w, oh, ow, pad_t, pad_l;
  int64_t ph, pw;  // the padded image: ph rows of pw pixels (stride 1: oh + kh - 1, ow + kw - 1)
};

Geo make_geo(const ConvGeometry& g) {
  return {g.kh,    g.kw,    g.cin,           g.cout,         g.h, g.w, g.oh, g.ow,
          g.pad_t, g.pad_l, g.oh + g.kh - 1, g.ow + g.kw - 1};
}

// xp <- image n of the dense channels-last x, widened to f32, zero where the padding is.
void pad_image(const Tensor& x, int64_t n, const Geo& g, float* xp) {
  std::fill(xp, xp + g.ph * g.pw * g.cin, 0.0f);
  const size_t isz = dtype_size(x.dtype());
  const char* xb =
      static_cast<const char*>(x.data_ptr()) + n * g.h * g.w * g.cin * static_cast<int64_t>(isz);
  // The image's columns that land inside the padded row (padding past pw clips them).
  const int64_t c0 = std::max<int64_t>(0, -g.pad_l), c1 = std::min(g.w, g.pw - g.pad_l);
  if (c1 <= c0) return;
  for (int64_t ih = 0; ih < g.h; ++ih) {
    const int64_t r = ih + g.pad_t;
    if (r < 0 || r >= g.ph) continue;
    convert_row(xb + (ih * g.w + c0) * g.cin * static_cast<int64_t>(isz), x.dtype(),
                xp + (r * g.pw + c0 + g.pad_l) * g.cin, DType::f32, (c1 - c0) * g.cin);
  }
}

// The kernels: simd.h's AVX2 vectors (8 f32 lanes), every multiply-add an explicit fmadd (the
// file builds without contraction, as every file on simd.h does). They run only after
// common_declines found AVX2 and FMA.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
using namespace simd::avx2;

// ---------------------------------------------------------------- forward

// P output pixels from column ow0 of row oh, CB registers of channels: out[(ow0 + p) * cout + c].
template <int P, int CB> MIXPREC_ALWAYS_INLINE void fwd_block(const float* xp, const Geo& g,
                                                              const float* wr, const float* bias,
                                                              bool relu, int64_t oh, int64_t ow0,
                                                              float* out) {
  V acc[P][CB];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int cb = 0; cb < CB; ++cb) acc[p][cb] = loadu(bias + cb * 8);
  const int64_t cin = g.cin, cout = g.cout;
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      const float* xr = xp + ((oh + i) * g.pw + ow0 + j) * cin;
      const float* wt = wr + (i * g.kw + j) * cin * cout;
      for (int64_t ci = 0; ci < cin; ++ci, wt += cout) {
        V w[CB];
#pragma GCC unroll 4
        for (int cb = 0; cb < CB; ++cb) w[cb] = loadu(wt + cb * 8);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const V x = broadcast(xr + p * cin + ci);
#pragma GCC unroll 4
          for (int cb = 0; cb < CB; ++cb) acc[p][cb] = fmadd(x, w[cb], acc[p][cb]);
        }
      }
    }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int cb = 0; cb < CB; ++cb) {
      V a = acc[p][cb];
      if (relu) a = select(a <= 0.0f, splat(0.0f), a);  // NaN is not <= 0: it propagates
      storeu(out + (ow0 + p) * cout + cb * 8, a);
    }
}

// The row's last `rem` (< P) pixels, one block of exactly that many.
template <int R, int CB> MIXPREC_ALWAYS_INLINE void fwd_tail(int64_t rem, const float* xp,
                                                             const Geo& g, const float* wr,
                                                             const float* bias, bool relu,
                                                             int64_t oh, int64_t ow0, float* out) {
  if constexpr (R >= 1) {
    if (rem == R)
      fwd_block<R, CB>(xp, g, wr, bias, relu, oh, ow0, out);
    else
      fwd_tail<R - 1, CB>(rem, xp, g, wr, bias, relu, oh, ow0, out);
  }
}

template <int CB> constexpr int kFwdPixels = CB == 1 ? 8 : CB == 2 ? 6 : CB == 3 ? 4 : 3;

template <int CB> void fwd_row(const float* xp, const Geo& g, const float* wr, const float* bias,
                               bool relu, int64_t oh, float* out) {
  constexpr int P = kFwdPixels<CB>;
  int64_t ow0 = 0;
  for (; ow0 + P <= g.ow; ow0 += P) fwd_block<P, CB>(xp, g, wr, bias, relu, oh, ow0, out);
  fwd_tail<P - 1, CB>(g.ow - ow0, xp, g, wr, bias, relu, oh, ow0, out);
}

using FwdRowFn = void (*)(const float*, const Geo&, const float*, const float*, bool, int64_t,
                          float*);

// The instance of a kernel for cout / 8 registers of channels (cout: 8, 16, 24 or 32).
template <class Fn> Fn by_registers(int64_t cout, std::initializer_list<Fn> per_count) {
  return per_count.begin()[cout / 8 - 1];
}

FwdRowFn pick_fwd(int64_t cout) {
  return by_registers<FwdRowFn>(cout, {&fwd_row<1>, &fwd_row<2>, &fwd_row<3>, &fwd_row<4>});
}

// ---------------------------------------------------------------- backward-weights

// part[(m0 + t) * cout + c] = sum over the output pixels of xp[pixel + off[t]] * dy[pixel][c]
// for T (tap, input channel) pairs whose offsets into xp (from an output pixel's top-left input)
// are off[0 .. T).
template <int T, int CB> MIXPREC_ALWAYS_INLINE void bwd_w_block(const float* xp, const float* dy,
                                                                const Geo& g, const int64_t* off,
                                                                float* part) {
  V acc[T][CB];
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int cb = 0; cb < CB; ++cb) acc[t][cb] = splat(0.0f);
  int64_t o[T];
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t) o[t] = off[t];
  const int64_t cin = g.cin, cout = g.cout;
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    const float* xr = xp + oh * g.pw * cin;
    const float* dr = dy + oh * g.ow * cout;
    for (int64_t ow = 0; ow < g.ow; ++ow, xr += cin, dr += cout) {
      V d[CB];
#pragma GCC unroll 4
      for (int cb = 0; cb < CB; ++cb) d[cb] = loadu(dr + cb * 8);
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) {
        const V x = broadcast(xr + o[t]);
#pragma GCC unroll 4
        for (int cb = 0; cb < CB; ++cb) acc[t][cb] = fmadd(x, d[cb], acc[t][cb]);
      }
    }
  }
#pragma GCC unroll 12
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int cb = 0; cb < CB; ++cb) storeu(part + t * cout + cb * 8, acc[t][cb]);
}

template <int R, int CB> MIXPREC_ALWAYS_INLINE void bwd_w_tail(int64_t rem, const float* xp,
                                                               const float* dy, const Geo& g,
                                                               const int64_t* off, float* part) {
  if constexpr (R >= 1) {
    if (rem == R)
      bwd_w_block<R, CB>(xp, dy, g, off, part);
    else
      bwd_w_tail<R - 1, CB>(rem, xp, dy, g, off, part);
  }
}

template <int CB> constexpr int kBwdPairs = CB == 1 ? 12 : CB == 2 ? 6 : CB == 3 ? 4 : 3;

// One image's partial dW ([m][cout], m = (i * kw + j) * cin + ci, `off` holding each m's offset)
// and db (cout floats after it).
template <int CB>
void bwd_w_image(const float* xp, const float* dy, const Geo& g, const int64_t* off, float* part) {
  constexpr int T = kBwdPairs<CB>;
  const int64_t m_total = g.kh * g.kw * g.cin;
  int64_t m = 0;
  for (; m + T <= m_total; m += T) bwd_w_block<T, CB>(xp, dy, g, off + m, part + m * g.cout);
  bwd_w_tail<T - 1, CB>(m_total - m, xp, dy, g, off + m, part + m * g.cout);
  V s[CB];
  for (int cb = 0; cb < CB; ++cb) s[cb] = splat(0.0f);
  const int64_t pixels = g.oh * g.ow;
  for (int64_t q = 0; q < pixels; ++q)
    for (int cb = 0; cb < CB; ++cb) s[cb] = s[cb] + loadu(dy + q * g.cout + cb * 8);
  for (int cb = 0; cb < CB; ++cb) storeu(part + m_total * g.cout + cb * 8, s[cb]);
}

using BwdImageFn = void (*)(const float*, const float*, const Geo&, const int64_t*, float*);

BwdImageFn pick_bwd(int64_t cout) {
  return by_registers<BwdImageFn>(
      cout, {&bwd_w_image<1>, &bwd_w_image<2>, &bwd_w_image<3>, &bwd_w_image<4>});
}

// ---------------------------------------------------------------- backward-data

// col[q][m] = sum over co of dy[q][co] * w[co][m] for P output pixels q from q0 and V vectors of m
// (m = (i * kw + j) * cin + ci, padded to mp, a multiple of 8) from vector v0: what each output
// pixel's gradient gives each input it read. wt: w as [cout][mp] (zero past m_total).
template <int P, int NV>
MIXPREC_ALWAYS_INLINE void col_block(const float* dy, int64_t q0, const float* wt, int64_t mp,
                                     int64_t v0, int64_t cout, float* col) {
  V acc[P][NV];
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[p][v] = splat(0.0f);
  for (int64_t co = 0; co < cout; ++co) {
    V w[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) w[v] = loadu(wt + co * mp + (v0 + v) * 8);
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const V d = broadcast(dy + (q0 + p) * cout + co);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[p][v] = fmadd(d, w[v], acc[p][v]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) storeu(col + (q0 + p) * mp + (v0 + v) * 8, acc[p][v]);
}

template <int P, int R> MIXPREC_ALWAYS_INLINE void col_tail(int64_t rem, const float* dy,
                                                            int64_t q0, const float* wt, int64_t mp,
                                                            int64_t v0, int64_t cout, float* col) {
  if constexpr (R >= 1) {
    if (rem == R)
      col_block<P, R>(dy, q0, wt, mp, v0, cout, col);
    else
      col_tail<P, R - 1>(rem, dy, q0, wt, mp, v0, cout, col);
  }
}

// One image: col (pixels x mp) from dy (pixels x cout), 2 pixels x 5 vectors a block (10
// accumulators, 5 weight vectors, 1 broadcast: 16 registers).
template <int P> MIXPREC_ALWAYS_INLINE void col_pixels(const float* dy, int64_t q0, const float* wt,
                                                       int64_t mp, int64_t cout, float* col) {
  constexpr int NV = 5;
  const int64_t nv = mp / 8;
  int64_t v0 = 0;
  for (; v0 + NV <= nv; v0 += NV) col_block<P, NV>(dy, q0, wt, mp, v0, cout, col);
  col_tail<P, NV - 1>(nv - v0, dy, q0, wt, mp, v0, cout, col);
}

void col_image(const float* dy, int64_t pixels, const float* wt, int64_t mp, int64_t cout,
               float* col) {
  int64_t q = 0;
  for (; q + 2 <= pixels; q += 2) col_pixels<2>(dy, q, wt, mp, cout, col);
  if (q < pixels) col_pixels<1>(dy, q, wt, mp, cout, col);
}

// dxp (f32, the padded image [ph][pw][cin], zeroed) += each pixel's col row at the inputs it
// read, in pixel order (deterministic). For a pixel and kernel row i the kw taps are contiguous in
// both col and dxp: one run of kw * cin floats, never clipped (the padding absorbs the border
// pixels' taps and is dropped afterwards).
void col_to_padded(const float* col, const Geo& g, int64_t mp, float* __restrict dxp) {
  const int64_t len = g.kw * g.cin;
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const float* __restrict c = col + (oh * g.ow + ow) * mp;
      for (int64_t i = 0; i < g.kh; ++i) {
        const float* __restrict src = c + i * len;
        float* __restrict dst = dxp + ((oh + i) * g.pw + ow) * g.cin;
        for (int64_t e = 0; e < len; ++e) dst[e] += src[e];
      }
    }
}

#pragma GCC pop_options

// ---------------------------------------------------------------- shared

// t dense channels-last: exactly the strides a channels-last image of its shape is allocated with.
bool dense_nhwc(const Tensor& t) {
  return t.strides() == image_strides(t.shape(), ImageLayout::nhwc);
}

std::string common_declines(const ConvGeometry& g, DType dt) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma)) return "needs AVX2 and FMA";
  if (f.avx512f)
    return "AVX-512 machine: oneDNN's kernels keep the job (this one was measured on AVX2 only)";
  if (g.groups != 1 || g.stride_h != 1 || g.stride_w != 1 || g.dil_h != 1 || g.dil_w != 1)
    return "groups, stride or dilation != 1";
  if (g.cin < 2 || g.cin > kMaxCin) return "input channels not in [2, 16]";
  if (g.cout % 8 != 0 || g.cout > kMaxCout) return "output channels not 8, 16, 24 or 32";
  if (g.kh > kMaxK || g.kw > kMaxK) return "kernel larger than 7x7";
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16) return "not f32, bf16 or f16";
  return "";
}

// x and the output (gradient) `image` must also be dense channels-last (`layout_why` otherwise).
std::string declines(const ConvGeometry& g, const Tensor& x, const Tensor& image,
                     const char* layout_why) {
  std::string why = common_declines(g, x.dtype());
  if (why.empty() && (!dense_nhwc(x) || !dense_nhwc(image))) why = layout_why;
  return why;
}

// w [cout, cin, kh, kw] (any dtype) as f32 [(i * kw + j) * cin + ci][cout].
std::vector<float> repack_weights(const Tensor& w, const Geo& g) {
  const Tensor w32 = amp_cast(w, DType::f32).contiguous();
  const float* wp = w32.data<float>();
  std::vector<float> out(static_cast<size_t>(g.kh * g.kw * g.cin * g.cout));
  for (int64_t co = 0; co < g.cout; ++co)
    for (int64_t ci = 0; ci < g.cin; ++ci)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          out[static_cast<size_t>(((i * g.kw + j) * g.cin + ci) * g.cout + co)] =
              wp[((co * g.cin + ci) * g.kh + i) * g.kw + j];
  return out;
}

}  // namespace

std::string conv_small_fwd_declines(const ConvFwdProblem& p) {
  return declines(p.g, p.x, p.y, "input or output not dense channels-last");
}

void conv_small_fwd(const ConvFwdProblem& pr) {
  const Geo g = make_geo(pr.g);
  const std::vector<float> wr = repack_weights(pr.w, g);
  std::vector<float> bias(static_cast<size_t>(g.cout), 0.0f);
  if (pr.b.defined()) {
    const Tensor b32 = amp_cast(pr.b, DType::f32).contiguous();
    std::copy_n(b32.data<float>(), g.cout, bias.begin());
  }
  const FwdRowFn row_fn = pick_fwd(g.cout);
  const DType ydt = pr.y.dtype();
  char* yb = static_cast<char*>(pr.y.data_ptr());
  const int64_t row_elems = g.ow * g.cout, isz = static_cast<int64_t>(dtype_size(ydt));
#pragma omp parallel
  {
    std::vector<float> xp(static_cast<size_t>(g.ph * g.pw * g.cin));
    std::vector<float> row(static_cast<size_t>(row_elems));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < pr.g.n; ++n) {
      pad_image(pr.x, n, g, xp.data());
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        row_fn(xp.data(), g, wr.data(), bias.data(), pr.relu, oh, row.data());
        convert_row(row.data(), DType::f32, yb + ((n * g.oh + oh) * row_elems) * isz, ydt,
                    row_elems);
      }
    }
  }
}

std::string conv_small_bwd_data_declines(const ConvBwdDataProblem& p) {
  return declines(p.g, p.dx, p.dy, "input gradient or output gradient not dense channels-last");
}

void conv_small_bwd_data(const ConvBwdDataProblem& pr) {
  const Geo g = make_geo(pr.g);
  const int64_t m_total = g.kh * g.kw * g.cin, mp = (m_total + 7) / 8 * 8;
  std::vector<float> wt(static_cast<size_t>(g.cout * mp), 0.0f);  // [cout][mp]
  {
    const std::vector<float> wr = repack_weights(pr.w, g);  // [m][cout]
    for (int64_t m = 0; m < m_total; ++m)
      for (int64_t co = 0; co < g.cout; ++co)
        wt[static_cast<size_t>(co * mp + m)] = wr[static_cast<size_t>(m * g.cout + co)];
  }
  const DType ddt = pr.dy.dtype(), xdt = pr.dx.dtype();
  const char* dyb = static_cast<const char*>(pr.dy.data_ptr());
  char* dxb = static_cast<char*>(pr.dx.data_ptr());
  const int64_t pixels = g.oh * g.ow, dy_elems = pixels * g.cout, dx_elems = g.h * g.w * g.cin;
  const int64_t dsz = static_cast<int64_t>(dtype_size(ddt)),
                xsz = static_cast<int64_t>(dtype_size(xdt));
#pragma omp parallel
  {
    std::vector<float> dy32(static_cast<size_t>(dy_elems));
    std::vector<float> col(static_cast<size_t>(pixels * mp));
    std::vector<float> dxp(static_cast<size_t>(g.ph * g.pw * g.cin));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < pr.g.n; ++n) {
      convert_row(dyb + n * dy_elems * dsz, ddt, dy32.data(), DType::f32, dy_elems);
      col_image(dy32.data(), pixels, wt.data(), mp, g.cout, col.data());
      std::fill(dxp.begin(), dxp.end(), 0.0f);
      col_to_padded(col.data(), g, mp, dxp.data());
      // The image's rows out of the padding (stride 1: input row ih is padded row ih + pad_t).
      char* out = dxb + n * dx_elems * xsz;
      for (int64_t ih = 0; ih < g.h; ++ih)
        convert_row(dxp.data() + ((ih + g.pad_t) * g.pw + g.pad_l) * g.cin, DType::f32,
                    out + ih * g.w * g.cin * xsz, xdt, g.w * g.cin);
    }
  }
}

std::string conv_small_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (!p.dw.defined()) return "no weight gradient needed";
  return declines(p.g, p.x, p.dy, "input or output gradient not dense channels-last");
}

void conv_small_bwd_weights(const ConvBwdWeightsProblem& pr) {
  const Geo g = make_geo(pr.g);
  const int64_t m_total = g.kh * g.kw * g.cin, slot = (m_total + 1) * g.cout;  // dW then db
  const int64_t N = pr.g.n;
  std::vector<int64_t> off(static_cast<size_t>(m_total));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      for (int64_t ci = 0; ci < g.cin; ++ci)
        off[static_cast<size_t>((i * g.kw + j) * g.cin + ci)] = (i * g.pw + j) * g.cin + ci;
  // Every element is written (by its image) before it is read: no zero-fill of the 2.5 MB.
  const auto parts = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(N * slot));
  const BwdImageFn image_fn = pick_bwd(g.cout);
  const DType ddt = pr.dy.dtype();
  const char* dyb = static_cast<const char*>(pr.dy.data_ptr());
  const int64_t img_elems = g.oh * g.ow * g.cout, isz = static_cast<int64_t>(dtype_size(ddt));
#pragma omp parallel
  {
    std::vector<float> xp(static_cast<size_t>(g.ph * g.pw * g.cin));
    std::vector<float> dy32(static_cast<size_t>(img_elems));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pad_image(pr.x, n, g, xp.data());
      convert_row(dyb + n * img_elems * isz, ddt, dy32.data(), DType::f32, img_elems);
      image_fn(xp.data(), dy32.data(), g, off.data(), parts.get() + n * slot);
    }
  }
  // The images' slots summed in image order (deterministic), dW stored as [cout][cin][kh][kw].
  const std::vector<float> total = sum_slots_in_order(parts.get(), N, slot);
  std::vector<float> dw(static_cast<size_t>(m_total * g.cout));
  for (int64_t co = 0; co < g.cout; ++co)
    for (int64_t ci = 0; ci < g.cin; ++ci)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          dw[static_cast<size_t>(((co * g.cin + ci) * g.kh + i) * g.kw + j)] =
              total[static_cast<size_t>(((i * g.kw + j) * g.cin + ci) * g.cout + co)];
  MIXPREC_ASSERT(pr.dw.is_contiguous(), "conv_small_bwd_weights: dw must be contiguous");
  convert_row(dw.data(), DType::f32, pr.dw.data_ptr(), pr.dw.dtype(), m_total * g.cout);
  if (pr.db.defined()) {
    MIXPREC_ASSERT(pr.db.is_contiguous(), "conv_small_bwd_weights: db must be contiguous");
    convert_row(total.data() + m_total * g.cout, DType::f32, pr.db.data_ptr(), pr.db.dtype(),
                g.cout);
  }
}

}  // namespace mixprec::ops::cpu
