// oneDNN softmax and log-softmax (softmax_v2 with softmax_accurate / softmax_log, separate src
// and dst descriptors) for f32 and bf16, plus the f16 emulation through the f32 primitive.
// Each `*_declines` builds (and caches) the primitive descriptor and returns oneDNN's reason
// on failure, so dispatch falls back to the reference. Problems: ops/ref/softmax.h.
#pragma once

#include <string>

#include "ops/softmax_problem.h"

namespace mixprec::ops::onednn {

std::string softmax_forward_declines(const SoftmaxForward& p);
void softmax_forward(const SoftmaxForward& p);
std::string softmax_backward_declines(const SoftmaxBackward& p);
void softmax_backward(const SoftmaxBackward& p);

std::string softmax_forward_f16_declines(const SoftmaxForward& p);
void softmax_forward_f16(const SoftmaxForward& p);
std::string softmax_backward_f16_declines(const SoftmaxBackward& p);
void softmax_backward_f16(const SoftmaxBackward& p);

}  // namespace mixprec::ops::onednn
