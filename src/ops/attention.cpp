// scaled_dot_product_attention, forward and backward side by side: autocast (the op is on the
// white list: its matmuls run in the low dtype), the dtype of its softmax (the policy slot
// attention_softmax: f32 at every level unless a custom white list names it), shape checks, the
// mask as a broadcast view, kernel dispatch, and the node, which saves q, k, v, the output and the
// f32 row log-sum-exp (nothing of size [Lq, Lk]). When the softmax was forced into f16/bf16 and a
// value rounded to it overflowed, the overflow check (ops/numerics.h) gets an event naming the
// cell, attention_softmax and the phase, ahead of the generic "output of the op" one.
// Problems and the kernels that take them: attention_problem.h.
#include <cmath>

#include "mixprec/ops/numerics.h"
#include "ops/attention_problem.h"
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

namespace {
constexpr OpId kOp = OpId::scaled_dot_product_attention;
constexpr std::string_view kName = "scaled_dot_product_attention";

std::string describe_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttentionParams& p) {
  std::string s = "q " + desc(q) + " k " + desc(k) + " v " + desc(v);
  if (p.causal) s += " causal";
  if (p.mask.defined()) s += " mask " + desc(p.mask);
  if (is_low_precision(p.softmax_dtype))
    s += " softmax in " + std::string(dtype_name(p.softmax_dtype));
  return s;
}
}  // namespace

std::string AttentionFwdProblem::describe() const { return describe_attention(q, k, v, params); }
std::string AttentionBwdProblem::describe() const { return describe_attention(q, k, v, params); }

namespace {

// t with a unit stride in its last dim (what the kernels read rows by); a copy only if needed.
Tensor unit_last_stride(const Tensor& t) {
  return t.strides().back() == 1 || t.size(-1) == 1 ? t : t.contiguous();
}

// A new tensor of t's shape laid out like t when that is dense with a unit last stride.
Tensor empty_like_layout(const Tensor& t) {
  Strides st = dense_strides_like(t);
  if (st.back() != 1) st = contiguous_strides(t.shape());
  return empty_strided(t.shape(), st, t.dtype(), t.device());
}

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  const bool ranks = q.dim() == 4 && k.dim() == 4 && v.dim() == 4;
  MIXPREC_CHECK(ranks && q.size(0) == k.size(0) && q.size(0) == v.size(0) &&
                    q.size(1) == k.size(1) && q.size(1) == v.size(1) && q.size(3) == k.size(3) &&
                    k.size(2) == v.size(2),
                kName, ": expected q [B, H, Lq, D], k [B, H, Lk, D] and v [B, H, Lk, Dv], got q ",
                shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
                Hint{"split the heads first: x.reshape({B, L, H, D}).permute({0, 2, 1, 3})"});
  MIXPREC_CHECK(k.size(2) >= 1 && q.size(3) >= 1 && v.size(3) >= 1, kName,
                ": expected at least one key and head dims >= 1, got k ", shape_str(k.shape()),
                " and v ", shape_str(v.shape()));
}

// The mask as a u8 view of shape [B, H, Lq, Lk] (stride 0 on broadcast dims).
Tensor mask_view(const Tensor& mask, const Shape& scores) {
  if (!mask.defined()) return {};
  MIXPREC_CHECK(
      mask.dtype() == DType::boolean || mask.dtype() == DType::u8, kName,
      ": expected a bool (or u8) mask, got ", dtype_name(mask.dtype()),
      Hint{"true marks the keys a query may attend to (PyTorch's convention); an additive float "
           "bias is not supported"});
  bool fits = mask.dim() <= 4;
  for (int64_t d = 1; fits && d <= mask.dim(); ++d) {
    const int64_t m = mask.size(-d), s = scores[static_cast<size_t>(4 - d)];
    fits = m == s || m == 1;
  }
  MIXPREC_CHECK(fits, kName, ": the mask ", shape_str(mask.shape()),
                " does not broadcast to the scores [B, H, Lq, Lk] = ", shape_str(scores));
  const Tensor m = broadcast_to(mask.detach(), scores);
  return m.dtype() == DType::u8
             ? m
             : Tensor::from_storage(m.storage(), m.shape(), m.strides(), m.offset(), DType::u8);
}

// The dtype the softmax runs in: the low dtype only when a custom white list names
// attention_softmax; otherwise the inputs' accumulation dtype (f32; f64 for f64) at every level.
DType softmax_dtype_for(DType input) {
  if (autocast_active() && effective_policy(OpId::attention_softmax) == AmpPolicy::to_low)
    return autocast_state().low;
  return acc_dtype(input);
}

// Records the overflow of the forced low-precision softmax, if a check is on and nothing came
// first.
void report_softmax_overflow(NumericsCheckScope* check, const char* phase, const std::string& cell,
                             DType sdt, int64_t count, double input_max) {
  if (count == 0 || !check || check->first()) return;
  const std::string what =
      std::string(phase) == "forward" ? "the scores q.k^T * scale" : "dP = dO.v^T or dS";
  check->record(NonFiniteEvent{
      OpId::attention_softmax, "attention_softmax", cell, phase,
      what + " of " + std::string(kName) + " rounded to " + std::string(dtype_name(sdt)) +
          " (a custom list put attention_softmax in " + std::string(dtype_name(sdt)) + ")",
      sdt, input_max, count, false});
}

double max_abs(std::initializer_list<const Tensor*> ts) {
  double m = 0.0;
  for (const Tensor* t : ts) m = std::max(m, summarize_finite(*t).max_abs);
  return m;
}

struct Saved {
  SavedTensor q, k, v, o, lse;
  AttentionParams params;
  std::string cell;
};

std::vector<Tensor> attention_backward(const Saved& s, const Tensor& g) {
  const Tensor q = s.q.unpack(kName), k = s.k.unpack(kName), v = s.v.unpack(kName),
               o = s.o.unpack(kName);
  // q, k, v interleaved in one projection (MultiheadAttention's): dq, dk, dv interleaved the same
  // way in one new tensor, which ops::unbind's backward then takes whole, without a copy.
  std::vector<Tensor> grads;
  if (interleaved_views({&q, &k, &v}))
    grads = empty_interleaved_like({&q, &k, &v});
  else
    grads = {empty_like_layout(q), empty_like_layout(k), empty_like_layout(v)};
  AttentionBwdProblem b{
      q,
      k,
      v,
      o,
      s.lse.unpack(kName),
      g.dtype() == o.dtype() ? unit_last_stride(g.detach()) : packed(g, o.dtype()),
      grads[0],
      grads[1],
      grads[2],
      s.params};
  int64_t bad = 0;
  if (is_low_precision(b.params.softmax_dtype)) b.params.softmax_nonfinite = &bad;
  dispatch(kOp, "backward", b);
  if (bad > 0)
    report_softmax_overflow(numerics_check_any_phase(), "backward", s.cell, b.params.softmax_dtype,
                            bad, max_abs({&b.dout}));
  return {b.dq, b.dk, b.dv};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                    const AttentionOptions& options) {
  Prepared p = autocast_inputs(kOp, {q0, k0, v0});
  check_floating(kName, p.in[0], "q");
  check_floating(kName, p.in[1], "k");
  check_floating(kName, p.in[2], "v");
  check_same_device(kName, {&p.in[0], &p.in[1], &p.in[2], &options.mask});
  const DType dt = promote(promote(p.in[0].dtype(), p.in[1].dtype()), p.in[2].dtype());
  for (Tensor& t : p.in) t = unit_last_stride(amp_cast(t, dt));
  const Tensor &q = p.in[0], &k = p.in[1], &v = p.in[2];
  check_shapes(q, k, v);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), D = q.size(3),
                Dv = v.size(3);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  MIXPREC_CHECK(std::isfinite(scale), kName, ": expected a finite scale, got ", scale);

  AttentionParams prm{.scale = scale,
                      .causal = options.causal,
                      .mask = mask_view(options.mask, {B, H, Lq, Lk}),
                      .softmax_dtype = softmax_dtype_for(dt)};
  int64_t bad = 0;
  if (is_low_precision(prm.softmax_dtype)) prm.softmax_nonfinite = &bad;
  // The output is laid out [B, Lq, H, Dv], so that merging the heads afterwards is a free view.
  Tensor o = empty_strided({B, H, Lq, Dv}, {Lq * H * Dv, Dv, H * Dv, 1}, dt, q.device());
  const Tensor lse = Tensor::empty({B, H, Lq}, {.dtype = acc_dtype(dt), .device = q.device()});
  dispatch(kOp, "forward", AttentionFwdProblem{q.detach(), k.detach(), v.detach(), o, lse, prm});
  if (bad > 0)
    report_softmax_overflow(numerics_check(), "forward", current_cell_path(), prm.softmax_dtype,
                            bad, max_abs({&q, &k}));
  prm.softmax_nonfinite = nullptr;

  if (autograd::needs_grad({&q, &k, &v})) {
    auto s = std::make_shared<Saved>(Saved{SavedTensor(q.detach()), SavedTensor(k.detach()),
                                           SavedTensor(v.detach()), SavedTensor(o.detach()),
                                           SavedTensor(lse), prm, current_cell_path()});
    record(kOp, {q, k, v}, o,
           [s](const std::vector<Tensor>& g) { return attention_backward(*s, g[0]); });
  }
  const int64_t flops = 2 * B * H * attention_pairs(Lq, Lk, options.causal) * (D + Dv);
  Tensor out = finish(kOp, p, o, dt, flops);
  if (op_recording())
    record_op(OpRecord{OpId::attention_softmax,
                       current_cell_path(),
                       {dt},
                       {},
                       prm.softmax_dtype,
                       prm.softmax_dtype,
                       0,
                       false});
  return out;
}

}  // namespace mixprec::ops
