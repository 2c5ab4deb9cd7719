// The onednn backend's kernels: for each problem type the primitive, then the f16 emulation
// through the f32 primitive. The backend sits between cpu and ref (MIXPREC_OPS_BACKENDS).
#include "ops/dispatch.h"
#include "ops/onednn/kernels.h"

namespace mixprec::ops {

void register_onednn_kernels() {
  using namespace onednn;
  constexpr Device::Type kCpu = Device::Type::cpu;
  register_kernel<MatmulProblem>({"onednn", kCpu, matmul_declines, onednn::matmul});
  register_kernel<MatmulProblem>(
      {"f16_via_f32", kCpu, matmul_f16_via_f32_declines, matmul_f16_via_f32});

  register_kernel<ConvFwdProblem>({"onednn", kCpu, conv_fwd_declines, conv_fwd});
  register_kernel<ConvFwdProblem>({"f16_via_f32", kCpu, conv_fwd_f16_declines, conv_fwd_f16});
  register_kernel<ConvBwdDataProblem>({"onednn", kCpu, conv_bwd_data_declines, conv_bwd_data});
  register_kernel<ConvBwdDataProblem>(
      {"f16_via_f32", kCpu, conv_bwd_data_f16_declines, conv_bwd_data_f16});
  register_kernel<ConvBwdWeightsProblem>(
      {"onednn", kCpu, conv_bwd_weights_declines, conv_bwd_weights});
  register_kernel<ConvBwdWeightsProblem>(
      {"f16_via_f32", kCpu, conv_bwd_weights_f16_declines, conv_bwd_weights_f16});

  register_kernel<PoolFwdProblem>({"onednn", kCpu, pool_fwd_declines, pool_fwd});
  register_kernel<PoolBwdProblem>({"onednn", kCpu, pool_bwd_declines, pool_bwd});

  register_kernel<BatchNormFwdProblem>({"onednn", kCpu, batch_norm_fwd_declines, batch_norm_fwd});
  register_kernel<BatchNormFwdProblem>(
      {"f16_via_f32", kCpu, batch_norm_fwd_f16_declines, batch_norm_fwd_f16});
  register_kernel<BatchNormBwdProblem>({"onednn", kCpu, batch_norm_bwd_declines, batch_norm_bwd});
  register_kernel<BatchNormBwdProblem>(
      {"f16_via_f32", kCpu, batch_norm_bwd_f16_declines, batch_norm_bwd_f16});
  register_kernel<LayerNormFwdProblem>({"onednn", kCpu, layer_norm_fwd_declines, layer_norm_fwd});
  register_kernel<LayerNormFwdProblem>(
      {"f16_via_f32", kCpu, layer_norm_fwd_f16_declines, layer_norm_fwd_f16});
  register_kernel<LayerNormBwdProblem>({"onednn", kCpu, layer_norm_bwd_declines, layer_norm_bwd});
  register_kernel<LayerNormBwdProblem>(
      {"f16_via_f32", kCpu, layer_norm_bwd_f16_declines, layer_norm_bwd_f16});

  register_kernel<SoftmaxFwdProblem>({"onednn", kCpu, softmax_fwd_declines, softmax_fwd});
  register_kernel<SoftmaxFwdProblem>(
      {"f16_via_f32", kCpu, softmax_fwd_f16_declines, softmax_fwd_f16});
  register_kernel<SoftmaxBwdProblem>({"onednn", kCpu, softmax_bwd_declines, softmax_bwd});
  register_kernel<SoftmaxBwdProblem>(
      {"f16_via_f32", kCpu, softmax_bwd_f16_declines, softmax_bwd_f16});
}

}  // namespace mixprec::ops
