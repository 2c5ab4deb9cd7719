// Losses, forward and backward side by side: softmax_cross_entropy (sparse class indices or
// one-hot / soft float labels), nll_loss and mse_loss, each with reduction none / mean / sum.
// They compute in f32 (f64 for f64 inputs) and return acc_dtype(input): at O2 the output is
// NOT cast back to the low dtype (the loss stays fp32). Labels are validated here with errors
// that name the bad label and the class count. Problems and kernels: loss_problem.h.
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/loss_problem.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

std::string CrossEntropyFwdProblem::describe() const {
  return desc(logits) + (sparse ? " labels " : " soft labels ") + desc(labels);
}
std::string CrossEntropyBwdProblem::describe() const {
  return desc(logits) + (sparse ? " labels " : " soft labels ") + desc(labels) + " g " + desc(g);
}
std::string NllFwdProblem::describe() const { return desc(log_probs) + " labels " + desc(labels); }
std::string NllBwdProblem::describe() const { return desc(dlog_probs) + " g " + desc(g); }
std::string MseFwdProblem::describe() const { return desc(pred) + " target " + desc(target); }
std::string MseBwdProblem::describe() const { return desc(pred) + " g " + desc(g); }

namespace {

// Class-index labels [n] of an integer dtype as packed i64, each checked to lie in [0, classes).
Tensor class_labels(std::string_view op, const Tensor& labels, int64_t n, int64_t classes,
                    const char* float_hint) {
  MIXPREC_CHECK(labels.defined() && (labels.dtype() == DType::i32 || labels.dtype() == DType::i64),
                op, ": expected class-index labels of dtype i32 or i64, got ", desc(labels),
                Hint{float_hint});
  MIXPREC_CHECK(labels.shape() == Shape{n}, op, ": expected labels of shape [", n,
                "] (one class index per row), got ", desc(labels));
  const Tensor lab = packed(labels, DType::i64);
  // Labels on a GPU are not range-checked here: reading them would make every step wait for
  // the GPU. The CUDA cross-entropy kernel gives a row whose label is out of range a NaN loss
  // (ops/cuda/rows.cu), so a train step sees a non-finite loss and skips the update.
  if (!lab.device().is_cpu()) return lab;
  // A kernel of its own, so that a captured step (core/capture.h) checks every batch's labels.
  mixprec::detail::run_kernel([lab, n, classes, name = std::string(op)] {
    const int64_t* l = lab.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      MIXPREC_CHECK(l[i] >= 0 && l[i] < classes, name, ": label ", l[i], " at index ", i,
                    " is out of range [0, ", classes, ")",
                    Hint{"labels must be class indices 0..C-1, with C the size of the last layer"});
  });
  return lab;
}

void check_rows(std::string_view op, const Tensor& t, const char* what) {
  check_floating(op, t, what);
  MIXPREC_CHECK(t.dim() == 2, op, ": expected ", what, " of shape [N, C], got ", desc(t));
}

// none: the per-element losses; mean / sum: a scalar, summed in index order (on a GPU by the
// sum op's kernel, queued: the host reads nothing).
Tensor reduce_loss(const Tensor& per, Reduction r) {
  if (r == Reduction::none) return per;
  if (!per.device().is_cpu()) {
    AutocastScope as_is(AutocastState{});  // the loss stays in acc_dtype, never cast to low
    return r == Reduction::mean ? mean(per) : sum(per);
  }
  Tensor out = Tensor::empty({}, {.dtype = per.dtype(), .device = per.device()});
  // A kernel of its own (a captured step replays it), writing through a view without history.
  mixprec::detail::run_kernel([per, o = out.detach(), r]() mutable {
    double s = ordered_sum(per);
    if (r == Reduction::mean) s /= static_cast<double>(per.numel());
    o.fill_(s);
  });
  return out;
}

double reduction_factor(Reduction r, int64_t n) {
  return r == Reduction::mean ? 1.0 / static_cast<double>(n) : 1.0;
}

// Records the loss; the output is never cast back to the low dtype.
Tensor finish_loss(OpId id, Prepared& p, Tensor out) {
  p.decision.output.reset();
  return finish(id, p, out, out.dtype());
}

}  // namespace

Tensor softmax_cross_entropy(const Tensor& logits0, const Tensor& labels0,
                             const SoftmaxCrossEntropyOptions& o) {
  constexpr std::string_view op = "softmax_cross_entropy";
  Prepared p = autocast_inputs(OpId::softmax_cross_entropy, {logits0, labels0});
  const Tensor &logits = p.in[0], &labels = p.in[1];
  check_rows(op, logits, "logits");
  check_same_device(op, {&logits, &labels});
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  const DType cd = acc_dtype(logits.dtype());
  Tensor lab;
  if (o.sparse) {
    lab = class_labels(op, labels, n, c,
                       "with sparse = true labels are class indices; pass "
                       "sparse = false for one-hot labels");
  } else {
    MIXPREC_CHECK(labels.defined() && is_floating(labels.dtype()), op,
                  ": expected one-hot float labels of shape ", shape_str(logits.shape()), ", got ",
                  desc(labels), Hint{"for class indices [N] set sparse = true"});
    MIXPREC_CHECK(labels.shape() == logits.shape(), op,
                  ": expected one-hot labels of the logits' shape ", shape_str(logits.shape()),
                  ", got ", desc(labels), Hint{"for class indices [N] set sparse = true"});
    lab = packed(labels, cd);
  }
  const Tensor x = packed(logits, cd);
  const Tensor per = Tensor::empty({n}, {.dtype = cd, .device = x.device()});
  const Tensor row_max = Tensor::empty({n}, {.dtype = cd, .device = x.device()});
  const Tensor row_logsum = Tensor::empty({n}, {.dtype = cd, .device = x.device()});
  dispatch(OpId::softmax_cross_entropy, "forward",
           CrossEntropyFwdProblem{x, lab, o.sparse, per, row_max, row_logsum});
  Tensor out = reduce_loss(per, o.reduction);
  if (autograd::needs_grad({&logits})) {
    SavedTensor sx(x), sl(lab), sm(row_max), ss(row_logsum);
    const bool sparse = o.sparse;
    const double factor = reduction_factor(o.reduction, n);
    const DType dt = logits.dtype();
    record(OpId::softmax_cross_entropy, {logits}, out, [=](const std::vector<Tensor>& g) {
      const Tensor xs = sx.unpack(op);
      const Tensor d = Tensor::empty(xs.shape(), {.dtype = cd, .device = xs.device()});
      dispatch(OpId::softmax_cross_entropy, "backward",
               CrossEntropyBwdProblem{xs, sl.unpack(op), sparse, sm.unpack(op), ss.unpack(op),
                                      packed(g[0], cd), factor, d});
      return std::vector<Tensor>{packed(d, dt)};
    });
  }
  return finish_loss(OpId::softmax_cross_entropy, p, out);
}

Tensor nll_loss(const Tensor& log_probs0, const Tensor& labels, Reduction reduction) {
  constexpr std::string_view op = "nll_loss";
  Prepared p = autocast_inputs(OpId::nll_loss, {log_probs0, labels});
  const Tensor& log_probs = p.in[0];
  check_rows(op, log_probs, "log_probs");
  check_same_device(op, {&log_probs, &p.in[1]});
  const int64_t n = log_probs.shape()[0], c = log_probs.shape()[1];
  const DType cd = acc_dtype(log_probs.dtype());
  const Tensor lab = class_labels(op, p.in[1], n, c, "nll_loss takes class indices [N]");
  const Tensor lp = packed(log_probs, cd);
  const Tensor per = Tensor::empty({n}, {.dtype = cd, .device = lp.device()});
  dispatch(OpId::nll_loss, "forward", NllFwdProblem{lp, lab, per});
  Tensor out = reduce_loss(per, reduction);
  if (autograd::needs_grad({&log_probs})) {
    SavedTensor sl(lab);
    const double factor = reduction_factor(reduction, n);
    const DType dt = log_probs.dtype();
    const Shape shape = log_probs.shape();
    const Device dev = lp.device();
    record(OpId::nll_loss, {log_probs}, out, [=](const std::vector<Tensor>& g) {
      const Tensor d = Tensor::empty(shape, {.dtype = cd, .device = dev});
      dispatch(OpId::nll_loss, "backward",
               NllBwdProblem{sl.unpack(op), packed(g[0], cd), factor, d});
      return std::vector<Tensor>{packed(d, dt)};
    });
  }
  return finish_loss(OpId::nll_loss, p, out);
}

Tensor mse_loss(const Tensor& prediction0, const Tensor& target0, Reduction reduction) {
  constexpr std::string_view op = "mse_loss";
  Prepared p = autocast_inputs(OpId::mse_loss, {prediction0, target0});
  const Tensor &pred = p.in[0], &target = p.in[1];
  check_floating(op, pred, "prediction");
  check_floating(op, target, "target");
  check_same_device(op, {&pred, &target});
  MIXPREC_CHECK(pred.shape() == target.shape(), op,
                ": expected a target of the prediction's shape ", shape_str(pred.shape()), ", got ",
                desc(target),
                Hint{"mse_loss does not broadcast; reshape the target to the prediction's shape"});
  const DType cd = acc_dtype(promote(pred.dtype(), target.dtype()));
  const Tensor pc = packed(pred, cd), tc = packed(target, cd);
  const Tensor per = Tensor::empty(pred.shape(), {.dtype = cd, .device = pc.device()});
  dispatch(OpId::mse_loss, "forward", MseFwdProblem{pc, tc, per});
  Tensor out = reduce_loss(per, reduction);
  if (autograd::needs_grad({&pred, &target})) {
    SavedTensor sp(pc), st(tc);
    const double factor = reduction_factor(reduction, pred.numel());
    const DType dp = pred.dtype(), dtt = target.dtype();
    const bool gp = pred.requires_grad(), gt = target.requires_grad();
    record(OpId::mse_loss, {pred, target}, out, [=](const std::vector<Tensor>& g) {
      const Tensor ps = sp.unpack(op);
      const Tensor d = Tensor::empty(ps.shape(), {.dtype = cd, .device = ps.device()});
      dispatch(OpId::mse_loss, "backward",
               MseBwdProblem{ps, st.unpack(op), packed(g[0], cd), factor, d});
      return std::vector<Tensor>{gp ? packed(d, dp) : Tensor(),
                                 gt ? packed(neg(d), dtt) : Tensor()};
    });
  }
  return finish_loss(OpId::mse_loss, p, out);
}

}  // namespace mixprec::ops
