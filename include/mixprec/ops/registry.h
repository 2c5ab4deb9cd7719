// The op registry: every op once, with its name, AMP policy and the number of differentiable
// inputs. AMP and autograd look ops up by OpId, never by string. The forward and backward of
// each op live side by side in src/ops/<family>.cpp; its kernels in src/ops/ref and
// src/ops/onednn. Invariant: kOps has one row per OpId, in enum order (static_asserted).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mixprec {

// (Formatted by hand: the values read in groups, several a line.)
// clang-format off
enum class OpId : uint16_t {
  // elementwise, broadcasting
  add, sub, mul, div, pow, maximum, minimum, add_scalar, mul_scalar, pow_scalar,
  neg, exp, log, sqrt, rsqrt, abs, clamp, where, masked_fill,
  // activations
  relu, leaky_relu, gelu, sigmoid, tanh, silu, hardswish,
  // linear algebra and convolution
  matmul, linear, conv2d,
  // pooling
  max_pool2d, avg_pool2d, adaptive_avg_pool2d,
  // normalisation and softmax
  batch_norm, layer_norm, softmax, log_softmax,
  // attention (attention_softmax: its softmax phase, a policy slot only, never a node)
  scaled_dot_product_attention, attention_softmax,
  // reductions
  sum, mean, max, argmax,
  // shape and copies
  view, permute, slice, concat, broadcast_to, contiguous, cast,
  // lookup and regularisation
  embedding, dropout,
  // losses
  softmax_cross_entropy, nll_loss, mse_loss,
  // AMP's optimizer-side multi-tensor updates (ops/amp_foreach.cpp; never autograd nodes)
  amp_unscale, amp_update_scale, fused_sgd, fused_momentum, fused_adam, amp_advance_step, amp_clip,
  count_
};
// clang-format on
inline constexpr size_t kNumOps = static_cast<size_t>(OpId::count_);

// How autocast treats an op (DESIGN.md, AMP semantics). The level decides when it applies:
//   to_low  : the white list (O1 and auto cast inputs to the low dtype)
//   to_fp32 : the black list (O2 and auto run it in fp32)
//   promote : run in the widest floating input dtype (auto)
//   keep    : run in the input dtype
enum class AmpPolicy : uint8_t { keep, to_low, to_fp32, promote };
inline constexpr size_t kNumAmpPolicies = static_cast<size_t>(AmpPolicy::promote) + 1;

// compute: autocast applies; norm: BatchNorm/LayerNorm (also covered by keep_batchnorm_fp32);
// layout: moves or reinterprets data (views, copies, casts) and is never autocast.
enum class OpKind : uint8_t { compute, norm, layout };

struct OpInfo {
  OpId id;
  std::string_view name;
  AmpPolicy policy;
  uint8_t differentiable_inputs;  // 255: variadic
  OpKind kind;
};

// The default policies are the union of MindSpore's and PyTorch's lists for the ops we have
// (MindSpore's mindspore/train/amp.py: AMP_WHITE_LIST, AMP_BLACK_LIST and the AMP_AUTO_* lists;
// PyTorch's autocast op lists; docs/amp.md shows the result): conv/matmul/dense/ReLU are white;
// norms, softmax, log-softmax, exp/log/pow/rsqrt, sums/means and losses are black; concat and
// where promote; the rest keep their input dtype.
inline constexpr std::array<OpInfo, kNumOps> kOps{{
    {OpId::add, "add", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::sub, "sub", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::mul, "mul", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::div, "div", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::pow, "pow", AmpPolicy::to_fp32, 2, OpKind::compute},
    {OpId::maximum, "maximum", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::minimum, "minimum", AmpPolicy::keep, 2, OpKind::compute},
    {OpId::add_scalar, "add_scalar", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::mul_scalar, "mul_scalar", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::pow_scalar, "pow_scalar", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::neg, "neg", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::exp, "exp", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::log, "log", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::sqrt, "sqrt", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::rsqrt, "rsqrt", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::abs, "abs", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::clamp, "clamp", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::where, "where", AmpPolicy::promote, 2, OpKind::compute},
    {OpId::masked_fill, "masked_fill", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::relu, "relu", AmpPolicy::to_low, 1, OpKind::compute},
    {OpId::leaky_relu, "leaky_relu", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::gelu, "gelu", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::sigmoid, "sigmoid", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::tanh, "tanh", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::silu, "silu", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::hardswish, "hardswish", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::matmul, "matmul", AmpPolicy::to_low, 2, OpKind::compute},
    {OpId::linear, "linear", AmpPolicy::to_low, 3, OpKind::compute},
    {OpId::conv2d, "conv2d", AmpPolicy::to_low, 3, OpKind::compute},
    {OpId::max_pool2d, "max_pool2d", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::avg_pool2d, "avg_pool2d", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::adaptive_avg_pool2d, "adaptive_avg_pool2d", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::batch_norm, "batch_norm", AmpPolicy::to_fp32, 3, OpKind::norm},
    {OpId::layer_norm, "layer_norm", AmpPolicy::to_fp32, 3, OpKind::norm},
    {OpId::softmax, "softmax", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::log_softmax, "log_softmax", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::scaled_dot_product_attention, "scaled_dot_product_attention", AmpPolicy::to_low, 3,
     OpKind::compute},
    {OpId::attention_softmax, "attention_softmax", AmpPolicy::to_fp32, 0, OpKind::compute},
    {OpId::sum, "sum", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::mean, "mean", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::max, "max", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::argmax, "argmax", AmpPolicy::keep, 0, OpKind::layout},
    {OpId::view, "view", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::permute, "permute", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::slice, "slice", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::concat, "concat", AmpPolicy::promote, 255, OpKind::layout},
    {OpId::broadcast_to, "broadcast_to", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::contiguous, "contiguous", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::cast, "cast", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::embedding, "embedding", AmpPolicy::keep, 1, OpKind::compute},
    {OpId::dropout, "dropout", AmpPolicy::keep, 1, OpKind::layout},
    {OpId::softmax_cross_entropy, "softmax_cross_entropy", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::nll_loss, "nll_loss", AmpPolicy::to_fp32, 1, OpKind::compute},
    {OpId::mse_loss, "mse_loss", AmpPolicy::to_fp32, 2, OpKind::compute},
    {OpId::amp_unscale, "amp_unscale", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::amp_update_scale, "amp_update_scale", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::fused_sgd, "fused_sgd", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::fused_momentum, "fused_momentum", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::fused_adam, "fused_adam", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::amp_advance_step, "amp_advance_step", AmpPolicy::keep, 0, OpKind::compute},
    {OpId::amp_clip, "amp_clip", AmpPolicy::keep, 0, OpKind::compute},
}};

consteval bool op_table_in_enum_order() {
  for (size_t i = 0; i < kNumOps; ++i)
    if (static_cast<size_t>(kOps[i].id) != i) return false;
  return true;
}
static_assert(op_table_in_enum_order(), "kOps rows must follow the OpId enum order");

constexpr const OpInfo& op_info(OpId id) { return kOps[static_cast<size_t>(id)]; }
constexpr std::string_view op_name(OpId id) { return op_info(id).name; }
std::optional<OpId> find_op(std::string_view name);

}  // namespace mixprec
