// CUDA kernels over [N, C, ...] images, by channel: BatchNorm (forward: training statistics and
// eval; backward), per-channel sums (conv2d's bias gradient), conv2d's bias/ReLU epilogue, and
// pooling (max, average, adaptive average; forward and backward). Formulas are the
// reference kernels' (ops/ref/norm.cpp, norm_stats.cpp, pool.cpp) step for step; only the order
// of the per-channel sums differs (split into slices, summed in a fixed order: deterministic).
// Every tensor here is dense (any dim order); BatchNorm's x, y, dy, dx share one layout.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/pool_problem.h"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::load_elem;
using cuda_detail::store_elem;

constexpr unsigned kThreads = 256;  // every kernel here: 256 threads a block

// A dense [N, C, ...] tensor in memory as [outer][C][inner]: inner is the channel's stride (the
// dims laid out inside a channel: H*W for NCHW, 1 for channels-last), outer the rest. Channel
// c's k-th element (k < outer * inner) is at (k / inner) * C * inner + c * inner + k % inner, and
// memory offset e belongs to channel (e / inner) % C. (As norm_stats.cpp's ChannelBlocks.)
struct Blocks {
  int64_t outer = 0, c = 0, inner = 0;
  __host__ __device__ int64_t per_channel() const { return outer * inner; }
};
Blocks blocks_of(const Tensor& t) {
  MIXPREC_ASSERT(t.dim() >= 2 && detail::fills_its_span(t), "cuda image kernel: ", desc(t),
                 " is not a dense [N, C, ...] tensor");
  const int64_t c = t.shape()[1], n = t.numel();
  const int64_t inner = c == 1 ? n : t.strides()[1];
  return {c > 0 && inner > 0 ? n / (c * inner) : 0, c, inner};
}
__host__ __device__ inline int64_t channel_elem(const Blocks& b, int64_t c, int64_t k) {
  return (k / b.inner) * b.c * b.inner + c * b.inner + k % b.inner;
}
__device__ inline int64_t channel_of(const Blocks& b, int64_t e) { return (e / b.inner) % b.c; }

template <class F> void visit_compute(DType d, F&& f) {
  if (d == DType::f64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

// ------------------------------------------------------------------ per-channel sums
// What channel_partials sums per element k of channel c (two sums, s1 and s2):
//   stats:   d = x - shift[c] and d * d (shift: the channel's first value; f64, as norm_stats)
//   bn_bwd:  g = dy and g * (x - mean) * invstd (in C, as ref::batch_norm_bwd)
//   sum:     x (s2 unused)
enum class SumKind { stats, bn_bwd, sum };

struct SumArgs {
  Blocks b;
  const void* x;
  const void* dy;  // bn_bwd only
  DType dt;
  const void* mean;  // bn_bwd: [C] in C
  const void* var;
  double eps;
  int64_t slices, slice_len;  // channel elements split into `slices` runs of slice_len
  double* partial;            // [C][slices][2]
};

// One channel's term of the sums (the SumKind table above): set up once per channel (the shift,
// or the mean and 1/std), then added element by element into s1, s2.
template <class C, SumKind K> struct Term {
  double shift = 0;
  C mu = 0, invstd = 0;
  __device__ Term(const SumArgs& a, int64_t c) {
    if constexpr (K == SumKind::stats)
      shift = load_elem<double>(a.x, a.dt, channel_elem(a.b, c, 0));
    if constexpr (K == SumKind::bn_bwd) {
      mu = static_cast<const C*>(a.mean)[c];
      invstd = C(1) / ::sqrt(static_cast<const C*>(a.var)[c] + static_cast<C>(a.eps));
    }
  }
  __device__ void add(const SumArgs& a, int64_t e, double& s1, double& s2) const {
    if constexpr (K == SumKind::stats) {
      const double d = load_elem<double>(a.x, a.dt, e) - shift;
      s1 += d;
      s2 += d * d;
    } else if constexpr (K == SumKind::bn_bwd) {
      const C g = load_elem<C>(a.dy, a.dt, e);
      s1 += g;
      s2 += g * (load_elem<C>(a.x, a.dt, e) - mu) * invstd;
    } else {
      s1 += load_elem<double>(a.x, a.dt, e);
    }
  }
};

// The rows [lo, hi) of slice `s` of a channel's m elements.
__device__ inline void slice_range(const SumArgs& a, int64_t s, int64_t& lo, int64_t& hi) {
  const int64_t m = a.b.per_channel();
  lo = s * a.slice_len;
  hi = lo + a.slice_len < m ? lo + a.slice_len : m;
}

// Channels with inner > 1 (NCHW: a channel's elements are runs of `inner` contiguous values).
// Grid: (slices, min(C, 65535)) blocks of 256 threads; block (s, cy) takes slice s of channels
// cy, cy + gridDim.y, ...; its threads stride the slice (t, t + 256, ...): coalesced within each
// run. A shared-memory tree then halves 256 partial pairs to one, written by thread 0.
// Invariant: blockDim.x == 256 (the tree's size).
template <class C, SumKind K> __global__ void channel_partials_kernel(SumArgs a) {
  __shared__ double s1s[kThreads], s2s[kThreads];
  for (int64_t c = blockIdx.y; c < a.b.c; c += gridDim.y) {
    int64_t lo, hi;
    slice_range(a, blockIdx.x, lo, hi);
    const Term<C, K> term(a, c);
    double s1 = 0, s2 = 0;
    for (int64_t k = lo + threadIdx.x; k < hi; k += kThreads)
      term.add(a, channel_elem(a.b, c, k), s1, s2);
    s1s[threadIdx.x] = s1;
    s2s[threadIdx.x] = s2;
    __syncthreads();
    for (unsigned h = kThreads / 2; h > 0; h >>= 1) {
      if (threadIdx.x < h) {
        s1s[threadIdx.x] += s1s[threadIdx.x + h];
        s2s[threadIdx.x] += s2s[threadIdx.x + h];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      double* out = a.partial + (c * a.slices + blockIdx.x) * 2;
      out[0] = s1s[0];
      out[1] = s2s[0];
    }
    __syncthreads();  // the shared arrays are reused by the next channel
  }
}

// Channels-last (inner == 1: element k of channel c at k * C + c). Grid: (slices,
// ceil(C / 32)) blocks of 32 x 8 threads; block (s, cb) takes channels cb*32 + threadIdx.x
// (lanes beyond C idle) over the rows of slice s, threadIdx.y striding them by 8: a warp reads 32
// neighbouring channels of one row (coalesced). The 8 partial pairs of a channel are then added
// in order (y = 0..7) by the y = 0 thread. Invariant: blockDim == (32, 8).
template <class C, SumKind K> __global__ void channel_partials_cl_kernel(SumArgs a) {
  __shared__ double s1s[8][32], s2s[8][32];
  const int64_t c = int64_t{blockIdx.y} * 32 + threadIdx.x;
  double s1 = 0, s2 = 0;
  if (c < a.b.c) {
    int64_t lo, hi;
    slice_range(a, blockIdx.x, lo, hi);
    const Term<C, K> term(a, c);
    for (int64_t k = lo + threadIdx.y; k < hi; k += 8) term.add(a, k * a.b.c + c, s1, s2);
  }
  s1s[threadIdx.y][threadIdx.x] = s1;
  s2s[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && c < a.b.c) {
    for (int y = 1; y < 8; ++y) s1 += s1s[y][threadIdx.x], s2 += s2s[y][threadIdx.x];
    double* out = a.partial + (c * a.slices + blockIdx.x) * 2;
    out[0] = s1;
    out[1] = s2;
  }
}

// Grid: grid_for(C, 256), one thread per channel adding its slices' partials in slice order.
//   stats:  mean = shift + s1 / m, var = max(0, s2 / m - (s1 / m)^2) (norm_stats.cpp's formula)
//   bn_bwd: dbeta = s1, dgamma = s2
//   sum:    out1 = s1, rounded once into out_dt
template <SumKind K>
__global__ void channel_finish_kernel(SumArgs a, void* out1, void* out2, DType out_dt) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < a.b.c;
       c += int64_t{gridDim.x} * blockDim.x) {
    double s1 = 0, s2 = 0;
    for (int64_t s = 0; s < a.slices; ++s) {
      s1 += a.partial[(c * a.slices + s) * 2];
      s2 += a.partial[(c * a.slices + s) * 2 + 1];
    }
    if constexpr (K == SumKind::stats) {
      const double m = static_cast<double>(a.b.per_channel());
      const double shift = load_elem<double>(a.x, a.dt, channel_elem(a.b, c, 0));
      const double d = s1 / m;
      store_elem<double>(out1, out_dt, c, shift + d);
      store_elem<double>(out2, out_dt, c, fmax(0.0, s2 / m - d * d));
    } else if constexpr (K == SumKind::bn_bwd) {
      store_elem<double>(out1, out_dt, c, s2);  // dgamma
      store_elem<double>(out2, out_dt, c, s1);  // dbeta
    } else {
      store_elem<double>(out1, out_dt, c, s1);
    }
  }
}

// Runs the two kernels above for x (and dy, mean, var for bn_bwd) into out1/out2 (dtype out_dt).
template <SumKind K> void channel_sums(const Tensor& x, const Tensor& dy, const Tensor& mean,
                                       const Tensor& var, double eps, const Tensor& out1,
                                       const Tensor& out2) {
  const Blocks b = blocks_of(x);
  if (b.c == 0) return;
  const int64_t m = b.per_channel();
  // Channels-last: 512 rows a slice (64 a thread); otherwise 8192 values (32 a thread).
  const bool cl = b.inner == 1 && b.c > 1 && (b.c + 31) / 32 <= 65535;
  const int64_t per_slice = cl ? 512 : 8192;
  const int64_t slices = std::clamp<int64_t>((m + per_slice - 1) / per_slice, 1, cl ? 4096 : 256);
  const Tensor partial =
      Tensor::empty({b.c, slices, 2}, {.dtype = DType::f64, .device = x.device()});
  SumArgs a{b,
            x.data_ptr(),
            dy.defined() ? dy.data_ptr() : nullptr,
            x.dtype(),
            mean.defined() ? mean.data_ptr() : nullptr,
            var.defined() ? var.data_ptr() : nullptr,
            eps,
            slices,
            (m + slices - 1) / slices,
            static_cast<double*>(partial.data_ptr())};
  cudaStream_t s = cuda_detail::activate(x.device());
  visit_compute(x.dtype(), [&]<class C>() {
    if (cl)
      channel_partials_cl_kernel<C, K>
          <<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>((b.c + 31) / 32)),
             dim3(32, 8), 0, s>>>(a);
    else
      channel_partials_kernel<C, K><<<dim3(static_cast<unsigned>(slices),
                                           static_cast<unsigned>(std::min<int64_t>(b.c, 65535))),
                                      kThreads, 0, s>>>(a);
  });
  MIXPREC_CUDA_LAUNCHED();
  channel_finish_kernel<K><<<cuda_detail::grid_for(b.c, kThreads), kThreads, 0, s>>>(
      a, out1.data_ptr(), out2.defined() ? out2.data_ptr() : nullptr, out1.dtype());
  MIXPREC_CUDA_LAUNCHED();
}

// ------------------------------------------------------------------ element-wise by channel

// Grid: grid_for(numel, 256), one thread per element in memory order e (coalesced): y[e] =
// (x[e] - mean[c]) * (gamma[c] * invstd[c]) + beta[c], c = channel_of(e), in C, rounded once.
template <class C> __global__ void bn_fwd_kernel(const void* x, void* y, DType dt, Blocks b,
                                                 const C* gamma, const C* beta, const C* mean,
                                                 const C* var, C eps, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = channel_of(b, e);
    const C invstd = C(1) / ::sqrt(var[c] + eps);
    const C scale = gamma[c] * invstd;
    store_elem<C>(y, dt, e, (load_elem<C>(x, dt, e) - mean[c]) * scale + beta[c]);
  }
}

// Same grid and access. dx = k * (g - dbeta/m - xhat * dgamma/m) in training, g * k in eval,
// with k = gamma * invstd (ref::batch_norm_bwd's formula).
template <class C>
__global__ void bn_bwd_dx_kernel(const void* x, const void* dy, void* dx, DType dt, Blocks b,
                                 const C* gamma, const C* mean, const C* var, const C* dgamma,
                                 const C* dbeta, C eps, bool training, int64_t n) {
  const C m = static_cast<C>(b.per_channel());
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = channel_of(b, e);
    const C invstd = C(1) / ::sqrt(var[c] + eps);
    const C k = gamma[c] * invstd;
    const C g = load_elem<C>(dy, dt, e);
    if (!training) {
      store_elem<C>(dx, dt, e, g * k);
      continue;
    }
    const C xhat = (load_elem<C>(x, dt, e) - mean[c]) * invstd;
    store_elem<C>(dx, dt, e, k * (g - dbeta[c] / m - xhat * (dgamma[c] / m)));
  }
}

// Same grid and access, in place on y: fill writes y[e] = bias[c] (bias in y's dtype, exact);
// relu replaces v by 0 where v <= 0 (NaN stays, as ops::relu).
__global__ void bias_relu_kernel(void* y, DType dt, Blocks b, const void* bias, bool fill,
                                 bool relu, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    double v = fill ? load_elem<double>(bias, dt, channel_of(b, e)) : load_elem<double>(y, dt, e);
    if (relu && !(v > 0 || v != v)) v = 0;
    store_elem<double>(y, dt, e, v);
  }
}

// ------------------------------------------------------------------ pooling

struct PoolArgs {
  const void* x;  // max: the forward input; avg: unused in backward
  const void* dy;
  void* out;
  DType dt;
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, pt, pl;
  int64_t xs[4], os[4], ds[4];       // strides of x, of the output (y or dx), of dy
  bool adaptive, count_include_pad;  // average pooling (PoolGeometry's)
  bool cl;                           // the output is channels-last: threads take cells in its order
};

// Cell t of an [N, C, rows, cols] grid, in the output's memory order (channel fastest when
// channels-last, column fastest otherwise): consecutive threads write consecutive addresses.
__device__ inline void cell_of(int64_t t, const PoolArgs& a, int64_t rows, int64_t cols, int64_t& n,
                               int64_t& c, int64_t& y, int64_t& x) {
  if (a.cl) {
    c = t % a.c, x = t / a.c % cols, y = t / (a.c * cols) % rows, n = t / (a.c * cols * rows);
  } else {
    x = t % cols, y = t / cols % rows, c = t / (cols * rows) % a.c, n = t / (cols * rows * a.c);
  }
}

// Window (oy, ox) of max pooling, as ref::make_bins: rows [lo, hi) of the input.
__device__ inline void window(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t in,
                              int64_t& lo, int64_t& hi) {
  const int64_t start = o * stride - pad;
  const int64_t end = start + k < in + pad ? start + k : in + pad;
  lo = start > 0 ? start : 0;
  hi = end < in ? end : in;
}

// The first maximal cell (row-major scan) of window (oy, ox) of plane (n, c); a NaN wins (the
// first one), as ref::argmax. Returns the offset iy * w + ix.
template <class C>
__device__ int64_t window_argmax(const PoolArgs& a, int64_t n, int64_t c, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  window(oy, a.kh, a.sh, a.pt, a.h, y0, y1);
  window(ox, a.kw, a.sw, a.pl, a.w, x0, x1);
  const int64_t base = n * a.xs[0] + c * a.xs[1];
  int64_t best = y0 * a.w + x0;
  C bv = load_elem<C>(a.x, a.dt, base + y0 * a.xs[2] + x0 * a.xs[3]);
  for (int64_t iy = y0; iy < y1; ++iy)
    for (int64_t ix = x0; ix < x1; ++ix) {
      const C v = load_elem<C>(a.x, a.dt, base + iy * a.xs[2] + ix * a.xs[3]);
      if (v > bv || (isnan(v) && !isnan(bv))) bv = v, best = iy * a.w + ix;
    }
  return best;
}

// Max forward. Grid: grid_for(N*C*OH*OW, 256), one thread per output (n, c, oy, ox) taken in
// y's memory order (cell_of), reading its window through x's strides: x and y share a layout,
// so a warp's threads read neighbouring addresses at each window position (the neighbouring
// channels, or the neighbouring windows of a plane). Writes the argmax's value (no rounding).
template <class C> __global__ void max_pool_fwd_kernel(PoolArgs a) {
  const int64_t total = a.n * a.c * a.oh * a.ow;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, c, oy, ox;
    cell_of(t, a, a.oh, a.ow, n, c, oy, ox);
    const int64_t m = window_argmax<C>(a, n, c, oy, ox);
    const C v =
        load_elem<C>(a.x, a.dt, n * a.xs[0] + c * a.xs[1] + m / a.w * a.xs[2] + m % a.w * a.xs[3]);
    store_elem<C>(a.out, a.dt, n * a.os[0] + c * a.os[1] + oy * a.os[2] + ox * a.os[3], v);
  }
}

// Max backward, as a gather (no atomics): grid_for(N*C*H*W, 256), one thread per input cell
// (n, c, iy, ix) in dx's memory order (cell_of) visiting the windows that contain it in (oy, ox)
// order, recomputing each one's argmax and adding dy where it is this cell: the reference's order
// of additions, in C, one rounding. Invariant: windows are never empty (pool_geometry's output-size
// rule).
template <class C> __global__ void max_pool_bwd_kernel(PoolArgs a) {
  const int64_t total = a.n * a.c * a.h * a.w;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, c, iy, ix;
    cell_of(t, a, a.h, a.w, n, c, iy, ix);
    // Windows with start <= i < start + k: o in [ceil((i + pad - k + 1) / s), (i + pad) / s].
    const int64_t oy0 = ::max(int64_t{0}, (iy + a.pt - a.kh + a.sh) / a.sh);
    const int64_t oy1 = ::min(a.oh - 1, (iy + a.pt) / a.sh);
    const int64_t ox0 = ::max(int64_t{0}, (ix + a.pl - a.kw + a.sw) / a.sw);
    const int64_t ox1 = ::min(a.ow - 1, (ix + a.pl) / a.sw);
    C acc = 0;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox)
        if (window_argmax<C>(a, n, c, oy, ox) == iy * a.w + ix)
          acc += load_elem<C>(a.dy, a.dt, n * a.ds[0] + c * a.ds[1] + oy * a.ds[2] + ox * a.ds[3]);
    store_elem<C>(a.out, a.dt, n * a.os[0] + c * a.os[1] + iy * a.os[2] + ix * a.os[3], acc);
  }
}

// Average pooling's bin o along one dim, as ref::make_bins: the input range [lo, hi) it reads
// and its extent including padding (the divisor with count_include_pad).
__device__ inline void avg_bin(int64_t o, int64_t in, int64_t out, int64_t k, int64_t stride,
                               int64_t pad, bool adaptive, int64_t& lo, int64_t& hi, int64_t& ext) {
  if (adaptive) {
    lo = o * in / out;
    hi = ((o + 1) * in + out - 1) / out;
    ext = hi - lo;
    return;
  }
  window(o, k, stride, pad, in, lo, hi);
  const int64_t start = o * stride - pad;
  ext = (start + k < in + pad ? start + k : in + pad) - start;
}

// The divisor of output (oy, ox) and its window (ref::Windows::divisor).
struct AvgWindow {
  int64_t y0, y1, x0, x1, divisor;
};
__device__ inline AvgWindow avg_window(const PoolArgs& a, int64_t oy, int64_t ox) {
  AvgWindow w;
  int64_t ey, ex;
  avg_bin(oy, a.h, a.oh, a.kh, a.sh, a.pt, a.adaptive, w.y0, w.y1, ey);
  avg_bin(ox, a.w, a.ow, a.kw, a.sw, a.pl, a.adaptive, w.x0, w.x1, ex);
  w.divisor = a.count_include_pad && !a.adaptive ? ey * ex : (w.y1 - w.y0) * (w.x1 - w.x0);
  return w;
}

// Average forward (plain, adaptive and global). Grid: grid_for(N*C*OH*OW, 256), one thread per
// output in y's memory order (cell_of; global pooling: neighbouring threads take neighbouring
// channels) summing its window row by row in C (the reference's order, so the same bits), then
// sum / divisor rounded once.
template <class C> __global__ void avg_pool_fwd_kernel(PoolArgs a) {
  const int64_t total = a.n * a.c * a.oh * a.ow;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, c, oy, ox;
    cell_of(t, a, a.oh, a.ow, n, c, oy, ox);
    const AvgWindow w = avg_window(a, oy, ox);
    const int64_t base = n * a.xs[0] + c * a.xs[1];
    C sum = 0;
    for (int64_t iy = w.y0; iy < w.y1; ++iy)
      for (int64_t ix = w.x0; ix < w.x1; ++ix)
        sum += load_elem<C>(a.x, a.dt, base + iy * a.xs[2] + ix * a.xs[3]);
    store_elem<C>(a.out, a.dt, n * a.os[0] + c * a.os[1] + oy * a.os[2] + ox * a.os[3],
                  sum / static_cast<C>(w.divisor));
  }
}

// The outputs along one dim whose bins may hold input i: [lo, hi] (clipped to [0, out)).
// Adaptive: bin o holds i iff floor(o*in/out) <= i < ceil((o+1)*in/out), i.e. o in
// [floor(i*out/in), ceil((i+1)*out/in) - 1]. Plain: start <= i < start + k (as max pooling).
__device__ inline void covering(int64_t i, int64_t in, int64_t out, int64_t k, int64_t stride,
                                int64_t pad, bool adaptive, int64_t& lo, int64_t& hi) {
  if (adaptive) {
    lo = i * out / in;
    hi = ((i + 1) * out + in - 1) / in - 1;
  } else {
    lo = (i + pad - k + stride) / stride;
    hi = (i + pad) / stride;
  }
  lo = lo > 0 ? lo : 0;
  hi = hi < out - 1 ? hi : out - 1;
}

// Average backward, as a gather (no atomics): grid_for(N*C*H*W, 256), one thread per input cell
// in dx's memory order (cell_of, coalesced writes) adding dy / divisor of every output whose
// window holds it, in (oy, ox) order: the reference's order of additions, in C, one rounding.
template <class C> __global__ void avg_pool_bwd_kernel(PoolArgs a) {
  const int64_t total = a.n * a.c * a.h * a.w;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, c, iy, ix, oy0, oy1, ox0, ox1;
    cell_of(t, a, a.h, a.w, n, c, iy, ix);
    covering(iy, a.h, a.oh, a.kh, a.sh, a.pt, a.adaptive, oy0, oy1);
    covering(ix, a.w, a.ow, a.kw, a.sw, a.pl, a.adaptive, ox0, ox1);
    C acc = 0;
    for (int64_t oy = oy0; oy <= oy1; ++oy)
      for (int64_t ox = ox0; ox <= ox1; ++ox) {
        const AvgWindow w = avg_window(a, oy, ox);
        if (iy < w.y0 || iy >= w.y1 || ix < w.x0 || ix >= w.x1) continue;
        const C g =
            load_elem<C>(a.dy, a.dt, n * a.ds[0] + c * a.ds[1] + oy * a.ds[2] + ox * a.ds[3]);
        acc += g / static_cast<C>(w.divisor);
      }
    store_elem<C>(a.out, a.dt, n * a.os[0] + c * a.os[1] + iy * a.os[2] + ix * a.os[3], acc);
  }
}

void copy_strides(const Tensor& t, int64_t (&s)[4]) {
  for (int d = 0; d < 4; ++d) s[d] = t.defined() ? t.strides()[static_cast<size_t>(d)] : 0;
}

PoolArgs pool_args(const PoolGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& out) {
  PoolArgs a{};
  a.x = x.defined() ? x.data_ptr() : nullptr;
  a.dy = dy.defined() ? dy.data_ptr() : nullptr;
  a.out = out.data_ptr();
  a.dt = out.dtype();
  a.n = g.n, a.c = g.c, a.h = g.h, a.w = g.w, a.oh = g.oh, a.ow = g.ow;
  a.kh = g.kh, a.kw = g.kw, a.sh = g.stride_h, a.sw = g.stride_w, a.pt = g.pad_t, a.pl = g.pad_l;
  a.adaptive = g.adaptive;
  a.count_include_pad = g.count_include_pad;
  copy_strides(x, a.xs);
  copy_strides(out, a.os);
  copy_strides(dy, a.ds);
  a.cl = detail::is_channels_last(out);
  return a;
}

template <class C> const C* cptr(const Tensor& t) { return static_cast<const C*>(t.data_ptr()); }

}  // namespace

// ------------------------------------------------------------------ launchers

void channel_sum(const Tensor& x, const Tensor& out) {
  channel_sums<SumKind::sum>(x, Tensor(), Tensor(), Tensor(), 0.0, out, Tensor());
}

void channel_bias_relu(const Tensor& y, const Tensor& bias, bool fill, bool relu) {
  const int64_t n = y.numel();
  if (n == 0) return;
  MIXPREC_ASSERT(!fill || (bias.dtype() == y.dtype() && bias.is_contiguous()),
                 "cuda conv bias: expected a packed bias in y's dtype");
  cudaStream_t s = cuda_detail::activate(y.device());
  bias_relu_kernel<<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
      y.data_ptr(), y.dtype(), blocks_of(y), fill ? bias.data_ptr() : nullptr, fill, relu, n);
  MIXPREC_CUDA_LAUNCHED();
}

void batch_norm_fwd(const BatchNormFwdProblem& p) {
  const int64_t n = p.x.numel();
  if (n == 0) return;
  if (p.training)
    channel_sums<SumKind::stats>(p.x, Tensor(), Tensor(), Tensor(), 0.0, p.mean, p.var);
  cudaStream_t s = cuda_detail::activate(p.x.device());
  visit_compute(p.x.dtype(), [&]<class C>() {
    bn_fwd_kernel<C><<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        p.x.data_ptr(), p.y.data_ptr(), p.x.dtype(), blocks_of(p.x), cptr<C>(p.gamma),
        cptr<C>(p.beta), cptr<C>(p.mean), cptr<C>(p.var), static_cast<C>(p.eps), n);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void batch_norm_bwd(const BatchNormBwdProblem& p) {
  const int64_t n = p.x.numel();
  if (n == 0) return;
  channel_sums<SumKind::bn_bwd>(p.x, p.dy, p.mean, p.var, p.eps, p.dgamma, p.dbeta);
  cudaStream_t s = cuda_detail::activate(p.x.device());
  visit_compute(p.x.dtype(), [&]<class C>() {
    bn_bwd_dx_kernel<C><<<cuda_detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        p.x.data_ptr(), p.dy.data_ptr(), p.dx.data_ptr(), p.x.dtype(), blocks_of(p.x),
        cptr<C>(p.gamma), cptr<C>(p.mean), cptr<C>(p.var), cptr<C>(p.dgamma), cptr<C>(p.dbeta),
        static_cast<C>(p.eps), p.training, n);
  });
  MIXPREC_CUDA_LAUNCHED();
}

std::string batch_norm_declines(const Tensor& x, const Tensor& other) {
  if (!is_floating(x.dtype())) return "integer x";
  if (!detail::fills_its_span(x)) return "x is not dense";
  for (size_t d = 0; other.defined() && d < x.strides().size(); ++d)
    if (x.shape()[d] != 1 && other.strides()[d] != x.strides()[d])
      return "x and y/dy/dx differ in layout";
  return {};
}
std::string batch_norm_fwd_declines(const BatchNormFwdProblem& p) {
  if (p.relu) return "a fused relu";
  return batch_norm_declines(p.x, p.y);
}
std::string batch_norm_bwd_declines(const BatchNormBwdProblem& p) {
  if (p.relu_y.defined()) return "a fused relu mask";
  if (auto why = batch_norm_declines(p.x, p.dy); !why.empty()) return why;
  return batch_norm_declines(p.x, p.dx);
}

std::string pool_fwd_declines(const PoolFwdProblem& p) {
  return p.g.kind == PoolKind::max && p.g.adaptive ? "adaptive max pooling" : "";
}
std::string pool_bwd_declines(const PoolBwdProblem& p) {
  if (p.g.kind != PoolKind::max) return {};
  if (p.g.adaptive) return "adaptive max pooling";
  return p.x.defined() ? "" : "no forward input";
}

// Both: one thread per output (forward) or input cell (backward), max or average kernels.
void pool_fwd(const PoolFwdProblem& p) {
  if (p.y.numel() == 0) return;
  const PoolArgs a = pool_args(p.g, p.x, Tensor(), p.y);
  cudaStream_t s = cuda_detail::activate(p.x.device());
  const unsigned grid = cuda_detail::grid_for(p.y.numel(), kThreads);
  visit_compute(p.x.dtype(), [&]<class C>() {
    if (p.g.kind == PoolKind::max)
      max_pool_fwd_kernel<C><<<grid, kThreads, 0, s>>>(a);
    else
      avg_pool_fwd_kernel<C><<<grid, kThreads, 0, s>>>(a);
  });
  MIXPREC_CUDA_LAUNCHED();
}

void pool_bwd(const PoolBwdProblem& p) {
  if (p.dx.numel() == 0) return;
  const bool is_max = p.g.kind == PoolKind::max;
  const PoolArgs a = pool_args(p.g, is_max ? p.x : Tensor(), p.dy, p.dx);
  cudaStream_t s = cuda_detail::activate(p.dy.device());
  const unsigned grid = cuda_detail::grid_for(p.dx.numel(), kThreads);
  visit_compute(p.dy.dtype(), [&]<class C>() {
    if (is_max)
      max_pool_bwd_kernel<C><<<grid, kThreads, 0, s>>>(a);
    else
      avg_pool_bwd_kernel<C><<<grid, kThreads, 0, s>>>(a);
  });
  MIXPREC_CUDA_LAUNCHED();
}

}  // namespace mixprec::ops::cuda
