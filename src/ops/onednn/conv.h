// oneDNN convolution kernels (forward with fused bias and ReLU, backward-data,
// backward-weights with f32 weight/bias gradients for bf16 inputs), and the f16 emulation that
// converts to f32, runs the f32 kernel and rounds the outputs to f16. Activations go in with
// their exact strides; only the weights are reordered into oneDNN's preferred (blocked) format.
// Each `declines` builds and caches the primitive and returns oneDNN's reason on failure.
#pragma once

#include <string>

#include "ops/conv_problem.h"

namespace mixprec::ops::onednn {

std::string conv_fwd_declines(const detail::ConvFwdProblem& p);
void conv_fwd(const detail::ConvFwdProblem& p);
std::string conv_bwd_data_declines(const detail::ConvBwdDataProblem& p);
void conv_bwd_data(const detail::ConvBwdDataProblem& p);
std::string conv_bwd_weights_declines(const detail::ConvBwdWeightsProblem& p);
void conv_bwd_weights(const detail::ConvBwdWeightsProblem& p);

// f16: the same kernels in f32 on converted copies (emulation of an f16 accelerator).
std::string conv_fwd_f16_declines(const detail::ConvFwdProblem& p);
void conv_fwd_f16(const detail::ConvFwdProblem& p);
std::string conv_bwd_data_f16_declines(const detail::ConvBwdDataProblem& p);
void conv_bwd_data_f16(const detail::ConvBwdDataProblem& p);
std::string conv_bwd_weights_f16_declines(const detail::ConvBwdWeightsProblem& p);
void conv_bwd_weights_f16(const detail::ConvBwdWeightsProblem& p);

}  // namespace mixprec::ops::onednn
