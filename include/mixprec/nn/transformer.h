// Transformer layers with MindSpore's names (mindspore.nn 2.x) where they exist:
// MultiheadAttention (self-attention with a biased in_proj [3E, E] and out_proj, through
// ops::scaled_dot_product_attention), TransformerEncoderLayer in its pre-norm form
// (MindSpore's norm_first=True: x + MHA(LN(x)), then x + MLP(LN(x)), GELU tanh, no dropout), and
// PositionEmbedding, a learned [max_length, dim] table added to a [B, L, dim] input.
// Inputs are batch first: [B, L, E].
#pragma once

#include <cstdint>

#include "mixprec/nn/layers.h"

namespace mixprec::nn {

// The keys and values of the positions seen so far, for one attention layer, for incremental
// decoding: [B, H, T, E / H] each, undefined when nothing was seen yet.
struct KVCache {
  Tensor k, v;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

struct MultiheadAttentionOptions {
  bool causal = false;  // position i attends to positions <= i
};

class MultiheadAttention : public Cell {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  Tensor construct(const Tensor& x) override;  // self-attention, [B, L, E] -> [B, L, E]
  // x [B, L, E] holds the positions that follow those in `cache`: their keys and values join the
  // cache, and each query attends to the cached positions and (causally) to the new ones.
  Tensor forward_cached(const Tensor& x, KVCache& cache);
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  bool causal() const { return causal_; }
  // [B, L, E] -> q, k, v, each [B, H, L, E / H] (views of one in_proj GEMM).
  std::array<Tensor, 3> project_qkv(const Tensor& x);
  // [B, H, L, E / H] attention output -> [B, L, E] through out_proj.
  Tensor merge_heads(const Tensor& o);
  Dense in_proj, out_proj;

 private:
  int64_t embed_dim_, num_heads_;
  bool causal_;
};

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;  // MindSpore's default
  bool causal = false;
  double layer_norm_eps = 1e-5;    // MindSpore's TransformerEncoderLayer default
};

// Pre-norm (norm_first) encoder layer without dropout: y = x + self_attn(norm1(x));
// out = y + linear2(gelu_tanh(linear1(norm2(y)))).
class TransformerEncoderLayer : public Cell {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  Tensor feed_forward(const Tensor& y);  // y + MLP(norm2(y))
  Tensor forward_cached(const Tensor& x, KVCache& cache);  // construct() with self_attn's cache
  LayerNorm norm1;
  MultiheadAttention self_attn;
  LayerNorm norm2;
  Dense linear1;
  GELU activation;
  Dense linear2;
};

// A learned position table: x [B, L, dim] -> x + embedding_table[offset : offset + L].
class PositionEmbedding : public Cell {
 public:
  PositionEmbedding(int64_t max_length, int64_t dim, init::Initializer init = init::Normal(0.02));
  Tensor construct(const Tensor& x) override { return add_at(x, 0); }
  Tensor add_at(const Tensor& x, int64_t offset);
  std::string type_name() const override { return "PositionEmbedding"; }
  Tensor embedding_table;  // [max_length, dim]

 private:
  int64_t max_length_, dim_;
};

}  // namespace mixprec::nn
