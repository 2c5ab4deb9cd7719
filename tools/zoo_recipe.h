// The zoo registry (nn::zoo()) as the CLI's settings, and the train step they make. `mixprec
// train` builds its optimizer and Model through here and so does `mixprec bench`, so that `bench
// --model X` times the very step `train --model X` runs (optimizer, schedule, clipping, AMP
// level, loss scaling); eval and generate build their network from the same row. recipe_json
// says what a built step is made of: both commands' --report carry it, and
// tests/cli/recipe_test.sh compares them model by model.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/train/model.h"
#include "train_settings.h"

namespace mixprec::cli {

// The directory or file a model's default data lives in.
std::string default_data(nn::ZooData data);

// Sets every training setting of `a.model` that the command line did not give (`given(flag)`)
// to its registry row's value: optimizer, --lr, --momentum, --weight-decay, --lr-schedule, the
// warm-up share (unless --warmup-steps), --max-grad-norm, --batch-size, --amp-level, --data.
void apply_model_defaults(TrainArgs& a, const std::function<bool(const char*)>& given);
// The settings train runs `model` with when nothing is given.
TrainArgs model_defaults(const std::string& model);
// For --help: "vit-tiny 0.001, gpt-tiny 0.0003", the models whose `field` differs from the
// default model's, each with its value ("" when none does).
std::string models_differing(const std::function<std::string(const nn::ZooTraining&)>& field);

// "gpt-tiny": the language models, comma-separated (for --help: they read text).
std::string language_models();

// The loss every zoo model trains with: sparse softmax cross-entropy, mean over the batch (a
// language model's over every position).
inline constexpr nn::SoftmaxCrossEntropyOptions kTrainingLoss{.sparse = true,
                                                              .reduction = nn::Reduction::mean};

// The optimizer train makes for `a` over `updates` optimizer updates: the schedule spans them and
// a warm-up share (TrainArgs::warmup_fraction) becomes that share of them, rounded.
std::unique_ptr<optim::Optimizer> make_training_optimizer(const TrainArgs& a,
                                                          std::vector<Tensor> params,
                                                          int64_t updates);
// The Model options train builds its step with: the AMP level (O0 under a custom list, which
// configures the network itself), --dtype, --keep-batchnorm-fp32, --loss-scale, and the step's
// clipping, accumulation, check_numerics and gradient statistics; with `metrics`.
train::ModelOptions training_model_options(const TrainArgs& a,
                                           std::map<std::string, train::MetricHandle> metrics = {});

// What the built step `step` is made of (its optimizer's and manager's own names, its options;
// the settings that made them) and the batch it is fed (one sample's shape and dtype, and a
// label's): the "recipe" of train's and bench's reports.
nlohmann::json recipe_json(const TrainArgs& a, amp::TrainOneStepCell& step, const Tensor& x,
                           const Tensor& y);
// One line of it: "AdamW lr 0.0003 (cosine, warm-up 5% of the updates), weight decay 0.1,
// clipping at global norm 1, loss scale dynamic(...)".
std::string describe_recipe(const nlohmann::json& recipe);

}  // namespace mixprec::cli
