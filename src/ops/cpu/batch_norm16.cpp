// Batch normalisation of f16/bf16 activations with f32 parameters and statistics, widened tile by
// tile: each tile of at most kTile elements is converted to f32 in a stack buffer (F16C/AVX2 row
// converters, chosen at run time), computed in f32 and rounded back once, so no f32 copy of a
// whole tensor is ever made (low_via_f32 made three: x, y, and in backward x, dy, dx).
// Layouts: dense x seen as [outer][C][inner] (channels-last and [N, C]: inner = 1; NCHW: inner =
// H*W). Forward: the statistics of batch_norm_statistics (shared by every kernel), then the
// reference's formula, (x - mean) * (gamma * invstd) + beta in f32 without contraction: the same
// bits as ref::batch_norm_fwd. Backward: per-channel sums of dy and dy * (x - mean) in f32 within a
// tile, f64 across tiles, in an order fixed by the shape (thread-count independent), then the
// reference's formula for dx. GRAPH_MODE's fused ReLU (forward) and ReLU mask (backward) are
// applied to the f32 tile, with the relu op's own formulas.
#include <algorithm>
#include <cmath>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "ops/cpu/kernels.h"
#include "ops/kernel_choice.h"
#include "ops/elementwise_problem.h"
#include "ops/layout.h"

namespace mixprec::ops::cpu {
using namespace detail;
namespace {

constexpr int64_t kTile = 4096;  // f32 elements per tile: 16 KiB per buffer, in L1/L2

// A run of n values of x (16-bit) as f32 in out.
void widen(const Tensor& x, int64_t at, float* out, int64_t n) {
  if (x.dtype() == DType::f16)
    f16_to_f32_row(static_cast<const f16*>(x.data_ptr()) + at, out, n);
  else
    bf16_to_f32_row(static_cast<const bf16*>(x.data_ptr()) + at, out, n);
}
void narrow(const float* in, const Tensor& y, int64_t at, int64_t n) {
  if (y.dtype() == DType::f16)
    f32_to_f16_row(in, static_cast<f16*>(y.data_ptr()) + at, n);
  else
    f32_to_bf16_row(in, static_cast<bf16*>(y.data_ptr()) + at, n);
}

// The tiles of a [outer][C][inner] tensor: channels-last, a tile is `rows` whole rows of C;
// otherwise a piece of one channel's run of `inner` values. Tile t covers [begin, begin + size)
// of memory; first_channel and (for runs) channel say which channels it holds.
struct Tiling {
  ChannelBlocks b;
  int64_t rows = 0;     // channels-last: rows per tile
  int64_t per_run = 0;  // otherwise: tiles per run of `inner` values
  int64_t count = 0;

  explicit Tiling(const ChannelBlocks& blocks) : b(blocks) {
    if (b.inner == 1) {
      rows = std::max<int64_t>(1, kTile / b.channels);
      count = (b.outer + rows - 1) / rows;
    } else {
      per_run = (b.inner + kTile - 1) / kTile;
      count = b.outer * b.channels * per_run;
    }
  }
  bool channels_last() const { return b.inner == 1; }
  // Memory range of tile t, and (not channels-last) its channel.
  void range(int64_t t, int64_t& begin, int64_t& size, int64_t& channel) const {
    if (channels_last()) {
      const int64_t r0 = t * rows, r1 = std::min(b.outer, r0 + rows);
      begin = r0 * b.channels;
      size = (r1 - r0) * b.channels;
      channel = 0;
      return;
    }
    const int64_t run = t / per_run, piece = t % per_run;
    channel = run % b.channels;
    begin = run * b.inner + piece * kTile;
    size = std::min(kTile, b.inner - piece * kTile);
  }
};

// The arithmetic of a tile, compiled twice: for the baseline and for AVX2 (chosen at run time;
// no FMA, so no contraction: both give the reference's bits).
#define MIXPREC_TILE_VARIANTS(name, params, args)                        \
  __attribute__((target("avx2"))) void name##_avx2 params { name args; } \
  void name##_base params { name args; }

// f32 per-channel affine map on a tile: v = (v - mu) * scale + shift.
[[gnu::always_inline]] inline void apply_affine(float* v, int64_t size, const Tiling& t,
                                                int64_t channel, const float* mu,
                                                const float* scale, const float* shift) {
  if (t.channels_last()) {
    const int64_t c = t.b.channels;
    for (int64_t r = 0; r < size / c; ++r) {
      float* row = v + r * c;
      for (int64_t j = 0; j < c; ++j) row[j] = (row[j] - mu[j]) * scale[j] + shift[j];
    }
    return;
  }
  const float m = mu[channel], s = scale[channel], k = shift[channel];
  for (int64_t i = 0; i < size; ++i) v[i] = (v[i] - m) * s + k;
}

MIXPREC_TILE_VARIANTS(apply_affine,
                      (float* v, int64_t size, const Tiling& t, int64_t channel, const float* mu,
                       const float* scale, const float* shift),
                      (v, size, t, channel, mu, scale, shift))

// GRAPH_MODE's fused ReLU (norm_problem.h): in f32 before the rounding, which it commutes with;
// and relu's backward mask on the incoming gradient (the same formulas as the relu op's).
[[gnu::always_inline]] inline void relu_tile(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = formulas::Relu{}(v[i]);
}
MIXPREC_TILE_VARIANTS(relu_tile, (float* v, int64_t n), (v, n))
[[gnu::always_inline]] inline void relu_mask_tile(float* g, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = formulas::ReluMask{}(g[i], y[i]);
}
MIXPREC_TILE_VARIANTS(relu_mask_tile, (float* g, const float* y, int64_t n), (g, y, n))

// One tile's sums of g and g * (x - mu), per channel (slots: C channels-last, else 1), in f32.
[[gnu::always_inline]] inline void tile_sums(const float* xv, const float* gv, int64_t size,
                                             const Tiling& t, int64_t channel, const float* mu,
                                             double* out) {
  if (t.channels_last()) {
    const int64_t C = t.b.channels;
    alignas(64) float a[kTile], b[kTile];
    std::fill(a, a + C, 0.0f);
    std::fill(b, b + C, 0.0f);
    for (int64_t r = 0; r < size / C; ++r)
      for (int64_t j = 0; j < C; ++j) {
        a[j] += gv[r * C + j];
        b[j] += gv[r * C + j] * (xv[r * C + j] - mu[j]);
      }
    for (int64_t j = 0; j < C; ++j) {
      out[j] = a[j];
      out[C + j] = b[j];
    }
    return;
  }
  const float m = mu[channel];
  float a = 0, b = 0;
  for (int64_t i = 0; i < size; ++i) {
    a += gv[i];
    b += gv[i] * (xv[i] - m);
  }
  out[0] = a;
  out[1] = b;
}
MIXPREC_TILE_VARIANTS(tile_sums,
                      (const float* xv, const float* gv, int64_t size, const Tiling& t,
                       int64_t channel, const float* mu, double* out),
                      (xv, gv, size, t, channel, mu, out))

// One tile's dx = a * g + (b * (x - mu) + c), per channel, into gv.
[[gnu::always_inline]] inline void tile_dx(const float* xv, float* gv, int64_t size,
                                           const Tiling& t, int64_t channel, const float* mu,
                                           const float* a, const float* b, const float* c) {
  if (t.channels_last()) {
    const int64_t C = t.b.channels;
    for (int64_t r = 0; r < size / C; ++r)
      for (int64_t j = 0; j < C; ++j) {
        const int64_t i = r * C + j;
        gv[i] = a[j] * gv[i] + (b[j] * (xv[i] - mu[j]) + c[j]);
      }
    return;
  }
  const float aj = a[channel], bj = b[channel], cj = c[channel], m0 = mu[channel];
  for (int64_t i = 0; i < size; ++i) gv[i] = aj * gv[i] + (bj * (xv[i] - m0) + cj);
}
MIXPREC_TILE_VARIANTS(tile_dx,
                      (const float* xv, float* gv, int64_t size, const Tiling& t, int64_t channel,
                       const float* mu, const float* a, const float* b, const float* c),
                      (xv, gv, size, t, channel, mu, a, b, c))

std::vector<float> invstd_of(const Tensor& var, double eps) {
  const float* v = var.data<float>();
  std::vector<float> r(static_cast<size_t>(var.numel()));
  for (size_t c = 0; c < r.size(); ++c) r[c] = 1.0f / std::sqrt(v[c] + static_cast<float>(eps));
  return r;
}

// fn(tile, begin, size, channel, x, dy) on every tile, with x and dy widened into f32 buffers
// (dy masked by relu_y when a ReLU is fused); tiles in parallel.
template <class Fn>
void for_each_tile_pair(const BatchNormBwdProblem& p, const Tiling& t, Fn&& fn) {
  const auto mask = cpu_features().avx2 ? relu_mask_tile_avx2 : relu_mask_tile_base;
  const bool masked = p.relu_y.defined();
#pragma omp parallel for schedule(static) if (t.count > 1)
  for (int64_t k = 0; k < t.count; ++k) {
    alignas(64) float xv[kTile], gv[kTile];
    int64_t begin, size, channel;
    t.range(k, begin, size, channel);
    widen(p.x, begin, xv, size);
    widen(p.dy, begin, gv, size);
    if (masked) {
      alignas(64) float yv[kTile];
      widen(p.relu_y, begin, yv, size);
      mask(gv, yv, size);
    }
    fn(k, begin, size, channel, xv, gv);
  }
}

// Per channel, sum(dy) and sum(dy * (x - mean)): each tile sums in f32 into its own slots (f64),
// and the tiles are added in order.
void gradient_sums(const BatchNormBwdProblem& p, const Tiling& t, std::vector<double>& sg,
                   std::vector<double>& sgx) {
  const int64_t C = t.b.channels;
  const int64_t slots = t.channels_last() ? C : 1;
  std::vector<double> part(static_cast<size_t>(2 * t.count * slots));
  const float* mu = p.mean.data<float>();
  const auto sums = cpu_features().avx2 ? tile_sums_avx2 : tile_sums_base;
  for_each_tile_pair(p, t,
                     [&](int64_t k, int64_t, int64_t size, int64_t channel, float* xv, float* gv) {
                       sums(xv, gv, size, t, channel, mu, part.data() + 2 * k * slots);
                     });
  sg.assign(static_cast<size_t>(C), 0.0);
  sgx.assign(static_cast<size_t>(C), 0.0);
  for (int64_t k = 0; k < t.count; ++k) {
    const double* in = part.data() + 2 * k * slots;
    int64_t begin, size, channel;
    t.range(k, begin, size, channel);
    for (int64_t j = 0; j < slots; ++j) {
      sg[static_cast<size_t>(channel + j)] += in[j];
      sgx[static_cast<size_t>(channel + j)] += in[slots + j];
    }
  }
}

std::string declines(const Tensor& x, const Tensor& gamma) {
  if (std::string why = why_not_via_f32(x.dtype()); !why.empty()) return why;
  if (x.numel() == 0) return "empty tensor";
  if (x.strides()[1] == 1 && x.shape()[1] > kTile) return "more than 4096 channels, channels-last";
  if (!gamma.defined() || gamma.dtype() != DType::f32) return "parameters not f32";
  if (!x.is_contiguous() && !(x.strides()[1] == 1 && fills_its_span(x) && x.dim() == 4 &&
                              has_layout(x, ImageLayout::nhwc)))
    return "neither contiguous nor channels-last";
  return "";
}

}  // namespace

std::string why_not_via_f32(DType d) {
  if (d == DType::f16) return "";
  // With measured kernel choice the f32 route is a candidate beside the native one (it wins on
  // CPUs whose bf16 arithmetic is slower than their f32); in the fixed order it stays out.
  if (d == DType::bf16)
    return cpu_features().avx512f && kernel_choice() == KernelChoice::first
               ? "bf16 is computed natively on AVX-512"
               : "";
  return std::string("not a 16-bit float (") + std::string(dtype_name(d)) + ")";
}

std::string batch_norm16_fwd_declines(const BatchNormFwdProblem& p) {
  if (std::string why = declines(p.x, p.gamma); !why.empty()) return why;
  if (p.y.strides() != p.x.strides() || p.y.dtype() != p.x.dtype())
    return "y laid out differently from x";
  return "";
}

void batch_norm16_fwd(const BatchNormFwdProblem& p) {
  if (p.training) batch_norm_statistics(p.x, p.mean, p.var);
  const Tiling t(channel_blocks(p.x));
  const std::vector<float> invstd = invstd_of(p.var, p.eps);
  const int64_t C = t.b.channels;
  std::vector<float> scale(static_cast<size_t>(C));
  const float *gamma = p.gamma.data<float>(), *beta = p.beta.data<float>();
  for (int64_t c = 0; c < C; ++c)
    scale[static_cast<size_t>(c)] = gamma[c] * invstd[static_cast<size_t>(c)];
  const float* mu = p.mean.data<float>();
  const auto affine = cpu_features().avx2 ? apply_affine_avx2 : apply_affine_base;
  const auto relu = cpu_features().avx2 ? relu_tile_avx2 : relu_tile_base;
#pragma omp parallel for schedule(static) if (t.count > 1)
  for (int64_t k = 0; k < t.count; ++k) {
    alignas(64) float v[kTile];
    int64_t begin, size, channel;
    t.range(k, begin, size, channel);
    widen(p.x, begin, v, size);
    affine(v, size, t, channel, mu, scale.data(), beta);
    if (p.relu) relu(v, size);
    narrow(v, p.y, begin, size);
  }
}

std::string batch_norm16_bwd_declines(const BatchNormBwdProblem& p) {
  if (std::string why = declines(p.x, p.gamma); !why.empty()) return why;
  if (p.dy.strides() != p.x.strides() || p.dx.strides() != p.x.strides() ||
      p.dy.dtype() != p.x.dtype())
    return "x, dy and dx laid out differently";
  if (p.relu_y.defined() &&
      (p.relu_y.strides() != p.x.strides() || p.relu_y.dtype() != p.x.dtype()))
    return "the fused relu's output laid out differently from x";
  return "";
}

// dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)) with k = gamma * invstd (training); the
// statistics are constants in eval: dx = k * dy.
void batch_norm16_bwd(const BatchNormBwdProblem& p) {
  const Tiling t(channel_blocks(p.x));
  const int64_t C = t.b.channels;
  const double m = static_cast<double>(t.b.outer * t.b.inner);
  std::vector<double> sg, sgx;
  gradient_sums(p, t, sg, sgx);
  const std::vector<float> invstd = invstd_of(p.var, p.eps);
  const float *gamma = p.gamma.data<float>(), *mu = p.mean.data<float>();
  float* dgamma = p.dgamma.data<float>();
  float* dbeta = p.dbeta.data<float>();
  // dx = a * dy + b * (x - mu) + c per channel: a = k, b = -k * invstd * mgx, c = -k * mg.
  std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C)),
      c(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j) {
    const auto u = static_cast<size_t>(j);
    dbeta[j] = static_cast<float>(sg[u]);
    dgamma[j] = static_cast<float>(sgx[u]) * invstd[u];
    const float k = gamma[j] * invstd[u];
    const float mg = p.training ? static_cast<float>(sg[u] / m) : 0.0f;
    const float mgx = p.training ? dgamma[j] / static_cast<float>(m) : 0.0f;
    a[u] = k;
    b[u] = -k * invstd[u] * mgx;
    c[u] = -k * mg;
  }
  const auto dx = cpu_features().avx2 ? tile_dx_avx2 : tile_dx_base;
  for_each_tile_pair(
      p, t, [&](int64_t, int64_t begin, int64_t size, int64_t channel, float* xv, float* gv) {
        dx(xv, gv, size, t, channel, mu, a.data(), b.data(), c.data());
        narrow(gv, p.dx, begin, size);
      });
}

}  // namespace mixprec::ops::cpu
