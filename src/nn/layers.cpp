// Layer implementations: parameter creation with MindSpore's defaults, and construct() as calls
// into mixprec::ops. Layers hold fp32 parameters; AMP casts them at use (ops/autocast.h).
#include "mixprec/nn/layers.h"

#include "mixprec/error.h"

namespace mixprec::nn {

static init::Initializer default_bias_init(int64_t fan_in) {
  return init::Uniform(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

// ---------------------------------------------------------------- Dense

Dense::Dense(int64_t in, int64_t out, DenseOptions o) : in_(in), out_(out), activation_(o.activation) {
  MIXPREC_CHECK(in > 0 && out > 0, "Dense: expected positive in/out channels, got ", in, ", ", out);
  weight = register_parameter("weight", init::initialize(o.weight_init, {out, in}));
  if (o.has_bias)
    bias = register_parameter("bias", init::initialize(o.bias_init.value_or(default_bias_init(in)), {out}));
}

Tensor Dense::construct(const Tensor& x) {
  MIXPREC_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Dense(", in_, ", ", out_,
                "): expected input with last dim ", in_, ", got shape ", shape_str(x.shape()),
                Hint{"flatten the input first (nn::Flatten) or fix in_channels"});
  return ops::linear(x, weight, bias, activation_);
}

std::string Dense::extra_repr() const {
  return "in_channels=" + std::to_string(in_) + ", out_channels=" + std::to_string(out_) +
         (bias.defined() ? "" : ", has_bias=false") + (activation_ == Activation::relu ? ", activation=relu" : "");
}

// ---------------------------------------------------------------- Conv2d

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dOptions o) : Conv2d(in, out, {k, k}, o) {}

Conv2d::Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> k, Conv2dOptions o)
    : in_(in), out_(out), kernel_(k) {
  MIXPREC_CHECK(in > 0 && out > 0 && k[0] > 0 && k[1] > 0, "Conv2d: expected positive channels and "
                "kernel size, got in=", in, " out=", out, " kernel=", k[0], "x", k[1]);
  MIXPREC_CHECK(o.group > 0 && in % o.group == 0 && out % o.group == 0, "Conv2d: group ", o.group,
                " must divide in_channels ", in, " and out_channels ", out);
  if (o.pad_mode != PadMode::pad)
    MIXPREC_CHECK(o.padding == (std::array<int64_t, 4>{0, 0, 0, 0}), "Conv2d: padding is only "
                  "used with pad_mode=pad", Hint{"set .pad_mode = PadMode::pad"});
  op_ = ops::Conv2dOptions{.stride = o.stride, .pad_mode = o.pad_mode, .padding = o.padding,
                           .dilation = o.dilation, .groups = o.group, .activation = o.activation,
                           .output_format = o.memory_format};
  const Shape wshape{out, in / o.group, k[0], k[1]};
  weight = register_parameter("weight", init::initialize(o.weight_init, wshape));
  if (o.has_bias) {
    const int64_t fan_in = in / o.group * k[0] * k[1];
    bias = register_parameter("bias", init::initialize(o.bias_init.value_or(default_bias_init(fan_in)), {out}));
  }
}

Tensor Conv2d::construct(const Tensor& x) {
  MIXPREC_CHECK(x.dim() == 4 && x.size(1) == in_, "Conv2d(", in_, ", ", out_, "): expected input [N, ",
                in_, ", H, W], got ", shape_str(x.shape()));
  return ops::conv2d(x, weight, bias, op_);
}

std::string Conv2d::extra_repr() const {
  static const char* modes[] = {"valid", "same", "pad"};
  return "in_channels=" + std::to_string(in_) + ", out_channels=" + std::to_string(out_) +
         ", kernel_size=(" + std::to_string(kernel_[0]) + ", " + std::to_string(kernel_[1]) +
         "), stride=" + std::to_string(op_.stride[0]) + ", pad_mode=" +
         modes[static_cast<int>(op_.pad_mode)] + (bias.defined() ? ", has_bias=true" : "");
}

// ---------------------------------------------------------------- BatchNorm

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions o) : num_features_(c), options_(std::move(o)) {
  MIXPREC_CHECK(c > 0, "BatchNorm: expected num_features > 0, got ", c);
  MIXPREC_CHECK(options_.momentum >= 0 && options_.momentum <= 1, "BatchNorm: momentum must be "
                "in [0, 1], got ", options_.momentum, Hint{"MindSpore's convention: 0.9 keeps 90% of the running value"});
  gamma = register_parameter("gamma", init::initialize(options_.gamma_init, {c}), options_.affine);
  beta = register_parameter("beta", init::initialize(options_.beta_init, {c}), options_.affine);
  moving_mean = register_buffer("moving_mean", zeros({c}));
  moving_variance = register_buffer("moving_variance", ones({c}));
}

Tensor BatchNorm2d::construct(const Tensor& x) {
  MIXPREC_CHECK(static_cast<size_t>(x.dim()) == expected_dims_ && x.size(1) == num_features_,
                type_name(), "(", num_features_, "): expected input with ", expected_dims_,
                " dims and ", num_features_, " channels in dim 1, got ", shape_str(x.shape()));
  const bool batch_stats = options_.use_batch_statistics.value_or(training());
  return ops::batch_norm(x, gamma, beta, moving_mean, moving_variance,
                         {.training = batch_stats, .momentum = options_.momentum, .eps = options_.eps});
}

std::string BatchNorm2d::extra_repr() const {
  return "num_features=" + std::to_string(num_features_) + ", eps=" + std::to_string(options_.eps) +
         ", momentum=" + std::to_string(options_.momentum);
}

BatchNorm1d::BatchNorm1d(int64_t c, BatchNormOptions o) : BatchNorm2d(c, std::move(o)) {
  expected_dims_ = 2;
}

Tensor BatchNorm1d::construct(const Tensor& x) {
  if (x.dim() == 3) {  // [N, C, L]
    const bool batch_stats = options_.use_batch_statistics.value_or(training());
    MIXPREC_CHECK(x.size(1) == num_features_, "BatchNorm1d(", num_features_, "): expected ",
                  num_features_, " channels in dim 1, got ", shape_str(x.shape()));
    return ops::batch_norm(x, gamma, beta, moving_mean, moving_variance,
                           {.training = batch_stats, .momentum = options_.momentum, .eps = options_.eps});
  }
  return BatchNorm2d::construct(x);
}

// ---------------------------------------------------------------- LayerNorm and the rest

LayerNorm::LayerNorm(Shape shape, double eps) : shape_(std::move(shape)), eps_(eps) {
  MIXPREC_CHECK(!shape_.empty(), "LayerNorm: normalized_shape must not be empty");
  gamma = register_parameter("gamma", ones(shape_));
  beta = register_parameter("beta", zeros(shape_));
}

Tensor LayerNorm::construct(const Tensor& x) {
  const size_t k = shape_.size();
  MIXPREC_CHECK(static_cast<size_t>(x.dim()) >= k &&
                    Shape(x.shape().end() - static_cast<int64_t>(k), x.shape().end()) == shape_,
                "LayerNorm", shape_str(shape_), ": input shape ", shape_str(x.shape()),
                " does not end with the normalized shape");
  return ops::layer_norm(x, gamma, beta, static_cast<int64_t>(k), eps_);
}

Tensor GELU::construct(const Tensor& x) {
  return ops::gelu(x, approximate_ ? ops::GeluApproximation::tanh : ops::GeluApproximation::none);
}

static ops::Pool2dOptions pool_options(int64_t k, int64_t s, const PoolOptions& o, const char* who) {
  MIXPREC_CHECK(k > 0 && s > 0, who, ": expected positive kernel_size and stride, got ", k, ", ", s);
  MIXPREC_CHECK(o.pad_mode != PadMode::same, who, ": pad_mode same is not supported",
                Hint{"use PadMode::pad with an explicit symmetric padding"});
  return ops::Pool2dOptions{.kernel = {k, k}, .stride = {s, s},
                            .padding = o.pad_mode == PadMode::pad ? o.padding : std::array<int64_t, 2>{0, 0},
                            .ceil_mode = o.ceil_mode, .count_include_pad = o.count_include_pad};
}

MaxPool2d::MaxPool2d(int64_t k, int64_t s, PoolOptions o) : op_(pool_options(k, s, o, "MaxPool2d")) {}
std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + std::to_string(op_.kernel[0]) + ", stride=" + std::to_string(op_.stride[0]);
}
AvgPool2d::AvgPool2d(int64_t k, int64_t s, PoolOptions o) : op_(pool_options(k, s, o, "AvgPool2d")) {}

Dropout::Dropout(double p) : p_(p) {
  MIXPREC_CHECK(p >= 0 && p < 1, "Dropout: p (the drop probability) must be in [0, 1), got ", p);
}
Tensor Dropout::construct(const Tensor& x) { return ops::dropout(x, p_, training(), default_generator()); }

Embedding::Embedding(int64_t vocab, int64_t dim, init::Initializer table) {
  MIXPREC_CHECK(vocab > 0 && dim > 0, "Embedding: expected positive sizes, got ", vocab, ", ", dim);
  embedding_table = register_parameter("embedding_table", init::initialize(table, {vocab, dim}));
}

SequentialCell::SequentialCell(std::vector<std::shared_ptr<Cell>> cells) {
  for (auto& c : cells) append(std::move(c));
}

SequentialCell& SequentialCell::append(std::shared_ptr<Cell> cell) {
  register_cell(std::to_string(cells_.size()), cell);
  cells_.push_back(std::move(cell));
  return *this;
}

Tensor SequentialCell::construct(const Tensor& x) {
  Tensor y = x;
  for (auto& c : cells_) y = (*c)(y);
  return y;
}

}  // namespace mixprec::nn
