// Reference loss kernels (the only implementation: losses are O(N*C) and memory bound).
// Invariants the wrappers (src/ops/loss.cpp) establish: every float tensor is contiguous in the
// compute dtype C (f32, or f64 for f64 inputs); sparse labels are i64 [N], already checked to
// lie in [0, num_classes). `g` is the incoming gradient, one element (broadcast) or one per loss
// element, and `factor` the reduction's scale (1/N for mean, else 1).
#pragma once

#include "mixprec/tensor.h"

namespace mixprec::ops::ref {

// With m_i = max_j x_ij and s_i = log sum_j exp(x_ij - m_i) (kept apart: m_i + s_i rounded to
// f32 would lose s_i's digits when |m_i| is large): loss[i] = s_i sum_j t_ij - sum_j t_ij
// (x_ij - m_i); sparse: loss[i] = (m_i - x[i, label_i]) + s_i. Writes loss, row_max, row_logsum
// (each [N]).
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, bool sparse,
                           const Tensor& loss, const Tensor& row_max, const Tensor& row_logsum);
// dlogits[i, j] = g_i * factor * (softmax_ij * sum_j t_ij - t_ij).
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, bool sparse,
                            const Tensor& row_max, const Tensor& row_logsum, const Tensor& g,
                            double factor, const Tensor& dlogits);

// loss[i] = -log_probs[i, label_i]; the gradient is -g_i * factor at (i, label_i), 0 elsewhere.
void nll_forward(const Tensor& log_probs, const Tensor& labels, const Tensor& loss);
void nll_backward(const Tensor& labels, const Tensor& g, double factor, const Tensor& dlog_probs);

// loss = (p - t)^2 elementwise; dp = 2 (p - t) g factor (dt = -dp).
void mse_forward(const Tensor& pred, const Tensor& target, const Tensor& loss);
void mse_backward(const Tensor& pred, const Tensor& target, const Tensor& g, double factor,
                  const Tensor& dpred);

// Sum of all elements of a contiguous C tensor, in order (for the mean/sum reductions).
double ordered_sum(const Tensor& t);

}  // namespace mixprec::ops::ref
