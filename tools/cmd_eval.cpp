// `mixprec eval --model NAME --checkpoint FILE [--data DIR]`: loads fp32 weights into a zoo
// network (strictly: every name and shape must match) and reports test accuracy and loss, at
// any AMP level (the weights are cast at use). An image model reads the MNIST-format test split;
// a language model the validation part of a text file or folder (as train does), and reports the
// loss per byte. The network, its default data and its optimizer come from its registry row.
#include <cstdio>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/amp/amp.h"
#include "mixprec/data/text.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/train/model.h"
#include "train_common.h"
#include "zoo_recipe.h"

namespace mixprec::cli {

namespace {
struct EvalArgs {
  std::string model = "simplenet", checkpoint, amp_level = "O0", dtype = "bf16";
  std::string data = default_data(nn::zoo_model(model).training.data);  // --model's, when not given
  int64_t batch_size = 256;
  int threads = 0;
  std::string device = "cpu";
};
}  // namespace

Command register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on the test split");
  cmd->add_option("--model", a->model, "Network the checkpoint belongs to")
      ->capture_default_str()
      ->check(CLI::IsMember(nn::model_names()));
  cmd->add_option("--checkpoint", a->checkpoint,
                  "The .safetensors file (from mixprec train --checkpoint)")
      ->required();
  std::string others;
  for (const nn::ZooModel& m : nn::zoo())
    if (m.training.data != nn::zoo_model(a->model).training.data)
      others +=
          (others.empty() ? "" : ", ") + std::string(m.name) + " " + default_data(m.training.data);
  cmd->add_option(
         "--data", a->data,
         "Directory with MNIST-format IDX files; for " + language_models() +
             " a text file or folder, whose last 10% is read (default: the model's training data" +
             (others.empty() ? "" : "; " + others) + ")")
      ->capture_default_str();
  cmd->add_option("--amp-level", a->amp_level, "O0|O1|O2|O3|auto")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "bf16|f16")->capture_default_str();
  cmd->add_option("--batch-size", a->batch_size, "Evaluation batch size")
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--threads", a->threads, "OpenMP threads (0: default)")
      ->capture_default_str()
      ->check(integer_range(0, kMaxThreads, std::nullopt, "0: default"));
  cmd->add_option("--device", a->device, kDeviceHelp)->capture_default_str();
  return {
      cmd, [a, cmd] {
        as_usage_error([&] {
          MIXPREC_CHECK(a->batch_size >= 1, "--batch-size: expected at least 1, got ",
                        a->batch_size);
          MIXPREC_CHECK(a->threads >= 0, "--threads: expected at least 0, got ", a->threads);
          with_prefix("--amp-level: ", [&] { (void)parse_amp_level(a->amp_level); });
          (void)parse_low_dtype(a->dtype);
        });
        use_device(a->device);
        set_threads(a->threads);
        const nn::ZooModel& zoo = nn::zoo_model(a->model);
        if (cmd->count("--data") == 0) a->data = default_data(zoo.training.data);
        auto net = zoo.make();
        const auto params = io::load_checkpoint(a->checkpoint);
        check_checkpoint_model(a->checkpoint, a->model, "--model");
        const auto report = with_prefix("--checkpoint " + a->checkpoint + ": ", [&] {
          return io::load_param_into_net(*net, params, {.strict = true});
        });
        amp::auto_mixed_precision(*net, a->amp_level, parse_low_dtype(a->dtype));
        nn::SoftmaxCrossEntropyWithLogits loss_fn(kTrainingLoss);
        // An eval-only Model (no optimizer, no train step; the network's AMP configuration set
        // above is kept at the Model's default level O0).
        const int64_t context = zoo.language_model ? zoo.input.sample[0] : 0;
        if (zoo.language_model) {  // the validation windows of the text, as train evaluates them
          train::Model model(*net, loss_fn, {.metrics = {{"Loss", nn::Loss()}}});
          const dataset::TextOptions opts{.usage = "validation", .context = context};
          const auto test =
              dataset::Dataset(dataset::TextDataset(a->data, opts)).batch(a->batch_size);
          const auto m = model.eval(test);
          std::printf(
              "%s (%lld tensors) on %s: validation loss %.4f per byte (%lld windows of %lld bytes, "
              "amp_level %s)\n",
              a->checkpoint.c_str(), static_cast<long long>(report.loaded), a->data.c_str(),
              m.at("Loss"), static_cast<long long>(test.num_samples()),
              static_cast<long long>(context + 1), a->amp_level.c_str());
          return 0;
        }
        train::Model model(*net, loss_fn,
                           {.metrics = {{"Accuracy", nn::Accuracy()}, {"Loss", nn::Loss()}}});
        const auto test = standard_pipeline(dataset::MnistDataset(a->data, {.usage = "test"}))
                              .batch(a->batch_size);
        const auto m = model.eval(test);
        std::printf(
            "%s (%lld tensors) on %s: test accuracy %.4f, test loss %.4f (%lld samples, amp_level "
            "%s)\n",
            a->checkpoint.c_str(), static_cast<long long>(report.loaded), a->data.c_str(),
            m.at("Accuracy"), m.at("Loss"), static_cast<long long>(test.num_samples()),
            a->amp_level.c_str());
        return 0;
      }};
}

}  // namespace mixprec::cli
