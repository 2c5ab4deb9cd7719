// The zoo's transformers (issue 15): output shapes, parameter counts worked out by hand from the
// issue's definitions, the loss falling over a few AdamW steps on tiny data, and the next-token
// loss over [B, L, C] logits.
#include <gtest/gtest.h>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

int64_t count_params(nn::Cell& net) {
  int64_t n = 0;
  for (const Tensor& p : net.trainable_params()) n += p.numel();
  return n;
}

// One pre-norm block of width e, MLP e -> 4e -> e: two LayerNorms, in_proj (3e x e + 3e),
// out_proj (e x e + e), linear1 (4e x e + 4e), linear2 (e x 4e + e).
int64_t block_params(int64_t e) { return 2 * 2 * e + (3 * e * e + 3 * e) + (e * e + e) + (4 * e * e + 4 * e) + (4 * e * e + e); }

TEST(ZooTransformers, VitTinyShapesAndParameterCount) {
  manual_seed(0);
  auto net = nn::make_model("vit-tiny");
  const int64_t patch = 64 * 16 + 64, cls = 64, pos = 50 * 64, norm = 2 * 64, head = 64 * 10 + 10;
  EXPECT_EQ(count_params(*net), patch + cls + pos + 4 * block_params(64) + norm + head);
  EXPECT_EQ(count_params(*net), 205066);
  NoGradGuard ng;
  EXPECT_EQ((*net)(testing::random({3, 1, 28, 28}, 1, DType::f32)).shape(), (Shape{3, 10}));
}

TEST(ZooTransformers, GptTinyShapesAndParameterCount) {
  manual_seed(0);
  auto net = nn::make_model("gpt-tiny");
  const int64_t tok = 256 * 128, pos = 128 * 128, norm = 2 * 128, head = 128 * 256 + 256;
  EXPECT_EQ(count_params(*net), tok + pos + 4 * block_params(128) + norm + head);
  EXPECT_EQ(count_params(*net), 875520);
  NoGradGuard ng;
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>(2 * 128, 65), {2, 128});
  EXPECT_EQ((*net)(tokens).shape(), (Shape{2, 128, 256}));
  EXPECT_EQ((*net)(ops::slice(tokens, 1, 0, 5)).shape(), (Shape{2, 5, 256}));
  const Tensor too_long = Tensor::from_vector(std::vector<int64_t>(129, 65), {1, 129});
  EXPECT_TRUE(testing::throws_error_with([&] { (void)(*net)(too_long); }, "1 <= L <= 128"));
  EXPECT_TRUE(nn::is_language_model("gpt-tiny"));
  EXPECT_FALSE(nn::is_language_model("vit-tiny"));
}

// The precision table's network row gives what the network returns: gpt-tiny's own last op is the
// cast of its u8 bytes to i32 tokens, which the row used to show as the network's output.
TEST(ZooTransformers, PrecisionTableShowsTheNetworksOutputDtype) {
  manual_seed(0);
  auto net = nn::make_model("gpt-tiny");
  const Tensor bytes = Tensor::from_vector(std::vector<uint8_t>(2 * 16, 65), {2, 16});
  const auto rows = amp::precision_table(*net, bytes);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().cell, "(network)");
  EXPECT_EQ(rows.front().output, "f32");
}

// A few AdamW steps on one fixed batch; returns the first and the last loss.
std::pair<double, double> fit(nn::Cell& net, const std::function<Tensor()>& loss_fn, int steps, double lr) {
  nn::AdamW opt(net.trainable_params(), lr, 0.9, 0.999, 1e-8, 0.0);
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    const Tensor loss = loss_fn();
    (s == 0 ? first : last) = loss.item();
    opt.step(grad(loss, net.trainable_params()));
  }
  return {first, last};
}

TEST(ZooTransformers, GptTinyLossFallsOnARepeatedText) {
  manual_seed(1);
  auto net = nn::make_model("gpt-tiny");
  std::vector<int64_t> seq;
  for (int i = 0; i < 2 * 33; ++i) seq.push_back("abcab"[i % 5]);
  const Tensor all = Tensor::from_vector(seq, {2, 33});
  const Tensor in = ops::contiguous(ops::slice(all, 1, 0, 32)), target = ops::contiguous(ops::slice(all, 1, 1, 33));
  auto loss_fn = [&] {
    return ops::softmax_cross_entropy(ops::reshape((*net)(in), {64, 256}), ops::reshape(target, {64}),
                                      {.sparse = true, .reduction = ops::Reduction::mean});
  };
  const auto [first, last] = fit(*net, loss_fn, 8, 3e-3);
  EXPECT_NEAR(first, std::log(256.0), 0.5) << "an untrained byte model is near uniform";
  EXPECT_LT(last, 0.6 * first);
}

TEST(ZooTransformers, VitTinyLossFallsOnAFewImages) {
  manual_seed(2);
  auto net = nn::make_model("vit-tiny");
  // Image i: noise plus +-i/8 on its left and right halves (the patches' content tells the class).
  Tensor x = testing::random({8, 1, 28, 28}, 3, DType::f32, 0, 0.2);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 784; ++j) x.data<float>()[i * 784 + j] += (j % 28 < 14 ? 1.0f : -1.0f) * float(i) / 8.0f;
  const Tensor y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  auto loss_fn = [&] {
    return ops::softmax_cross_entropy((*net)(x), y, {.sparse = true, .reduction = ops::Reduction::mean});
  };
  const auto [first, last] = fit(*net, loss_fn, 12, 1e-3);  // vit-tiny's default rate
  EXPECT_NEAR(first, std::log(10.0), 0.3);
  EXPECT_LT(last, 0.5 * first);
}

TEST(ZooTransformers, GptTinyCachedDecodingMatchesTheFullForward) {
  manual_seed(3);
  nn::GptTiny net;
  NoGradGuard ng;
  std::vector<int32_t> bytes;
  for (int i = 0; i < 20; ++i) bytes.push_back((i * 37 + 11) % 256);
  const Tensor tokens = Tensor::from_vector(bytes, {1, 20});
  const Tensor full = net(tokens);
  std::vector<nn::KVCache> caches(4);
  EXPECT_TRUE(testing::all_close(net.forward_cached(ops::slice(tokens, 1, 0, 12), caches), ops::slice(full, 1, 0, 12),
                                 {1e-4, 1e-5}));
  for (int64_t i = 12; i < 20; ++i)
    EXPECT_TRUE(testing::all_close(net.forward_cached(ops::slice(tokens, 1, i, i + 1), caches),
                                   ops::slice(full, 1, i, i + 1), {1e-4, 1e-5})) << i;
  EXPECT_EQ(caches[0].length(), 20);
  // Greedy decoding takes the full forward's most likely next byte at every position.
  Generator unused(0);
  const std::string greedy = net.generate("ab", 6, 0.0, unused);
  ASSERT_EQ(greedy.size(), 8u);
  for (size_t k = 2; k < greedy.size(); ++k) {
    std::vector<int32_t> prefix(greedy.begin(), greedy.begin() + static_cast<int64_t>(k));
    for (int32_t& b : prefix) b &= 0xff;
    const Tensor logits = net(Tensor::from_vector(prefix, {1, static_cast<int64_t>(k)}));
    const auto next = ops::argmax(ops::slice(logits, 1, static_cast<int64_t>(k) - 1, static_cast<int64_t>(k)), 2);
    EXPECT_EQ(next.to_vector<int64_t>()[0], static_cast<unsigned char>(greedy[k])) << k;
  }
  // Sampling is a function of the seed; 200 bytes run past the context (the cache restarts).
  Generator g1(7), g2(7);
  const std::string a = net.generate("The ", 200, 1.0, g1), b = net.generate("The ", 200, 1.0, g2);
  EXPECT_EQ(a.size(), 204u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.substr(0, 4), "The ");
}

TEST(SoftmaxCrossEntropyWithLogits, SequenceLogitsAreTheLossOfTheirFlattenedRows) {
  const Tensor logits = testing::random({2, 3, 5}, 4, DType::f32, -3, 3);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 4, 2, 1, 1, 3}, {2, 3});
  const Tensor rows = ops::softmax_cross_entropy(ops::reshape(logits, {6, 5}), ops::reshape(labels, {6}), {.sparse = true});
  nn::SoftmaxCrossEntropyWithLogits none({.sparse = true}), mean({.sparse = true, .reduction = nn::Reduction::mean});
  const Tensor per_token = none(logits, labels);
  EXPECT_EQ(per_token.shape(), (Shape{2, 3}));
  EXPECT_EQ(per_token.to_vector<double>(), rows.to_vector<double>());
  const auto r = rows.to_vector<double>();
  EXPECT_NEAR(mean(logits, labels).item(), (r[0] + r[1] + r[2] + r[3] + r[4] + r[5]) / 6, 1e-6);
  EXPECT_TRUE(testing::throws_error_with([&] { (void)none(logits, ops::reshape(labels, {3, 2})); },
                                         "expected class-index labels of shape [2, 3]"));
}

}  // namespace
}  // namespace mixprec
