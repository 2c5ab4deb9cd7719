// The loss family's problems (softmax_cross_entropy, nll_loss, mse_loss; ops/loss.cpp). Kernels:
// ref::cross_entropy_*, ref::nll_*, ref::mse_*, and cpu::cross_entropy_rows_* for sparse f32
// cross-entropy (the language models' loss, where libm's exp per logit showed in the step).
// Invariants the op establishes: every float tensor is contiguous in the compute dtype C (f32, or
// f64 for f64 inputs); sparse labels are i64 [N], already checked to lie in [0, num_classes). `g`
// is the incoming gradient, one element (broadcast) or one per loss element, and `factor` the
// reduction's scale (1/N for mean, else 1).
#pragma once

#include <array>
#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// With m_i = max_j x_ij and s_i = log sum_j exp(x_ij - m_i) (kept apart: m_i + s_i rounded to
// f32 would lose s_i's digits when |m_i| is large): loss[i] = s_i sum_j t_ij - sum_j t_ij
// (x_ij - m_i); sparse: loss[i] = (m_i - x[i, label_i]) + s_i. Writes loss, row_max, row_logsum
// (each [N]).
struct CrossEntropyFwdProblem {
  Tensor logits, labels;
  bool sparse = true;
  Tensor loss, row_max, row_logsum;
  Device device() const { return logits.device(); }
  std::string describe() const;
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() {
    return std::array{&CrossEntropyFwdProblem::loss, &CrossEntropyFwdProblem::row_max,
                      &CrossEntropyFwdProblem::row_logsum};
  }
};

// dlogits[i, j] = g_i * factor * (softmax_ij * sum_j t_ij - t_ij).
struct CrossEntropyBwdProblem {
  Tensor logits, labels;
  bool sparse = true;
  Tensor row_max, row_logsum, g;
  double factor = 1.0;
  Tensor dlogits;
  Device device() const { return logits.device(); }
  std::string describe() const;
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&CrossEntropyBwdProblem::dlogits}; }
};

// loss[i] = -log_probs[i, label_i]; the gradient is -g_i * factor at (i, label_i), 0 elsewhere.
struct NllFwdProblem {
  Tensor log_probs, labels, loss;
  Device device() const { return log_probs.device(); }
  std::string describe() const;
};
struct NllBwdProblem {
  Tensor labels, g;
  double factor = 1.0;
  Tensor dlog_probs;
  Device device() const { return dlog_probs.device(); }
  std::string describe() const;
};

// loss = (p - t)^2 elementwise; dp = 2 (p - t) g factor (dt = -dp).
struct MseFwdProblem {
  Tensor pred, target, loss;
  Device device() const { return pred.device(); }
  std::string describe() const;
};
struct MseBwdProblem {
  Tensor pred, target, g;
  double factor = 1.0;
  Tensor dpred;
  Device device() const { return pred.device(); }
  std::string describe() const;
};

// ---------------------------------------------------------------- shared by every CPU kernel
// Sum of all elements of a contiguous f32/f64 tensor, in index order (the mean/sum reductions of
// the losses, thread-count independent). Defined in ops/ref/loss.cpp.
double ordered_sum(const Tensor& t);

}  // namespace mixprec::ops
