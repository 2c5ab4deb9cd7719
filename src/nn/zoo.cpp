// The zoo networks. Layer choices mirror bench/compare_torch.py exactly (kernel sizes, padding,
// bias flags), so timings compare like with like.
#include "mixprec/nn/zoo.h"

#include "mixprec/error.h"

namespace mixprec::nn {

// conv1's output is kept contiguous (NCHW): Flatten then views it for free.
SimpleNet::SimpleNet()
    : conv1(1, 32, 3, {.pad_mode = PadMode::valid, .weight_init = init::Normal(0.02),
                       .memory_format = ops::MemoryFormat::contiguous}),
      fc(32 * 26 * 26, 10) {
  register_cell("conv1", conv1);
  register_cell("relu", relu);
  register_cell("flatten", flatten);
  register_cell("fc", fc);
}

Tensor SimpleNet::construct(const Tensor& x) {
  Tensor y = conv1(x);
  y = relu(y);
  y = flatten(y);
  return fc(y);
}

static Conv2dOptions conv3x3(int64_t stride) {
  return {.stride = {stride, stride}, .pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride)
    : conv1_(in, out, 3, conv3x3(stride)), conv2_(out, out, 3, conv3x3(1)), bn1_(out), bn2_(out) {
  register_cell("conv1", conv1_);
  register_cell("bn1", bn1_);
  register_cell("conv2", conv2_);
  register_cell("bn2", bn2_);
  if (stride != 1 || in != out) {
    down_ = std::make_unique<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
        make<Conv2d>(in, out, 1, Conv2dOptions{.stride = {stride, stride}, .pad_mode = PadMode::valid}),
        make<BatchNorm2d>(out)});
    register_cell("down", *down_);
  }
}

Tensor BasicBlock::construct(const Tensor& x) {
  Tensor y = ops::relu(bn1_(conv1_(x)));
  y = bn2_(conv2_(y));
  return ops::relu(ops::add(y, down_ ? (*down_)(x) : x));
}

namespace {

std::shared_ptr<Cell> lenet() {
  const Conv2dOptions c1{.pad_mode = PadMode::pad, .padding = {2, 2, 2, 2}, .has_bias = true, .activation = Activation::relu};
  const Conv2dOptions c2{.pad_mode = PadMode::valid, .has_bias = true, .activation = Activation::relu};
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Conv2d>(1, 6, 5, c1), make<MaxPool2d>(2, 2), make<Conv2d>(6, 16, 5, c2), make<MaxPool2d>(2, 2),
      make<Flatten>(), make<Dense>(400, 120, DenseOptions{.activation = Activation::relu}),
      make<Dense>(120, 84, DenseOptions{.activation = Activation::relu}), make<Dense>(84, 10)});
}

std::shared_ptr<Cell> convnet_bn() {
  const Conv2dOptions same{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}, .has_bias = true};
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Conv2d>(1, 32, 3, same), make<BatchNorm2d>(32), make<ReLU>(), make<MaxPool2d>(2, 2),
      make<Conv2d>(32, 64, 3, same), make<BatchNorm2d>(64), make<ReLU>(), make<MaxPool2d>(2, 2),
      make<Flatten>(), make<Dense>(64 * 7 * 7, 128, DenseOptions{.activation = Activation::relu}),
      make<Dense>(128, 10)});
}

std::shared_ptr<Cell> mlp() {
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Flatten>(), make<Dense>(784, 2048, DenseOptions{.activation = Activation::relu}),
      make<Dense>(2048, 2048, DenseOptions{.activation = Activation::relu}), make<Dense>(2048, 10)});
}

std::shared_ptr<Cell> resnet_small() {
  const Conv2dOptions stem{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Conv2d>(1, 32, 3, stem), make<BatchNorm2d>(32), make<ReLU>(),
      make<BasicBlock>(32, 32, 1), make<BasicBlock>(32, 32, 1),
      make<BasicBlock>(32, 64, 2), make<BasicBlock>(64, 64, 1),
      make<BasicBlock>(64, 128, 2), make<BasicBlock>(128, 128, 1),
      make<AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}), make<Flatten>(), make<Dense>(128, 10)});
}

}  // namespace

std::vector<std::string> model_names() {
  return {"simplenet", "lenet", "convnet-bn", "mlp", "resnet-small", "vit-tiny", "gpt-tiny"};
}

bool is_language_model(std::string_view name) { return name == "gpt-tiny"; }

std::shared_ptr<Cell> make_model(std::string_view name) {
  if (name == "simplenet") return std::make_shared<SimpleNet>();
  if (name == "lenet") return lenet();
  if (name == "convnet-bn") return convnet_bn();
  if (name == "mlp") return mlp();
  if (name == "resnet-small") return resnet_small();
  if (name == "vit-tiny") return std::make_shared<VitTiny>();
  if (name == "gpt-tiny") return std::make_shared<GptTiny>();
  std::string valid;
  for (const auto& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
  MIXPREC_CHECK(false, "unknown model '", name, "'; valid models: ", valid);
  return nullptr;
}

int64_t default_batch_size(std::string_view name) {
  if (name == "gpt-tiny") return 32;
  if (name == "vit-tiny") return 128;
  return name == "resnet-small" ? 64 : 256;
}

}  // namespace mixprec::nn
