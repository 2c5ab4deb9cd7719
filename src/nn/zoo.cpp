// The zoo networks and the registry, one row per model (zoo.h). Layer choices mirror
// bench/compare_torch.py exactly (kernel sizes, padding, bias flags), so timings compare like
// with like.
#include "mixprec/nn/zoo.h"

#include "mixprec/error.h"

namespace mixprec::nn {

// The seed's SimpleNet, layer for layer, with no layout hint: the library finds that conv1's
// output is flattened and writes it row-major (ops::MemoryFormat::any).
SimpleNet::SimpleNet()
    : conv1(1, 32, 3, {.pad_mode = PadMode::valid, .weight_init = init::Normal(0.02)}),
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
        make<Conv2d>(in, out, 1,
                     Conv2dOptions{.stride = {stride, stride}, .pad_mode = PadMode::valid}),
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
  const Conv2dOptions c1{.pad_mode = PadMode::pad,
                         .padding = {2, 2, 2, 2},
                         .has_bias = true,
                         .activation = Activation::relu};
  const Conv2dOptions c2{
      .pad_mode = PadMode::valid, .has_bias = true, .activation = Activation::relu};
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Conv2d>(1, 6, 5, c1), make<MaxPool2d>(2, 2), make<Conv2d>(6, 16, 5, c2),
      make<MaxPool2d>(2, 2), make<Flatten>(),
      make<Dense>(400, 120, DenseOptions{.activation = Activation::relu}),
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
      make<Dense>(2048, 2048, DenseOptions{.activation = Activation::relu}),
      make<Dense>(2048, 10)});
}

std::shared_ptr<Cell> resnet_small() {
  const Conv2dOptions stem{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
  return std::make_shared<SequentialCell>(std::vector<std::shared_ptr<Cell>>{
      make<Conv2d>(1, 32, 3, stem), make<BatchNorm2d>(32), make<ReLU>(),
      make<BasicBlock>(32, 32, 1), make<BasicBlock>(32, 32, 1), make<BasicBlock>(32, 64, 2),
      make<BasicBlock>(64, 64, 1), make<BasicBlock>(64, 128, 2), make<BasicBlock>(128, 128, 1),
      make<AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}), make<Flatten>(),
      make<Dense>(128, 10)});
}

}  // namespace

// The image classifiers train as the seed does (Momentum 0.01, 0.9) with a cosine schedule; the
// transformers as issue 15 says: AdamW with a 5% warm-up, gpt-tiny on text, clipped at 1.0.
const std::vector<ZooModel>& zoo() {
  static const ZooInput image{.sample = {1, 28, 28}, .dtype = DType::f32, .classes = 10};
  static const ZooTraining seed{.optimizer = "momentum",
                                .lr = 0.01,
                                .momentum = 0.9,
                                .weight_decay = 0.0,
                                .lr_schedule = "cosine",
                                .warmup_fraction = 0.0,
                                .max_grad_norm = 0.0,
                                .batch_size = 64,
                                .amp_level = "O2",
                                .data = ZooData::fashion_mnist};
  // The transformers differ from the seed's recipe in these settings alone.
  static const ZooTraining vit = [] {
    ZooTraining t = seed;
    t.optimizer = "adamw";
    t.lr = 1e-3;
    t.weight_decay = 0.05;
    t.warmup_fraction = 0.05;
    return t;
  }();
  static const ZooTraining gpt = [] {
    ZooTraining t = vit;
    t.lr = 3e-4;
    t.weight_decay = 0.1;
    t.max_grad_norm = 1.0;
    t.batch_size = 32;
    t.data = ZooData::fortunes;
    return t;
  }();
  static const std::vector<ZooModel> rows{
      {"simplenet", []() -> std::shared_ptr<Cell> { return std::make_shared<SimpleNet>(); }, image,
       false, 256, seed},
      {"lenet", lenet, image, false, 256, seed},
      {"convnet-bn", convnet_bn, image, false, 256, seed},
      {"mlp", mlp, image, false, 256, seed},
      {"resnet-small", resnet_small, image, false, 64, seed},
      {"vit-tiny", []() -> std::shared_ptr<Cell> { return std::make_shared<VitTiny>(); }, image,
       false, 128, vit},
      {"gpt-tiny",
       []() -> std::shared_ptr<Cell> { return std::make_shared<GptTiny>(); },
       {.sample = {GptTiny::kContext}, .dtype = DType::u8, .classes = GptTiny::kVocab},
       true,
       32,
       gpt},
  };
  return rows;
}

const ZooModel& zoo_model(std::string_view name) {
  for (const ZooModel& m : zoo())
    if (m.name == name) return m;
  std::string valid;
  for (const ZooModel& m : zoo()) valid += (valid.empty() ? "" : ", ") + std::string(m.name);
  MIXPREC_CHECK(false, "unknown model '", name, "'; valid models: ", valid);
  return zoo().front();
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ZooModel& m : zoo()) names.emplace_back(m.name);
  return names;
}

bool is_language_model(std::string_view name) { return zoo_model(name).language_model; }

std::shared_ptr<Cell> make_model(std::string_view name) { return zoo_model(name).make(); }

int64_t default_batch_size(std::string_view name) { return zoo_model(name).bench_batch_size; }

}  // namespace mixprec::nn
