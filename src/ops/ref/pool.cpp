// Reference pooling: one OpenMP task per (n, c) plane; each window is read through the
// tensor's strides (NCHW or channels-last), reduced in the compute type and stored once. The
// backward accumulates each plane's input gradient on the task that owns it, in a fixed order,
// so results do not depend on the thread count.
#include "ops/ref/kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "mixprec/convert.h"

namespace mixprec::ops::ref {

namespace {

// Per output index along one dim: the input range [lo, hi) it reads, and (average pooling with
// count_include_pad) its extent including padding, PyTorch's divisor.
struct Bins {
  std::vector<int64_t> lo, hi, extent;
};

Bins make_bins(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, bool adaptive) {
  Bins b;
  for (int64_t o = 0; o < out; ++o) {
    int64_t lo, hi, ext;
    if (adaptive) {
      lo = o * in / out;
      hi = ((o + 1) * in + out - 1) / out;
      ext = hi - lo;
    } else {
      const int64_t start = o * stride - pad;
      const int64_t end = std::min(start + k, in + pad);
      ext = end - start;
      lo = std::max<int64_t>(start, 0);
      hi = std::min(end, in);
    }
    b.lo.push_back(lo);
    b.hi.push_back(hi);
    b.extent.push_back(ext);
  }
  return b;
}

struct Windows {
  Bins rows, cols;
  explicit Windows(const PoolGeometry& g)
      : rows(make_bins(g.h, g.oh, g.kh, g.stride_h, g.pad_t, g.adaptive)),
        cols(make_bins(g.w, g.ow, g.kw, g.stride_w, g.pad_l, g.adaptive)) {}
  int64_t divisor(const PoolGeometry& g, int64_t oy, int64_t ox) const {
    const size_t y = static_cast<size_t>(oy), x = static_cast<size_t>(ox);
    if (g.count_include_pad && !g.adaptive) return rows.extent[y] * cols.extent[x];
    return (rows.hi[y] - rows.lo[y]) * (cols.hi[x] - cols.lo[x]);
  }
};

// The first maximal element of window (oy, ox) of a plane, as (row, column). A NaN wins.
struct Cell {
  int64_t iy, ix;
};
template <class T>
Cell argmax(const T* plane, const Strides& s, const Windows& win, int64_t oy, int64_t ox) {
  const size_t y = static_cast<size_t>(oy), x = static_cast<size_t>(ox);
  Cell best{win.rows.lo[y], win.cols.lo[x]};
  auto best_v = load(plane[best.iy * s[2] + best.ix * s[3]]);
  for (int64_t iy = win.rows.lo[y]; iy < win.rows.hi[y]; ++iy)
    for (int64_t ix = win.cols.lo[x]; ix < win.cols.hi[x]; ++ix) {
      const auto v = load(plane[iy * s[2] + ix * s[3]]);
      if (v > best_v || (std::isnan(v) && !std::isnan(best_v))) {
        best_v = v;
        best = {iy, ix};
      }
    }
  return best;
}

// Small problems (gradient checks, tests) run on the calling thread.
template <class T> void fwd(const PoolFwdProblem& p) {
  using C = compute_t<T>;
  const PoolGeometry& g = p.g;
  const Windows win(g);
  const Strides& xs = p.x.strides();
  const Strides& ys = p.y.strides();
  const T* x = static_cast<const T*>(p.x.data_ptr());
  T* y = static_cast<T*>(p.y.data_ptr());
#pragma omp parallel for schedule(static) if (g.worth_threads())
  for (int64_t task = 0; task < g.n * g.c; ++task) {
    const int64_t n = task / g.c, c = task % g.c;
    const T* xp = x + n * xs[0] + c * xs[1];
    T* yp = y + n * ys[0] + c * ys[1];
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T& out = yp[oy * ys[2] + ox * ys[3]];
        if (g.kind == PoolKind::max) {
          const Cell m = argmax(xp, xs, win, oy, ox);
          out = xp[m.iy * xs[2] + m.ix * xs[3]];
          continue;
        }
        C sum = 0;
        for (int64_t iy = win.rows.lo[static_cast<size_t>(oy)];
             iy < win.rows.hi[static_cast<size_t>(oy)]; ++iy)
          for (int64_t ix = win.cols.lo[static_cast<size_t>(ox)];
               ix < win.cols.hi[static_cast<size_t>(ox)]; ++ix)
            sum += load(xp[iy * xs[2] + ix * xs[3]]);
        out = store<T>(sum / static_cast<C>(win.divisor(g, oy, ox)));
      }
  }
}

template <class T> void bwd(const PoolBwdProblem& p) {
  using C = compute_t<T>;
  const PoolGeometry& g = p.g;
  MIXPREC_ASSERT(g.kind != PoolKind::max || p.x.defined(), "max_pool2d backward needs x");
  const Windows win(g);
  const Strides& ds = p.dy.strides();
  const Strides& gs = p.dx.strides();
  const Strides xs = p.x.defined() ? p.x.strides() : Strides{};
  const T* dy = static_cast<const T*>(p.dy.data_ptr());
  const T* x = p.x.defined() ? static_cast<const T*>(p.x.data_ptr()) : nullptr;
  T* dx = static_cast<T*>(p.dx.data_ptr());
#pragma omp parallel if (g.worth_threads())
  {
    std::vector<C> acc(static_cast<size_t>(g.h * g.w));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < g.n * g.c; ++task) {
      const int64_t n = task / g.c, c = task % g.c;
      const T* dyp = dy + n * ds[0] + c * ds[1];
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const C gv = load(dyp[oy * ds[2] + ox * ds[3]]);
          if (g.kind == PoolKind::max) {
            const Cell m = argmax(x + n * xs[0] + c * xs[1], xs, win, oy, ox);
            acc[static_cast<size_t>(m.iy * g.w + m.ix)] += gv;
            continue;
          }
          const C share = gv / static_cast<C>(win.divisor(g, oy, ox));
          for (int64_t iy = win.rows.lo[static_cast<size_t>(oy)];
               iy < win.rows.hi[static_cast<size_t>(oy)]; ++iy)
            for (int64_t ix = win.cols.lo[static_cast<size_t>(ox)];
                 ix < win.cols.hi[static_cast<size_t>(ox)]; ++ix)
              acc[static_cast<size_t>(iy * g.w + ix)] += share;
        }
      T* dxp = dx + n * gs[0] + c * gs[1];
      for (int64_t iy = 0; iy < g.h; ++iy)
        for (int64_t ix = 0; ix < g.w; ++ix)
          dxp[iy * gs[2] + ix * gs[3]] = store<T>(acc[static_cast<size_t>(iy * g.w + ix)]);
    }
  }
}

}  // namespace

void pool_fwd(const PoolFwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() { fwd<T>(p); });
}
void pool_bwd(const PoolBwdProblem& p) {
  visit_float(p.dy.dtype(), [&]<class T>() { bwd<T>(p); });
}

}  // namespace mixprec::ops::ref
