// The cpu backend: our own vector kernels for shapes where they beat oneDNN 2.6 (or where it
// has none), registered ahead of oneDNN (see register.cpp). Each declines, with the reason,
// every problem outside its niche. Problems and their invariants: ops/<family>_problem.h.
// The elementwise engine behind cpu::pointwise is in cpu/elementwise.h.
#pragma once

#include <optional>
#include <string>

#include "ops/amp_problem.h"
#include "ops/attention_problem.h"
#include "ops/conv_problem.h"
#include "ops/elementwise_problem.h"
#include "ops/loss_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/pool_problem.h"
#include "ops/reduce_problem.h"

namespace mixprec::ops::cpu {

namespace simd {  // simd.h
enum class Isa;
enum class Activation;
}  // namespace simd

// batch_norm16.cpp: "" for the 16-bit dtypes that the CPU's GEMMs and convolutions (oneDNN)
// compute in f32 (f16 always, bf16 without AVX-512), else why not: the dtypes for which the cpu
// backend's kernels widen tile by tile instead of computing natively.
std::string why_not_via_f32(DType d);
// loss.cpp: sparse softmax cross-entropy on f32 rows (f64 and soft labels decline to ref).
std::string cross_entropy_rows_fwd_declines(const CrossEntropyFwdProblem& p);
std::string cross_entropy_rows_bwd_declines(const CrossEntropyBwdProblem& p);
void cross_entropy_rows_fwd(const CrossEntropyFwdProblem& p);  // with the widest vectors here
void cross_entropy_rows_bwd(const CrossEntropyBwdProblem& p);
void cross_entropy_rows_fwd_isa(const CrossEntropyFwdProblem& p, simd::Isa isa);  // tests
void cross_entropy_rows_bwd_isa(const CrossEntropyBwdProblem& p, simd::Isa isa);

// elementwise.cpp: every pointwise formula through the vectorised engine; ReLU and its gradient
// mask on the bits of dense f16/bf16 tensors.
void pointwise(const PointwiseProblem& p);
std::string relu_bits16_declines(const PointwiseProblem& p);
void relu_bits16(const PointwiseProblem& p);  // with the widest vectors this CPU has
void relu_bits16_isa(const PointwiseProblem& p, simd::Isa isa);  // tests: each width here
// activations.cpp: gelu (erf and tanh forms), their gradients, erf and exp on f32 rows,
// vectorised (simd.h): the row kernel of a pointwise formula, if it has one; the pointwise
// kernel that runs those (through the elementwise engine, any dtype and layout, f32 compute);
// and the row kernel itself (a: the input, or a gradient's incoming g; b: its saved x, else null).
std::optional<simd::Activation> row_kernel_of(PointwiseFn fn);
std::string vector_rows_declines(const PointwiseProblem& p);
void vector_rows(const PointwiseProblem& p);
// Its direct path (tests: each ISA here): false, and nothing run, unless every operand and the
// output share one dtype (f32, bf16, f16) and one dense layout.
bool vector_rows_direct(const PointwiseProblem& p, simd::Isa isa);
void activation_rows(simd::Activation act, simd::Isa isa, const float* a, const float* b,
                     float* out, int64_t n);
// gelu's four forms on bf16 or f16 (every operand and the output one 16-bit dtype, one dense
// layout) by lookup in a table of all 65536 inputs, made once per form and dtype by the row
// kernel itself: vector_rows' bits, with a gather instead of erf or exp per value. Whether it
// beats the row kernel depends on the CPU's gathers: dispatch measures the two
// (PointwiseProblem::measured). table16_on: tests, each ISA here.
std::string table16_declines(const PointwiseProblem& p);
void table16(const PointwiseProblem& p);
void table16_on(const PointwiseProblem& p, simd::Isa isa);

// conv_direct.cpp: single-input-channel convolutions with at most 8 output channels (LeNet's
// first conv), forward and backward-weights, f32 register accumulation, channels-last output.
std::string conv_direct_c1_fwd_declines(const ConvFwdProblem& p);
void conv_direct_c1_fwd(const ConvFwdProblem& p);
std::string conv_direct_c1_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_direct_c1_bwd_weights(const ConvBwdWeightsProblem& p);
// Direct convolution for 2-16 input and 8-32 output channels, channels-last (conv_small.cpp).
std::string conv_small_fwd_declines(const ConvFwdProblem& p);
void conv_small_fwd(const ConvFwdProblem& p);
std::string conv_small_bwd_data_declines(const ConvBwdDataProblem& p);
void conv_small_bwd_data(const ConvBwdDataProblem& p);
std::string conv_small_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_small_bwd_weights(const ConvBwdWeightsProblem& p);

// gemm_skinny.cpp: GEMMs with a dimension of at most 16 in bf16/f16 (f32 stays with oneDNN),
// without a widened copy of the large operand: `dot` for N <= 16 with both operands contiguous
// along K (a Dense layer's forward), `rows` for a row-major b with M or K <= 16 (its backward).
// reduce.cpp: sum over the leading axes of a row-major tensor, the reference's bits.
std::string reduce_sum_leading_declines(const ReduceSumProblem& p);
void reduce_sum_leading(const ReduceSumProblem& p);

std::string gemm_skinny_dot_declines(const MatmulProblem& p);
void gemm_skinny_dot(const MatmulProblem& p);
std::string gemm_skinny_rows_declines(const MatmulProblem& p);
void gemm_skinny_rows(const MatmulProblem& p);

// conv_bf16_pairs.cpp: the weight gradient of bf16 convolutions (channels-last, input and output
// channels multiples of 16, not 1x1) through AVX512-BF16's pair dot product.
std::string conv_bf16_pairs_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_bf16_pairs_bwd_weights(const ConvBwdWeightsProblem& p);
// The same for a bf16 GEMM whose reduction is long (K >= 1024) and whose a is a transposed
// row-major matrix: linear's backward-weights (dY^T X over the tokens).
std::string gemm_bf16_pairs_declines(const MatmulProblem& p);
void gemm_bf16_pairs(const MatmulProblem& p);
// conv_im2col.cpp: im2col + GEMM (through dispatch, gemm_into) for convolutions with a small
// reduction (cin * kh * kw <= 64, one group).
std::string conv_im2col_fwd_declines(const ConvFwdProblem& p);
void conv_im2col_fwd(const ConvFwdProblem& p);
std::string conv_im2col_bwd_data_declines(const ConvBwdDataProblem& p);
void conv_im2col_bwd_data(const ConvBwdDataProblem& p);
std::string conv_im2col_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void conv_im2col_bwd_weights(const ConvBwdWeightsProblem& p);

// batch_norm16.cpp: batch norm of f16/bf16 data (f32 parameters), widened tile by tile in the
// kernel instead of whole tensors (contiguous or channels-last).
std::string batch_norm16_fwd_declines(const BatchNormFwdProblem& p);
void batch_norm16_fwd(const BatchNormFwdProblem& p);
std::string batch_norm16_bwd_declines(const BatchNormBwdProblem& p);
void batch_norm16_bwd(const BatchNormBwdProblem& p);
// pool_global_avg.cpp: global average pooling (kernel = the whole input, no padding).
std::string pool_global_avg_fwd_declines(const PoolFwdProblem& p);
void pool_global_avg_fwd(const PoolFwdProblem& p);
std::string pool_global_avg_bwd_declines(const PoolBwdProblem& p);
void pool_global_avg_bwd(const PoolBwdProblem& p);

// pool_max_nhwc.cpp: channels-last max pooling of f32/bf16/f16, with a u8 argmax workspace.
std::string pool_max_nhwc_fwd_declines(const PoolFwdProblem& p);
void pool_max_nhwc_fwd(const PoolFwdProblem& p);
std::string pool_max_nhwc_bwd_declines(const PoolBwdProblem& p);
void pool_max_nhwc_bwd(const PoolBwdProblem& p);

// attention.cpp: FlashAttention's blockwise algorithm with online softmax (f32 statistics),
// register-blocked tiles on AVX-512 or AVX2 (simd::best_isa()), f32/bf16/f16 (16-bit tiles
// widened inside the kernel). The overloads taking an ISA (one this CPU runs, not scalar), the
// forward's bound on a slice's keys and values widened at once (in floats; above it, tile by
// tile) and the backward's bound on its dQ scratch (in floats; it sets how many (b, h) run per
// wave) are for tests: the results do not depend on any of them.
std::string flash_attention_declines(const AttentionFwdProblem& p);
void flash_attention_fwd(const AttentionFwdProblem& p);
void flash_attention_fwd(const AttentionFwdProblem& p, simd::Isa isa);
void flash_attention_fwd(const AttentionFwdProblem& p, simd::Isa isa, int64_t whole_floats);
std::string flash_attention_bwd_declines(const AttentionBwdProblem& p);
void flash_attention_bwd(const AttentionBwdProblem& p);
void flash_attention_bwd(const AttentionBwdProblem& p, simd::Isa isa, int64_t scratch_floats);

// amp.cpp: the unscale + finite check and the optimizers' fused updates (fused_update:
// instantiated for SgdStep, MomentumStep and AdamStep), chunked OpenMP loops, bit for bit the
// reference kernels.
void amp_unscale(const AmpUnscaleProblem& p);
template <class Step> void fused_update(const FusedUpdateProblem<Step>& p);

}  // namespace mixprec::ops::cpu
