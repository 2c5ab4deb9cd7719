// The onednn backend's kernels: for each problem type the primitive, then the same primitive in
// f32 through low_via_f32 for the 16-bit problems it cannot compute in (f16 always, bf16 on CPUs
// without AVX-512). The backend sits between cpu and ref (MIXPREC_OPS_BACKENDS).
#include "ops/dispatch.h"
#include "ops/low_via_f32.h"
#include "ops/onednn/context.h"
#include "ops/onednn/kernels.h"

namespace mixprec::ops {

void register_onednn_kernels() {
  using namespace onednn;
  constexpr Device::Type kCpu = Device::Type::cpu;
  register_kernel<MatmulProblem>({"onednn", kCpu, matmul_declines, onednn::matmul});
  register_kernel(low_via_f32<why_not_via_f32, matmul_declines, onednn::matmul>(kCpu));

  // Convolutions through f32 chunk by chunk of images (in cache, the 16-bit problem's peak
  // memory), and after them whole (one oneDNN call on widened tensors): in the fixed order the
  // whole form never runs; measured kernel choice takes it where fewer, larger calls win.
  register_kernel<ConvFwdProblem>({"onednn", kCpu, conv_fwd_declines, conv_fwd});
  register_kernel(low_via_f32_batched<why_not_via_f32, conv_fwd_declines, conv_fwd>(kCpu));
  register_kernel(low_via_f32<why_not_via_f32, conv_fwd_declines, conv_fwd>(kCpu));
  register_kernel<ConvBwdDataProblem>({"onednn", kCpu, conv_bwd_data_declines, conv_bwd_data});
  register_kernel(
      low_via_f32_batched<why_not_via_f32, conv_bwd_data_declines, conv_bwd_data>(kCpu));
  register_kernel(low_via_f32<why_not_via_f32, conv_bwd_data_declines, conv_bwd_data>(kCpu));
  register_kernel<ConvBwdWeightsProblem>(
      {"onednn", kCpu, conv_bwd_weights_declines, conv_bwd_weights});
  register_kernel(
      low_via_f32_batched<why_not_via_f32, conv_bwd_weights_declines, conv_bwd_weights>(kCpu));
  register_kernel(low_via_f32<why_not_via_f32, conv_bwd_weights_declines, conv_bwd_weights>(kCpu));

  register_kernel<PoolFwdProblem>({"onednn", kCpu, pool_fwd_declines, pool_fwd});
  register_kernel<PoolBwdProblem>({"onednn", kCpu, pool_bwd_declines, pool_bwd});

  register_kernel<BatchNormFwdProblem>({"onednn", kCpu, batch_norm_fwd_declines, batch_norm_fwd});
  register_kernel(low_via_f32<why_not_via_f32, batch_norm_fwd_declines, batch_norm_fwd>(kCpu));
  register_kernel<BatchNormBwdProblem>({"onednn", kCpu, batch_norm_bwd_declines, batch_norm_bwd});
  register_kernel(low_via_f32<why_not_via_f32, batch_norm_bwd_declines, batch_norm_bwd>(kCpu));
  register_kernel<LayerNormFwdProblem>({"onednn", kCpu, layer_norm_fwd_declines, layer_norm_fwd});
  register_kernel(low_via_f32<why_not_via_f32, layer_norm_fwd_declines, layer_norm_fwd>(kCpu));
  register_kernel<LayerNormBwdProblem>({"onednn", kCpu, layer_norm_bwd_declines, layer_norm_bwd});
  register_kernel(low_via_f32<why_not_via_f32, layer_norm_bwd_declines, layer_norm_bwd>(kCpu));

  register_kernel<SoftmaxFwdProblem>({"onednn", kCpu, softmax_fwd_declines, softmax_fwd});
  register_kernel(low_via_f32<why_not_via_f32, softmax_fwd_declines, softmax_fwd>(kCpu));
  register_kernel<SoftmaxBwdProblem>({"onednn", kCpu, softmax_bwd_declines, softmax_bwd});
  register_kernel(low_via_f32<why_not_via_f32, softmax_bwd_declines, softmax_bwd>(kCpu));
}

}  // namespace mixprec::ops
