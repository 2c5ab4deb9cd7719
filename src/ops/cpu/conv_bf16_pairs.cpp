// Weight gradients of bf16 layers on CPUs with AVX512-BF16, as pairs of positions through the
// hardware's dot product (vdpbf16ps): a convolution's dW[tap][oc][ic] = sum over the output
// positions p of dy[p][oc] * x[q(p, tap)][ic], and a Dense layer's dW = dy^T x over the tokens
// (the same with one tap). oneDNN 2.6 runs the convolution's at 0.56 of the machine's bf16 rate on
// resnet-small's layers (its `jit_bf16` backward-weights: 420-690 GFLOP/s alone, 470 in the step,
// where its forward reaches 710-1000), 35% of that model's step.
//
// vdpbf16ps adds to each f32 lane the two products of a pair of bf16 values: the odd one first,
// then the even one, each addition rounded to nearest even (checked on this project's AMD and in
// Intel's manual), subnormal inputs and results flushed to zero, as in oneDNN's own bf16 kernels.
// So a pair holds two output positions: p0 = (n, oh, 2j) and p1 = (n, oh, 2j + 1) (zero when
// OW is odd and 2j + 1 = OW, x's word too, so that an inf there meets no phantom 0). Each image is
// packed into 32-bit words
//   dy2 (oh, j, oc)     = (dy[p0][oc], dy[p1][oc])
//   xp (kw, r, j, ic)   = (x[r - pad_t][iw0][ic], x[r - pad_t][iw1][ic])  (zero where padding)
// with iw0, iw1 = (2j or 2j + 1) * stride_w + kw - pad_l, and r the padded input row; the tap
// (kh, kw) of output row oh reads xp row r = oh * stride_h + kh. 32 channels are interleaved at
// a time by unpacklo/unpackhi, which work within 128-bit lanes: the slots' channel order is undone
// when the sums are stored (slot_channel). A tile of MR = 8 output channels x NV vectors of 16
// input channels of one tap is held in NV * 8 registers; each pair broadcasts the 8 dy words and
// loads NV x vectors: 8 * NV vdpbf16ps for 8 + NV loads (2 a cycle: the machine's peak).
//
// Order and threads: the images (the tokens) fall into at most kGroups groups, a count set by the
// shape alone; a thread takes whole groups, packs each image once and runs every tile over it into
// the group's own f32 sums, which are then added in group order. Every dW value is thus a chain
// over the pairs of its group in order, then a chain over the groups: the bits do not depend on the
// thread count. (Splitting the tiles between the threads instead made each thread pack every image:
// a third of the time; packing together needed a barrier per chunk, which ran at the pace of the
// slower of the 2 shared cores.) The sums are rounded once into dw's dtype; db (when asked for) is
// the column sum of dy (sum_rows, in position order).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/error.h"
#include "ops/cpu/kernels.h"
#include "ops/layout.h"
#include "ops/matmul_problem.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <immintrin.h>

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kMr = 8;                            // output channels per tile
constexpr int64_t kMaxImageBytes = int64_t{2} << 20;  // a chunk's packed words, per thread
constexpr int64_t kChunkPairs = 256;                  // pairs a chunk of images should hold
constexpr int64_t kGroups = 8;       // groups of images summed separately: up to 8 threads busy
constexpr int64_t kMinGemmK = 1024;  // the GEMM kernel's shortest reduction
// The largest weight gradient taken (elements): the groups' f32 sums are kGroups copies of it, 32
// MB at most; larger layers stay with oneDNN, whose kernels need no such copies.
constexpr int64_t kMaxWeights = int64_t{1} << 20;

struct Geo {
  int64_t n, cin, h, w, cout, kh, kw, oh, ow, sh, sw, pt, pl;
  int64_t pairs;  // pairs per output row: ceil(ow / 2)
  int64_t rows;   // padded input rows the taps read: (oh - 1) * sh + kh
  int nv;         // vectors of 16 input channels per tile: 2 where cin % 32 == 0, else 1
  int64_t chunk;  // images packed together: at least kChunkPairs pairs, within kMaxImageBytes
  int64_t dy_words() const { return oh * pairs * cout; }
  int64_t x_words() const { return kw * rows * pairs * cin; }
  // A chunk's words of one block of 16 output channels in dy2, of 16 nv input channels in xp.
  int64_t dy_block() const { return chunk * oh * pairs * 16; }
  int64_t x_block() const { return chunk * kw * rows * pairs * 16 * nv; }
};

Geo make_geo(const ConvGeometry& g) {
  Geo q{g.n,
        g.cin,
        g.h,
        g.w,
        g.cout,
        g.kh,
        g.kw,
        g.oh,
        g.ow,
        g.stride_h,
        g.stride_w,
        g.pad_t,
        g.pad_l,
        (g.ow + 1) / 2,
        (g.oh - 1) * g.stride_h + g.kh,
        1,
        1};
  q.nv = g.cin % 32 == 0 ? 2 : 1;
  const int64_t per_image = std::max<int64_t>(1, q.oh * q.pairs);
  const int64_t bytes = std::max<int64_t>(1, (q.dy_words() + q.x_words()) * 4);
  q.chunk = std::clamp<int64_t>((kChunkPairs + per_image - 1) / per_image, 1,
                                std::max<int64_t>(1, kMaxImageBytes / bytes));
  return q;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

// Two pixels' channels as pair words (a's value in the low half). 32 channels at a time go
// through unpacklo/unpackhi, which interleave within 128-bit lanes: the words at slots
// [c, c + 16) hold channels c + {0-3, 8-11, 16-19, 24-27} and [c + 16, c + 32) the same + 4
// (slot_channel undoes it when the sums are stored); a last 16 keep their order.
inline int64_t slot_channel(int64_t s, int64_t n) {
  if (s / 32 * 32 + 32 > n) return s;
  const int64_t l = s % 16;
  return s / 32 * 32 + l / 4 * 8 + l % 4 + (s % 32) / 16 * 4;
}

// slot_channel for every slot of n.
inline std::vector<int64_t> slot_channels(int64_t n) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) t[static_cast<size_t>(s)] = slot_channel(s, n);
  return t;
}

// sums[e] = sums[e] + sums[words + e] + ... over the groups, in group order (one chain per
// element, vectorised across elements).
inline void add_groups(float* sums, int64_t groups, int64_t words) {
#pragma omp parallel for schedule(static) if (groups * words > 65536)
  for (int64_t e0 = 0; e0 < words; e0 += 4096) {
    const int64_t e1 = std::min(words, e0 + 4096);
    for (int64_t q = 1; q < groups; ++q) {
      const float* src = sums + q * words;
      for (int64_t e = e0; e < e1; ++e) sums[e] += src[e];
    }
  }
}

// n channels (a multiple of 16) of pixels a and b (null: zeros) into the pair words of slots
// [0, n): slot c at out + c / width * block + c % width.
inline void pair_row(const uint16_t* a, const uint16_t* b, int64_t n, uint32_t* out, int64_t block,
                     int64_t width) {
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512i va = a ? _mm512_loadu_si512(a + c) : _mm512_setzero_si512();
    const __m512i vb = b ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
    _mm512_storeu_si512(out + c / width * block + c % width, _mm512_unpacklo_epi16(va, vb));
    _mm512_storeu_si512(out + (c + 16) / width * block + (c + 16) % width,
                        _mm512_unpackhi_epi16(va, vb));
  }
  for (; c < n; c += 16) {
    const __m512i lo =
        a ? _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)(a + c)))
          : _mm512_setzero_si512();
    const __m512i hi =
        b ? _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)(b + c)))
          : _mm512_setzero_si512();
    _mm512_storeu_si512(out + c / width * block + c % width,
                        _mm512_or_si512(lo, (__m512i)((__v16su)hi << 16)));  // no undefined source
  }
}

// Image n's pairs into slot i of a chunk's blocked buffers, so that each tile reads its operands
// as two contiguous streams: dy2[oc / 16][i][oh][j][oc % 16] (two tiles of 8 per block) and
// xp[ic / (16 nv)][i][kw][r][j][ic % (16 nv)] (g.chunk slots). x and dy dense channels-last bf16.
void pack_image(const Geo& g, const uint16_t* x, const uint16_t* dy, int64_t n, int64_t i,
                uint32_t* dy2, uint32_t* xp) {
  const int64_t dy_block = g.dy_block();
  const uint16_t* dyn = dy + n * g.oh * g.ow * g.cout;
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t j = 0; j < g.pairs; ++j) {
      const uint16_t* p0 = dyn + (oh * g.ow + 2 * j) * g.cout;
      const uint16_t* p1 = 2 * j + 1 < g.ow ? p0 + g.cout : nullptr;
      pair_row(p0, p1, g.cout, dy2 + ((i * g.oh + oh) * g.pairs + j) * 16, dy_block, 16);
    }
  const int64_t width = 16 * g.nv, x_block = g.x_block();
  const uint16_t* xn = x + n * g.h * g.w * g.cin;
  for (int64_t kw = 0; kw < g.kw; ++kw)
    for (int64_t r = 0; r < g.rows; ++r) {
      const int64_t ih = r - g.pt;
      const bool row_in = ih >= 0 && ih < g.h;
      uint32_t* out = xp + ((i * g.kw + kw) * g.rows + r) * g.pairs * width;
      for (int64_t j = 0; j < g.pairs; ++j, out += width) {
        const int64_t iw0 = 2 * j * g.sw + kw - g.pl, iw1 = iw0 + g.sw;
        const uint16_t* a =
            row_in && iw0 >= 0 && iw0 < g.w ? xn + (ih * g.w + iw0) * g.cin : nullptr;
        const uint16_t* b = row_in && 2 * j + 1 < g.ow && iw1 >= 0 && iw1 < g.w
                                ? xn + (ih * g.w + iw1) * g.cin
                                : nullptr;
        pair_row(a, b, g.cin, out, x_block, width);
      }
    }
}

// The register block of a tile: 8 rows (output channels) x NV vectors of 16 columns (input
// channels), loaded from acc (or 0 if fresh), then `pairs` pairs: dr the rows' words (8 of them
// every 16), xr the columns' words (16 NV of them every 16 NV), and stored back.
template <int NV> struct Block {
  __m512 c[kMr][NV];
  Block(const float* acc, int64_t ldc, bool fresh) {
    for (int m = 0; m < kMr; ++m)
      for (int v = 0; v < NV; ++v)
        c[m][v] = fresh ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + m * ldc + v * 16);
  }
  [[gnu::always_inline]] void add(int64_t pairs, const uint32_t* dr, const uint32_t* xr) {
    for (int64_t j = 0; j < pairs; ++j, dr += 16, xr += 16 * NV) {
      __m512bh b[NV];
      for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(xr + v * 16);
      for (int m = 0; m < kMr; ++m) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(dr[m]));
        for (int v = 0; v < NV; ++v) c[m][v] = _mm512_dpbf16_ps(c[m][v], a, b[v]);
      }
    }
  }
  void store(float* acc, int64_t ldc) const {
    for (int m = 0; m < kMr; ++m)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(acc + m * ldc + v * 16, c[m][v]);
  }
};

// acc (tap (kh, kw)'s [oc0, oc0 + 8) x [ic0, ic0 + 16 NV)) (0 if fresh) + the pairs of the chunk's
// first `images` slots, in (image, oh, j) order: d and x are the tile's oc and ic blocks of dy2 and
// xp. Stride 1: an image's rows of pairs follow one another in dy2 and in xp, so its pairs are one
// run (fewer loop exits where rows hold few pairs); else one run per output row.
template <int NV> void tile(const Geo& g, int64_t images, const uint32_t* d, const uint32_t* x,
                            int64_t kh, int64_t kw, bool fresh, float* acc) {
  Block<NV> blk(acc, g.cin, fresh);
  const int64_t runs = g.sh == 1 ? 1 : g.oh, run = g.sh == 1 ? g.oh * g.pairs : g.pairs;
  for (int64_t i = 0; i < images; ++i)
    for (int64_t oh = 0; oh < runs; ++oh)
      blk.add(run, d + (i * g.oh + oh) * g.pairs * 16,
              x + ((i * g.kw + kw) * g.rows + oh * g.sh + kh) * g.pairs * 16 * NV);
  blk.store(acc, g.cin);
}

// The whole weight gradient, as kGroups fixed groups of images (a count set by the batch alone):
// a thread takes whole groups, packs each of its images once into its own buffers (its slice of
// `pack`), chunk by chunk, and runs every tile over the chunk into the group's own sums (a tile's
// registers loaded and stored once a chunk). No thread waits for another or packs an image twice
// (splitting the tiles between the threads made each pack every image: a third of the time).
// Consecutive tiles share the tap and input channels: one slice of xp serves the oc blocks.
void run(const Geo& g, int64_t groups, const uint16_t* x, const uint16_t* dy, uint32_t* pack,
         float* sums) {
  const int64_t dy_block = g.dy_block(), x_block = g.x_block();
  const int64_t ocb = g.cout / kMr, icb = g.cin / (16 * g.nv), tiles = g.kh * g.kw * ocb * icb;
  const int64_t words = g.kh * g.kw * g.cout * g.cin;
  const int64_t per_thread = g.chunk * (g.dy_words() + g.x_words());
#pragma omp parallel
  {
    int64_t id = 0;
#ifdef _OPENMP
    id = omp_get_thread_num();
#endif
    uint32_t* const dy2 = pack + id * per_thread;
    uint32_t* const xp = dy2 + g.chunk * g.dy_words();
#pragma omp for schedule(static)
    for (int64_t grp = 0; grp < groups; ++grp) {
      const int64_t n_end = (grp + 1) * g.n / groups;
      for (int64_t n0 = grp * g.n / groups; n0 < n_end; n0 += g.chunk) {
        const int64_t images = std::min(g.chunk, n_end - n0);
        const bool fresh = n0 == grp * g.n / groups;
        for (int64_t i = 0; i < images; ++i) pack_image(g, x, dy, n0 + i, i, dy2, xp);
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t tap = t / (ocb * icb), ib = t / ocb % icb, ob = t % ocb;
          float* acc = sums + grp * words + (tap * g.cout + ob * kMr) * g.cin + ib * 16 * g.nv;
          const uint32_t* d = dy2 + ob / 2 * dy_block + ob % 2 * kMr;
          const uint32_t* xs = xp + ib * x_block;
          if (g.nv == 2)
            tile<2>(g, images, d, xs, tap / g.kw, tap % g.kw, fresh, acc);
          else
            tile<1>(g, images, d, xs, tap / g.kw, tap % g.kw, fresh, acc);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- the GEMM with a long reduction

// out[m][n] = sum over k of a[m][k] b[k][n], where a is the transpose of a row-major [K, M] (a
// Dense layer's output gradient: linear's backward-weights) and b row-major [K, N]: the pairs are
// consecutive k, packed as for the convolution (a's rows as dy's pixels, b's as x's), the K range
// split in `groups` fixed groups summed separately, then in group order.
struct Gemm {
  int64_t m, n, k, lda, ldb;  // a[m][k] at a + k * lda + m; b[k][n] at b + k * ldb + n
  int nv;
  int64_t groups, chunk;  // chunk: pairs packed at a time
};

void gemm_run(const Gemm& g, const uint16_t* a, const uint16_t* b, uint32_t* pack, float* sums) {
  const int64_t width = 16 * g.nv, mb = g.m / kMr, nb = g.n / width, words = g.m * g.n;
  const int64_t pairs_total = (g.k + 1) / 2;
#pragma omp parallel
  {
    int64_t id = 0;
#ifdef _OPENMP
    id = omp_get_thread_num();
#endif
    uint32_t* const d2 = pack + id * g.chunk * (g.m + g.n);
    uint32_t* const x2 = d2 + g.chunk * g.m;
#pragma omp for schedule(static)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const int64_t p_end = (grp + 1) * pairs_total / g.groups;
      for (int64_t p0 = grp * pairs_total / g.groups; p0 < p_end; p0 += g.chunk) {
        const int64_t pairs = std::min(g.chunk, p_end - p0);
        const bool fresh = p0 == grp * pairs_total / g.groups;
        for (int64_t j = 0; j < pairs; ++j) {
          const int64_t k0 = 2 * (p0 + j);
          const bool two = k0 + 1 < g.k;
          pair_row(a + k0 * g.lda, two ? a + (k0 + 1) * g.lda : nullptr, g.m, d2 + j * 16,
                   pairs * 16, 16);
          pair_row(b + k0 * g.ldb, two ? b + (k0 + 1) * g.ldb : nullptr, g.n, x2 + j * width,
                   pairs * width, width);
        }
        for (int64_t t = 0; t < mb * nb; ++t) {
          const int64_t ib = t / mb, ob = t % mb;
          float* acc = sums + grp * words + ob * kMr * g.n + ib * width;
          const uint32_t* d = d2 + ob / 2 * pairs * 16 + ob % 2 * kMr;
          const uint32_t* x = x2 + ib * pairs * width;
          if (g.nv == 2) {
            Block<2> blk(acc, g.n, fresh);
            blk.add(pairs, d, x);
            blk.store(acc, g.n);
          } else {
            Block<1> blk(acc, g.n, fresh);
            blk.add(pairs, d, x);
            blk.store(acc, g.n);
          }
        }
      }
    }
  }
}

#pragma GCC pop_options

}  // namespace

std::string conv_bf16_pairs_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16)) return "needs AVX512-BF16";
  if (p.x.dtype() != DType::bf16 || p.dy.dtype() != DType::bf16) return "not bf16";
  if (!p.dw.defined()) return "no weight gradient needed";
  const ConvGeometry& g = p.g;
  if (g.groups != 1 || g.dil_h != 1 || g.dil_w != 1) return "groups or dilation != 1";
  // A 1x1 convolution packs as much as it computes (one tap): oneDNN measured 1.1-1.45x faster
  // on resnet-small's stride-2 shortcuts; so it stays there, in the fixed order too.
  if (g.kh * g.kw == 1) return "a 1x1 kernel (oneDNN's measured faster)";
  if (g.cin % 16 != 0) return "input channels not a multiple of 16";
  if (g.cout % 16 != 0) return "output channels not a multiple of 16";
  if (g.n == 0 || g.oh == 0 || g.ow == 0) return "no output positions";
  if (!has_layout(p.x, ImageLayout::nhwc) || !has_layout(p.dy, ImageLayout::nhwc))
    return "input or output gradient not dense channels-last";
  const Geo q = make_geo(g);
  if ((q.dy_words() + q.x_words()) * 4 > kMaxImageBytes)
    return "an image's packed pairs exceed 2 MB";
  if (g.kh * g.kw * g.cout * g.cin > kMaxWeights) return "a weight of more than 2^20 elements";
  return "";
}

void conv_bf16_pairs_bwd_weights(const ConvBwdWeightsProblem& p) {
  const Geo g = make_geo(p.g);
  const int64_t taps = g.kh * g.kw, words = taps * g.cout * g.cin;
  // The f32 sums [tap][oc][ic], dW's order of them and the chunk's packed pairs, from the caching
  // allocator (fresh megabytes would page-fault on every call: a quarter of the time measured).
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const int64_t groups = std::min(g.n, kGroups);
  const int64_t pack_words = threads * g.chunk * (g.dy_words() + g.x_words());
  const Tensor scratch = Tensor::empty({(groups + 1) * words + pack_words}, {.dtype = DType::f32});
  float* const sums = static_cast<float*>(scratch.data_ptr());
  float* const dw = sums + groups * words;
  run(g, groups, static_cast<const uint16_t*>(p.x.data_ptr()),
      static_cast<const uint16_t*>(p.dy.data_ptr()), reinterpret_cast<uint32_t*>(dw + words), sums);
  // The groups' sums added in group order, then [tap][oc slot][ic slot] -> dw [oc][ic][kh][kw].
  add_groups(sums, groups, words);
  const std::vector<int64_t> oc_of = slot_channels(g.cout), ic_of = slot_channels(g.cin);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t oc = 0; oc < g.cout; ++oc) {
      const float* src = sums + (t * g.cout + oc) * g.cin;
      float* dst = dw + oc_of[static_cast<size_t>(oc)] * g.cin * taps + t;
      for (int64_t ic = 0; ic < g.cin; ++ic) dst[ic_of[static_cast<size_t>(ic)] * taps] = src[ic];
    }
  MIXPREC_ASSERT(p.dw.is_contiguous(), "conv_bf16_pairs_bwd_weights: dw must be contiguous");
  convert_row(dw, DType::f32, p.dw.data_ptr(), p.dw.dtype(), taps * g.cout * g.cin);
  if (p.db.defined()) {
    // dy as [N * OH * OW, C] (dense channels-last): its column sums, rows in order.
    Tensor db = p.db;
    sum_rows(p.dy.permute({0, 2, 3, 1}).reshape({g.n * g.oh * g.ow, g.cout}), db);
  }
}

std::string gemm_bf16_pairs_declines(const MatmulProblem& p) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16)) return "needs AVX512-BF16";
  if (p.a.dtype() != DType::bf16 || p.b.dtype() != DType::bf16) return "not bf16";
  if (p.a.dim() != 2 || p.b.dim() != 2) return "batched";
  if (p.bias.defined() || p.relu) return "a bias or ReLU";
  const int64_t m = p.a.size(0), k = p.a.size(1), n = p.b.size(1);
  if (m % 16 != 0 || n % 16 != 0) return "M or N not a multiple of 16";
  if (k < kMinGemmK) return "a reduction shorter than 1024";
  if (m * n > kMaxWeights) return "an output of more than 2^20 elements";
  if (p.a.strides()[0] != 1 || p.a.strides()[1] < m)
    return "a is not the transpose of a row-major matrix";
  if (p.b.strides()[1] != 1 || p.b.strides()[0] < n) return "b is not row-major";
  if (!p.out.is_contiguous()) return "out not contiguous";
  return "";
}

void gemm_bf16_pairs(const MatmulProblem& p) {
  Gemm g{p.a.size(0), p.b.size(1), p.a.size(1), p.a.strides()[1], p.b.strides()[0], 1, 1, 1};
  g.nv = g.n % 32 == 0 ? 2 : 1;
  const int64_t pairs = (g.k + 1) / 2;
  g.groups = std::clamp<int64_t>(pairs / 128, 1, kGroups);  // set by the shape alone
  g.chunk = std::clamp<int64_t>((int64_t{256} << 10) / (4 * (g.m + g.n)), 64, 1024);
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  const int64_t words = g.m * g.n;
  const Tensor scratch =
      Tensor::empty({g.groups * words + threads * g.chunk * (g.m + g.n)}, {.dtype = DType::f32});
  float* const sums = static_cast<float*>(scratch.data_ptr());
  gemm_run(g, static_cast<const uint16_t*>(p.a.data_ptr()),
           static_cast<const uint16_t*>(p.b.data_ptr()),
           reinterpret_cast<uint32_t*>(sums + g.groups * words), sums);
  // The groups in order, the slots' channel order undone, rounded once into out's dtype.
  add_groups(sums, g.groups, words);
  const std::vector<int64_t> m_of = slot_channels(g.m), n_of = slot_channels(g.n);
  std::vector<float> row(static_cast<size_t>(g.n));
  const int64_t osz = static_cast<int64_t>(dtype_size(p.out.dtype()));
  for (int64_t ms = 0; ms < g.m; ++ms) {
    for (int64_t ns = 0; ns < g.n; ++ns)
      row[static_cast<size_t>(n_of[static_cast<size_t>(ns)])] = sums[ms * g.n + ns];
    convert_row(row.data(), DType::f32,
                static_cast<char*>(p.out.data_ptr()) + m_of[static_cast<size_t>(ms)] * g.n * osz,
                p.out.dtype(), g.n);
  }
}

}  // namespace mixprec::ops::cpu
