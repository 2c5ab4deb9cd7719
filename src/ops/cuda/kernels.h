// The cuda backend's kernels (ops/cuda/): each takes a problem whose tensors are on one CUDA
// device, queues its work on that device's compute stream (core/cuda_stream.h) and returns
// without waiting. `*_declines` says why a kernel does not take a problem.
#pragma once

#include <string>

#include "ops/amp_problem.h"
#include "ops/elementwise_problem.h"
#include "ops/embedding_problem.h"
#include "ops/loss_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/reduce_problem.h"
#include "ops/softmax_problem.h"

namespace mixprec::ops::cuda {

// pointwise.cu: every formula, any operand dtypes, broadcasting (out of at most 8 dims).
std::string pointwise_declines(const PointwiseProblem& p);
void pointwise(const PointwiseProblem& p);

// matmul.cpp: cuBLASLt. Epilogue: what cuBLASLt applies after the bias, before the rounding
// (ops use relu; gelu is there for a fused Dense + GELU).
enum class Epilogue { none, relu, gelu };
std::string matmul_declines(const MatmulProblem& p);
void matmul(const MatmulProblem& p);

// rows.cu: row-wise kernels (warp per row) and the block-per-output sum reduction.
void softmax_fwd(const SoftmaxFwdProblem& p);
void softmax_bwd(const SoftmaxBwdProblem& p);
void layer_norm_fwd(const LayerNormFwdProblem& p);
void layer_norm_bwd(const LayerNormBwdProblem& p);
void cross_entropy_fwd(const CrossEntropyFwdProblem& p);
void cross_entropy_bwd(const CrossEntropyBwdProblem& p);
void embedding_fwd(const EmbeddingFwdProblem& p);
void embedding_bwd(const EmbeddingBwdProblem& p);
std::string reduce_sum_declines(const ReduceSumProblem& p);
void reduce_sum(const ReduceSumProblem& p);

// amp.cu: one launch each; the found-inf flag and the scale are read on the device.
void amp_unscale(const AmpUnscaleProblem& p);
void amp_update_scale(const AmpUpdateScaleProblem& p);
void fused_momentum(const FusedMomentumProblem& p);

}  // namespace mixprec::ops::cuda
