// The model zoo (DESIGN.md, "The main job"): simplenet (the seed's network), lenet, convnet-bn,
// mlp and resnet-small, all for 1x28x28 inputs and 10 classes. bench/compare_torch.py builds
// the same networks in PyTorch layer for layer. Dense+ReLU pairs use Dense's fused activation
// (MindSpore's Dense(..., activation='relu')), which computes exactly Dense then ReLU.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/nn/layers.h"

namespace mixprec::nn {

// The seed's SimpleNet, as written there: Conv2d(1, 32, 3, pad_mode='valid',
// weight_init=Normal(0.02)) (MindSpore's Conv2d has no bias by default), ReLU, Flatten,
// Dense(32*26*26, 10).
class SimpleNet : public Cell {
 public:
  SimpleNet();
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "SimpleNet"; }
  Conv2d conv1;
  ReLU relu;
  Flatten flatten;
  Dense fc;
};

// conv-BN-ReLU-conv-BN (+ 1x1 conv + BN shortcut when the shape changes), add, ReLU.
class BasicBlock : public Cell {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }

 private:
  Conv2d conv1_, conv2_;
  BatchNorm2d bn1_, bn2_;
  std::unique_ptr<SequentialCell> down_;
};

std::vector<std::string> model_names();
// Throws listing the valid names for an unknown one.
std::shared_ptr<Cell> make_model(std::string_view name);
// The batch size the benchmarks use for `name` (256; 64 for resnet-small).
int64_t default_batch_size(std::string_view name);

}  // namespace mixprec::nn
