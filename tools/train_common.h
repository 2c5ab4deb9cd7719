// Shared pieces of the train / eval / bench / generate commands: parsing of --amp-level, --dtype,
// --loss-scale, --optimizer and --seed values into library objects, with errors that list the
// valid choices, and the standard Fashion-MNIST preprocessing.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mixprec/amp/amp.h"
#include "mixprec/data/dataset.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::cli {

// "none" | "fixed:S" | "fixed-drop:S" | "dynamic" | "dynamic:init,factor,window" | "dynamic-torch".
// "default" gives the level's default (nullopt).
std::optional<std::shared_ptr<amp::LossScaleManager>> parse_loss_scale(const std::string& spec);

DType parse_low_dtype(const std::string& s);  // f16 | bf16

// Name and hyper-parameters: a zoo model's come from its registry row (zoo_recipe.h).
struct OptimizerSpec {
  std::string name;  // momentum | sgd | adam | adamw
  double lr = 0.0;
  double momentum = 0.0;
  double weight_decay = 0.0;
  std::string schedule;  // constant | cosine | step (cosine from lr to 0 over the run)
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // for cosine
};
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec,
                                                 std::vector<Tensor> params);

// Fashion-MNIST mean/std normalisation (0.2860, 0.3530) after rescaling to [0, 1].
dataset::Dataset standard_pipeline(dataset::Dataset ds);

// --seed of train and generate: a decimal integer from 0 to 2^64-1, refused otherwise (CLI11
// alone would clamp 2^64 to 2^64-1).
CLI::Validator seed_validator();

// Every other integer option of every command, checked the same way, as text before CLI11
// converts it (which would clamp 2^64, and take " 5", "+5" or "0x10"): a decimal integer in
// [min, max], or `also` (e.g. -1: no limit), refused otherwise naming the range, e.g. "expected
// at least 1 (or -1: no limit), got 0" or "expected an integer from 1 to 1048576, got 1e3".
inline constexpr int64_t kNoMax = INT64_MAX;
inline constexpr int64_t kMaxThreads = 65536;  // --threads
inline constexpr int64_t kMaxEpochs =
    1000000;  // --epochs: epochs x batches stays far from overflow
CLI::Validator integer_range(int64_t min, int64_t max = kNoMax,
                             std::optional<int64_t> also = std::nullopt,
                             const std::string& note = "");
// The range check of integer_range for a value outside the command line (e.g. the WINDOW of
// --loss-scale dynamic:INIT,FACTOR,WINDOW): the value, or an error naming `what` and the range.
int64_t parse_integer_in(const std::string& text, const std::string& what, int64_t min,
                         int64_t max);

// Refuses a checkpoint that `mixprec train` saved for another model than `model` (its metadata
// cli.model), naming both: a strict load would list the missing names instead.
void check_checkpoint_model(const std::string& checkpoint, const std::string& model,
                            const std::string& flag);

// --threads: sets OpenMP's thread count (0 keeps the default); returns the count in use.
int set_threads(int threads);
// Sets the execution mode (--mode: pynative | graph) in the context, keeping the rest.
void set_mode(const std::string& mode);

// --device for train, eval and bench: "cpu" (the default), "cuda" or "cuda:N".
inline constexpr const char* kDeviceHelp =
    "cpu | cuda[:N] (CUDA: experimental; needs a -DMIXPREC_CUDA=ON build and a GPU)";
// Parses --device and makes it the context's device (train::Model then trains and evaluates
// there). A CUDA device throws a clear error when the build has no CUDA backend or no GPU is
// visible (docs/cuda.md).
void use_device(const std::string& device);

}  // namespace mixprec::cli
