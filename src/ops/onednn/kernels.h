// The onednn backend: oneDNN 2.6 primitives for matmul, convolution, pooling, batch/layer
// normalisation and softmax, in f32 and (where the CPU has AVX-512) bf16; registered after the
// cpu backend and before the reference (see register.cpp). Tensors go in with their exact
// strides (a transposed operand or a channels-last image is described, never copied); each
// `declines` builds and caches the primitive (per thread, context.h) and returns oneDNN's own
// reason when it cannot, or when oneDNN would only run its reference kernel. Built only with
// MIXPREC_WITH_ONEDNN. Problems and their invariants: ops/<family>_problem.h. f16, and bf16 on
// CPUs without AVX-512, run through the f32 kernels below (low_via_f32, see register.cpp).
#pragma once

#include <string>

#include "ops/conv_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/pool_problem.h"
#include "ops/softmax_problem.h"

namespace mixprec::ops::onednn {

// matmul.cpp: the matmul primitive with strided memory descriptors, bias and a fused relu
// post-op, any batch broadcast, f32 dst from bf16 inputs.
std::string matmul_declines(const MatmulProblem& p);
void matmul(const MatmulProblem& p);
// oneDNN's name for the implementation it picked for p ("brg:avx512_core_amx", ...), or the
// reason it cannot; for tests and benchmarks that check the fast path is taken.
std::string matmul_impl_name(const MatmulProblem& p);

// conv.cpp: forward with fused bias and ReLU, backward-data, backward-weights with f32
// weight/bias gradients for bf16 inputs. Only the (small) weights are reordered, into the
// blocked format oneDNN's fast kernels want.
std::string conv_fwd_declines(const ConvFwdProblem& p);
void conv_fwd(const ConvFwdProblem& p);
std::string conv_bwd_data_declines(const ConvBwdDataProblem& p);
void conv_bwd_data(const ConvBwdDataProblem& p);
std::string conv_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_bwd_weights(const ConvBwdWeightsProblem& p);

// pool.cpp: max (forward_training leaves oneDNN's argmax workspace for the backward) and
// average (include/exclude padding), any dense NCHW or channels-last layout. Declines adaptive
// bins that are not uniform and ceil-mode average windows whose divisor oneDNN would compute
// differently from PyTorch. Ties go to the first maximum as in the reference; a NaN is skipped
// here (the reference propagates it), the one known difference.
std::string pool_fwd_declines(const PoolFwdProblem& p);
void pool_fwd(const PoolFwdProblem& p);
std::string pool_bwd_declines(const PoolBwdProblem& p);
void pool_bwd(const PoolBwdProblem& p);

// norm.cpp: batch normalisation (training statistics from batch_norm_statistics, then the
// use_global_stats primitive) and layer normalisation over [rows, M]; f32 parameters and
// statistics.
std::string batch_norm_fwd_declines(const BatchNormFwdProblem& p);
void batch_norm_fwd(const BatchNormFwdProblem& p);
std::string batch_norm_bwd_declines(const BatchNormBwdProblem& p);
void batch_norm_bwd(const BatchNormBwdProblem& p);
std::string layer_norm_fwd_declines(const LayerNormFwdProblem& p);
void layer_norm_fwd(const LayerNormFwdProblem& p);
std::string layer_norm_bwd_declines(const LayerNormBwdProblem& p);
void layer_norm_bwd(const LayerNormBwdProblem& p);

// softmax.cpp: softmax_v2 (accurate / log) over one axis of a contiguous tensor; rows without
// a distribution are repaired to NaN (fill_nan_rows, nan_where_nan).
std::string softmax_fwd_declines(const SoftmaxFwdProblem& p);
void softmax_fwd(const SoftmaxFwdProblem& p);
std::string softmax_bwd_declines(const SoftmaxBwdProblem& p);
void softmax_bwd(const SoftmaxBwdProblem& p);

}  // namespace mixprec::ops::onednn
