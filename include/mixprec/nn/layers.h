// The layers of mixprec::nn, with MindSpore's names and documented defaults (MindSpore 2.x):
// Dense and Conv2d weights default to HeUniform(sqrt(5)) and biases to Uniform(1/sqrt(fan_in))
// (PyTorch's scheme); Conv2d defaults to pad_mode "same" and no bias; BatchNorm momentum 0.9
// (running = 0.9 running + 0.1 batch), eps 1e-5; LayerNorm eps 1e-7; GELU defaults to the tanh
// approximation; Dropout's p is the drop probability. Parameters are fp32 master weights.
#pragma once

#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "mixprec/nn/cell.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/ops.h"

namespace mixprec::nn {

using ops::Activation;
using ops::PadMode;

struct DenseOptions {
  init::Initializer weight_init = init::HeUniform(std::sqrt(5.0));
  std::optional<init::Initializer> bias_init{};  // default Uniform(1/sqrt(in_channels))
  bool has_bias = true;
  Activation activation = Activation::none;  // fused into the GEMM where oneDNN allows
};

class Dense : public Cell {
 public:
  Dense(int64_t in_channels, int64_t out_channels, DenseOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Dense"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [out, in], [out]

 private:
  int64_t in_, out_;
  Activation activation_;
};

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  PadMode pad_mode = PadMode::same;
  std::array<int64_t, 4> padding{0, 0, 0, 0};  // top, bottom, left, right, with PadMode::pad
  std::array<int64_t, 2> dilation{1, 1};
  int64_t group = 1;
  bool has_bias = false;
  init::Initializer weight_init = init::HeUniform(std::sqrt(5.0));
  std::optional<init::Initializer> bias_init{};  // default Uniform(1/sqrt(fan_in))
  Activation activation = Activation::none;
  // Output memory layout (the logical shape is NCHW either way): `any` (the default) lets the
  // library choose (channels-last, or contiguous once a Flatten is seen to transpose the output:
  // ops::MemoryFormat); channels_last or contiguous fix it.
  ops::MemoryFormat memory_format = ops::MemoryFormat::any;
};

class Conv2d : public Cell {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [out, in/group, kh, kw], [out] or undefined

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  ops::Conv2dOptions op_;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.9;  // MindSpore's convention: weight of the old running value
  bool affine = true;
  init::Initializer gamma_init = init::One();
  init::Initializer beta_init = init::Zero();
  // Use batch statistics in training mode (default) and running ones in eval mode; set to
  // force one or the other.
  std::optional<bool> use_batch_statistics{};
};

class BatchNorm2d : public Cell {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string extra_repr() const override;
  Tensor gamma, beta, moving_mean, moving_variance;  // MindSpore's names; f32 [C]

 protected:
  int64_t num_features_;
  BatchNormOptions options_;
  size_t expected_dims_ = 4;
};

// [N, C] or [N, C, L] input.
class BatchNorm1d : public BatchNorm2d {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
};

class LayerNorm : public Cell {
 public:
  // Normalises over the trailing dims `normalized_shape`.
  explicit LayerNorm(Shape normalized_shape, double epsilon = 1e-7);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  Tensor gamma, beta;

 private:
  Shape shape_;
  double eps_;
};

class ReLU : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Cell {
 public:
  explicit GELU(bool approximate = true) : approximate_(approximate) {}
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }

 private:
  bool approximate_;
};

class Sigmoid : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::sigmoid(x); }
  std::string type_name() const override { return "Sigmoid"; }
};

class Tanh : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::tanh(x); }
  std::string type_name() const override { return "Tanh"; }
};

// MindSpore's nn.HSwish: x * relu6(x + 3) / 6.
class HSwish : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::hardswish(x); }
  std::string type_name() const override { return "HSwish"; }
};

class Softmax : public Cell {
 public:
  explicit Softmax(int64_t axis = -1) : axis_(axis) {}
  Tensor construct(const Tensor& x) override { return ops::softmax(x, axis_); }
  std::string type_name() const override { return "Softmax"; }

 private:
  int64_t axis_;
};

class Flatten : public Cell {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Tensor construct(const Tensor& x) override { return ops::flatten(x, start_, end_); }
  std::string type_name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

struct PoolOptions {
  PadMode pad_mode = PadMode::valid;  // valid, or pad with symmetric `padding`
  std::array<int64_t, 2> padding{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // AvgPool2d
};

class MaxPool2d : public Cell {
 public:
  explicit MaxPool2d(int64_t kernel_size = 1, int64_t stride = 1, PoolOptions options = {});
  Tensor construct(const Tensor& x) override { return ops::max_pool2d(x, op_); }
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  ops::Pool2dOptions op_;
};

class AvgPool2d : public Cell {
 public:
  explicit AvgPool2d(int64_t kernel_size = 1, int64_t stride = 1, PoolOptions options = {});
  Tensor construct(const Tensor& x) override { return ops::avg_pool2d(x, op_); }
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  ops::Pool2dOptions op_;
};

class AdaptiveAvgPool2d : public Cell {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size = {1, 1}) : size_(output_size) {}
  Tensor construct(const Tensor& x) override { return ops::adaptive_avg_pool2d(x, size_); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }

 private:
  std::array<int64_t, 2> size_;
};

class Dropout : public Cell {
 public:
  explicit Dropout(double p = 0.5);  // p: probability of dropping an element
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }

 private:
  double p_;
};

class Embedding : public Cell {
 public:
  Embedding(int64_t vocab_size, int64_t embedding_size,
            init::Initializer embedding_table = init::Normal(0.01));
  Tensor construct(const Tensor& indices) override { return ops::embedding(indices, embedding_table); }
  std::string type_name() const override { return "Embedding"; }
  Tensor embedding_table;
};

// Runs its cells in order; they are named "0", "1", ...
class SequentialCell : public Cell {
 public:
  SequentialCell() = default;
  explicit SequentialCell(std::vector<std::shared_ptr<Cell>> cells);
  SequentialCell& append(std::shared_ptr<Cell> cell);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "SequentialCell"; }
  size_t size() const { return cells_.size(); }
  Cell& operator[](size_t i) { return *cells_.at(i); }

 private:
  std::vector<std::shared_ptr<Cell>> cells_;
};

// make<T>(args...) == std::make_shared<T>(args...): for building SequentialCell lists.
template <class T, class... Args>
std::shared_ptr<Cell> make(Args&&... args) {
  return std::make_shared<T>(std::forward<Args>(args)...);
}

}  // namespace mixprec::nn
