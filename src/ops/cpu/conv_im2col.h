// Convolution as im2col + GEMM, for convolutions with a small reduction (cin * kh * kw <= 64,
// one group): the first layers of image networks (1 input channel), where oneDNN 2.6 has no
// fast channels-last kernel. Forward: patches P [N*OH*OW, K] times W^T gives the channels-last
// output directly; backward-weights: dY^T P in f32; backward-data: dY W, scattered back with
// col2im (per image, in a fixed order: deterministic). The GEMMs go through oneDNN.
#pragma once

#include <string>

#include "ops/conv_problem.h"

namespace mixprec::ops::detail {

std::string im2col_fwd_declines(const ConvFwdProblem& p);
void im2col_fwd(const ConvFwdProblem& p);
std::string im2col_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void im2col_bwd_weights(const ConvBwdWeightsProblem& p);
std::string im2col_bwd_data_declines(const ConvBwdDataProblem& p);
void im2col_bwd_data(const ConvBwdDataProblem& p);

}  // namespace mixprec::ops::detail
