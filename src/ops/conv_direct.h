// Direct convolution for small reductions (cin * kh * kw <= 64, one group): the first layers
// of image networks. No patch matrix is materialised: each output row is accumulated in f32
// from the input rows its taps read (vectorised over output channels for channels-last outputs,
// over output columns for NCHW ones), so the cost is one pass over the output. Backward-weights
// accumulates per image in f32 and sums the images in order (deterministic). Backward-data
// stays with im2col (conv_im2col.h).
#pragma once

#include <string>

#include "conv_problem.h"

namespace mixprec::ops::detail {

std::string direct_fwd_declines(const ConvFwdProblem& p);
void direct_fwd(const ConvFwdProblem& p);
std::string direct_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void direct_bwd_weights(const ConvBwdWeightsProblem& p);

}  // namespace mixprec::ops::detail
