// The cuda backend's kernels, registered for Device::cuda only (so the CPU's dispatch order is
// unchanged): our own kernels (ops/cuda/*.cu) and cuBLASLt GEMMs (ops/cuda/matmul.cpp). A
// problem no CUDA kernel accepts fails with dispatch's "no implementation accepts" error.
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace mixprec::ops {

void register_cuda_kernels() {
  constexpr Device::Type kCuda = Device::Type::cuda;
  register_kernel<PointwiseProblem>({"cuda", kCuda, cuda::pointwise_declines, cuda::pointwise});
  register_kernel<MatmulProblem>({"cublaslt", kCuda, cuda::matmul_declines, cuda::matmul});
  register_kernel<SoftmaxFwdProblem>({"cuda", kCuda, accept_all, cuda::softmax_fwd});
  register_kernel<SoftmaxBwdProblem>({"cuda", kCuda, accept_all, cuda::softmax_bwd});
  register_kernel<LayerNormFwdProblem>({"cuda", kCuda, accept_all, cuda::layer_norm_fwd});
  register_kernel<LayerNormBwdProblem>({"cuda", kCuda, accept_all, cuda::layer_norm_bwd});
  register_kernel<CrossEntropyFwdProblem>({"cuda", kCuda, accept_all, cuda::cross_entropy_fwd});
  register_kernel<CrossEntropyBwdProblem>({"cuda", kCuda, accept_all, cuda::cross_entropy_bwd});
  register_kernel<EmbeddingFwdProblem>({"cuda", kCuda, accept_all, cuda::embedding_fwd});
  register_kernel<EmbeddingBwdProblem>({"cuda", kCuda, accept_all, cuda::embedding_bwd});
  register_kernel<ReduceSumProblem>({"cuda", kCuda, cuda::reduce_sum_declines, cuda::reduce_sum});
  register_kernel<AmpUnscaleProblem>({"cuda", kCuda, accept_all, cuda::amp_unscale});
  register_kernel<AmpUpdateScaleProblem>({"cuda", kCuda, accept_all, cuda::amp_update_scale});
  register_kernel<FusedMomentumProblem>({"cuda", kCuda, accept_all, cuda::fused_momentum});
}

}  // namespace mixprec::ops
