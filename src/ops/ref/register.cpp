// The reference backend's kernels: one per problem type, accepting everything on the CPU. The
// backend is registered last (MIXPREC_OPS_BACKENDS), so it runs what every other kernel declines.
#include "ops/dispatch.h"
#include "ops/ref/kernels.h"

namespace mixprec::ops {

void register_ref_kernels() {
  constexpr Device::Type kCpu = Device::Type::cpu;
  register_kernel<PointwiseProblem>({"ref", kCpu, accept_all, ref::pointwise});
  register_kernel<EmbeddingFwdProblem>({"ref", kCpu, accept_all, ref::embedding_fwd});
  register_kernel<EmbeddingBwdProblem>({"ref", kCpu, accept_all, ref::embedding_bwd});
  register_kernel<MatmulProblem>({"ref", kCpu, accept_all, ref::matmul});
  register_kernel<ConvFwdProblem>({"ref", kCpu, accept_all, ref::conv_fwd});
  register_kernel<ConvBwdDataProblem>({"ref", kCpu, accept_all, ref::conv_bwd_data});
  register_kernel<ConvBwdWeightsProblem>({"ref", kCpu, accept_all, ref::conv_bwd_weights});
  register_kernel<PoolFwdProblem>({"ref", kCpu, accept_all, ref::pool_fwd});
  register_kernel<PoolBwdProblem>({"ref", kCpu, accept_all, ref::pool_bwd});
  register_kernel<BatchNormFwdProblem>({"ref", kCpu, accept_all, ref::batch_norm_fwd});
  register_kernel<BatchNormBwdProblem>({"ref", kCpu, accept_all, ref::batch_norm_bwd});
  register_kernel<LayerNormFwdProblem>({"ref", kCpu, accept_all, ref::layer_norm_fwd});
  register_kernel<LayerNormBwdProblem>({"ref", kCpu, accept_all, ref::layer_norm_bwd});
  register_kernel<SoftmaxFwdProblem>({"ref", kCpu, accept_all, ref::softmax_fwd});
  register_kernel<SoftmaxBwdProblem>({"ref", kCpu, accept_all, ref::softmax_bwd});
  register_kernel<ReduceSumProblem>({"ref", kCpu, accept_all, ref::reduce_sum});
  register_kernel<ReduceMaxProblem>({"ref", kCpu, accept_all, ref::reduce_max});
  register_kernel<ReduceMaxBwdProblem>({"ref", kCpu, accept_all, ref::reduce_max_bwd});
  register_kernel<CrossEntropyFwdProblem>({"ref", kCpu, accept_all, ref::cross_entropy_fwd});
  register_kernel<CrossEntropyBwdProblem>({"ref", kCpu, accept_all, ref::cross_entropy_bwd});
  register_kernel<NllFwdProblem>({"ref", kCpu, accept_all, ref::nll_fwd});
  register_kernel<NllBwdProblem>({"ref", kCpu, accept_all, ref::nll_bwd});
  register_kernel<MseFwdProblem>({"ref", kCpu, accept_all, ref::mse_fwd});
  register_kernel<MseBwdProblem>({"ref", kCpu, accept_all, ref::mse_bwd});
  register_kernel<AttentionFwdProblem>({"ref", kCpu, accept_all, ref::attention_fwd});
  register_kernel<AttentionBwdProblem>({"ref", kCpu, accept_all, ref::attention_bwd});
  register_kernel<AmpUnscaleProblem>({"ref", kCpu, accept_all, ref::amp_unscale});
  register_kernel<AmpUpdateScaleProblem>({"ref", kCpu, accept_all, ref::amp_update_scale});
  register_kernel<FusedSgdProblem>({"ref", kCpu, accept_all, ref::fused_update<SgdStep>});
  register_kernel<FusedMomentumProblem>({"ref", kCpu, accept_all, ref::fused_update<MomentumStep>});
  register_kernel<FusedAdamProblem>({"ref", kCpu, accept_all, ref::fused_update<AdamStep>});
  register_kernel<AmpAdvanceStepProblem>({"ref", kCpu, accept_all, ref::amp_advance_step});
  register_kernel<AmpClipProblem>({"ref", kCpu, accept_all, ref::amp_clip});
}

}  // namespace mixprec::ops
