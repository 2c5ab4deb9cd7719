// `mixprec train`: trains a zoo model on an MNIST-format dataset (Fashion-MNIST by default) with
// any AMP level, low dtype and loss-scale choice; shows progress; evaluates on the test split;
// writes a JSON report and an fp32 checkpoint on request; --trace writes a per-step CSV.
// `mixprec eval` evaluates a checkpoint. Defaults train the seed's SimpleNet with O2/bf16.
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mixprec/allocator.h"
#include "mixprec/amp/amp.h"
#include "mixprec/cpu_features.h"
#include "mixprec/data/dataset.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/rng.h"
#include "mixprec/train/checkpoint.h"
#include "mixprec/train/guard.h"
#include "mixprec/train/model.h"
#include "mixprec/version.h"
#include "train_common.h"

namespace mixprec::cli {
namespace {

struct TrainArgs {
  std::string model = "simplenet";
  std::string data = dataset::kFashionMnistDir;
  int64_t epochs = 2;
  int64_t max_steps = -1;
  int64_t batch_size = 64;
  int64_t train_samples = -1;
  OptimizerSpec opt;
  uint64_t seed = 1;
  int threads = 0;
  std::string amp_level = "O2";
  std::string dtype = "bf16";
  std::string keep_bn = "default";
  std::string loss_scale = "default";
  std::string report, checkpoint, trace, resume;
  int64_t save_every = 0;
  bool show_precision = false;
  bool no_eval = false;
  bool eval_every_epoch = true;
  bool check_numerics = false;
  std::string on_overflow = "warn";
  int64_t grad_stats_every = 0;
  double max_skip_rate = 0.05;
  int64_t print_every = 100;
};

// Per-step CSV: step, epoch, loss, scale, skipped, overflow, lr.
class TraceWriter : public train::Callback {
 public:
  explicit TraceWriter(const std::string& path) : out_(path) {
    MIXPREC_CHECK(out_.good(), "--trace: cannot open '", path, "' for writing");
    out_ << "step,epoch,loss,scale,skipped,overflow,lr,casts,cast_bytes,low_flops_fraction,offending_op,phase,cell\n";
  }
  void on_step_end(train::RunContext& c) override {
    const amp::StepInfo& s = c.step;
    out_ << c.global_step << ',' << c.epoch + 1 << ',' << s.loss << ',' << s.loss_scale << ',' << (s.skipped ? 1 : 0)
         << ',' << (s.overflow ? 1 : 0) << ',' << s.lr << ',' << s.casts << ',' << s.cast_bytes << ','
         << s.low_flops_fraction << ',' << (s.event ? s.event->op_name : "") << ','
         << (s.event ? s.event->phase : "") << ',' << (s.event ? csv_safe(s.event->cell) : "") << '\n';
  }
  static std::string csv_safe(std::string v) {
    for (char& ch : v)
      if (ch == ',' || ch == '\n' || ch == '"') ch = ' ';
    return v;
  }

 private:
  std::ofstream out_;
};

// Mean loss over each epoch's steps, per-epoch test metrics and gradient statistics, for the
// report.
class History : public train::Callback {
 public:
  explicit History(const dataset::Dataset* test) : test_(test) {}
  void on_step_end(train::RunContext& c) override {
    if (c.step.loss_finite) {
      sum_ += c.step.loss;
      ++n_;
    }
    skipped_ += c.step.skipped;
    steps_ = c.global_step;
    for (const amp::GradStats& g : c.step.grad_stats)
      if (grad_stats.size() < 20000)
        grad_stats.push_back({{"step", c.global_step}, {"param", g.param}, {"max_abs", g.max_abs},
                              {"underflow_fraction", g.underflow_fraction}, {"zero_fraction", g.zero_fraction},
                              {"recommended_scale", g.recommended_scale}});
  }
  void on_epoch_end(train::RunContext& c) override {
    const double loss = n_ ? sum_ / static_cast<double>(n_) : NAN;
    epoch_losses.push_back(loss);
    nlohmann::json e{{"epoch", c.epoch + 1}, {"train_loss", loss}};
    if (test_ && c.model) {
      const auto m = c.model->eval(*test_);
      e["test_accuracy"] = m.at("Accuracy");
      e["test_loss"] = m.at("Loss");
      std::printf("epoch %lld: test accuracy %.4f, test loss %.4f\n", static_cast<long long>(c.epoch + 1),
                  m.at("Accuracy"), m.at("Loss"));
    }
    epoch_metrics.push_back(e);
    sum_ = 0;
    n_ = 0;
  }
  std::vector<double> epoch_losses;
  nlohmann::json epoch_metrics = nlohmann::json::array();
  nlohmann::json grad_stats = nlohmann::json::array();
  int64_t skipped_ = 0, steps_ = 0;

 private:
  const dataset::Dataset* test_;

 private:
  double sum_ = 0;
  int64_t n_ = 0;
};

// Creates the parent directory of an output file, so `--report runs/x.json` just works.
void ensure_parent(const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  MIXPREC_CHECK(!ec, "cannot create directory '", parent.string(), "' for '", path, "': ", ec.message());
}

int run_train(const TrainArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  ensure_parent(a.report);
  ensure_parent(a.checkpoint);
  ensure_parent(a.trace);
  const int threads = set_threads(a.threads);
  manual_seed(a.seed);
  const AmpLevel level = parse_amp_level(a.amp_level);
  const DType low = parse_low_dtype(a.dtype);
  std::optional<bool> keep_bn;
  MIXPREC_CHECK(a.keep_bn == "default" || a.keep_bn == "true" || a.keep_bn == "false",
                "--keep-batchnorm-fp32: expected true or false, got '", a.keep_bn, "'");
  if (a.keep_bn != "default") keep_bn = a.keep_bn == "true";
  const auto manager = parse_loss_scale(a.loss_scale);
  MIXPREC_CHECK(a.epochs >= 1, "--epochs must be >= 1, got ", a.epochs);
  MIXPREC_CHECK(a.batch_size >= 1, "--batch-size must be >= 1, got ", a.batch_size);

  std::shared_ptr<nn::Cell> net = nn::make_model(a.model);
  dataset::MnistOptions train_opts{.usage = "train"};
  if (a.train_samples > 0) train_opts.num_samples = a.train_samples;
  const dataset::Dataset train_ds =
      standard_pipeline(dataset::MnistDataset(a.data, train_opts)).shuffle(a.seed).batch(a.batch_size, true);
  const dataset::Dataset test_ds = standard_pipeline(dataset::MnistDataset(a.data, {.usage = "test"})).batch(256);

  OptimizerSpec spec = a.opt;
  const int64_t steps_per_epoch = train_ds.num_batches();
  // The schedule spans the planned run (epochs); --max-steps only stops early, so a run that
  // stops and resumes follows the same learning rates as one that never stopped.
  spec.total_steps = a.epochs * steps_per_epoch;
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(spec, net->trainable_params());
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});

  train::ModelOptions mo{.metrics = {{"Accuracy", train::Accuracy()}, {"Loss", train::Loss()}},
                         .amp_level = a.amp_level, .keep_batchnorm_fp32 = keep_bn, .dtype = low,
                         .step = {.check_numerics = a.check_numerics, .grad_stats_every = a.grad_stats_every}};
  const train::OnOverflow on_overflow = train::parse_on_overflow(a.on_overflow);
  if (manager) mo.loss_scale_manager = *manager;
  train::Model model(*net, loss_fn, *optimizer, mo);
  amp::TrainOneStepCell& step = model.train_network();

  std::printf("mixprec %s: training %s on %s (%lld samples, %lld steps/epoch, batch %lld)\n", MIXPREC_VERSION,
              a.model.c_str(), a.data.c_str(), static_cast<long long>(train_ds.num_samples()),
              static_cast<long long>(steps_per_epoch), static_cast<long long>(a.batch_size));
  std::printf("amp_level %s, dtype %s, loss scale %s, optimizer %s lr %g, %d threads, cpu: %s\n",
              std::string(amp_level_name(level)).c_str(), a.dtype.c_str(),
              step.loss_scale_manager() ? step.loss_scale_manager()->description().c_str() : "none",
              optimizer->name().c_str(), a.opt.lr, threads, describe(cpu_features()).c_str());
  if (level == AmpLevel::O0) std::printf("note: O0 trains in fp32; --dtype is ignored\n");
  if (low == DType::f16 && level != AmpLevel::O0)
    std::printf("note: f16 is emulated exactly on this CPU (fp32 compute, outputs rounded to f16): "
                "numerically faithful, not faster; bf16 is the fast type here\n");
  std::vector<amp::PrecisionRow> precision_rows;
  if (a.show_precision || !a.report.empty()) {
    const dataset::Batch sample = train_ds.get_batch(0, 0);
    precision_rows = amp::precision_table(*net, sample.image.slice(0, 0, std::min<int64_t>(8, sample.size())));
    if (a.show_precision) std::printf("%s", amp::format_precision_table(precision_rows).c_str());
  }

  // The settings a resumed run must share with the run it continues.
  const io::Metadata run_keys{{"cli.model", a.model},           {"cli.seed", std::to_string(a.seed)},
                              {"cli.batch_size", std::to_string(a.batch_size)},
                              {"cli.train_samples", std::to_string(a.train_samples)},
                              {"cli.dtype", a.dtype},           {"cli.loss_scale", a.loss_scale},
                              {"cli.data", a.data},             {"cli.epochs", std::to_string(a.epochs)},
                              {"cli.lr", std::to_string(a.opt.lr)}, {"cli.lr_schedule", a.opt.schedule}};
  train::TrainOptions topts{.max_steps = a.max_steps};
  if (!a.resume.empty()) {
    const train::ResumeInfo info = train::load_training_state(a.resume, model);
    for (const auto& [k, v] : run_keys) {
      auto it = info.metadata.find(k);
      MIXPREC_CHECK(it != info.metadata.end() && it->second == v, "--resume ", a.resume, ": the run was saved with ",
                    k.substr(4), " = '", it == info.metadata.end() ? std::string("?") : it->second,
                    "', this run has '", v, "'", Hint{"resume with the same settings as the original run"});
    }
    topts.initial_epoch = info.epoch;
    topts.start_batch = info.batch;
    std::printf("resuming from %s at epoch %lld, batch %lld (step %lld)\n", a.resume.c_str(),
                static_cast<long long>(info.epoch + 1), static_cast<long long>(info.batch),
                static_cast<long long>(info.global_step));
  }

  auto history = std::make_shared<History>(a.no_eval || !a.eval_every_epoch ? nullptr : &test_ds);
  auto guard = std::make_shared<train::OverflowGuard>(
      train::GuardOptions{.action = on_overflow, .max_skip_rate = a.max_skip_rate});
  std::vector<train::CallbackRef> callbacks{train::ProgressBar(a.print_every), history, guard};
  if (!a.trace.empty()) callbacks.emplace_back(TraceWriter(a.trace));
  if (!a.checkpoint.empty() && a.save_every > 0)
    callbacks.emplace_back(train::CheckpointSaver(a.checkpoint, a.save_every, false, run_keys));
  reset_peak_memory();
  const auto train_start = std::chrono::steady_clock::now();
  model.train(a.epochs, train_ds, callbacks, topts);
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
  const int64_t peak = memory_stats().peak_bytes;

  std::map<std::string, double> metrics;
  if (!a.no_eval) {
    const nlohmann::json& last = history->epoch_metrics.empty() ? nlohmann::json() : history->epoch_metrics.back();
    if (last.contains("test_accuracy") && guard->stop_reason().empty() && model.next_batch() == 0) {
      metrics["Accuracy"] = last["test_accuracy"].get<double>();  // evaluated at the end of the last epoch
      metrics["Loss"] = last["test_loss"].get<double>();
    } else {
      metrics = model.eval(test_ds);
    }
    std::printf("test accuracy %.4f, test loss %.4f\n", metrics["Accuracy"], metrics["Loss"]);
  }
  if (!a.checkpoint.empty()) {
    train::save_training_state(a.checkpoint, model, run_keys);
    std::printf("saved checkpoint %s (fp32 weights + training state for --resume)\n", a.checkpoint.c_str());
  }
  if (!guard->stop_reason().empty()) std::fprintf(stderr, "mixprec: %s\n", guard->stop_reason().c_str());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double samples_per_second =
      static_cast<double>(history->steps_ * a.batch_size) / std::max(train_seconds, 1e-9);
  std::printf("%lld steps (%lld skipped) in %.1f s, %.0f samples/s, peak memory %.1f MB\n",
              static_cast<long long>(history->steps_), static_cast<long long>(step.skipped_steps()), train_seconds,
              samples_per_second, static_cast<double>(peak) / 1e6);
  if (!a.report.empty()) {
    nlohmann::json j;
    j["model"] = a.model;
    j["amp_level"] = std::string(amp_level_name(level));
    j["dtype"] = level == AmpLevel::O0 ? "f32" : a.dtype;
    j["epochs"] = a.epochs;
    j["steps"] = history->steps_;
    j["skipped_steps"] = step.skipped_steps();
    j["loss_scale_final"] = step.loss_scale_manager() ? step.loss_scale_manager()->get_loss_scale() : 1.0;
    j["loss_scale_manager"] = step.loss_scale_manager() ? step.loss_scale_manager()->description() : "none";
    j["train_loss"] = history->epoch_losses.empty() ? NAN : history->epoch_losses.back();
    j["train_loss_per_epoch"] = history->epoch_losses;
    j["test_accuracy"] = a.no_eval ? nlohmann::json(nullptr) : nlohmann::json(metrics["Accuracy"]);
    j["test_loss"] = a.no_eval ? nlohmann::json(nullptr) : nlohmann::json(metrics["Loss"]);
    j["samples_per_second"] = samples_per_second;
    j["peak_memory_bytes"] = peak;
    j["wall_seconds"] = wall;
    j["train_seconds"] = train_seconds;
    j["batch_size"] = a.batch_size;
    j["optimizer"] = optimizer->name();
    j["learning_rate"] = a.opt.lr;
    j["seed"] = a.seed;
    j["threads"] = threads;
    j["keep_batchnorm_fp32"] = a.keep_bn;
    j["data"] = a.data;
    j["mixprec_version"] = MIXPREC_VERSION;
    j["cpu_features"] = describe(cpu_features());
    j["epoch_metrics"] = history->epoch_metrics;
    j["grad_stats"] = history->grad_stats;
    nlohmann::json events = nlohmann::json::array();
    for (const train::OverflowRecord& r : guard->events())
      events.push_back({{"step", r.step}, {"phase", r.event.phase}, {"cell", r.event.cell.empty() ? "(network)" : r.event.cell},
                        {"op", r.event.op_name}, {"dtype", std::string(dtype_name(r.event.dtype))},
                        {"input_max_abs", r.event.input_max_abs}, {"detail", r.event.detail},
                        {"nonfinite_count", r.event.nonfinite_count}, {"loss_finite", r.loss_finite},
                        {"loss_scale", r.loss_scale}});
    j["overflow_events"] = events;
    j["overflow_event_count"] = guard->event_count();
    nlohmann::json promos = nlohmann::json::array();
    for (const train::Promotion& p : guard->promotions())
      promos.push_back({{"step", p.step}, {"cell", p.cell}, {"from", p.from}, {"to", p.to}});
    j["promotions"] = promos;
    j["warnings"] = guard->warnings();
    j["on_overflow"] = a.on_overflow;
    j["check_numerics"] = a.check_numerics;
    if (!guard->stop_reason().empty()) j["stopped"] = guard->stop_reason();
    nlohmann::json table = nlohmann::json::array();
    for (const amp::PrecisionRow& r : precision_rows)
      table.push_back({{"cell", r.cell}, {"type", r.type}, {"ops", r.ops}, {"compute", r.compute},
                       {"weights", r.weights}, {"output", r.output}});
    j["precision_table"] = table;
    std::ofstream f(a.report);
    MIXPREC_CHECK(f.good(), "--report: cannot open '", a.report, "' for writing");
    f << j.dump(2) << "\n";
    std::printf("wrote report %s\n", a.report.c_str());
  }
  return guard->stop_reason().empty() ? 0 : 3;  // --on-overflow stop ended the run early
}

}  // namespace

Command register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a zoo model on Fashion-MNIST (or any MNIST-format data) with AMP");
  std::string models;
  for (const auto& m : nn::model_names()) models += (models.empty() ? "" : "|") + m;
  cmd->add_option("--model", a->model, "Network: " + models)->capture_default_str()
      ->check(CLI::IsMember(nn::model_names()));
  cmd->add_option("--data", a->data, "Directory with MNIST-format IDX files (raw or .gz)")->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "Epochs to train")->capture_default_str();
  cmd->add_option("--max-steps", a->max_steps, "Stop after this many steps in total (-1: no limit)")->capture_default_str();
  cmd->add_option("--batch-size", a->batch_size, "Batch size (the last partial batch is dropped)")->capture_default_str();
  cmd->add_option("--train-samples", a->train_samples, "Use only the first N training samples (-1: all)")->capture_default_str();
  cmd->add_option("--optimizer", a->opt.name, "momentum|sgd|adam|adamw")->capture_default_str()
      ->check(CLI::IsMember({"momentum", "sgd", "adam", "adamw"}));
  cmd->add_option("--lr", a->opt.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--momentum", a->opt.momentum, "Momentum (momentum optimizer)")->capture_default_str();
  cmd->add_option("--weight-decay", a->opt.weight_decay, "Weight decay")->capture_default_str();
  cmd->add_option("--lr-schedule", a->opt.schedule,
                  "cosine (from --lr to 0 over the run) | constant (the seed's fixed rate) | step (x0.1 every third)")
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "cosine", "step"}));
  cmd->add_option("--warmup-steps", a->opt.warmup_steps, "Linear learning-rate warm-up steps")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for weights and data order")->capture_default_str();
  cmd->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)")->capture_default_str();
  cmd->add_option("--amp-level", a->amp_level,
                  "O0 (fp32) | O1 (white list low) | O2 (all but black list low, fp32 BatchNorm) | O3 (all low) | auto")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "Low-precision dtype: bf16 (fast on this CPU) | f16 (exact emulation, not faster)")
      ->capture_default_str();
  cmd->add_option("--keep-batchnorm-fp32", a->keep_bn, "true|false (default: true at O2, false otherwise)")
      ->capture_default_str();
  cmd->add_option("--loss-scale", a->loss_scale,
                  "default|none|fixed:S|fixed-drop:S|dynamic[:INIT,FACTOR,WINDOW]|dynamic-torch "
                  "(default: dynamic 2^24,2,2000 at O2, none otherwise)")
      ->capture_default_str();
  cmd->add_option("--report", a->report, "Write a JSON summary here");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Save here at the end (safetensors: fp32 weights, readable by eval/inspect, plus the training state)");
  cmd->add_option("--save-every", a->save_every, "Also save the checkpoint every N steps (needs --checkpoint)")
      ->capture_default_str();
  cmd->add_option("--resume", a->resume, "Continue a run from a checkpoint it saved (same settings; bit-identical)");
  cmd->add_option("--trace", a->trace, "Write a per-step CSV (step, epoch, loss, scale, skipped, overflow, lr)");
  cmd->add_flag("--show-precision", a->show_precision, "Print what dtype each cell computes in, before training");
  cmd->add_flag("--no-eval", a->no_eval, "Skip the test-set evaluation");
  cmd->add_flag("!--no-eval-every-epoch", a->eval_every_epoch, "Evaluate only at the end, not after every epoch");
  cmd->add_flag("--check-numerics", a->check_numerics,
                "Check every op of every step for inf/NaN (slower); without it only overflowing steps are replayed");
  cmd->add_option("--on-overflow", a->on_overflow,
                  "warn|stop|promote: on a forward overflow or persistent skipping, warn, stop training (exit status 3), "
                  "or switch the offending cell to fp32 and continue")
      ->capture_default_str()->check(CLI::IsMember({"warn", "stop", "promote"}));
  cmd->add_option("--grad-stats", a->grad_stats_every, "Gradient statistics every N steps (0: off)")->capture_default_str();
  cmd->add_option("--max-skip-rate", a->max_skip_rate, "Warn when more than this share of steps is skipped after warm-up")
      ->capture_default_str();
  cmd->add_option("--print-every", a->print_every, "Progress line every N steps (when not a terminal)")->capture_default_str();
  return {cmd, [a] { return run_train(*a); }};
}

}  // namespace mixprec::cli
