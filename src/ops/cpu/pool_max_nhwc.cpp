// Max pooling for channels-last f32/bf16/f16 tensors: the layout the convolutions produce.
// Forward keeps, per output element, the index of the first maximum inside its window (u8,
// a [N, OH, OW, C] workspace); backward routes each gradient to that index, accumulating in
// f32 only when windows overlap. NaN propagates (it wins the max), as in the reference.
// On this CPU it runs 4-8x faster than oneDNN 2.6's bf16 channels-last pooling. Each output
// pixel's C channels are contiguous, so the inner loop runs over channels (vectorised); images
// are split over threads. Below 16 channels, with no horizontal padding, a row is computed as
// dense passes over all window starts instead (dense_row): LeNet's 6-channel pooling 0.84 ->
// 0.61 ms a forward at batch 256 (best of 8 alternated runs); a -inf start with a compare for the
// first tap, and an AVX2 build of the passes, both measured slower and were dropped. With the
// channels in whole vectors (16 on AVX-512, 8 on AVX2: convnet-bn's 32 and 64), the forward runs
// the windows in registers instead (pool_max_windows.inc): each window's taps read straight from
// x, its offsets computed once for all its channel vectors, the rows a few windows ahead
// prefetched. convnet-bn's two poolings, in its step (3 alternated profiles): 3.06-3.89
// -> 1.41-1.77 ms a step; alone at batch 256 x 28 x 28 x 32 bf16, 1.32 -> 0.75 ms (before the
// prefetch, alternated).
#include "ops/cpu/kernels.h"

#include <cmath>

#include <algorithm>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/dtype.h"
#include "ops/cpu/simd.h"

namespace mixprec::ops::cpu {
using namespace detail;
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace windows_avx512 {
using namespace simd::avx512;
#include "ops/cpu/pool_max_windows.inc"
}  // namespace windows_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace windows_avx2 {
using namespace simd::avx2;
#include "ops/cpu/pool_max_windows.inc"
}  // namespace windows_avx2
#pragma GCC pop_options

std::string common_declines(const PoolGeometry& g, DType dt) {
  if (g.kind != PoolKind::max) return "not max pooling";
  if (g.adaptive) return "adaptive bins";
  if (g.layout != ImageLayout::nhwc) return "not channels-last";
  if (dt == DType::f64) return "f64 (the reference handles it)";
  if (g.kh * g.kw > 255) return "window larger than 255 elements";
  return "";
}

}  // namespace

std::string pool_max_nhwc_fwd_declines(const PoolFwdProblem& p) {
  return common_declines(p.g, p.x.dtype());
}

namespace {

// Few channels (LeNet's 6), windows inside the row horizontally: one output row as dense passes.
// best[q] / arg[q] for every window start column w0 in [0, (OW-1)*sw] and channel (q = w0*C + c),
// each tap (i, j) one vectorised pass over rows[i] shifted by j*C, in the per-window loop's tap
// order and with its compare; then the columns w0 = ow*sw are gathered. The passes compute sw
// times the needed starts but have no per-window overhead, which at C = 6 was most of the cost.
// The compare is written out here and in the per-window loop: one inline helper for both measured
// slower at 32 channels (6 alternated runs: 1.9-2.9 ms written out, 2.6-3.4 ms shared), so it stays
// twice. rows: kh widened input rows (valid[i] false: outside the image, skipped); writes out[ow*C
// + c] and the argmax (as u8 into w, when given). The first valid tap starts from -inf with its own
// index and is then compared like the others: the same maximum and first argmax as the per-window
// loop, a -inf or NaN first value included.
void dense_row(const PoolGeometry& g, const float* rows, const char* valid, float* best, float* arg,
               float* out, uint8_t* w) {
  const int64_t C = g.c, WC = g.w * C, L = ((g.ow - 1) * g.stride_w + 1) * C;
  bool first = true;
  for (int64_t i = 0; i < g.kh; ++i) {
    if (!valid[i]) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const float* src = rows + i * WC + j * C;
      const float idx = static_cast<float>(i * g.kw + j);
      if (first) {  // -inf with the first tap's index, then that tap compared like the others
#pragma omp simd
        for (int64_t q = 0; q < L; ++q) {
          best[q] = -INFINITY;
          arg[q] = idx;
        }
        first = false;
      }
#pragma omp simd
      for (int64_t q = 0; q < L; ++q) {
        const float v = src[q];
        const bool take = (v > best[q]) | ((v != v) & (best[q] == best[q]));  // NaN wins
        best[q] = take ? v : best[q];
        arg[q] = take ? idx : arg[q];
      }
    }
  }
  const int64_t step = g.stride_w * C;
  for (int64_t ow = 0; ow < g.ow; ++ow)
    for (int64_t c = 0; c < C; ++c) {
      out[ow * C + c] = best[ow * step + c];
      if (w) w[ow * C + c] = static_cast<uint8_t>(arg[ow * step + c]);
    }
}

// The dense passes pay off below this many channels (the per-window loop vectorises over C).
constexpr int64_t kDenseBelowC = 16;

}  // namespace

void pool_max_nhwc_fwd(const PoolFwdProblem& p) {
  const PoolGeometry& g = p.g;
  const int64_t C = g.c, WC = g.w * C;
  Tensor ws;
  if (p.workspace) {  // a replayed call (GRAPH_MODE) hands back the workspace it made before
    const Shape s{g.n, g.oh, g.ow, C};
    const bool reuse =
        p.workspace->defined() && p.workspace->shape() == s && p.workspace->dtype() == DType::u8;
    ws = reuse ? *p.workspace : Tensor::empty(s, {.dtype = DType::u8, .device = p.x.device()});
  }
  uint8_t* wb = ws.defined() ? ws.data<uint8_t>() : nullptr;
  const char* xb = static_cast<const char*>(p.x.data_ptr());
  char* yb = static_cast<char*>(p.y.data_ptr());
  const DType dt = p.x.dtype();
  const int64_t es = static_cast<int64_t>(p.x.itemsize());
  const bool dense = C < kDenseBelowC && g.pad_l == 0 && (g.ow - 1) * g.stride_w + g.kw <= g.w;
  // Channels in whole vectors: the windows in registers, straight from x (no widened rows).
  const simd::Isa isa = simd::best_isa();
  const int64_t lanes = isa == simd::Isa::avx512 ? simd::avx512::kLanes : simd::avx2::kLanes;
  if (!dense && isa != simd::Isa::scalar && C % lanes == 0) {
    visit_float(dt, [&]<class T>() {
      if constexpr (!std::is_same_v<T, double>) {
        const T* x = static_cast<const T*>(p.x.data_ptr());
        T* y = static_cast<T*>(p.y.data_ptr());
        if (isa == simd::Isa::avx512)
          windows_avx512::max_windows<T>(g, x, y, wb);
        else
          windows_avx2::max_windows<T>(g, x, y, wb);
      }
    });
    if (p.workspace) *p.workspace = ws;
    return;
  }
#pragma omp parallel
  {
    // Per thread: the window's input rows widened to f32 (vectorised converter), and the
    // running max / argmax (argmax as f32, the same vector width, so the select vectorises).
    std::vector<float> rows(static_cast<size_t>(g.kh * WC)), arg(static_cast<size_t>(C));
    std::vector<float> out(static_cast<size_t>(g.ow * C));
    std::vector<char> valid(static_cast<size_t>(g.kh));
    std::vector<float> best(dense ? static_cast<size_t>(WC) : 0), dense_arg(best.size());
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.stride_h - g.pad_t + i;
          valid[static_cast<size_t>(i)] = ih >= 0 && ih < g.h;
          if (valid[static_cast<size_t>(i)])
            convert_row(xb + (n * g.h + ih) * WC * es, dt, rows.data() + i * WC, DType::f32, WC);
        }
        if (dense) {
          dense_row(g, rows.data(), valid.data(), best.data(), dense_arg.data(), out.data(),
                    wb ? wb + (n * g.oh + oh) * g.ow * C : nullptr);
          convert_row(out.data(), DType::f32, yb + (n * g.oh + oh) * g.ow * C * es, dt, g.ow * C);
          continue;
        }
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          float* bp = out.data() + ow * C;  // the running max is the output row itself
          float* ap = arg.data();
          bool first = true;
          for (int64_t i = 0; i < g.kh; ++i) {
            if (!valid[static_cast<size_t>(i)]) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t iw = ow * g.stride_w - g.pad_l + j;
              if (iw < 0 || iw >= g.w) continue;
              const float* px = rows.data() + i * WC + iw * C;
              const float idx = static_cast<float>(i * g.kw + j);
              if (first) {  // (C >= 16 here, or padding: the copy's call is amortised)
                std::copy(px, px + C, bp);
                std::fill(ap, ap + C, idx);
                first = false;
                continue;
              }
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) {
                const float v = px[c];
                const bool take =
                    (v > bp[c]) |
                    ((v != v) & (bp[c] == bp[c]));  // NaN wins (no short circuit: vectorises)
                bp[c] = take ? v : bp[c];
                ap[c] = take ? idx : ap[c];
              }
            }
          }
          if (wb) {
            uint8_t* w = wb + ((n * g.oh + oh) * g.ow + ow) * C;
            for (int64_t c = 0; c < C; ++c) w[c] = static_cast<uint8_t>(ap[c]);
          }
        }
        convert_row(out.data(), DType::f32, yb + (n * g.oh + oh) * g.ow * C * es, dt, g.ow * C);
      }
  }
  if (p.workspace) *p.workspace = ws;
}

std::string pool_max_nhwc_bwd_declines(const PoolBwdProblem& p) {
  if (auto why = common_declines(p.g, p.dy.dtype()); !why.empty()) return why;
  if (!p.workspace.defined() || p.workspace.dim() != 4) return "no channels-last argmax workspace";
  return "";
}

void pool_max_nhwc_bwd(const PoolBwdProblem& p) {
  const PoolGeometry& g = p.g;
  const int64_t C = g.c;
  const bool overlap = g.stride_h < g.kh || g.stride_w < g.kw;
  const uint8_t* wb = p.workspace.data<uint8_t>();
  // Window index -> offset in the image, relative to the window's corner (ih0 * W + iw0) * C:
  // a table instead of a division and a modulo per element.
  int64_t rel[256];
  for (int64_t k = 0; k < g.kh * g.kw; ++k) rel[k] = ((k / g.kw) * g.w + k % g.kw) * C;
  const int64_t image = g.h * g.w * C;
  visit_float(p.dy.dtype(), [&]<class T>() {
    const T* dyb = static_cast<const T*>(p.dy.data_ptr());
    T* dxb = static_cast<T*>(p.dx.data_ptr());
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      T* dxn = dxb + n * image;
      if (!overlap) std::fill(dxn, dxn + image, T{});
      std::vector<float> acc(overlap ? static_cast<size_t>(image) : 0, 0.0f);
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const int64_t o = ((n * g.oh + oh) * g.ow + ow) * C;
          // Padding makes the corner negative; the argmax always points inside the image.
          const int64_t corner =
              ((oh * g.stride_h - g.pad_t) * g.w + (ow * g.stride_w - g.pad_l)) * C;
          for (int64_t c = 0; c < C; ++c) {
            const int64_t at = corner + rel[wb[o + c]] + c;
            if (overlap)
              acc[static_cast<size_t>(at)] += static_cast<float>(load(dyb[o + c]));
            else
              dxn[at] = dyb[o + c];
          }
        }
      if (overlap)
        for (int64_t e = 0; e < image; ++e) dxn[e] = store<T>(acc[static_cast<size_t>(e)]);
    }
  });
}

}  // namespace mixprec::ops::cpu
