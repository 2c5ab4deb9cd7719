// The cuda backend's kernels, registered for Device::cuda only (so the CPU's dispatch order is
// unchanged): our own kernels (ops/cuda/*.cu, attention included), cuBLASLt GEMMs
// (ops/cuda/matmul.cpp) and cuDNN convolutions (ops/cuda/conv.cpp). A problem no CUDA kernel
// accepts fails with dispatch's "no implementation accepts" error.
#include "ops/conv_problem.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"
#include "ops/pool_problem.h"

namespace mixprec::ops {

void register_cuda_kernels() {
  constexpr Device::Type kCuda = Device::Type::cuda;
  register_kernel<PointwiseProblem>({"cuda", kCuda, cuda::pointwise_declines, cuda::pointwise});
  register_kernel<MatmulProblem>({"cublaslt", kCuda, cuda::matmul_declines, cuda::matmul});
  register_kernel<ConvFwdProblem>({"cudnn", kCuda, cuda::conv_fwd_declines, cuda::conv_fwd});
  register_kernel<ConvBwdDataProblem>(
      {"cudnn", kCuda, cuda::conv_bwd_data_declines, cuda::conv_bwd_data});
  register_kernel<ConvBwdWeightsProblem>(
      {"cudnn", kCuda, cuda::conv_bwd_weights_declines, cuda::conv_bwd_weights});
  register_kernel<BatchNormFwdProblem>(
      {"cuda", kCuda, cuda::batch_norm_fwd_declines, cuda::batch_norm_fwd});
  register_kernel<BatchNormBwdProblem>(
      {"cuda", kCuda, cuda::batch_norm_bwd_declines, cuda::batch_norm_bwd});
  register_kernel<PoolFwdProblem>({"cuda", kCuda, cuda::pool_fwd_declines, cuda::pool_fwd});
  register_kernel<PoolBwdProblem>({"cuda", kCuda, cuda::pool_bwd_declines, cuda::pool_bwd});
  register_kernel<SoftmaxFwdProblem>({"cuda", kCuda, accept_all, cuda::softmax_fwd});
  register_kernel<SoftmaxBwdProblem>({"cuda", kCuda, accept_all, cuda::softmax_bwd});
  register_kernel<LayerNormFwdProblem>({"cuda", kCuda, accept_all, cuda::layer_norm_fwd});
  register_kernel<LayerNormBwdProblem>({"cuda", kCuda, accept_all, cuda::layer_norm_bwd});
  register_kernel<CrossEntropyFwdProblem>({"cuda", kCuda, accept_all, cuda::cross_entropy_fwd});
  register_kernel<CrossEntropyBwdProblem>({"cuda", kCuda, accept_all, cuda::cross_entropy_bwd});
  register_kernel<EmbeddingFwdProblem>({"cuda", kCuda, accept_all, cuda::embedding_fwd});
  register_kernel<EmbeddingBwdProblem>({"cuda", kCuda, accept_all, cuda::embedding_bwd});
  register_kernel<ReduceSumProblem>({"cuda", kCuda, cuda::reduce_sum_declines, cuda::reduce_sum});
  register_kernel<ReduceMaxProblem>({"cuda", kCuda, cuda::reduce_max_declines, cuda::reduce_max});
  register_kernel<ReduceMaxBwdProblem>(
      {"cuda", kCuda, cuda::reduce_max_bwd_declines, cuda::reduce_max_bwd});
  register_kernel<NllFwdProblem>({"cuda", kCuda, accept_all, cuda::nll_fwd});
  register_kernel<NllBwdProblem>({"cuda", kCuda, accept_all, cuda::nll_bwd});
  register_kernel<MseFwdProblem>({"cuda", kCuda, accept_all, cuda::mse_fwd});
  register_kernel<MseBwdProblem>({"cuda", kCuda, accept_all, cuda::mse_bwd});
  register_kernel<AttentionFwdProblem>(
      {"cuda", kCuda, cuda::attention_fwd_declines, cuda::attention_fwd});
  register_kernel<AttentionBwdProblem>(
      {"cuda", kCuda, cuda::attention_bwd_declines, cuda::attention_bwd});
  register_kernel<AmpUnscaleProblem>({"cuda", kCuda, accept_all, cuda::amp_unscale});
  register_kernel<AmpUpdateScaleProblem>({"cuda", kCuda, accept_all, cuda::amp_update_scale});
  register_kernel<FusedSgdProblem>({"cuda", kCuda, accept_all, cuda::fused_update<SgdStep>});
  register_kernel<FusedMomentumProblem>(
      {"cuda", kCuda, accept_all, cuda::fused_update<MomentumStep>});
  register_kernel<FusedAdamProblem>({"cuda", kCuda, accept_all, cuda::fused_update<AdamStep>});
  register_kernel<AmpAdvanceStepProblem>({"cuda", kCuda, accept_all, cuda::amp_advance_step});
  register_kernel<AmpClipProblem>({"cuda", kCuda, accept_all, cuda::amp_clip});
}

}  // namespace mixprec::ops
