// MultiheadAttention, TransformerEncoderLayer (pre-norm) and PositionEmbedding: compositions of
// Dense, LayerNorm, GELU and ops::scaled_dot_product_attention. The head split and merge are
// views: attention reads strided q/k/v and writes its output [B, L, H, D] in memory.
#include "mixprec/nn/transformer.h"

#include "mixprec/error.h"

namespace mixprec::nn {

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions o)
    : in_proj(e, 3 * e), out_proj(e, e), embed_dim_(e), num_heads_(h), causal_(o.causal) {
  MIXPREC_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention: embed_dim ", e,
                " must be a positive multiple of num_heads ", h);
  register_cell("in_proj", in_proj);
  register_cell("out_proj", out_proj);
}

std::array<Tensor, 3> MultiheadAttention::project_qkv(const Tensor& x) {
  MIXPREC_CHECK(x.dim() == 3 && x.size(2) == embed_dim_, "MultiheadAttention(", embed_dim_,
                "): expected input [B, L, ", embed_dim_, "], got ", shape_str(x.shape()));
  const int64_t B = x.size(0), L = x.size(1), D = embed_dim_ / num_heads_;
  // [B, L, 3E] -> [B, L, 3, H, D] -> [3, B, H, L, D]
  const Tensor qkv = ops::permute(ops::reshape(in_proj(x), {B, L, 3, num_heads_, D}), {2, 0, 3, 1, 4});
  const std::vector<Tensor> parts = ops::unbind(qkv, 0);  // d qkv: one tensor in in_proj's layout
  return {parts[0], parts[1], parts[2]};
}

Tensor MultiheadAttention::merge_heads(const Tensor& o) {
  const int64_t B = o.size(0), L = o.size(2);
  return out_proj(ops::reshape(ops::transpose(o, 1, 2), {B, L, embed_dim_}));
}

Tensor MultiheadAttention::construct(const Tensor& x) {
  const auto [q, k, v] = project_qkv(x);
  return merge_heads(ops::scaled_dot_product_attention(q, k, v, {.causal = causal_}));
}

Tensor MultiheadAttention::forward_cached(const Tensor& x, KVCache& cache) {
  const auto [q, k, v] = project_qkv(x);
  cache.k = cache.k.defined() ? ops::concat({cache.k, k}, 2) : ops::contiguous(k);
  cache.v = cache.v.defined() ? ops::concat({cache.v, v}, 2) : ops::contiguous(v);
  // Causal attention is bottom-right aligned: new query i sees every cached key and new keys <= i.
  return merge_heads(ops::scaled_dot_product_attention(q, cache.k, cache.v, {.causal = causal_}));
}

std::string MultiheadAttention::extra_repr() const {
  return "embed_dim=" + std::to_string(embed_dim_) + ", num_heads=" + std::to_string(num_heads_) +
         (causal_ ? ", causal=true" : "");
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t h, TransformerEncoderLayerOptions o)
    : norm1({d}, o.layer_norm_eps), self_attn(d, h, {.causal = o.causal}), norm2({d}, o.layer_norm_eps),
      linear1(d, o.dim_feedforward), activation(true), linear2(o.dim_feedforward, d) {
  register_cell("norm1", norm1);
  register_cell("self_attn", self_attn);
  register_cell("norm2", norm2);
  register_cell("linear1", linear1);
  register_cell("activation", activation);
  register_cell("linear2", linear2);
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& y) {
  return ops::add(y, linear2(activation(linear1(norm2(y)))));
}

Tensor TransformerEncoderLayer::construct(const Tensor& x) {
  return feed_forward(ops::add(x, self_attn(norm1(x))));
}

Tensor TransformerEncoderLayer::forward_cached(const Tensor& x, KVCache& cache) {
  return feed_forward(ops::add(x, self_attn.forward_cached(norm1(x), cache)));
}

PositionEmbedding::PositionEmbedding(int64_t n, int64_t dim, init::Initializer init)
    : max_length_(n), dim_(dim) {
  MIXPREC_CHECK(n > 0 && dim > 0, "PositionEmbedding: expected positive sizes, got ", n, ", ", dim);
  embedding_table = register_parameter("embedding_table", init::initialize(init, {n, dim}));
}

Tensor PositionEmbedding::add_at(const Tensor& x, int64_t offset) {
  MIXPREC_CHECK(x.dim() >= 2 && x.size(-1) == dim_, "PositionEmbedding(", max_length_, ", ", dim_,
                "): expected input [..., L, ", dim_, "], got ", shape_str(x.shape()));
  const int64_t L = x.size(-2);
  MIXPREC_CHECK(offset >= 0 && offset + L <= max_length_, "PositionEmbedding: positions ", offset,
                "..", offset + L - 1, " exceed the table's ", max_length_, " rows",
                Hint{"use a sequence no longer than the model's context"});
  return ops::add(x, ops::slice(embedding_table, 0, offset, offset + L));
}

}  // namespace mixprec::nn
