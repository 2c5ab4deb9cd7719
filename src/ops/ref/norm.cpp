// Reference batch and layer normalisation (forward and backward): plain loops that load each
// element, compute in compute_t<T> (f32 for f32/f16/bf16, f64 for f64) and round the result
// once. Layer norm's statistics are two-pass (mean, then the mean squared deviation); batch
// norm's are one shifted pass summed in f64 (batch_norm_statistics). Parallel loops give each
// channel / row / column block to one thread, so results never depend on the thread count.
#include <cmath>

#include "ops/elementwise_problem.h"
#include "ops/ref/kernels.h"

namespace mixprec::ops::ref {
namespace {

// Element offsets of every (n, spatial...) position of t [N, C, ...], i.e. all dims but dim 1,
// in row-major order of those dims. Channel c adds c * strides[1].
std::vector<int64_t> channel_offsets(const Tensor& t) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  std::vector<int64_t> off{0};
  for (size_t d = 0; d < s.size(); ++d) {
    if (d == 1) continue;
    std::vector<int64_t> next;
    next.reserve(off.size() * static_cast<size_t>(s[d]));
    for (int64_t base : off)
      for (int64_t i = 0; i < s[d]; ++i) next.push_back(base + i * st[d]);
    off = std::move(next);
  }
  return off;
}

template <class C> const C* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const C*>(t.data_ptr()) : nullptr;
}

}  // namespace

// ---------------------------------------------------------------- batch norm

void batch_norm_fwd(const BatchNormFwdProblem& p) {
  if (p.training) batch_norm_statistics(p.x, p.mean, p.var);
  visit_float(p.x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const std::vector<int64_t> xo = channel_offsets(p.x), yo = channel_offsets(p.y);
    const int64_t nc = p.x.shape()[1], m = static_cast<int64_t>(xo.size());
    const int64_t xcs = p.x.strides()[1], ycs = p.y.strides()[1];
    const T* xb = static_cast<const T*>(p.x.data_ptr());
    T* yb = static_cast<T*>(p.y.data_ptr());
    const C *gamma = cptr<C>(p.gamma), *beta = cptr<C>(p.beta);
    C* mean = static_cast<C*>(p.mean.data_ptr());
    C* var = static_cast<C*>(p.var.data_ptr());
#pragma omp parallel for schedule(static) if (nc * m > 32768)
    for (int64_t c = 0; c < nc; ++c) {
      const T* xc = xb + c * xcs;
      const C invstd = C(1) / std::sqrt(var[c] + static_cast<C>(p.eps));
      const C scale = gamma[c] * invstd, mu = mean[c], shift = beta[c];
      T* yc = yb + c * ycs;
      for (int64_t i = 0; i < m; ++i) {
        const T y = store<T>((load(xc[xo[i]]) - mu) * scale + shift);
        yc[yo[i]] = p.relu ? store<T>(formulas::Relu{}(load(y))) : y;  // exact: y or 0
      }
    }
  });
}

void batch_norm_bwd(const BatchNormBwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const std::vector<int64_t> xo = channel_offsets(p.x), go = channel_offsets(p.dy),
                               dxo = channel_offsets(p.dx);
    // dy, masked by a fused relu's output as relu's backward would (formulas::ReluMask).
    const bool masked = p.relu_y.defined();
    const std::vector<int64_t> ro = masked ? channel_offsets(p.relu_y) : std::vector<int64_t>{};
    const T* rb = masked ? static_cast<const T*>(p.relu_y.data_ptr()) : nullptr;
    const int64_t rcs = masked ? p.relu_y.strides()[1] : 0;
    const int64_t nc = p.x.shape()[1], m = static_cast<int64_t>(xo.size());
    const int64_t xcs = p.x.strides()[1], gcs = p.dy.strides()[1], dxcs = p.dx.strides()[1];
    const T* xb = static_cast<const T*>(p.x.data_ptr());
    const T* gb = static_cast<const T*>(p.dy.data_ptr());
    T* dxb = static_cast<T*>(p.dx.data_ptr());
    const C *gamma = cptr<C>(p.gamma), *mean = cptr<C>(p.mean), *var = cptr<C>(p.var);
    C* dgamma = static_cast<C*>(p.dgamma.data_ptr());
    C* dbeta = static_cast<C*>(p.dbeta.data_ptr());
#pragma omp parallel for schedule(static) if (nc * m > 32768)
    for (int64_t c = 0; c < nc; ++c) {
      const T* xc = xb + c * xcs;
      const T* gc = gb + c * gcs;
      const T* rc = masked ? rb + c * rcs : nullptr;
      auto grad = [&](int64_t i) -> C {
        const C g = load(gc[go[i]]);
        return masked ? formulas::ReluMask{}(g, load(rc[ro[i]])) : g;
      };
      const C mu = mean[c], invstd = C(1) / std::sqrt(var[c] + static_cast<C>(p.eps));
      C sum_g = 0, sum_gx = 0;
      for (int64_t i = 0; i < m; ++i) {
        const C g = grad(i);
        sum_g += g;
        sum_gx += g * (load(xc[xo[i]]) - mu) * invstd;
      }
      dbeta[c] = sum_g;
      dgamma[c] = sum_gx;
      const C k = gamma[c] * invstd;
      T* dxc = dxb + c * dxcs;
      if (!p.training) {  // the statistics are constants: an affine map
        for (int64_t i = 0; i < m; ++i) dxc[dxo[i]] = store<T>(grad(i) * k);
        continue;
      }
      const C mg = sum_g / static_cast<C>(m), mgx = sum_gx / static_cast<C>(m);
      for (int64_t i = 0; i < m; ++i) {
        const C xhat = (load(xc[xo[i]]) - mu) * invstd;
        dxc[dxo[i]] = store<T>(k * (grad(i) - mg - xhat * mgx));
      }
    }
  });
}

// ---------------------------------------------------------------- layer norm

void layer_norm_fwd(const LayerNormFwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const int64_t rows = p.x.shape()[0], m = p.x.shape()[1];
    const T* xb = static_cast<const T*>(p.x.data_ptr());
    T* yb = static_cast<T*>(p.y.data_ptr());
    const C *gamma = cptr<C>(p.gamma), *beta = cptr<C>(p.beta);
    C* mean = static_cast<C*>(p.mean.data_ptr());
    C* var = static_cast<C*>(p.var.data_ptr());
#pragma omp parallel for schedule(static) if (rows * m > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xb + r * m;
      C sum = 0;
      for (int64_t j = 0; j < m; ++j) sum += load(xr[j]);
      const C mu = sum / static_cast<C>(m);
      C sq = 0;
      for (int64_t j = 0; j < m; ++j) {
        const C d = load(xr[j]) - mu;
        sq += d * d;
      }
      mean[r] = mu;
      var[r] = sq / static_cast<C>(m);
      const C rstd = C(1) / std::sqrt(var[r] + static_cast<C>(p.eps));
      T* yr = yb + r * m;
      for (int64_t j = 0; j < m; ++j)
        yr[j] = store<T>((load(xr[j]) - mu) * rstd * gamma[j] + beta[j]);
    }
  });
}

void layer_norm_bwd(const LayerNormBwdProblem& p) {
  visit_float(p.x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    const int64_t rows = p.x.shape()[0], m = p.x.shape()[1];
    const T* xb = static_cast<const T*>(p.x.data_ptr());
    const T* gb = static_cast<const T*>(p.dy.data_ptr());
    T* dxb = static_cast<T*>(p.dx.data_ptr());
    const C *gamma = cptr<C>(p.gamma), *mean = cptr<C>(p.mean), *var = cptr<C>(p.var);
    auto rstd_of = [&](int64_t r) { return C(1) / std::sqrt(var[r] + static_cast<C>(p.eps)); };
    // dx, row by row.
#pragma omp parallel for schedule(static) if (rows * m > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xb + r * m;
      const T* gr = gb + r * m;
      const C mu = mean[r], rstd = rstd_of(r);
      C a = 0, b = 0;
      for (int64_t j = 0; j < m; ++j) {
        const C dxhat = load(gr[j]) * gamma[j];
        a += dxhat;
        b += dxhat * (load(xr[j]) - mu) * rstd;
      }
      a /= static_cast<C>(m);
      b /= static_cast<C>(m);
      T* dxr = dxb + r * m;
      for (int64_t j = 0; j < m; ++j) {
        const C xhat = (load(xr[j]) - mu) * rstd;
        dxr[j] = store<T>(rstd * (load(gr[j]) * gamma[j] - a - xhat * b));
      }
    }
    // dgamma, dbeta: each block of columns sums over the rows in order.
    C* dgamma = static_cast<C*>(p.dgamma.data_ptr());
    C* dbeta = static_cast<C*>(p.dbeta.data_ptr());
    constexpr int64_t kCols = 64;
    const int64_t blocks = (m + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (rows * m > 32768)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * kCols, j1 = std::min(m, j0 + kCols);
      for (int64_t j = j0; j < j1; ++j) dgamma[j] = dbeta[j] = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const C mu = mean[r], rstd = rstd_of(r);
        for (int64_t j = j0; j < j1; ++j) {
          const C g = load(gb[r * m + j]);
          dbeta[j] += g;
          dgamma[j] += g * (load(xb[r * m + j]) - mu) * rstd;
        }
      }
    }
  });
}

}  // namespace mixprec::ops::ref
