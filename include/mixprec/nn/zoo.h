// The model zoo (DESIGN.md, "The main job"): simplenet (the seed's network), lenet, convnet-bn,
// mlp, resnet-small and vit-tiny for 1x28x28 inputs and 10 classes; gpt-tiny, a byte-level
// language model; and the registry (zoo()), one row per model with everything the CLI knows of
// it. bench/compare_torch.py builds the same networks in PyTorch layer for layer. Dense+ReLU pairs
// use Dense's fused activation (MindSpore's Dense(..., activation='relu')), which computes exactly
// Dense then ReLU.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/dtype.h"
#include "mixprec/nn/layers.h"
#include "mixprec/nn/transformer.h"
#include "mixprec/rng.h"
#include "mixprec/shape.h"

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

// vit-tiny (issue 15): Conv2d(1, 64, 4, stride 4) patches (49), a class token, learned
// positions 50 x 64, 4 pre-norm blocks of 4 heads of 16 with MLP 64-256-64 (GELU tanh), a final
// LayerNorm and Dense(64, 10) on the class token. Input [N, 1, 28, 28].
class VitTiny : public Cell {
 public:
  VitTiny();
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "VitTiny"; }
  Conv2d patch;
  Tensor cls_token;  // [1, 1, 64]
  PositionEmbedding pos;
  SequentialCell blocks;  // TransformerEncoderLayer "blocks.0" ... "blocks.3"
  LayerNorm norm;
  Dense head;
};

// gpt-tiny (issue 15): byte tokens (256), context 128, token and position embeddings of width
// 128, 4 pre-norm blocks of 4 causal heads of 32 with MLP 128-512-128, a final LayerNorm and
// Dense(128, 256) to the logits (no weight tying). Input [B, L <= 128] tokens (u8, i32 or i64);
// output [B, L, 256] logits.
class GptTiny : public Cell {
 public:
  static constexpr int64_t kVocab = 256, kContext = 128, kWidth = 128;
  GptTiny();
  Tensor construct(const Tensor& tokens) override;
  // Incremental decoding: the logits of `tokens` [B, L], the positions that follow the
  // caches' (one KVCache per block; empty ones start a sequence), whose keys and values join them.
  Tensor forward_cached(const Tensor& tokens, std::vector<KVCache>& caches);
  // Samples `count` bytes after `prompt` (at least one byte) with a KV cache: softmax(logits /
  // temperature) drawn from `gen`; temperature 0 takes the most likely byte. When the context is
  // full, the cache restarts from the last half-context of bytes. Runs in eval mode, no grad.
  // Returns the prompt followed by the sample.
  std::string generate(const std::string& prompt, int64_t count, double temperature,
                       Generator& gen);
  // The same draws, each byte handed to `on_byte` as it is made (the text is not kept): sampling
  // stops early when it returns false. Returns the number of bytes made.
  int64_t generate(const std::string& prompt, int64_t count, double temperature, Generator& gen,
                   const std::function<bool(char)>& on_byte);
  std::string type_name() const override { return "GptTiny"; }
  Embedding tok;
  PositionEmbedding pos;
  SequentialCell blocks;  // TransformerEncoderLayer "blocks.0" ... "blocks.3"
  LayerNorm norm;
  Dense head;
};

// ---------------------------------------------------------------- the registry
// One row per zoo model: every fact about it that a command needs, here and nowhere else.
// `mixprec train` takes its training defaults, `mixprec bench` times the step they make,
// `mixprec eval` and `generate` build the network from it (tools/zoo_recipe.h).

// What a model reads: one sample's shape and dtype (a float image after the standard
// normalisation, or byte tokens) and its number of classes (a language model: its vocabulary,
// one label per position, the next token).
struct ZooInput {
  Shape sample;
  DType dtype;
  int64_t classes;
};

// The data a model trains on unless told otherwise (the CLI maps it to a path).
enum class ZooData { fashion_mnist, fortunes };

// How `mixprec train` trains a model unless told otherwise. Plain values (nn sits above optim
// and amp): the optimizer by its CLI name, the schedule by name, the AMP level by name.
struct ZooTraining {
  const char* optimizer;  // momentum | sgd | adam | adamw
  double lr;
  double momentum;  // the momentum optimizer's
  double weight_decay;
  const char* lr_schedule;  // cosine | constant | step
  double warmup_fraction;   // > 0: linear warm-up over this share of the updates
  double max_grad_norm;     // > 0: clip the unscaled gradients by their global norm
  int64_t batch_size;
  const char* amp_level;  // O0-O3; its default loss scaling and BatchNorm rule apply
  ZooData data;
};

struct ZooModel {
  const char* name;
  std::shared_ptr<Cell> (*make)();
  ZooInput input;
  bool language_model;       // a [B, L] token sequence in, [B, L, vocab] logits out
  int64_t bench_batch_size;  // the batch `mixprec bench` times (its tables are measured at it)
  ZooTraining training;
};

// Every zoo model, in the order the CLI lists them.
const std::vector<ZooModel>& zoo();
// The row of `name`; throws listing the valid names for an unknown one.
const ZooModel& zoo_model(std::string_view name);

// Views of the registry (the Python module binds these).
std::vector<std::string> model_names();
// True for the models whose input is a [B, L] token sequence rather than a 1x28x28 image.
bool is_language_model(std::string_view name);
// Throws listing the valid names for an unknown one.
std::shared_ptr<Cell> make_model(std::string_view name);
// The batch size the benchmarks use for `name` (ZooModel::bench_batch_size).
int64_t default_batch_size(std::string_view name);

}  // namespace mixprec::nn
