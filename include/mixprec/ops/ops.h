// The differentiable op library, as free functions in mixprec::ops (the seed's `ops` module).
// Every op: applies the thread-local autocast policy (ops/autocast.h) to its floating inputs,
// picks a kernel from its ordered implementation list (oneDNN, then the reference), and records
// an autograd node when grad mode is on and an input requires grad. Shapes follow NumPy
// broadcasting; dims may be negative. Layout: NCHW for images, [out, in] for dense weights,
// [out, in/groups, kh, kw] for conv weights (MindSpore's and PyTorch's conventions).
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "mixprec/rng.h"
#include "mixprec/tensor.h"

namespace mixprec::ops {

// ---------------------------------------------------------------- elementwise (broadcasting)
// Binary ops compute in promote(a.dtype, b.dtype) (after autocast), accumulating in f32.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // gradient goes to a where a >= b
Tensor minimum(const Tensor& a, const Tensor& b);  // gradient goes to a where a <= b
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);  // gradient sign(x), 0 at 0
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// cond: bool/u8 tensor; a and b broadcast with it. Gradient flows to a where cond, else to b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---------------------------------------------------------------- activations
enum class Activation { none, relu };
enum class GeluApproximation { none, tanh };  // exact erf form, or the tanh approximation
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.2);  // MindSpore's default alpha
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor silu(const Tensor& x);
// x * relu6(x + 3) / 6 (MindSpore's HSwish, PyTorch's hardswish); runs in its input dtype.
Tensor hardswish(const Tensor& x);

// ---------------------------------------------------------------- linear algebra, convolution
// a [.., M, K] x b [.., K, N] -> [.., M, N]; batch dims broadcast; 1-D operands are promoted
// like numpy.matmul. Accumulates in f32 whatever the input dtype.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x W^T + bias, x [.., in], weight [out, in], bias [out] (optional), then the activation
// (fused through oneDNN post-ops where possible). The weight gradient is produced in acc_dtype
// (f32 for bf16/f16 inputs) so master weights get full-precision gradients.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Activation activation = Activation::none);

enum class PadMode { valid, same, pad };
// Memory layout of an image tensor's [N, C, H, W] elements. Channels-last is what the fast CPU
// kernels take; contiguous (NCHW) makes a following Flatten a free view. `any` (the default)
// lets the library choose: channels-last, unless the output is then copied into row-major order
// by a Flatten, in which case that convolution writes contiguous from its next call on (the
// rule, and why it changes no value: src/ops/layout_choice.h).
enum class MemoryFormat { any, channels_last, contiguous };
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  PadMode pad_mode = PadMode::valid;
  std::array<int64_t, 4> padding{0, 0, 0, 0};  // top, bottom, left, right (PadMode::pad)
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  Activation activation = Activation::none;
  MemoryFormat output_format = MemoryFormat::any;
};
// x [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], bias [Cout] or undefined.
// PadMode::same pads so that out = ceil(in / stride), the extra row/column at the bottom/right.
// The output's layout is options.output_format's (see MemoryFormat); x may be either.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dOptions& options = {});

// ---------------------------------------------------------------- pooling
struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};   // 0: equal to kernel
  std::array<int64_t, 2> padding{0, 0};  // symmetric, top/bottom and left/right
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool: divide by the full window
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options = {});
// Output [N, C, oh, ow]; (1, 1) is global average pooling. Bins as in PyTorch.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

// ---------------------------------------------------------------- normalisation, softmax
struct BatchNormOptions {
  bool training = true;
  // MindSpore's convention: running = momentum * running + (1 - momentum) * batch statistic.
  double momentum = 0.9;
  double eps = 1e-5;
};
// x [N, C, ...]; gamma, beta, running_mean, running_var [C] in f32 (always: BatchNorm keeps its
// parameters and statistics in fp32 whatever x's dtype). Training normalises with the biased
// batch variance and updates running_var with the unbiased one; eval uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, const BatchNormOptions& options = {});
// Normalises over the last `normalized_dims` dims; gamma/beta have that trailing shape.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  int64_t normalized_dims = 1, double eps = 1e-5);
// Both subtract the max first; they compute in f32 (acc_dtype) and store in x's dtype.
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

// ---------------------------------------------------------------- attention
struct AttentionOptions {
  bool causal = false;  // query i sees keys j <= i + (Lk - Lq) (bottom-right aligned)
  // Undefined, or a bool (or u8) tensor broadcastable to [B, H, Lq, Lk]: true (nonzero) means
  // "may attend", as in PyTorch. Combined with causal when both are given.
  Tensor mask{};
  std::optional<double> scale{};  // multiplies q.k; default 1 / sqrt(D)
};
// softmax(scale * q k^T, masked) v, PyTorch's F.scaled_dot_product_attention. q [B, H, Lq, D],
// k [B, H, Lk, D], v [B, H, Lk, Dv] -> [B, H, Lq, Dv], with the output laid out [B, Lq, H, Dv]
// in memory (so merging the heads is a free view). Inputs are promoted to one float dtype. The
// q.k and p.v products run in that dtype with f32 accumulation; the softmax and its statistics
// always run in f32 (also at O3; only a custom white list naming attention_softmax moves them to
// the low dtype). The backward recomputes the probabilities from a saved f32 log-sum-exp per
// row: nothing of size [Lq, Lk] is kept. A row with no key to attend to is NaN. docs/amp.md.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// ---------------------------------------------------------------- reductions
// Empty axes: reduce over all dims. Sums accumulate in acc_dtype; the result has x's dtype.
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
// Gradient flows to the first maximal element along the reduced axes.
Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false);  // i64, first maximum

// ---------------------------------------------------------------- shape
Tensor reshape(const Tensor& x, const Shape& shape);
// Keeps dims [0, start) and flattens [start, end] (MindSpore Flatten: start = 1).
Tensor flatten(const Tensor& x, int64_t start = 1, int64_t end = -1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// The parts of x along dim, as views of x without that dim (x.size(dim) of them): q, k and v of a
// packed projection. Their gradients go into one tensor laid out like x.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
// Cast (astype) between dtypes; the gradient is cast back to x's dtype. This is the user's cast:
// AMP honours the chosen dtype in the ops that follow (ops/autocast.h, the explicit-cast rule).
Tensor cast(const Tensor& x, DType dtype);
// The same conversion for casts the library itself inserts (AMP's, the loss wrapper's, kernels'):
// the result is not marked as the user's choice, and x itself is returned when it has `dtype`.
Tensor amp_cast(const Tensor& x, DType dtype);

// ---------------------------------------------------------------- lookup, regularisation
// indices: integer tensor of any shape; weight [num_embeddings, dim] -> [..., dim].
Tensor embedding(const Tensor& indices, const Tensor& weight);
// Inverted dropout: keeps with probability 1 - p and scales by 1 / (1 - p). Identity when not
// training or p == 0. The mask comes from `gen` (counter based, thread-count independent).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// ---------------------------------------------------------------- losses (computed in f32)
enum class Reduction { none, mean, sum };
struct SoftmaxCrossEntropyOptions {
  bool sparse = false;  // labels are class indices [N] (i32/i64) rather than one-hot [N, C]
  Reduction reduction = Reduction::none;
};
// logits [N, C]. Returns [N] (none) or a scalar. Numerically stable (log-sum-exp).
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                             const SoftmaxCrossEntropyOptions& options = {});
// log_probs [N, C], labels [N] integer.
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels,
                Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& prediction, const Tensor& target,
                Reduction reduction = Reduction::mean);

}  // namespace mixprec::ops

namespace mixprec {
// Operators on tensors (elementwise, broadcasting, differentiable).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
}  // namespace mixprec
