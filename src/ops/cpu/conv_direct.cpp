// Direct convolution for single-input-channel layers with at most 8 output channels (LeNet's
// first conv: 1 -> 6 channels, 5x5), channels-last or contiguous (NCHW) output, forward and
// backward-weights. im2col + GEMM is a poor fit there: the reduction is 9-25 long and the GEMM's
// N is the channel count, so both the patch matrix and the GEMM are memory-bound. This kernel keeps
// one zero-padded fp32 copy of each image in L1 and accumulates in fp32 registers (8 output
// channels x one register of columns per block, every tap a broadcast-FMA), then rounds once.
// Backward-data is not needed for a first layer (the data needs no gradient); im2col covers it.
//
// Per image: xp = the image in fp32, zero-padded by the convolution's padding and widened to
// whole 16-column units. Forward, per output row: for each block of 16 (AVX-512) or 8 (AVX2)
// columns and 8 output channels, 8 accumulators start at the bias and take one broadcast-FMA
// per tap; ReLU, then the row is interleaved into channels-last order (or, for an NCHW y, each
// channel's row taken as it is) and rounded once into y's dtype. Backward-weights, per image: dy is
// widened to fp32 planes [C][OH][OWP] (zero past OW; an NCHW dy's rows go straight in), and
// for each (channel, kernel row) KW accumulators sweep the image; each image leaves its partial dW
// and db in its own slot, and the slots are summed in image order, so the result does not depend on
// threads. The kernels are written on simd.h's vectors (conv_direct_cols.inc), compiled per
// instruction set (AVX-512, AVX2+FMA) and picked at run time.
// On AVX2, channels-last outputs take the channels-last forms instead (cols_avx2::fwd_row_cl,
// bwd_w_cl: the lanes are the 8 channels, the input is broadcast), which read and write the
// channels-last rows as they are: the scalar interleave and de-interleave above cost as much as
// the arithmetic there (LeNet's 1 -> 6 layer, forward + backward-weights: 4.6 -> 2.1 ms).
#include "ops/cpu/kernels.h"
#include "mixprec/ops/ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "ops/cpu/simd.h"
#include "ops/cpu/slot_sum.h"
#include "ops/layout.h"
#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/error.h"

namespace mixprec::ops::cpu {
using namespace detail;
namespace {

constexpr int64_t kCols = 16;  // the padding unit of a row: one AVX-512 register of f32
constexpr int64_t kCoBlk = 8;  // output channels per block
constexpr int64_t kMaxK = 7;   // largest kernel side handled

// The geometry both kernels share. Rows are padded to whole 16-column units whatever the
// register width, so every block of either width lies inside its row.
struct Plan {
  int64_t kh, kw, pad_t, pad_l, h, w, oh, ow, cout;
  int64_t nb;      // 16-column units per output row
  int64_t owp;     // nb * 16
  int64_t pw, ph;  // padded image: ph rows of pw floats
  int64_t ncb;     // 8-channel blocks
};

Plan make_plan(const ConvGeometry& g) {
  Plan p{g.kh, g.kw, g.pad_t, g.pad_l, g.h, g.w, g.oh, g.ow, g.cout, 0, 0, 0, 0, 0};
  p.nb = (g.ow + kCols - 1) / kCols;
  p.owp = p.nb * kCols;
  p.pw = p.owp + g.kw - 1;
  p.ph = g.oh + g.kh - 1;
  p.ncb = (g.cout + kCoBlk - 1) / kCoBlk;
  return p;
}

// xp <- image n of x (one channel), widened to f32, zero everywhere else.
template <class T> void pad_image(const Tensor& x, int64_t n, const Plan& p, float* xp) {
  std::fill(xp, xp + p.ph * p.pw, 0.0f);
  const T* xb = static_cast<const T*>(x.data_ptr()) + n * x.strides()[0];
  const int64_t sh = x.strides()[2], sw = x.strides()[3];
  for (int64_t ih = 0; ih < p.h; ++ih) {
    const int64_t r = ih + p.pad_t;
    if (r < 0 || r >= p.ph) continue;
    float* row = xp + r * p.pw;
    const T* src = xb + ih * sh;
    for (int64_t iw = 0; iw < p.w; ++iw) {
      const int64_t c = iw + p.pad_l;
      if (c >= 0 && c < p.pw) row[c] = static_cast<float>(load(src[iw * sw]));
    }
  }
}

// The column kernels, once per ISA (conv_direct_cols.inc: fwd_row, bwd_w<KW>). One register of
// f32 per block: 16 lanes with AVX-512, 8 with AVX2. The blocks are one register wide, so a
// forward block keeps its 8 accumulators, the input vector and a broadcast weight in registers on
// either set (16 ymm with AVX2; a 16-lane block there was two ymm per accumulator, spilled on
// every tap, and ran 1.6x slower than im2col). The kernels run only after common_declines found
// AVX2 and FMA (and avx512() for the AVX-512 ones).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace cols_avx512 {
using namespace simd::avx512;
#include "ops/cpu/conv_direct_cols.inc"
}  // namespace cols_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace cols_avx2 {
using namespace simd::avx2;
#include "ops/cpu/conv_direct_cols.inc"

// Channels-last forms for AVX2 (lanes = the 8 output channels of the block, cout <= 8): the
// output row and dy come in channels-last order, so no interleave or de-interleave pass is needed
// (on AVX2 those scalar passes cost about as much as the column kernels' arithmetic). With
// AVX-512 the column kernels above keep the job: 16 columns a register against 8 channels here.
//
// Forward: one output row into out[ow * cout + c] for ow < owp (owp * cout + 8 floats: each
// pixel's 8 lanes are stored whole, the lanes past cout overwritten by the next pixel's store, so
// the pixels are stored in order). Blocks of 8 pixels, 8 accumulators; per tap one weight vector
// and 8 broadcast-FMAs.
void fwd_row_cl(const float* xrow, const Plan& p, const float* wpad, const float* bias, bool relu,
                float* out) {
  constexpr int64_t P = 8;
  const V b0 = loadu(bias);
  for (int64_t b = 0; b < p.owp; b += P) {
    V a[P];
    for (int64_t q = 0; q < P; ++q) a[q] = b0;
    const float* wt = wpad;
    for (int64_t i = 0; i < p.kh; ++i) {
      const float* xr = xrow + i * p.pw + b;
      for (int64_t j = 0; j < p.kw; ++j, wt += kCoBlk) {
        const V w = loadu(wt);
        for (int64_t q = 0; q < P; ++q) a[q] = fmadd(broadcast(xr + q + j), w, a[q]);
      }
    }
    for (int64_t q = 0; q < P; ++q) {
      if (relu) a[q] = select(a[q] <= 0.0f, splat(0.0f), a[q]);  // NaN is not <= 0: it stays
      storeu(out + (b + q) * p.cout, a[q]);
    }
  }
}

// Backward-weights, one image and kernel row i: acc[j][c] = sum over the output pixels of
// dy[pixel][c] * xp[oh + i][ow + j] (dyc: the image's dy, channels-last f32, 8 floats readable
// at every pixel); db[c] = the sum of dy when db is not null. Exactly the output pixels are
// visited, so no spare lane ever multiplies an input (a 0 * inf the reference never computes).
template <int KW>
void bwd_w_cl(const float* dyc, const float* xp, const Plan& p, int64_t i, float* dw, float* db) {
  V acc[KW];
  for (int j = 0; j < KW; ++j) acc[j] = splat(0.0f);
  V sum = splat(0.0f);
  for (int64_t oh = 0; oh < p.oh; ++oh) {
    const float* xr = xp + (oh + i) * p.pw;
    const float* dr = dyc + oh * p.ow * p.cout;
    for (int64_t ow = 0; ow < p.ow; ++ow) {
      const V d = loadu(dr + ow * p.cout);
      for (int j = 0; j < KW; ++j) acc[j] = fmadd(broadcast(xr + ow + j), d, acc[j]);
      if (db) sum = sum + d;
    }
  }
  const int64_t taps = p.kh * p.kw;
  for (int64_t c = 0; c < p.cout; ++c) {
    for (int j = 0; j < KW; ++j) dw[c * taps + i * KW + j] = acc[j][c];
    if (db) db[c] = sum[c];
  }
}

using BwdClFn = void (*)(const float*, const float*, const Plan&, int64_t, float*, float*);

template <int... KW> BwdClFn pick_bwd_cl(int64_t kw, std::integer_sequence<int, KW...>) {
  BwdClFn f = nullptr;
  ((kw == KW + 1 ? (f = &bwd_w_cl<KW + 1>) : f), ...);
  return f;
}

// The sum of a dy plane (n floats, a multiple of 16; zero past each row's OW): two 8-lane
// accumulators over 16-float steps, then a fixed tree. A scalar running sum was a chain of
// dependent adds, 26 * 32 of them per channel and image: the slowest part of the kernel.
float plane_sum(const float* p, int64_t n) {
  V a = splat(0.0f), b = splat(0.0f);
  for (int64_t k = 0; k < n; k += 16) {
    a = a + loadu(p + k);
    b = b + loadu(p + k + 8);
  }
  return hsum(a + b);
}

}  // namespace cols_avx2
#pragma GCC pop_options

// dst[0, n) = src[0, n) for a short row (an output row of 26 floats): whole 32-byte moves, then
// single floats, inlined. std::copy_n became a memmove call per row, which cost more than the
// convolution's arithmetic (213K calls per SimpleNet forward).
inline void copy_row(float* dst, const float* src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) std::memcpy(dst + k, src + k, 8 * sizeof(float));
  for (; k < n; ++k) dst[k] = src[k];
}

using BwdFn = void (*)(const float*, const float*, const Plan&, int64_t, float*);

template <int... KW> BwdFn pick_bwd(int64_t kw, bool avx512, std::integer_sequence<int, KW...>) {
  BwdFn f = nullptr;
  ((kw == KW + 1 ? (f = avx512 ? &cols_avx512::bwd_w<KW + 1> : &cols_avx2::bwd_w<KW + 1>) : f),
   ...);
  return f;
}

bool avx512() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.fma;
}

// The output (gradient) image dense in channels-last order, or contiguous (NCHW).
bool dense_nhwc(const Tensor& image, const ConvGeometry& g) {
  return is_channels_last(image) && image.strides()[3] == g.cout &&
         image.strides()[2] == g.ow * g.cout && image.strides()[0] == g.oh * g.ow * g.cout;
}
bool dense_nchw(const Tensor& image) { return image.is_contiguous(); }

std::string common_declines(const ConvGeometry& g, DType dt, const Tensor& image) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma)) return "needs AVX2 and FMA";
  if (g.groups != 1 || g.cin != 1) return "more than one input channel";
  if (g.stride_h != 1 || g.stride_w != 1 || g.dil_h != 1 || g.dil_w != 1)
    return "stride or dilation != 1";
  if (g.kh > kMaxK || g.kw > kMaxK) return "kernel larger than 7x7";
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16) return "not f32, bf16 or f16";
  // Past one 8-channel block im2col + GEMM (whose N is then a fair width) measures faster.
  // Channels-last, the scalar interleave dominates: 1 -> 32 channels 3x3 at batch 256, forward +
  // backward-weights 16.4 ms direct vs 8.3 ms im2col (kernels_bench BM_first_conv, AVX-512);
  // 1 -> 6 channels 5x5: 3.6 ms direct vs 5.5 ms im2col. NCHW (SimpleNet's 1 -> 32), in the model
  // at O0: forward 4.2 ms direct vs 3.3 ms im2col, and whole steps alternated 0.88-1.0x.
  if (g.cout > kCoBlk) return "more than 8 output channels (im2col + GEMM is faster there)";
  if (dense_nhwc(image, g) || dense_nchw(image)) return "";
  return "output (gradient) neither dense channels-last nor contiguous";
}

std::vector<float> padded_weights(const Tensor& w, const Plan& p) {
  const Tensor w32 = amp_cast(w, DType::f32).contiguous();  // [cout, 1, kh, kw]
  const float* wp = w32.data<float>();
  const int64_t taps = p.kh * p.kw;
  std::vector<float> out(static_cast<size_t>(p.ncb * taps * kCoBlk), 0.0f);
  for (int64_t co = 0; co < p.cout; ++co)
    for (int64_t t = 0; t < taps; ++t)
      out[static_cast<size_t>(((co / kCoBlk) * taps + t) * kCoBlk + co % kCoBlk)] =
          wp[co * taps + t];
  return out;
}

}  // namespace

std::string conv_direct_c1_fwd_declines(const ConvFwdProblem& p) {
  if (p.g.cout < 1) return "no output channels";
  return common_declines(p.g, p.x.dtype(), p.y);
}

void conv_direct_c1_fwd(const ConvFwdProblem& pr) {
  const Plan p = make_plan(pr.g);
  const std::vector<float> wpad = padded_weights(pr.w, p);
  std::vector<float> bias(static_cast<size_t>(p.ncb * kCoBlk), 0.0f);
  if (pr.b.defined()) {
    const Tensor b32 = amp_cast(pr.b, DType::f32).contiguous();
    std::copy_n(b32.data<float>(), p.cout, bias.begin());
  }
  const DType ydt = pr.y.dtype();
  char* yb = static_cast<char*>(pr.y.data_ptr());
  const int64_t row_elems = p.ow * p.cout, isz = static_cast<int64_t>(dtype_size(ydt));
  const bool nchw = !dense_nhwc(pr.y, pr.g);
  const bool cl = !nchw && !avx512();  // channels-last straight from the registers (AVX2)
  const auto row_fn = cl         ? &cols_avx2::fwd_row_cl
                      : avx512() ? &cols_avx512::fwd_row
                                 : &cols_avx2::fwd_row;
  visit_float(pr.x.dtype(), [&]<class T>() {
#pragma omp parallel
    {
      std::vector<float> xp(static_cast<size_t>(p.ph * p.pw));
      std::vector<float> planes(static_cast<size_t>(cl ? 0 : p.ncb * kCoBlk * p.owp));
      std::vector<float> row(static_cast<size_t>(cl ? p.owp * p.cout + kCoBlk : row_elems));
      // NCHW: the image's output in f32, [C][OH][OW], rounded in one call (per-row calls of OW
      // values spent most of their time in the converter's scalar tail).
      std::vector<float> image(nchw ? static_cast<size_t>(p.cout * p.oh * p.ow) : 0);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < pr.g.n; ++n) {
        pad_image<T>(pr.x, n, p, xp.data());
        for (int64_t oh = 0; oh < p.oh; ++oh) {
          if (cl) {
            row_fn(xp.data() + oh * p.pw, p, wpad.data(), bias.data(), pr.relu, row.data());
            convert_row(row.data(), DType::f32, yb + ((n * p.oh + oh) * row_elems) * isz, ydt,
                        row_elems);
            continue;
          }
          row_fn(xp.data() + oh * p.pw, p, wpad.data(), bias.data(), pr.relu, planes.data());
          if (nchw) {  // each channel's row as it is
            for (int64_t co = 0; co < p.cout; ++co)
              copy_row(image.data() + (co * p.oh + oh) * p.ow, planes.data() + co * p.owp, p.ow);
            continue;
          }
          for (int64_t ow = 0; ow < p.ow; ++ow)
            for (int64_t co = 0; co < p.cout; ++co)
              row[static_cast<size_t>(ow * p.cout + co)] =
                  planes[static_cast<size_t>(co * p.owp + ow)];
          convert_row(row.data(), DType::f32, yb + ((n * p.oh + oh) * row_elems) * isz, ydt,
                      row_elems);
        }
        if (nchw)
          convert_row(image.data(), DType::f32, yb + n * p.cout * p.oh * p.ow * isz, ydt,
                      p.cout * p.oh * p.ow);
      }
    }
  });
}

std::string conv_direct_c1_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (!p.dw.defined()) return "no weight gradient needed";
  return common_declines(p.g, p.x.dtype(), p.dy);
}

void conv_direct_c1_bwd_weights(const ConvBwdWeightsProblem& pr) {
  const Plan p = make_plan(pr.g);
  const int64_t taps = p.kh * p.kw, slot = p.cout * taps + p.cout;  // dW then db, per image
  const int64_t N = pr.g.n;
  // Every element is written (by its image) before it is read: no zero-fill of the 2.5 MB.
  const auto parts = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(N * slot));
  const BwdFn fn = pick_bwd(p.kw, avx512(), std::make_integer_sequence<int, kMaxK>{});
  const DType ddt = pr.dy.dtype();
  const char* db_ = static_cast<const char*>(pr.dy.data_ptr());
  const int64_t img_elems = p.oh * p.ow * p.cout, isz = static_cast<int64_t>(dtype_size(ddt));
  const bool nchw = !dense_nhwc(pr.dy, pr.g);
  const bool cl = !nchw && !avx512();  // channels-last dy read as it is (AVX2)
  const cols_avx2::BwdClFn cl_fn =
      cols_avx2::pick_bwd_cl(p.kw, std::make_integer_sequence<int, kMaxK>{});
  visit_float(pr.x.dtype(), [&]<class T>() {
#pragma omp parallel
    {
      std::vector<float> xp(static_cast<size_t>(p.ph * p.pw));
      std::vector<float> dy32(static_cast<size_t>(img_elems + kCoBlk),
                              0.0f);  // 8 readable past the end
      std::vector<float> planes(static_cast<size_t>(cl ? 0 : p.cout * p.oh * p.owp),
                                0.0f);  // tails stay 0
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        pad_image<T>(pr.x, n, p, xp.data());
        convert_row(db_ + n * img_elems * isz, ddt, dy32.data(), DType::f32, img_elems);
        if (cl) {
          float* part = parts.get() + n * slot;
          for (int64_t i = 0; i < p.kh; ++i)
            cl_fn(dy32.data(), xp.data(), p, i, part, i == 0 ? part + p.cout * taps : nullptr);
          continue;
        }
        if (nchw) {  // each channel's rows into its plane
          for (int64_t co = 0; co < p.cout; ++co)
            for (int64_t oh = 0; oh < p.oh; ++oh)
              copy_row(planes.data() + (co * p.oh + oh) * p.owp,
                       dy32.data() + (co * p.oh + oh) * p.ow, p.ow);
        } else {
          for (int64_t oh = 0; oh < p.oh; ++oh)
            for (int64_t ow = 0; ow < p.ow; ++ow)
              for (int64_t co = 0; co < p.cout; ++co)
                planes[static_cast<size_t>((co * p.oh + oh) * p.owp + ow)] =
                    dy32[static_cast<size_t>((oh * p.ow + ow) * p.cout + co)];
        }
        float* part = parts.get() + n * slot;
        for (int64_t co = 0; co < p.cout; ++co) {
          const float* plane = planes.data() + co * p.oh * p.owp;
          for (int64_t i = 0; i < p.kh; ++i)
            fn(plane, xp.data(), p, i, part + co * taps + i * p.kw);
          part[p.cout * taps + co] = cols_avx2::plane_sum(plane, p.oh * p.owp);  // db
        }
      }
    }
  });
  // Sum the images' slots in image order (deterministic), then store dW and db.
  const std::vector<float> total = sum_slots_in_order(parts.get(), N, slot);
  MIXPREC_ASSERT(pr.dw.is_contiguous(), "conv_direct_c1_bwd_weights: dw must be contiguous");
  convert_row(total.data(), DType::f32, pr.dw.data_ptr(), pr.dw.dtype(), p.cout * taps);
  if (pr.db.defined()) {
    MIXPREC_ASSERT(pr.db.is_contiguous(), "conv_direct_c1_bwd_weights: db must be contiguous");
    convert_row(total.data() + p.cout * taps, DType::f32, pr.db.data_ptr(), pr.db.dtype(), p.cout);
  }
}

}  // namespace mixprec::ops::cpu
