// Transformer layers: MultiheadAttention against the unfused composition of existing ops
// (projections, scaled q.k^T, softmax, p.v), causality, f64 gradients against central
// differences, the pre-norm TransformerEncoderLayer's wiring, PositionEmbedding, and the AMP
// levels (O1/O2 run the projections and attention matmuls low; LayerNorm and the attention
// softmax stay f32).
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

// The unfused self-attention: scores = q k^T / sqrt(D) (+ -inf above the diagonal), softmax, p v.
Tensor composed_attention(nn::MultiheadAttention& m, const Tensor& x) {
  const int64_t B = x.size(0), L = x.size(1), E = m.embed_dim(), H = m.num_heads(), D = E / H;
  const Tensor qkv = ops::linear(x, m.in_proj.weight, m.in_proj.bias);
  auto head = [&](int64_t i) {  // [B, H, L, D]
    return ops::permute(ops::reshape(ops::contiguous(ops::slice(qkv, 2, i * E, (i + 1) * E)), {B, L, H, D}),
                        {0, 2, 1, 3});
  };
  Tensor s = ops::mul(ops::matmul(head(0), ops::transpose(head(1), 2, 3)), 1.0 / std::sqrt(double(D)));
  if (m.causal()) {
    std::vector<float> mask(static_cast<size_t>(L * L), 0.0f);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i + 1; j < L; ++j) mask[static_cast<size_t>(i * L + j)] = -INFINITY;
    s = ops::add(s, Tensor::from_vector(mask, {L, L}));
  }
  const Tensor o = ops::matmul(ops::softmax(s, -1), head(2));
  return ops::linear(ops::reshape(ops::contiguous(ops::permute(o, {0, 2, 1, 3})), {B, L, E}),
                     m.out_proj.weight, m.out_proj.bias);
}

TEST(MultiheadAttention, MatchesTheComposedAttentionCausalAndNot) {
  for (bool causal : {false, true}) {
    manual_seed(1);
    nn::MultiheadAttention m(32, 4, {.causal = causal});
    EXPECT_EQ(m.in_proj.weight.shape(), (Shape{96, 32}));
    EXPECT_EQ(m.in_proj.bias.shape(), (Shape{96}));
    EXPECT_EQ(m.out_proj.weight.shape(), (Shape{32, 32}));
    const Tensor x = testing::random({2, 11, 32}, 3, DType::f32);
    const Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{2, 11, 32}));
    EXPECT_TRUE(testing::all_close(y, composed_attention(m, x), {1e-4, 1e-5})) << causal;
  }
}

TEST(MultiheadAttention, CausalOutputsDoNotSeeLaterPositions) {
  manual_seed(2);
  nn::MultiheadAttention m(16, 2, {.causal = true});
  const Tensor x = testing::random({1, 6, 16}, 4, DType::f32);
  Tensor x2 = x.clone();
  for (int64_t c = 0; c < 16; ++c) x2.data<float>()[5 * 16 + c] += 1.0f;  // change position 5
  const auto a = m(x).to_vector<double>(), b = m(x2).to_vector<double>();
  for (size_t i = 0; i < 5 * 16; ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  double moved = 0;
  for (size_t i = 5 * 16; i < 6 * 16; ++i) moved += std::fabs(a[i] - b[i]);
  EXPECT_GT(moved, 1e-3) << "position 5 sees its own change";
}

TEST(MultiheadAttention, InputAndWeightGradientsMatchFiniteDifferencesInF64) {
  manual_seed(3);
  nn::MultiheadAttention m(8, 2, {.causal = true});
  m.to_float(DType::f64);
  const Tensor x = testing::random({2, 5, 8}, 5);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return m(in[0]); }, {x}, 1e-6, 1e-6));
  // The weights through the functional composition in f64 (the same projections and attention).
  const Tensor w = testing::random({24, 8}, 6), b = testing::random({24}, 7),
               wo = testing::random({8, 8}, 8);
  auto fn = [&](const std::vector<Tensor>& in) {
    const Tensor qkv = ops::reshape(ops::linear(in[0], in[1], in[2]), {2, 5, 3, 2, 4});
    const Tensor p = ops::permute(qkv, {2, 0, 3, 1, 4});
    auto part = [&](int64_t i) { return ops::squeeze(ops::slice(p, 0, i, i + 1), 0); };
    const Tensor o = ops::scaled_dot_product_attention(part(0), part(1), part(2), {.causal = true});
    return ops::linear(ops::reshape(ops::transpose(o, 1, 2), {2, 5, 8}), in[3]);
  };
  EXPECT_TRUE(testing::gradcheck(fn, {x, w, b, wo}, 1e-6, 1e-6));
}

TEST(TransformerEncoderLayer, IsPreNormWithAGeluTanhMlp) {
  manual_seed(4);
  nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 64});
  EXPECT_EQ(layer.linear1.weight.shape(), (Shape{64, 16}));
  EXPECT_EQ(layer.linear2.weight.shape(), (Shape{16, 64}));
  int64_t count = 0;
  for (const Tensor& p : layer.trainable_params()) count += p.numel();
  // 2 LayerNorms (2 x 32) + in_proj 16*48+48 + out_proj 16*16+16 + 16*64+64 + 64*16+16
  EXPECT_EQ(count, 64 + 816 + 272 + 1088 + 1040);
  const Tensor x = testing::random({2, 7, 16}, 9, DType::f32);
  const Tensor y1 = ops::add(x, layer.self_attn(ops::layer_norm(x, layer.norm1.gamma, layer.norm1.beta, 1, 1e-5)));
  const Tensor h = ops::layer_norm(y1, layer.norm2.gamma, layer.norm2.beta, 1, 1e-5);
  const Tensor mlp = ops::linear(ops::gelu(ops::linear(h, layer.linear1.weight, layer.linear1.bias),
                                           ops::GeluApproximation::tanh),
                                 layer.linear2.weight, layer.linear2.bias);
  EXPECT_TRUE(testing::all_close(layer(x), ops::add(y1, mlp), {1e-5, 1e-6}));
}

TEST(TransformerEncoderLayer, GradientMatchesFiniteDifferencesInF64) {
  manual_seed(5);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .causal = true});
  layer.to_float(DType::f64);
  const Tensor x = testing::random({1, 4, 8}, 10);
  EXPECT_TRUE(testing::gradcheck([&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x}, 1e-6, 1e-6));
}

TEST(PositionEmbedding, AddsTheTableRowsFromTheOffset) {
  manual_seed(6);
  nn::PositionEmbedding pos(10, 4);
  const auto table = pos.embedding_table.to_vector<double>();
  const Tensor x = ones({2, 3, 4});
  const auto y = pos.add_at(x, 5).to_vector<double>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 12; ++i)
      EXPECT_EQ(y[static_cast<size_t>(b * 12 + i)], double(1.0f + float(table[static_cast<size_t>(20 + i)])));
  EXPECT_TRUE(testing::throws_error_with([&] { (void)pos.add_at(x, 8); }, "exceed the table's 10 rows"));
}

TEST(TransformerEncoderLayer, O1AndO2RunTheMatmulsLowAndLayerNormAndSoftmaxInF32) {
  const Tensor x = testing::random({2, 9, 16}, 11, DType::f32);
  for (const char* level : {"O1", "O2"})
    for (DType low : {DType::bf16, DType::f16}) {
      manual_seed(7);
      nn::TransformerEncoderLayer layer(16, 2, {.dim_feedforward = 32, .causal = true});
      amp::auto_mixed_precision(layer, level, low);
      std::vector<OpRecord> rec;
      {
        OpRecorder r(&rec);
        (void)layer(x);
      }
      int linears = 0, norms = 0, softmaxes = 0, attentions = 0;
      for (const OpRecord& r : rec) {
        const std::string where = std::string(level) + " " + std::string(dtype_name(low)) + " " + r.cell_path;
        const bool low_op = r.op == OpId::linear || r.op == OpId::scaled_dot_product_attention;
        const bool f32_op = r.op == OpId::layer_norm || r.op == OpId::attention_softmax;
        if (low_op) {
          EXPECT_EQ(r.compute_dtype, low) << where;
        }
        if (f32_op) {
          EXPECT_EQ(r.compute_dtype, DType::f32) << where;
        }
        linears += r.op == OpId::linear;
        attentions += r.op == OpId::scaled_dot_product_attention;
        norms += r.op == OpId::layer_norm;
        softmaxes += r.op == OpId::attention_softmax;
      }
      EXPECT_EQ(linears, 4);
      EXPECT_EQ(attentions, 1);
      EXPECT_EQ(norms, 2);
      EXPECT_EQ(softmaxes, 1);
    }
}

}  // namespace
}  // namespace mixprec
