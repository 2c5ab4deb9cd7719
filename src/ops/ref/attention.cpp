// Reference attention, forward and backward: the unfused composition, built from this backend's
// matmul and softmax kernels, every intermediate in compute_t (f32; f64 for f64) and each output
// rounded once, which makes it the oracle of exact attention for the fused kernels.
//   S = scale * q k^T, masked entries -inf;  P = softmax(S) (ref::softmax_fwd: a row with no
//   finite max is NaN);  o = P v;  lse = max + log(sum exp(S - max)), NaN for such a row.
//   Backward: S and P again; dv = P^T do; dP = do v^T; dS = P * (dP - rowsum(dP * P))
//   (ref::softmax_bwd); dq = scale * dS k; dk = scale * dS^T q.
// With the softmax forced into f16/bf16 (AttentionParams::softmax_dtype), S, P, dP and dS are
// rounded to it where an unfused low-precision softmax would store them, and the values that
// come out non-finite from those roundings are counted.
#include <cmath>
#include <limits>

#include "ops/layout.h"
#include "ops/ref/kernels.h"

namespace mixprec::ops {
namespace {

using detail::packed;

// f(<C>) with C = double for f64, float otherwise (the compute types).
template <class F> void visit_compute(DType ct, F&& f) {
  if (ct == DType::f64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

// Only the softmax dtype of prm, counting nothing.
AttentionParams quiet(const AttentionParams& prm) {
  AttentionParams q;
  q.softmax_dtype = prm.softmax_dtype;
  return q;
}

// S = scale * q k^T with the causal and boolean masks applied as -inf: [B, H, Lq, Lk] in ct.
Tensor masked_scores(const Tensor& q, const Tensor& k, const AttentionParams& prm, DType ct) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2);
  Tensor s = Tensor::empty({B, H, Lq, Lk}, {.dtype = ct});
  ref::matmul(MatmulProblem{.a = q, .b = k.transpose(2, 3), .bias = {}, .out = s});
  const int64_t off = Lk - Lq;
  const uint8_t* mb =
      prm.mask.defined() ? static_cast<const uint8_t*>(prm.mask.data_ptr()) : nullptr;
  const Strides ms = prm.mask.defined() ? prm.mask.strides() : Strides(4, 0);
  visit_compute(ct, [&]<class C>() {
    C* sp = static_cast<C*>(s.data_ptr());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i) {
          C* row = sp + ((b * H + h) * Lq + i) * Lk;
          const uint8_t* mrow = mb ? mb + b * ms[0] + h * ms[1] + i * ms[2] : nullptr;
          for (int64_t j = 0; j < Lk; ++j) {
            const bool visible = (!prm.causal || j <= i + off) && (!mrow || mrow[j * ms[3]] != 0);
            row[j] =
                visible ? row[j] * static_cast<C>(prm.scale) : -std::numeric_limits<C>::infinity();
          }
        }
  });
  return s;
}

// t rounded to the forced softmax dtype (t itself when the softmax runs in ct); adds to the
// count the values that were finite before the rounding and are not after it.
Tensor to_softmax_dtype(const Tensor& t, const AttentionParams& prm) {
  if (!is_low_precision(prm.softmax_dtype)) return t;
  const Tensor r = packed(t, prm.softmax_dtype);
  if (prm.softmax_nonfinite && !is_low_precision(t.dtype()))
    visit_compute(t.dtype(), [&]<class C>() {
      const C* a = static_cast<const C*>(t.data_ptr());  // t: a fresh contiguous ct tensor
      const Tensor w = packed(r, t.dtype());
      const C* b = static_cast<const C*>(w.data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i)
        *prm.softmax_nonfinite += std::isfinite(a[i]) && !std::isfinite(b[i]);
    });
  return r;
}

// P = softmax(S) along the last dim, in the softmax dtype.
Tensor probabilities(const Tensor& s, const AttentionParams& prm) {
  const Tensor x = to_softmax_dtype(s, prm);
  Tensor p = Tensor::empty(x.shape(), {.dtype = x.dtype()});
  ref::softmax_fwd(SoftmaxFwdProblem{.x = x, .y = p, .axis = 3, .log = false});
  return p;
}

// out = a @ b in ct (both widened to ct), then rounded once into `dst` (any strides).
void matmul_into(const Tensor& a, const Tensor& b, const Tensor& dst, DType ct,
                 double scale = 1.0) {
  Shape shape = a.shape();
  shape.back() = b.size(-1);
  Tensor out = Tensor::empty(shape, {.dtype = ct});
  ref::matmul(MatmulProblem{.a = a, .b = b, .bias = {}, .out = out});
  if (scale != 1.0)
    visit_compute(ct, [&]<class C>() {
      C* p = static_cast<C*>(out.data_ptr());
      for (int64_t i = 0; i < out.numel(); ++i) p[i] *= static_cast<C>(scale);
    });
  detail::round_into(out, dst);
}

}  // namespace

namespace ref {

void attention_fwd(const AttentionFwdProblem& p) {
  const DType ct = acc_dtype(p.q.dtype());
  const Tensor s = to_softmax_dtype(masked_scores(p.q, p.k, p.params, ct), p.params);
  const Tensor prob = probabilities(s, quiet(p.params));
  matmul_into(packed(prob, ct), packed(p.v, ct), p.o, ct);
  // lse from the scores the softmax saw, row by row.
  const int64_t rows = p.lse.numel(), n = s.size(3);
  const Tensor sc = packed(s, ct);
  visit_compute(ct, [&]<class C>() {
    const C* sp = static_cast<const C*>(sc.data_ptr());
    C* lp = static_cast<C*>(p.lse.data_ptr());
    for (int64_t r = 0; r < rows; ++r) {
      const C* row = sp + r * n;
      C mx = -std::numeric_limits<C>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      C sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
      lp[r] = std::isfinite(mx) ? mx + std::log(sum) : std::numeric_limits<C>::quiet_NaN();
    }
  });
}

void attention_bwd(const AttentionBwdProblem& p) {
  const DType ct = acc_dtype(p.q.dtype());
  // S and P as the forward had them (their roundings were counted there).
  const Tensor prob = probabilities(masked_scores(p.q, p.k, p.params, ct), quiet(p.params));
  const Tensor pc = packed(prob, ct), dout = packed(p.dout, ct);
  matmul_into(pc.transpose(2, 3), dout, p.dv, ct);
  Tensor dp = Tensor::empty(pc.shape(), {.dtype = ct});
  ref::matmul(
      MatmulProblem{.a = dout, .b = packed(p.v, ct).transpose(2, 3), .bias = {}, .out = dp});
  // dS in ct from P and dP as the softmax holds them, then rounded to the softmax dtype.
  const Tensor dps = packed(to_softmax_dtype(dp, p.params), ct);
  Tensor ds = Tensor::empty(pc.shape(), {.dtype = ct});
  ref::softmax_bwd(SoftmaxBwdProblem{.y = pc, .dy = dps, .dx = ds, .axis = 3, .log = false});
  const Tensor dsc = packed(to_softmax_dtype(ds, p.params), ct);
  matmul_into(dsc, packed(p.k, ct), p.dq, ct, p.params.scale);
  matmul_into(dsc.transpose(2, 3), packed(p.q, ct), p.dk, ct, p.params.scale);
}

}  // namespace ref
}  // namespace mixprec::ops
