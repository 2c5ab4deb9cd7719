// Shared op plumbing: autocast of inputs, output casts, op tracing and node recording.
#include "ops/op_common.h"

#include "mixprec/error.h"
#include "mixprec/ops/numerics.h"

namespace mixprec::ops::detail {

Prepared autocast_inputs(OpId op, std::vector<Tensor> inputs) {
  Prepared p;
  if (op_recording())
    for (const Tensor& t : inputs)
      p.is_param.push_back(t.defined() && t.is_leaf() && t.requires_grad());
  std::optional<DType> explicit_dtype;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    const uint64_t mark = explicit_dtype_mark(t);
    if (mark == 0) continue;
    explicit_dtype = explicit_dtype ? promote(*explicit_dtype, t.dtype()) : t.dtype();
    p.explicit_mark = outer_explicit_dtype_mark(p.explicit_mark, mark);
  }
  if (!autocast_active()) {
    p.in = std::move(inputs);
    return p;
  }
  std::vector<DType> float_dtypes;
  for (const Tensor& t : inputs)
    if (t.defined() && is_floating(t.dtype())) float_dtypes.push_back(t.dtype());
  p.decision = autocast_decision(op, float_dtypes, explicit_dtype);
  p.in = std::move(inputs);
  if (p.decision.input) {
    for (Tensor& t : p.in)
      if (t.defined() && is_floating(t.dtype()) && t.dtype() != *p.decision.input)
        t = amp_cast(t, *p.decision.input);
  }
  return p;
}

void carry_explicit_dtype(std::initializer_list<const Tensor*> inputs, const Tensor& out) {
  uint64_t mark = 0;
  for (const Tensor* t : inputs)
    if (t) mark = outer_explicit_dtype_mark(mark, explicit_dtype_mark(*t));
  if (mark != 0) mark_explicit_dtype(out, mark);
}

Tensor finish(OpId op, const Prepared& p, Tensor out, DType compute_dtype, int64_t flops) {
  if (flops > 0) {
    AmpCounters& c = amp_counters();
    c.flops += flops;
    if (is_low_precision(compute_dtype)) c.low_flops += flops;
  }
  if (NumericsCheckScope* check = numerics_check();
      check && !check->first() && is_floating(out.dtype())) {
    const FiniteSummary f = summarize_finite(out);
    if (f.nonfinite > 0) {
      double in_max = 0.0;
      for (const Tensor& t : p.in) in_max = std::max(in_max, summarize_finite(t).max_abs);
      check->record(NonFiniteEvent{op, std::string(op_name(op)), current_cell_path(), "forward",
                                   "output of " + std::string(op_name(op)), out.dtype(), in_max,
                                   f.nonfinite, f.has_nan});
    }
  }
  if (p.decision.output && is_floating(out.dtype()) && out.dtype() != *p.decision.output)
    out = amp_cast(out, *p.decision.output);
  if (p.explicit_mark != 0) mark_explicit_dtype(out, p.explicit_mark);
  if (op_recording()) {
    OpRecord r{op,
               current_cell_path(),
               {},
               {},
               compute_dtype,
               out.dtype(),
               flops,
               !p.in.empty() && p.in[0].defined() && p.in[0].requires_grad()};
    for (size_t i = 0; i < p.in.size(); ++i) {
      const Tensor& t = p.in[i];
      if (!t.defined() || !is_floating(t.dtype())) continue;
      r.input_dtypes.push_back(t.dtype());
      if (i < p.is_param.size() && p.is_param[i]) r.weight_dtypes.push_back(t.dtype());
    }
    record_op(std::move(r));
  }
  return out;
}

namespace {
std::shared_ptr<Node> make_node(OpId op, const std::vector<Tensor>& diff_inputs,
                                BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->name = op_name(op);
  node->op = static_cast<uint16_t>(op);
  node->next.reserve(diff_inputs.size());
  for (const Tensor& t : diff_inputs) node->next.push_back(autograd::edge_of(t));
  node->backward = std::move(backward);
  node->cell_path = current_cell_path();
  return node;
}
}  // namespace

void record(OpId op, const std::vector<Tensor>& diff_inputs, Tensor& out, BackwardFn backward,
            bool accepts_any_grad_dtype) {
  auto node = make_node(op, diff_inputs, std::move(backward));
  node->accepts_any_grad_dtype = accepts_any_grad_dtype;
  autograd::set_history(out, node);
}

void record(OpId op, const std::vector<Tensor>& diff_inputs, std::vector<Tensor>& outs,
            BackwardFn backward) {
  auto node = make_node(op, diff_inputs, std::move(backward));
  autograd::set_history(outs, node);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MIXPREC_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ",
                  shape_str(b), " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor reduce_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const size_t n = grad.shape().size();
  MIXPREC_ASSERT(shape.size() <= n, "reduce_to_shape: target has more dims");
  std::vector<int64_t> axes;
  const size_t lead = n - shape.size();
  for (size_t i = 0; i < n; ++i) {
    if (i < lead)
      axes.push_back(static_cast<int64_t>(i));
    else if (shape[i - lead] == 1 && grad.shape()[i] != 1)
      axes.push_back(static_cast<int64_t>(i));
  }
  Tensor g = axes.empty() ? grad : sum(grad, axes, /*keepdims=*/true);
  return reshape(g, shape);
}

void check_same_device(std::string_view op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    MIXPREC_CHECK(t->device() == first->device(), op, ": expected all tensors on ",
                  first->device().str(), ", got one on ", t->device().str());
  }
}

void check_floating(std::string_view op, const Tensor& t, std::string_view what) {
  MIXPREC_CHECK(t.defined(), op, ": ", what, " is undefined");
  MIXPREC_CHECK(is_floating(t.dtype()), op, ": expected a floating ", what, ", got ",
                dtype_name(t.dtype()));
}

}  // namespace mixprec::ops::detail
