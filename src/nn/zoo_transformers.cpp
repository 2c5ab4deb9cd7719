// The zoo's transformers, vit-tiny and gpt-tiny, defined exactly as issue 15 says so that the
// PyTorch peer can match them layer for layer. Embeddings, the class token and the position
// tables start from Normal(0.02); Dense and Conv2d keep their defaults; the patch Conv2d has a
// bias (a ViT patch embedding is a biased linear map of each patch).
#include <algorithm>
#include <cmath>

#include "mixprec/grad_mode.h"
#include "mixprec/error.h"
#include "mixprec/nn/zoo.h"

namespace mixprec::nn {

static void add_blocks(SequentialCell& blocks, int n, int64_t width, int64_t heads, bool causal) {
  for (int i = 0; i < n; ++i)
    blocks.append(make<TransformerEncoderLayer>(
        width, heads, TransformerEncoderLayerOptions{.dim_feedforward = 4 * width, .causal = causal}));
}

VitTiny::VitTiny()
    : patch(1, 64, 4, {.stride = {4, 4}, .pad_mode = PadMode::valid, .has_bias = true}),
      pos(50, 64), norm({64}, 1e-5), head(64, 10) {
  register_cell("patch", patch);
  cls_token = register_parameter("cls_token", init::initialize(init::Normal(0.02), {1, 1, 64}));
  register_cell("pos", pos);
  add_blocks(blocks, 4, 64, 4, false);
  register_cell("blocks", blocks);
  register_cell("norm", norm);
  register_cell("head", head);
}

Tensor VitTiny::construct(const Tensor& x) {
  MIXPREC_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
                "vit-tiny: expected input [N, 1, 28, 28], got ", shape_str(x.shape()));
  const int64_t n = x.size(0);
  Tensor y = ops::transpose(ops::flatten(patch(x), 2), 1, 2);  // [N, 49, 64]
  y = ops::concat({ops::broadcast_to(ops::amp_cast(cls_token, y.dtype()), {n, 1, 64}), y}, 1);
  y = pos(y);
  y = blocks(y);
  return head(ops::squeeze(ops::slice(norm(y), 1, 0, 1), 1));
}

GptTiny::GptTiny() : tok(kVocab, kWidth, init::Normal(0.02)), pos(kContext, kWidth), norm({kWidth}, 1e-5),
                     head(kWidth, kVocab) {
  register_cell("tok", tok);
  register_cell("pos", pos);
  add_blocks(blocks, 4, kWidth, 4, true);
  register_cell("blocks", blocks);
  register_cell("norm", norm);
  register_cell("head", head);
}

Tensor GptTiny::construct(const Tensor& tokens) {
  MIXPREC_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= kContext,
                "gpt-tiny: expected tokens [B, L] with 1 <= L <= ", kContext, ", got ",
                shape_str(tokens.shape()));
  // TextDataset's windows are bytes (u8); the embedding takes i32/i64 indices.
  Tensor y = pos(tok(tokens.dtype() == DType::u8 ? ops::cast(tokens, DType::i32) : tokens));
  return head(norm(blocks(y)));
}

Tensor GptTiny::forward_cached(const Tensor& tokens, std::vector<KVCache>& caches) {
  MIXPREC_CHECK(caches.size() == blocks.size(), "gpt-tiny: expected one KVCache per block (", blocks.size(),
                "), got ", caches.size());
  const int64_t offset = caches[0].length();
  Tensor y = pos.add_at(tok(tokens.dtype() == DType::u8 ? ops::cast(tokens, DType::i32) : tokens), offset);
  for (size_t i = 0; i < blocks.size(); ++i)
    y = dynamic_cast<TransformerEncoderLayer&>(blocks[i]).forward_cached(y, caches[i]);
  return head(norm(y));
}

// A byte drawn from the last position's logits [1, L, 256].
static int sample_byte(const Tensor& logits, double temperature, Generator& gen) {
  const int64_t L = logits.size(1);
  const std::vector<double> row = ops::contiguous(ops::slice(logits, 1, L - 1, L)).to_vector<double>();
  const auto best = std::max_element(row.begin(), row.end());
  if (temperature <= 0) return static_cast<int>(best - row.begin());
  std::vector<double> p(row.size());
  double total = 0;
  for (size_t i = 0; i < row.size(); ++i) total += p[i] = std::exp((row[i] - *best) / temperature);
  double u = gen.next_double() * total;
  for (size_t i = 0; i < p.size(); ++i)
    if ((u -= p[i]) < 0) return static_cast<int>(i);
  return static_cast<int>(best - row.begin());
}

std::string GptTiny::generate(const std::string& prompt, int64_t count, double temperature, Generator& gen) {
  std::string text = prompt;
  (void)generate(prompt, count, temperature, gen, [&](char b) {
    text.push_back(b);
    return true;
  });
  return text;
}

int64_t GptTiny::generate(const std::string& prompt, int64_t count, double temperature,
                          Generator& gen, const std::function<bool(char)>& on_byte) {
  MIXPREC_CHECK(!prompt.empty(), "gpt-tiny generate: the prompt must hold at least one byte");
  MIXPREC_CHECK(count >= 0 && std::isfinite(temperature) && temperature >= 0, "gpt-tiny generate: expected "
                "count >= 0 and a finite temperature >= 0, got ", count, " and ", temperature);
  NoGradGuard no_grad;
  struct EvalMode {  // restored however sampling ends (on_byte may throw)
    Cell& cell;
    const bool was_training = cell.training();
    explicit EvalMode(Cell& c) : cell(c) { cell.set_train(false); }
    ~EvalMode() { cell.set_train(was_training); }
  } eval_mode(*this);
  auto as_tensor = [](const std::string& s) {
    std::vector<int32_t> v(s.begin(), s.end());
    for (int32_t& b : v) b &= 0xff;
    return Tensor::from_vector(v, {1, static_cast<int64_t>(v.size())});
  };
  // The last bytes of prompt + sample: the model never looks further back than kContext.
  std::string tail = prompt.substr(prompt.size() - std::min<size_t>(prompt.size(), kContext));
  std::vector<KVCache> caches(blocks.size());
  // The prompt's last kContext bytes fill the cache; each new byte extends it by one position.
  Tensor logits = forward_cached(as_tensor(tail), caches);
  int64_t made = 0;
  while (made < count) {
    const char b = static_cast<char>(sample_byte(logits, temperature, gen));
    ++made;
    tail.push_back(b);
    if (tail.size() > 2 * kContext) tail.erase(0, tail.size() - kContext);
    if (!on_byte(b) || made == count) break;
    if (caches[0].length() == kContext) {  // full: restart from the last half-context
      caches.assign(blocks.size(), KVCache{});
      logits = forward_cached(as_tensor(tail.substr(tail.size() - kContext / 2)), caches);
    } else {
      logits = forward_cached(as_tensor(tail.substr(tail.size() - 1)), caches);
    }
  }
  return made;
}

}  // namespace mixprec::nn
