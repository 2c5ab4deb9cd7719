// The cuda backend's kernels (ops/cuda/): each takes a problem whose tensors are on one CUDA
// device, queues its work on that device's compute stream (core/cuda_stream.h) and returns
// without waiting. `*_declines` says why a kernel does not take a problem.
#pragma once

#include <string>

#include "ops/amp_problem.h"
#include "ops/attention_problem.h"
#include "ops/elementwise_problem.h"
#include "ops/embedding_problem.h"
#include "ops/loss_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/reduce_problem.h"
#include "ops/softmax_problem.h"

// (The conv and pool problems' headers bring in mixprec/ops/ops.h, whose sqrt, exp, max, ...
// would shadow the device math functions in the .cu files: declared here, defined in
// ops/conv_problem.h and ops/pool_problem.h.)
namespace mixprec::ops {
struct ConvFwdProblem;
struct ConvBwdDataProblem;
struct ConvBwdWeightsProblem;
struct PoolFwdProblem;
struct PoolBwdProblem;
}  // namespace mixprec::ops

namespace mixprec::ops::cuda {

// pointwise.cu: every formula, any operand dtypes, broadcasting (out of at most 8 dims).
std::string pointwise_declines(const PointwiseProblem& p);
void pointwise(const PointwiseProblem& p);

// matmul.cpp: cuBLASLt. Epilogue: what cuBLASLt applies after the bias, before the rounding
// (ops use relu; gelu is there for a fused Dense + GELU).
enum class Epilogue { none, relu, gelu };
std::string matmul_declines(const MatmulProblem& p);
void matmul(const MatmulProblem& p);

// conv.cpp: cuDNN 9 convolutions (f32, f64, f16/bf16 with f32 accumulation; symmetric padding).
std::string conv_fwd_declines(const ConvFwdProblem& p);
std::string conv_bwd_data_declines(const ConvBwdDataProblem& p);
std::string conv_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_fwd(const ConvFwdProblem& p);
void conv_bwd_data(const ConvBwdDataProblem& p);
void conv_bwd_weights(const ConvBwdWeightsProblem& p);

// image.cu: per-channel kernels over dense [N, C, ...] tensors (any dim order).
std::string batch_norm_fwd_declines(const BatchNormFwdProblem& p);
std::string batch_norm_bwd_declines(const BatchNormBwdProblem& p);
void batch_norm_fwd(const BatchNormFwdProblem& p);
void batch_norm_bwd(const BatchNormBwdProblem& p);
// Pooling: max (not adaptive), average (plain, adaptive, global).
std::string pool_fwd_declines(const PoolFwdProblem& p);
std::string pool_bwd_declines(const PoolBwdProblem& p);
void pool_fwd(const PoolFwdProblem& p);
void pool_bwd(const PoolBwdProblem& p);
// out[c] = the sum of x's channel c (out: [C], any float dtype, rounded once).
void channel_sum(const Tensor& x, const Tensor& out);
// In place on a dense y [N, C, H, W]: fill writes y = bias[c] (bias packed, in y's dtype); relu
// then sets y = max(y, 0) keeping NaN.
void channel_bias_relu(const Tensor& y, const Tensor& bias, bool fill, bool relu);

// rows.cu: row-wise kernels (warp per row), the losses and the block-per-output reductions.
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
// Max with the index of the first maximum (NaN wins), one block per output; its backward one
// thread per output.
std::string reduce_max_declines(const ReduceMaxProblem& p);
std::string reduce_max_bwd_declines(const ReduceMaxBwdProblem& p);
void reduce_max(const ReduceMaxProblem& p);
void reduce_max_bwd(const ReduceMaxBwdProblem& p);
// NLL (a thread per row forward, per element backward) and MSE (a thread per element).
void nll_fwd(const NllFwdProblem& p);
void nll_bwd(const NllBwdProblem& p);
void mse_fwd(const MseFwdProblem& p);
void mse_bwd(const MseBwdProblem& p);

// attention.cu: scaled dot-product attention, a warp per row, f32 (f64) statistics and sums.
std::string attention_fwd_declines(const AttentionFwdProblem& p);
std::string attention_bwd_declines(const AttentionBwdProblem& p);
void attention_fwd(const AttentionFwdProblem& p);
void attention_bwd(const AttentionBwdProblem& p);

// amp.cu: one launch each; the found-inf flag and the scale are read on the device.
void amp_unscale(const AmpUnscaleProblem& p);
void amp_update_scale(const AmpUpdateScaleProblem& p);
// fused_update: instantiated for SgdStep, MomentumStep and AdamStep.
template <class Step> void fused_update(const FusedUpdateProblem<Step>& p);
void amp_advance_step(const AmpAdvanceStepProblem& p);
void amp_clip(const AmpClipProblem& p);

}  // namespace mixprec::ops::cuda
