// Cells and layers: hierarchical names, parameter shapes and MindSpore default initializers,
// modes, to_float, BatchNorm running statistics, and the zoo's output shapes and parameter
// counts (which must equal the PyTorch peer's, layer for layer).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

struct Block : nn::Cell {
  nn::Dense fc1{4, 3};
  nn::ReLU relu;
  nn::Dense fc2{3, 2, {.has_bias = false}};
  Block() {
    register_cell("fc1", fc1);
    register_cell("relu", relu);
    register_cell("fc2", fc2);
  }
  Tensor construct(const Tensor& x) override { return fc2(relu(fc1(x))); }
};

struct Outer : nn::Cell {
  Block block;
  nn::SequentialCell features{{nn::make<nn::Dense>(2, 2), nn::make<nn::BatchNorm1d>(2)}};
  Outer() {
    register_cell("block", block);
    register_cell("features", features);
  }
  Tensor construct(const Tensor& x) override { return features(block(x)); }
};

TEST(Cell, HierarchicalNamesAndTraversal) {
  manual_seed(1);
  Outer net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.parameters_and_names()) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"block.fc1.weight", "block.fc1.bias", "block.fc2.weight",
                                      "features.0.weight", "features.0.bias", "features.1.gamma",
                                      "features.1.beta"}));
  std::vector<std::string> bufs;
  for (auto& [n, t] : net.buffers_and_names()) bufs.push_back(n);
  EXPECT_EQ(bufs,
            (std::vector<std::string>{"features.1.moving_mean", "features.1.moving_variance"}));
  EXPECT_EQ(net.trainable_params().size(), 7u);
  for (const Tensor& p : net.trainable_params()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_EQ(p.dtype(), DType::f32);
  }
  std::vector<std::string> cells;
  for (auto& [n, c] : net.cells_and_names()) cells.push_back(n + ":" + c->type_name());
  EXPECT_EQ(cells.front(), ":Cell");
  EXPECT_NE(std::find(cells.begin(), cells.end(), "features.1:BatchNorm1d"), cells.end());
  const Tensor y = net(testing::random({5, 4}, 1, DType::f32));
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
}

TEST(Cell, ModesPropagateAndBadRegistrationsFail) {
  Outer net;
  net.set_train(false);
  EXPECT_FALSE(net.block.fc1.training());
  EXPECT_FALSE(net.features[1].training());
  nn::ReLU r;
  EXPECT_THROW(net.register_cell("block", r), Error);
  EXPECT_THROW(net.register_cell("a.b", r), Error);
  EXPECT_THROW(net.register_parameter("w", Tensor::from_vector<int32_t>({1}, {1})), Error);
  EXPECT_THROW(r(Tensor(), Tensor()), Error);
}

TEST(Dense, DefaultInitFollowsMindSpore) {
  manual_seed(3);
  nn::Dense d(400, 50);
  EXPECT_EQ(d.weight.shape(), (Shape{50, 400}));
  EXPECT_EQ(d.bias.shape(), (Shape{50}));
  const double bound = 1.0 / std::sqrt(400.0);  // HeUniform(sqrt(5)) == U(-1/sqrt(fan_in), ..)
  double lo = 1, hi = -1;
  for (double v : d.weight.to_vector<double>()) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_GT(hi, 0.9 * bound);
  EXPECT_THROW(d(zeros({2, 399})), Error);
}

TEST(Dense, ForwardAndGradientMatchHandComputation) {
  nn::Dense d(2, 1, {.weight_init = init::Constant(0.5), .bias_init = init::Constant(1.0)});
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor y = d(x);  // 0.5*(1+2)+1 = 2.5, 0.5*(3+4)+1 = 4.5
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2.5f, 4.5f}));
  ops::sum(y).backward();
  EXPECT_EQ(d.weight.grad().to_vector<float>(), (std::vector<float>{4, 6}));
  EXPECT_EQ(d.bias.grad().to_vector<float>(), (std::vector<float>{2}));
}

TEST(Conv2d, ShapesPadModesAndDefaults) {
  manual_seed(4);
  nn::Conv2d valid(1, 32, 3, {.pad_mode = nn::PadMode::valid, .weight_init = init::Normal(0.02)});
  EXPECT_FALSE(valid.bias.defined()) << "MindSpore's Conv2d has no bias by default";
  EXPECT_EQ(valid(zeros({2, 1, 28, 28})).shape(), (Shape{2, 32, 26, 26}));
  nn::Conv2d same(3, 8, 3, {.stride = {2, 2}});
  EXPECT_EQ(same(zeros({1, 3, 15, 15})).shape(), (Shape{1, 8, 8, 8}));
  nn::Conv2d padded(1, 6, 5,
                    {.pad_mode = nn::PadMode::pad, .padding = {2, 2, 2, 2}, .has_bias = true});
  EXPECT_EQ(padded(zeros({1, 1, 28, 28})).shape(), (Shape{1, 6, 28, 28}));
  EXPECT_THROW(nn::Conv2d(3, 8, 3, {.group = 2}), Error);
  EXPECT_THROW(padded(zeros({1, 2, 28, 28})), Error);
  double s2 = 0;
  const auto w = valid.weight.to_vector<double>();
  for (double v : w) s2 += v * v;
  EXPECT_NEAR(std::sqrt(s2 / static_cast<double>(w.size())), 0.02, 0.004);
}

TEST(BatchNorm2d, RunningStatisticsUpdateOnlyInTraining) {
  nn::BatchNorm2d bn(2);
  const Tensor x = testing::random({4, 2, 3, 3}, 5, DType::f32, 1.0, 3.0);
  (void)bn(x);
  const auto mean = ops::mean(x, {0, 2, 3}).to_vector<double>();
  const auto rm = bn.moving_mean.to_vector<double>();
  for (int c = 0; c < 2; ++c)
    EXPECT_NEAR(rm[static_cast<size_t>(c)], 0.1 * mean[static_cast<size_t>(c)], 1e-5);
  bn.set_train(false);
  const auto before = bn.moving_mean.to_vector<float>();
  const Tensor y = bn(x);
  EXPECT_EQ(bn.moving_mean.to_vector<float>(), before);
  // eval: (x - rm) / sqrt(rv + eps)
  const double rv0 = bn.moving_variance.to_vector<double>()[0];
  EXPECT_NEAR(y.at({0, 0, 0, 0}), (x.at({0, 0, 0, 0}) - rm[0]) / std::sqrt(rv0 + 1e-5), 1e-4);
}

TEST(Cell, ToFloatForcesTheComputeDtype) {
  nn::Dense d(3, 2);
  const Tensor x = testing::random({2, 3}, 6, DType::f32);
  EXPECT_EQ(d(x).dtype(), DType::f32);
  d.to_float(DType::bf16);
  EXPECT_EQ(d(x).dtype(), DType::bf16);
  EXPECT_EQ(d.weight.dtype(), DType::f32) << "parameters stay fp32; they are cast at use";
  EXPECT_THROW(d.to_float(DType::i32), Error);
}

TEST(Zoo, OutputShapesAndParameterCountsMatchThePeer) {
  const std::map<std::string, int64_t> expected{{"simplenet", 216618},    {"lenet", 61706},
                                                {"convnet-bn", 421834},   {"mlp", 5824522},
                                                {"resnet-small", 696042}, {"vit-tiny", 205066}};
  for (const auto& name : nn::model_names()) {
    if (nn::is_language_model(name)) continue;  // zoo_transformers_test.cpp
    manual_seed(0);
    auto net = nn::make_model(name);
    int64_t count = 0;
    for (const Tensor& p : net->trainable_params()) count += p.numel();
    EXPECT_EQ(count, expected.at(name)) << name;
    NoGradGuard ng;
    EXPECT_EQ((*net)(testing::random({3, 1, 28, 28}, 7, DType::f32)).shape(), (Shape{3, 10}))
        << name;
  }
  EXPECT_THROW(nn::make_model("vgg"), Error);
}

// Each registry row's input spec is what its network takes and gives: a batch of its sample
// shape and dtype in, [B, classes] logits out (a language model: [B, L, vocab]).
TEST(Zoo, RegistryInputSpecsMatchTheNetworks) {
  std::set<std::string> names;
  for (const nn::ZooModel& m : nn::zoo()) {
    EXPECT_TRUE(names.insert(m.name).second) << "two rows named " << m.name;
    EXPECT_EQ(&nn::zoo_model(m.name), &m);
    EXPECT_GT(m.bench_batch_size, 0) << m.name;
    EXPECT_GT(m.training.batch_size, 0) << m.name;
    EXPECT_GT(m.training.lr, 0) << m.name;
    manual_seed(0);
    auto net = m.make();
    Shape in{2};
    in.insert(in.end(), m.input.sample.begin(), m.input.sample.end());
    Shape out{2};
    if (m.language_model) out.push_back(m.input.sample[0]);
    out.push_back(m.input.classes);
    std::vector<uint8_t> tokens(static_cast<size_t>(shape_numel(in)));
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
    const Tensor x = m.input.dtype == DType::u8 ? Tensor::from_vector(tokens, in)
                                                : testing::random(in, 5, m.input.dtype);
    NoGradGuard ng;
    EXPECT_EQ((*net)(x).shape(), out) << m.name;
  }
  EXPECT_EQ(nn::model_names().size(), nn::zoo().size());
  EXPECT_TRUE(nn::is_language_model("gpt-tiny"));
  EXPECT_EQ(nn::default_batch_size("resnet-small"), nn::zoo_model("resnet-small").bench_batch_size);
  try {
    (void)nn::zoo_model("vgg");
    ADD_FAILURE() << "an unknown model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid models: simplenet, lenet"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixprec
