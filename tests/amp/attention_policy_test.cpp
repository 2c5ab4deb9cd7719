// The AMP policy of scaled_dot_product_attention (docs/amp.md): its matmuls are on the white
// list and run in the low dtype at O1, O2, O3 and auto, while its softmax and statistics stay
// f32 at every level, O3 included. A custom white list naming attention_softmax forces the
// softmax into f16 on purpose; its overflow is then named by the overflow check (cell, op,
// phase), in the forward pass (scores) and in the backward pass (dP, dS).
#include <gtest/gtest.h>

#include <algorithm>

#include "mixprec/mixprec.h"
#include "mixprec/ops/numerics.h"
#include "mixprec/train/guard.h"
#include "op_test_util.h"
#include "ops/dispatch.h"

namespace mixprec {
namespace {

struct Attn : nn::Cell {
  Tensor construct(const Tensor& q, const Tensor& kv) override {
    return ops::scaled_dot_product_attention(q, kv, kv, {.causal = true});
  }
};
struct Net : nn::Cell {
  Attn attn;
  Net() { register_cell("attn", attn); }
  Tensor construct(const Tensor& q, const Tensor& kv) override { return attn(q, kv); }
};

std::vector<OpRecord> records_of(Net& net, const Tensor& q, const Tensor& kv, OpId op) {
  std::vector<OpRecord> rec;
  {
    OpRecorder r(&rec);
    (void)net(q, kv);
  }
  std::vector<OpRecord> out;
  for (OpRecord& r : rec)
    if (r.op == op) out.push_back(std::move(r));
  return out;
}

TEST(AttentionPolicy, DefaultListsPutTheMatmulsOnTheWhiteListAndTheSoftmaxOnTheBlackList) {
  const auto white = amp::get_white_list(), black = amp::get_black_list();
  EXPECT_NE(std::find(white.begin(), white.end(), "scaled_dot_product_attention"), white.end());
  EXPECT_NE(std::find(black.begin(), black.end(), "attention_softmax"), black.end());
}

TEST(AttentionPolicy, MatmulsRunLowAndTheSoftmaxInF32AtEveryLevelIncludingO3) {
  const Tensor q = testing::random({2, 2, 9, 8}, 1, DType::f32),
               kv = testing::random({2, 2, 9, 8}, 2, DType::f32);
  for (const char* level : {"O1", "O2", "O3", "auto"})
    for (DType low : {DType::bf16, DType::f16}) {
      Net net;
      amp::auto_mixed_precision(net, level, low);
      const auto sdpa = records_of(net, q, kv, OpId::scaled_dot_product_attention);
      const auto softmax = records_of(net, q, kv, OpId::attention_softmax);
      ASSERT_EQ(sdpa.size(), 1u);
      ASSERT_EQ(softmax.size(), 1u);
      EXPECT_EQ(sdpa[0].compute_dtype, low) << level;
      for (DType d : sdpa[0].input_dtypes) EXPECT_EQ(d, low) << level;
      EXPECT_EQ(sdpa[0].cell_path, "attn");
      EXPECT_EQ(softmax[0].compute_dtype, DType::f32) << level << " " << dtype_name(low);
      // O1 casts a white-list op's output back to fp32.
      EXPECT_EQ(sdpa[0].output_dtype, std::string(level) == "O1" ? DType::f32 : low) << level;
    }
  // O0: everything f32.
  Net net;
  EXPECT_EQ(records_of(net, q, kv, OpId::scaled_dot_product_attention)[0].compute_dtype,
            DType::f32);
}

// Scores of 200 * 200 * 16 / 4 = 160000: beyond f16's 65504, harmless in f32 statistics.
Tensor big(uint64_t seed) {
  return ops::add(testing::random({1, 2, 12, 16}, seed, DType::f32, -1, 1), 200.0);
}

TEST(AttentionPolicy, ForcedF16SoftmaxOverflowIsNamedInTheForwardPass) {
  const Tensor q = big(3), kv = big(4);
  Net plain;  // f32 on the f16-rounded inputs: the same products as the f16 matmuls
  const Tensor expected =
      plain(q.astype(DType::f16).astype(DType::f32), kv.astype(DType::f16).astype(DType::f32));
  {  // The default: f16 matmuls, f32 softmax: no overflow, the f32 result within f16 rounding.
    Net net;
    amp::custom_mixed_precision(net, {.white_list = {"scaled_dot_product_attention"}}, DType::f16);
    NumericsCheckScope check;
    const Tensor out = net(q, kv);
    EXPECT_FALSE(check.first().has_value()) << train::describe(*check.first());
    EXPECT_TRUE(testing::all_close(out, expected, {2e-3, 0.5}));
  }
  for (const char* impl : {"flash", "ref"}) {  // both kernels count the overflows
    ops::ForceImpl force(impl);
    Net net;
    amp::custom_mixed_precision(
        net, {.white_list = {"scaled_dot_product_attention", "attention_softmax"}}, DType::f16);
    NumericsCheckScope check;
    const Tensor out = net(q, kv);
    ASSERT_TRUE(check.first().has_value()) << impl;
    const NonFiniteEvent& e = *check.first();
    EXPECT_EQ(e.op, OpId::attention_softmax);
    EXPECT_EQ(e.op_name, "attention_softmax");
    EXPECT_EQ(e.cell, "attn");
    EXPECT_EQ(e.phase, "forward");
    EXPECT_EQ(e.dtype, DType::f16);
    EXPECT_GT(e.nonfinite_count, 0);
    EXPECT_NE(train::describe(e).find("forward attention_softmax in attn: the scores"),
              std::string::npos)
        << train::describe(e);
    EXPECT_TRUE(std::isnan(out.at({0, 0, 0, 0}))) << "the overflowed scores make the rows NaN";
  }
}

TEST(AttentionPolicy, ForcedF16SoftmaxOverflowIsNamedInTheBackwardPass) {
  // kv rows all 100, so every probability row is uniform and dS = P (dP - D) = 0 exactly in f32;
  // with dO = 1000, dP = dO . v = 1.6e6 overflows f16 when the softmax's dP is rounded to it.
  const Tensor q = testing::random({1, 2, 12, 16}, 5, DType::f32, -0.01, 0.01);
  const Tensor kv0 = full({1, 2, 12, 16}, 100.0);
  for (const char* impl : {"flash", "ref"})
    for (bool forced : {false, true}) {
      ops::ForceImpl force(impl);
      Net net;
      std::vector<std::string> white{"scaled_dot_product_attention"};
      if (forced) white.push_back("attention_softmax");
      amp::custom_mixed_precision(net, {.white_list = white}, DType::f16);
      const Tensor x = q.clone().set_requires_grad(true), kv = kv0.clone().set_requires_grad(true);
      NumericsCheckScope check;
      const Tensor loss = ops::sum(ops::mul(net(x, kv), 1000.0));
      EXPECT_FALSE(check.first().has_value()) << "the forward pass is finite";
      const std::vector<Tensor> g = grad(loss, {x, kv});
      if (!forced) {
        EXPECT_FALSE(check.first().has_value()) << train::describe(*check.first());
        EXPECT_EQ(summarize_finite(g[0]).nonfinite + summarize_finite(g[1]).nonfinite, 0) << impl;
        continue;
      }
      ASSERT_TRUE(check.first().has_value()) << impl;
      const NonFiniteEvent& e = *check.first();
      EXPECT_EQ(e.op_name, "attention_softmax");
      EXPECT_EQ(e.cell, "attn");
      EXPECT_EQ(e.phase, "backward");
      EXPECT_EQ(e.dtype, DType::f16);
      EXPECT_NE(train::describe(e).find("dP = dO.v^T or dS"), std::string::npos)
          << train::describe(e);
    }
}

}  // namespace
}  // namespace mixprec
