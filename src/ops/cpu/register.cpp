// The cpu backend's kernels, each in the place dispatch tries it: the whole backend comes before
// onednn and ref (MIXPREC_OPS_BACKENDS), so these niche kernels get first refusal.
#include "ops/cpu/kernels.h"
#include "ops/dispatch.h"
#include "ops/low_via_f32.h"

namespace mixprec::ops {

void register_cpu_kernels() {
  constexpr Device::Type kCpu = Device::Type::cpu;
  register_kernel<PointwiseProblem>({"bits16", kCpu, cpu::relu_bits16_declines, cpu::relu_bits16});
  register_kernel<PointwiseProblem>({"table16", kCpu, cpu::table16_declines, cpu::table16});
  register_kernel<PointwiseProblem>(
      {"vector_rows", kCpu, cpu::vector_rows_declines, cpu::vector_rows});
  register_kernel<PointwiseProblem>({"cpu", kCpu, accept_all, cpu::pointwise});

  register_kernel<CrossEntropyFwdProblem>(
      {"simd_rows", kCpu, cpu::cross_entropy_rows_fwd_declines, cpu::cross_entropy_rows_fwd});
  register_kernel<CrossEntropyBwdProblem>(
      {"simd_rows", kCpu, cpu::cross_entropy_rows_bwd_declines, cpu::cross_entropy_rows_bwd});

  register_kernel<ReduceSumProblem>(
      {"leading_rows", kCpu, cpu::reduce_sum_leading_declines, cpu::reduce_sum_leading});

  register_kernel<MatmulProblem>(
      {"skinny_dot", kCpu, cpu::gemm_skinny_dot_declines, cpu::gemm_skinny_dot});
  register_kernel<MatmulProblem>(
      {"skinny_rows", kCpu, cpu::gemm_skinny_rows_declines, cpu::gemm_skinny_rows});
  register_kernel<MatmulProblem>(
      {"bf16_pairs", kCpu, cpu::gemm_bf16_pairs_declines, cpu::gemm_bf16_pairs});

  register_kernel<ConvFwdProblem>(
      {"direct_c1", kCpu, cpu::conv_direct_c1_fwd_declines, cpu::conv_direct_c1_fwd});
  register_kernel<ConvFwdProblem>(
      {"direct_small", kCpu, cpu::conv_small_fwd_declines, cpu::conv_small_fwd});
  // 16-bit im2col convolutions whose GEMM would be emulated in f32 anyway: the whole kernel in
  // f32, chunk by chunk of images (patches widened once, output rounded once, in cache).
  register_kernel(low_via_f32_batched<cpu::why_not_via_f32, cpu::conv_im2col_fwd_declines,
                                      cpu::conv_im2col_fwd>(kCpu, "im2col_gemm_via_f32"));
  register_kernel<ConvFwdProblem>(
      {"im2col_gemm", kCpu, cpu::conv_im2col_fwd_declines, cpu::conv_im2col_fwd});
  register_kernel<ConvBwdDataProblem>(
      {"direct_small", kCpu, cpu::conv_small_bwd_data_declines, cpu::conv_small_bwd_data});
  register_kernel(low_via_f32_batched<cpu::why_not_via_f32, cpu::conv_im2col_bwd_data_declines,
                                      cpu::conv_im2col_bwd_data>(kCpu, "im2col_gemm_via_f32"));
  register_kernel<ConvBwdDataProblem>(
      {"im2col_gemm", kCpu, cpu::conv_im2col_bwd_data_declines, cpu::conv_im2col_bwd_data});
  register_kernel<ConvBwdWeightsProblem>({"direct_c1", kCpu,
                                          cpu::conv_direct_c1_bwd_weights_declines,
                                          cpu::conv_direct_c1_bwd_weights});
  register_kernel<ConvBwdWeightsProblem>(
      {"direct_small", kCpu, cpu::conv_small_bwd_weights_declines, cpu::conv_small_bwd_weights});
  register_kernel<ConvBwdWeightsProblem>({"bf16_pairs", kCpu,
                                          cpu::conv_bf16_pairs_bwd_weights_declines,
                                          cpu::conv_bf16_pairs_bwd_weights});
  register_kernel(low_via_f32_batched<cpu::why_not_via_f32, cpu::conv_im2col_bwd_weights_declines,
                                      cpu::conv_im2col_bwd_weights>(kCpu, "im2col_gemm_via_f32"));
  register_kernel<ConvBwdWeightsProblem>(
      {"im2col_gemm", kCpu, cpu::conv_im2col_bwd_weights_declines, cpu::conv_im2col_bwd_weights});

  register_kernel<BatchNormFwdProblem>(
      {"tiles16", kCpu, cpu::batch_norm16_fwd_declines, cpu::batch_norm16_fwd});
  register_kernel<BatchNormBwdProblem>(
      {"tiles16", kCpu, cpu::batch_norm16_bwd_declines, cpu::batch_norm16_bwd});

  register_kernel<PoolFwdProblem>(
      {"global_avg", kCpu, cpu::pool_global_avg_fwd_declines, cpu::pool_global_avg_fwd});
  register_kernel<PoolFwdProblem>(
      {"nhwc_max", kCpu, cpu::pool_max_nhwc_fwd_declines, cpu::pool_max_nhwc_fwd});
  register_kernel<PoolBwdProblem>(
      {"global_avg", kCpu, cpu::pool_global_avg_bwd_declines, cpu::pool_global_avg_bwd});
  register_kernel<PoolBwdProblem>(
      {"nhwc_max", kCpu, cpu::pool_max_nhwc_bwd_declines, cpu::pool_max_nhwc_bwd});

  register_kernel<AttentionFwdProblem>(
      {"flash", kCpu, cpu::flash_attention_declines, cpu::flash_attention_fwd});
  register_kernel<AttentionBwdProblem>(
      {"flash", kCpu, cpu::flash_attention_bwd_declines, cpu::flash_attention_bwd});

  register_kernel<AmpUnscaleProblem>({"cpu", kCpu, accept_all, cpu::amp_unscale});
  register_kernel<FusedSgdProblem>({"cpu", kCpu, accept_all, cpu::fused_update<SgdStep>});
  register_kernel<FusedMomentumProblem>({"cpu", kCpu, accept_all, cpu::fused_update<MomentumStep>});
  register_kernel<FusedAdamProblem>({"cpu", kCpu, accept_all, cpu::fused_update<AdamStep>});
}

}  // namespace mixprec::ops
