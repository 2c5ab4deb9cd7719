// The reference backend: plain loops for every float dtype and every problem, the test oracle
// and the fallback for whatever the fast kernels decline (registered last, see register.cpp).
// Loads widen to compute_t (f32 for f32/f16/bf16, f64 for f64), each output is accumulated in
// one fixed order by one thread and rounded once, so results do not depend on the thread count.
// Problems and their invariants: ops/<family>_problem.h.
#pragma once

#include "ops/amp_problem.h"
#include "ops/attention_problem.h"
#include "ops/conv_problem.h"
#include "ops/elementwise_problem.h"
#include "ops/embedding_problem.h"
#include "ops/loss_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/pool_problem.h"
#include "ops/reduce_problem.h"
#include "ops/softmax_problem.h"

namespace mixprec::ops::ref {

// elementwise.cpp: every pointwise formula, one element at a time.
void pointwise(const PointwiseProblem& p);

// embedding.cpp: row copies; the backward buckets positions by row (deterministic, no atomics).
void embedding_fwd(const EmbeddingFwdProblem& p);
void embedding_bwd(const EmbeddingBwdProblem& p);

// matmul.cpp: per batch, b widened once into a transposed panel; sequential dot products.
void matmul(const MatmulProblem& p);

// conv.cpp: direct loops over compute-type NCHW copies of the operands.
void conv_fwd(const ConvFwdProblem& p);
void conv_bwd_data(const ConvBwdDataProblem& p);
void conv_bwd_weights(const ConvBwdWeightsProblem& p);

// pool.cpp: max (the first maximal element of a window in row-major order; a NaN wins; the
// backward recomputes that argmax from the saved input, so it needs no workspace), average and
// adaptive average pooling.
void pool_fwd(const PoolFwdProblem& p);
void pool_bwd(const PoolBwdProblem& p);

// norm.cpp: batch norm (statistics from batch_norm_statistics) and layer norm (two-pass).
void batch_norm_fwd(const BatchNormFwdProblem& p);
void batch_norm_bwd(const BatchNormBwdProblem& p);
void layer_norm_fwd(const LayerNormFwdProblem& p);
void layer_norm_bwd(const LayerNormBwdProblem& p);

// softmax.cpp: max first, then the sum of exp(x - max); rows without a distribution are NaN.
void softmax_fwd(const SoftmaxFwdProblem& p);
void softmax_bwd(const SoftmaxBwdProblem& p);

// reduce.cpp: strided walks, one thread per output (blocks of 2^16 combined in order).
void reduce_sum(const ReduceSumProblem& p);
void reduce_max(const ReduceMaxProblem& p);
void reduce_max_bwd(const ReduceMaxBwdProblem& p);

// loss.cpp: cross-entropy (log-sum-exp, rows kept apart as max and log-sum), NLL, MSE.
void cross_entropy_fwd(const CrossEntropyFwdProblem& p);
void cross_entropy_bwd(const CrossEntropyBwdProblem& p);
void nll_fwd(const NllFwdProblem& p);
void nll_bwd(const NllBwdProblem& p);
void mse_fwd(const MseFwdProblem& p);
void mse_bwd(const MseBwdProblem& p);

// attention.cpp: the unfused composition of matmul and softmax above, all in compute_t.
void attention_fwd(const AttentionFwdProblem& p);
void attention_bwd(const AttentionBwdProblem& p);
void amp_unscale(const AmpUnscaleProblem& p);
void amp_update_scale(const AmpUpdateScaleProblem& p);
// fused_update: instantiated for SgdStep, MomentumStep and AdamStep.
template <class Step> void fused_update(const FusedUpdateProblem<Step>& p);
void amp_advance_step(const AmpAdvanceStepProblem& p);
void amp_clip(const AmpClipProblem& p);

}  // namespace mixprec::ops::ref
