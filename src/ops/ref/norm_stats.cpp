// Batch norm's training statistics, shared by every implementation (reference, oneDNN, f16
// via f32): per channel, one pass summing d = x - shift and d^2 in f64 (four-lane GCC vectors,
// an AVX2 + F16C clone chosen at run time, where f16 loads convert by vcvtph2ps, exactly, and an
// AVX-512 clone whose channels-last columns take eight channels a vector; each lane is a channel
// adding in a fixed order, so the bits are the same on every instruction set and thread count). The
// shift is the channel's first value, so a constant channel gets its value as the mean and a
// variance of exactly 0.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mixprec/cpu_features.h"
#include "ops/norm_problem.h"

namespace mixprec::ops {
namespace {

// L f64 lanes (and the f32, 16-bit and u32 vectors of L values that feed them): L = 4 is one AVX2
// register, or two SSE2 ones; L = 8 one AVX-512 register (the channels-last columns of the
// AVX-512 clone).
template <int L> struct Lanes {
  typedef double D __attribute__((vector_size(8 * L)));
  typedef float F __attribute__((vector_size(4 * L)));
  typedef uint16_t H __attribute__((vector_size(2 * L)));
#ifdef __FLT16_MAX__  // GCC has _Float16 on x86; clang 14 (the fuzz build) does not
  typedef _Float16 HF __attribute__((vector_size(2 * L)));
#endif
  typedef uint32_t U __attribute__((vector_size(4 * L)));
};
using v4d = Lanes<4>::D;
#define MIXPREC_INLINE [[gnu::always_inline]] inline

// L values of x as f64 lanes, exactly.
template <int L, class T> MIXPREC_INLINE void load_lanes(const T* p, typename Lanes<L>::D& out) {
  using D = typename Lanes<L>::D;
  using F = typename Lanes<L>::F;
  if constexpr (std::is_same_v<T, float>) {
    F v;
    std::memcpy(&v, p, sizeof v);
    out = __builtin_convertvector(v, D);
  } else if constexpr (std::is_same_v<T, bf16>) {  // bf16 is the top half of an f32
    typename Lanes<L>::H h;
    std::memcpy(&h, p, sizeof h);
    const typename Lanes<L>::U w = __builtin_convertvector(h, typename Lanes<L>::U) << 16;
    F v;
    std::memcpy(&v, &w, sizeof v);
    out = __builtin_convertvector(v, D);
#ifdef __FLT16_MAX__
  } else if constexpr (std::is_same_v<T, f16>) {  // exact; one vcvtph2ps in the clones
    typename Lanes<L>::HF h;
    std::memcpy(&h, p, sizeof h);
    out = __builtin_convertvector(__builtin_convertvector(h, F), D);
#endif
  } else {
    for (int l = 0; l < L; ++l) out[l] = static_cast<double>(load(p[l]));
  }
}

// One channel's contiguous run x[0, n) shifted by k: sums of d and d * d added to t1, t2.
template <class T>
MIXPREC_INLINE void add_run(const T* x, int64_t n, double k, double& t1, double& t2) {
  v4d s1a{}, s1b{}, s2a{}, s2b{}, d, e;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    load_lanes<4>(x + i, d);
    load_lanes<4>(x + i + 4, e);
    d -= k;
    e -= k;
    s1a += d;
    s1b += e;
    s2a += d * d;
    s2b += e * e;
  }
  s1a += s1b;
  s2a += s2b;
  double r1 = (s1a[0] + s1a[1]) + (s1a[2] + s1a[3]), r2 = (s2a[0] + s2a[1]) + (s2a[2] + s2a[3]);
  for (; i < n; ++i) {
    const double v = static_cast<double>(load(x[i])) - k;
    r1 += v;
    r2 += v * v;
  }
  t1 += r1;
  t2 += r2;
}

// Channels-last: channels [c, c + L * V) of `rows` rows of C values, V vectors of L f64 lanes side
// by side (L = 4: one cache line per row for V = 4; L = 8 in the AVX-512 clone); their sums added
// to a1[c...], a2[c...]. Each lane is one channel summing its rows in order, so L does not change
// the bits.
template <int L, int V, class T>
MIXPREC_INLINE void add_columns(const T* x, int64_t rows, int64_t channels, int64_t c,
                                const double* shift, double* a1, double* a2) {
  using D = typename Lanes<L>::D;
  D k[V], s1[V], s2[V], d;
  std::memcpy(k, shift + c, sizeof k);
  std::memcpy(s1, a1 + c, sizeof s1);
  std::memcpy(s2, a2 + c, sizeof s2);
  for (int64_t r = 0; r < rows; ++r)
    for (int v = 0; v < V; ++v) {
      load_lanes<L>(x + r * channels + c + L * v, d);
      d -= k[v];
      s1[v] += d;
      s2[v] += d * d;
    }
  std::memcpy(a1 + c, s1, sizeof s1);
  std::memcpy(a2 + c, s2, sizeof s2);
}
// Channels-last: `rows` rows of C values; channel c's sums added to a1[c], a2[c]. Wide: the
// AVX-512 clone's lanes of eight first.
template <bool Wide, class T> MIXPREC_INLINE void add_rows(const T* x, int64_t rows,
                                                           int64_t channels, const double* shift,
                                                           double* a1, double* a2) {
  int64_t c = 0;
  if constexpr (Wide) {
    for (; c + 32 <= channels; c += 32) add_columns<8, 4>(x, rows, channels, c, shift, a1, a2);
    for (; c + 8 <= channels; c += 8) add_columns<8, 1>(x, rows, channels, c, shift, a1, a2);
  }
  for (; c + 16 <= channels; c += 16) add_columns<4, 4>(x, rows, channels, c, shift, a1, a2);
  for (; c + 4 <= channels; c += 4) add_columns<4, 1>(x, rows, channels, c, shift, a1, a2);
  for (; c < channels; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const double v = static_cast<double>(load(x[r * channels + c])) - shift[c];
      a1[c] += v;
      a2[c] += v * v;
    }
}

// Unit u of shifted_sums: outer rows x one inner block, into its own a1[C], a2[C].
template <bool Wide, class T>
MIXPREC_INLINE void unit_sums(const T* x, const ChannelBlocks& s, int64_t u, int64_t rows,
                              int64_t ib, const double* shift, double* a1, double* a2) {
  const int64_t nib = (s.inner + ib - 1) / ib;
  const int64_t o0 = (u / nib) * rows, o1 = std::min(s.outer, o0 + rows);
  const int64_t i0 = (u % nib) * ib, i1 = std::min(s.inner, i0 + ib);
  if (s.inner == 1) return add_rows<Wide>(x + o0 * s.channels, o1 - o0, s.channels, shift, a1, a2);
  for (int64_t o = o0; o < o1; ++o)
    for (int64_t c = 0; c < s.channels; ++c)
      add_run(x + (o * s.channels + c) * s.inner + i0, i1 - i0, shift[c], a1[c], a2[c]);
}
template <class T>
__attribute__((target("avx2,f16c"))) void unit_sums_avx2(const T* x, const ChannelBlocks& s,
                                                         int64_t u, int64_t rows, int64_t ib,
                                                         const double* shift, double* a1,
                                                         double* a2) {
  unit_sums<false>(x, s, u, rows, ib, shift, a1, a2);
}
template <class T>
__attribute__((target("avx512f,avx512vl,avx512bw,avx2,f16c"))) void unit_sums_avx512(
    const T* x, const ChannelBlocks& s, int64_t u, int64_t rows, int64_t ib, const double* shift,
    double* a1, double* a2) {
  unit_sums<true>(x, s, u, rows, ib, shift, a1, a2);
}
template <class T> void unit_sums_base(const T* x, const ChannelBlocks& s, int64_t u, int64_t rows,
                                       int64_t ib, const double* shift, double* a1, double* a2) {
  unit_sums<false>(x, s, u, rows, ib, shift, a1, a2);
}

// Per channel, the f64 sums of d = x - shift[c] and of d * d. Work units (outer rows x inner
// blocks) and their order depend on the shape alone; each unit sums its part of every channel
// into its own slots, and the units are added in order.
template <class T> void shifted_sums(const T* x, const ChannelBlocks& s, const double* shift,
                                     double* s1, double* s2, int isa) {
  const int64_t ib = std::min<int64_t>(s.inner, 4096), nib = (s.inner + ib - 1) / ib;
  const int64_t rows = std::max<int64_t>(1, 32768 / (s.channels * ib)),
                nrb = (s.outer + rows - 1) / rows;
  std::vector<double> part(static_cast<size_t>(2 * nrb * nib * s.channels), 0.0);
  const CpuFeatures& f = cpu_features();
  const auto unit = isa == 2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.f16c
                        ? unit_sums_avx512<T>
                    : isa >= 1 && f.avx2 && f.f16c ? unit_sums_avx2<T>
                                                   : unit_sums_base<T>;
#pragma omp parallel for schedule(static) if (s.outer * s.channels * s.inner > 32768)
  for (int64_t u = 0; u < nrb * nib; ++u) {
    double* a1 = part.data() + 2 * u * s.channels;
    unit(x, s, u, rows, ib, shift, a1, a1 + s.channels);
  }
  std::fill(s1, s1 + s.channels, 0.0);
  std::fill(s2, s2 + s.channels, 0.0);
  for (int64_t u = 0; u < nrb * nib; ++u)
    for (int64_t c = 0; c < s.channels; ++c) {
      s1[c] += part[static_cast<size_t>((2 * u) * s.channels + c)];
      s2[c] += part[static_cast<size_t>((2 * u + 1) * s.channels + c)];
    }
}

}  // namespace

void batch_norm_statistics(const Tensor& x, const Tensor& mean, const Tensor& var) {
  batch_norm_statistics_on_isa(2, x, mean, var);
}

void batch_norm_statistics_on_isa(int isa, const Tensor& x, const Tensor& mean, const Tensor& var) {
  visit_float(x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const ChannelBlocks s = channel_blocks(x);
    if (s.outer == 0) return;
    const T* xb = static_cast<const T*>(x.data_ptr());
    const size_t nc = static_cast<size_t>(s.channels);
    // The shift is one of the channel's own values: a constant channel sums to 0 exactly, and
    // (shift - mean)^2 <= m * var bounds the cancellation in s2 / m - (s1 / m)^2 to a relative
    // error of about m * 2^-53 (below f32 rounding for m < 2^28).
    std::vector<double> shift(nc), s1(nc), s2(nc);
    for (size_t c = 0; c < nc; ++c) shift[c] = load(xb[static_cast<int64_t>(c) * s.inner]);
    shifted_sums(xb, s, shift.data(), s1.data(), s2.data(), isa);
    const double m = static_cast<double>(s.outer * s.inner);
    C* mp = mean.data<C>();
    C* vp = var.data<C>();
    for (size_t c = 0; c < nc; ++c) {
      const double d = s1[c] / m;
      mp[c] = static_cast<C>(shift[c] + d);
      vp[c] = static_cast<C>(std::max(0.0, s2[c] / m - d * d));
    }
  });
}

}  // namespace mixprec::ops
