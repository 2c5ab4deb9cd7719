// Shared pieces of the train / eval / bench / generate commands: parsing of --amp-level, --dtype,
// --loss-scale, --optimizer and --seed values into library objects, with errors that list the
// valid choices, and the standard Fashion-MNIST preprocessing.
#pragma once

#include <CLI/CLI.hpp>
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

struct OptimizerSpec {
  std::string name = "momentum";
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::string schedule = "cosine";    // constant | cosine | step (cosine from lr to 0 over the run)
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;            // for cosine
};
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<Tensor> params);

// Fashion-MNIST mean/std normalisation (0.2860, 0.3530) after rescaling to [0, 1].
dataset::Dataset standard_pipeline(dataset::Dataset ds);

// --seed of train and generate: a decimal integer from 0 to 2^64-1, refused otherwise (CLI11
// alone would clamp 2^64 to 2^64-1).
CLI::Validator seed_validator();

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
