// Reference loss kernels (the oracle; sparse f32 cross-entropy also has cpu/loss.cpp): log-sum-exp
// cross-entropy (sparse and one-hot/soft labels), NLL and MSE, forward and backward, in the
// compute dtype (f32 or f64). Rows are independent and each is handled by one thread;
// reductions to a scalar run in index order (thread-count independent).
#include "ops/ref/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mixprec::ops {
namespace {

// Calls f.template operator()<C>() with C = float or double, the dtype of t.
template <class F> void visit_compute(const Tensor& t, F&& f) {
  MIXPREC_ASSERT(t.dtype() == DType::f32 || t.dtype() == DType::f64,
                 "loss kernels take f32/f64, got ", dtype_name(t.dtype()));
  if (t.dtype() == DType::f64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

template <class C> C grad_at(const C* g, int64_t n_g, int64_t i) { return n_g == 1 ? g[0] : g[i]; }

}  // namespace

namespace ref {

void cross_entropy_fwd(const CrossEntropyFwdProblem& p) {
  const Tensor &logits = p.logits, &labels = p.labels, &loss = p.loss;
  const Tensor &row_max = p.row_max, &row_logsum = p.row_logsum;
  const bool sparse = p.sparse;
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  visit_compute(logits, [&]<class C>() {
    const C* x = logits.data<C>();
    C* out = loss.data<C>();
    C* mx = row_max.data<C>();
    C* ls = row_logsum.data<C>();
#pragma omp parallel for schedule(static) if (n * c > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const C* xi = x + i * c;
      C m = -std::numeric_limits<C>::infinity();
      int64_t jmax = 0;
      for (int64_t j = 0; j < c; ++j)
        if (xi[j] > m) m = xi[j], jmax = j;
      // sum = 1 + rest (the max's term is exactly 1): log1p keeps small losses exact.
      C rest = 0;
      for (int64_t j = 0; j < c; ++j)
        if (j != jmax) rest += std::exp(xi[j] - m);
      mx[i] = m;
      // A row without a finite max (all -inf, a +inf) has no distribution: NaN, as in
      // log_softmax (a NaN logit already makes rest NaN). The backward reads it from ls.
      ls[i] = std::isfinite(m) ? std::log1p(rest) : std::numeric_limits<C>::quiet_NaN();
      if (sparse) {
        out[i] = (m - xi[labels.data<int64_t>()[i]]) + ls[i];
      } else {
        const C* t = labels.data<C>() + i * c;
        C tsum = 0, tx = 0;
        for (int64_t j = 0; j < c; ++j) {
          tsum += t[j];
          tx += t[j] * (xi[j] - m);
        }
        out[i] = ls[i] * tsum - tx;
      }
    }
  });
}

void cross_entropy_bwd(const CrossEntropyBwdProblem& p) {
  const Tensor &logits = p.logits, &labels = p.labels, &row_max = p.row_max;
  const Tensor &row_logsum = p.row_logsum, &g = p.g, &dlogits = p.dlogits;
  const bool sparse = p.sparse;
  const double factor = p.factor;
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  visit_compute(logits, [&]<class C>() {
    const C* x = logits.data<C>();
    const C* mx = row_max.data<C>();
    const C* ls = row_logsum.data<C>();
    const C* gp = g.data<C>();
    C* d = dlogits.data<C>();
#pragma omp parallel for schedule(static) if (n * c > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const C gi = grad_at(gp, g.numel(), i) * static_cast<C>(factor);
      const C* xi = x + i * c;
      C* di = d + i * c;
      C tsum = 1;
      const C* t = sparse ? nullptr : labels.data<C>() + i * c;
      if (!sparse) {
        tsum = 0;
        for (int64_t j = 0; j < c; ++j) tsum += t[j];
      }
      for (int64_t j = 0; j < c; ++j) {
        const C prob = std::exp((xi[j] - mx[i]) - ls[i]);
        di[j] = (prob * tsum - (sparse ? C(0) : t[j])) * gi;
      }
      if (sparse) di[labels.data<int64_t>()[i]] -= gi;
    }
  });
}

void nll_fwd(const NllFwdProblem& p) {
  const Tensor &log_probs = p.log_probs, &labels = p.labels, &loss = p.loss;
  const int64_t n = log_probs.shape()[0], c = log_probs.shape()[1];
  visit_compute(log_probs, [&]<class C>() {
    const C* lp = log_probs.data<C>();
    const int64_t* lab = labels.data<int64_t>();
    C* out = loss.data<C>();
    for (int64_t i = 0; i < n; ++i) out[i] = -lp[i * c + lab[i]];
  });
}

void nll_bwd(const NllBwdProblem& p) {
  const Tensor &labels = p.labels, &g = p.g, &dlog_probs = p.dlog_probs;
  const double factor = p.factor;
  const int64_t n = dlog_probs.shape()[0], c = dlog_probs.shape()[1];
  visit_compute(dlog_probs, [&]<class C>() {
    const int64_t* lab = labels.data<int64_t>();
    const C* gp = g.data<C>();
    C* d = dlog_probs.data<C>();
    std::fill(d, d + n * c, C(0));
    for (int64_t i = 0; i < n; ++i)
      d[i * c + lab[i]] = -grad_at(gp, g.numel(), i) * static_cast<C>(factor);
  });
}

void mse_fwd(const MseFwdProblem& p) {
  const Tensor &pred = p.pred, &target = p.target, &loss = p.loss;
  const int64_t n = pred.numel();
  visit_compute(pred, [&]<class C>() {
    const C *p = pred.data<C>(), *t = target.data<C>();
    C* out = loss.data<C>();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) out[i] = (p[i] - t[i]) * (p[i] - t[i]);
  });
}

void mse_bwd(const MseBwdProblem& p) {
  const Tensor &pred = p.pred, &target = p.target, &g = p.g, &dpred = p.dpred;
  const double factor = p.factor;
  const int64_t n = pred.numel();
  visit_compute(pred, [&]<class C>() {
    const C *p = pred.data<C>(), *t = target.data<C>(), *gp = g.data<C>();
    C* d = dpred.data<C>();
    const int64_t ng = g.numel();
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i)
      d[i] = 2 * (p[i] - t[i]) * grad_at(gp, ng, i) * static_cast<C>(factor);
  });
}

}  // namespace ref

// ---------------------------------------------------------------- shared (loss_problem.h)

double ordered_sum(const Tensor& t) {
  double out = 0;
  visit_compute(t, [&]<class C>() {
    // Fixed blocks of 1024 combined in order: error grows with the block count, not with n.
    const C* p = t.data<C>();
    const int64_t n = t.numel();
    C total = 0;
    for (int64_t b = 0; b < n; b += 1024) {
      C acc = 0;
      for (int64_t i = b; i < std::min(n, b + 1024); ++i) acc += p[i];
      total += acc;
    }
    out = static_cast<double>(total);
  });
  return out;
}

}  // namespace mixprec::ops
