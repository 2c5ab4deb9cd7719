// Direct convolution for single-input-channel layers with at most 8 output channels (LeNet's
// first conv: 1 -> 6 channels, 5x5, stride 1), forward and backward-weights, with a
// channels-last output. im2col + GEMM is a poor fit there: the reduction is 9-25 long and the
// GEMM's N is the channel count, so both the patch matrix and the GEMM are memory-bound. This
// kernel keeps one zero-padded fp32 copy of each image in L1 and accumulates in fp32 registers
// (8 output channels x 16 columns per block, every tap a broadcast-FMA), then rounds once.
// Backward-data is not needed for a first layer (the data needs no gradient); im2col covers it.
#pragma once

#include <string>

#include "ops/conv_problem.h"

namespace mixprec::ops::detail {

std::string direct_c1_fwd_declines(const ConvFwdProblem& p);
void direct_c1_fwd(const ConvFwdProblem& p);
std::string direct_c1_bwd_weights_declines(const ConvBwdWeightsProblem& p);
void direct_c1_bwd_weights(const ConvBwdWeightsProblem& p);

}  // namespace mixprec::ops::detail
