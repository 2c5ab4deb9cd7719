// oneDNN batch and layer normalisation (f32 and bf16 data; f32 scale, shift and statistics),
// plus the f16 emulation that converts to f32, runs the f32 primitive and rounds the outputs
// to f16. Each `*_declines` builds (and caches) the primitive descriptor and returns oneDNN's
// reason on failure, so dispatch falls back to the reference. Problems: ops/ref/norm.h.
#pragma once

#include <string>

#include "ops/norm_problem.h"

namespace mixprec::ops::onednn {

std::string batch_norm_forward_declines(const BatchNormForward& p);
void batch_norm_forward(const BatchNormForward& p);
std::string batch_norm_backward_declines(const BatchNormBackward& p);
void batch_norm_backward(const BatchNormBackward& p);

std::string layer_norm_forward_declines(const LayerNormForward& p);
void layer_norm_forward(const LayerNormForward& p);
std::string layer_norm_backward_declines(const LayerNormBackward& p);
void layer_norm_backward(const LayerNormBackward& p);

// f16 data through the f32 primitives (decline unless x is f16).
std::string batch_norm_forward_f16_declines(const BatchNormForward& p);
void batch_norm_forward_f16(const BatchNormForward& p);
std::string batch_norm_backward_f16_declines(const BatchNormBackward& p);
void batch_norm_backward_f16(const BatchNormBackward& p);
std::string layer_norm_forward_f16_declines(const LayerNormForward& p);
void layer_norm_forward_f16(const LayerNormForward& p);
std::string layer_norm_backward_f16_declines(const LayerNormBackward& p);
void layer_norm_backward_f16(const LayerNormBackward& p);

}  // namespace mixprec::ops::onednn
