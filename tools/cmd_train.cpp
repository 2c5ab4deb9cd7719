// `mixprec train`: trains a zoo model on an MNIST-format dataset (Fashion-MNIST by default) with
// any AMP level, low dtype and loss-scale choice; shows progress; evaluates on the test split;
// writes a JSON report (report/run_writer.h) and an fp32 checkpoint on request; --trace writes a
// per-step CSV. run_train reads as its phases: parse, build, resume, train, then finish (evaluate,
// save, report).
// Every output path is checked before the first step (directories are created after every check);
// at the end each write is attempted whatever happened to the others; SIGINT/SIGTERM stop after
// the current step and save (train_signals.h). Options and resume checks: train_settings.h. Under
// mpirun it trains data parallel, each rank on its shard, rank 0 alone writing (train_parallel.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/allocator.h"
#include "mixprec/context.h"
#include "mixprec/amp/amp.h"
#include "mixprec/amp/rates.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/cpu_features.h"
#include "mixprec/data/dataset.h"
#include "mixprec/data/text.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/rng.h"
#include "mixprec/train/checkpoint.h"
#include "mixprec/train/guard.h"
#include "mixprec/train/model.h"
#include "mixprec/version.h"
#include "output_file.h"
#include "report/run_writer.h"
#include "train_common.h"
#include "train_parallel.h"
#include "train_run.h"
#include "train_settings.h"
#include "train_signals.h"
#include "train_trace.h"
#include "zoo_recipe.h"

namespace mixprec::cli {
namespace {

// An image model takes the sample shape of its registry row (1x28x28).
void check_image_shape(const dataset::Dataset& ds, const std::string& model) {
  const Shape& want = nn::zoo_model(model).input.sample;
  MIXPREC_CHECK(ds.source().sample_shape() == want, "--data: ", ds.source().describe_images(),
                "; the zoo's models (--model ", model, ") take ", want[1], "x", want[2],
                " images (", shape_str(want), " per sample)",
                Hint{"pass --data with MNIST-format 28x28 images (MNIST, Fashion-MNIST)"});
}

struct Data {
  dataset::Dataset train, test;
};

// Data parallel: each rank trains on its shard of every epoch; the test set is not sharded
// (Model::eval splits its batches over the ranks).
// gpt-tiny: windows of the model's context from TextDataset (--data: a text file or folder);
// training windows are random per (seed, epoch), validation ones consecutive.
Data load_text(const TrainArgs& a, const ParallelRun& par) {
  MIXPREC_CHECK(!par.on, "--model ", a.model,
                ": data-parallel training (mpirun) of a language model is not supported yet",
                Hint{"run it in one process"});
  const int64_t context = nn::zoo_model(a.model).input.sample[0];
  dataset::TextOptions train_opts{.usage = "train", .context = context, .seed = a.seed};
  if (a.train_samples > 0) train_opts.num_windows = a.train_samples;
  const dataset::TextDataset train_raw(a.data, train_opts);
  Data d{dataset::Dataset(train_raw).batch(a.batch_size, true),
         dataset::Dataset(dataset::TextDataset(a.data, {.usage = "validation", .context = context}))
             .batch(a.batch_size)};
  MIXPREC_CHECK(d.train.num_batches() > 0, "--data ", a.data, ": ", train_raw.num_samples(),
                " training windows of ", context + 1, " bytes, fewer than one batch of ",
                a.batch_size, Hint{"use a smaller --batch-size"});
  return d;
}

Data load_data(const TrainArgs& a, const ParallelRun& par) {
  if (nn::is_language_model(a.model)) return load_text(a, par);
  dataset::MnistOptions train_opts{.usage = "train", .num_shards = par.ranks, .shard_id = par.rank};
  if (a.train_samples > 0) train_opts.num_samples = a.train_samples;
  const dataset::MnistDataset train_raw(a.data, train_opts);
  const dataset::MnistDataset test_raw(a.data, {.usage = "test"});
  check_image_shape(train_raw, a.model);
  check_image_shape(test_raw, a.model);
  if (!par.on && a.train_samples > train_raw.num_samples() && par.rank == 0)
    std::printf(
        "note: --train-samples %lld: the training set of %s has %lld samples; all of them are "
        "used\n",
        static_cast<long long>(a.train_samples), a.data.c_str(),
        static_cast<long long>(train_raw.num_samples()));
  Data d{standard_pipeline(train_raw).shuffle(a.seed).batch(a.batch_size, true),
         standard_pipeline(test_raw).batch(256)};
  MIXPREC_CHECK(
      d.train.num_batches() > 0, "--data ", a.data, ": the training set has ",
      train_raw.num_samples(), " samples",
      a.train_samples > 0 ? " (--train-samples " + std::to_string(a.train_samples) + ")" : "",
      par.on ? ", " + std::to_string(d.train.num_samples()) + " per rank over " +
                   std::to_string(par.ranks) + " ranks,"
             : ",",
      " fewer than one batch of ", a.batch_size, " (the last partial batch is dropped)",
      Hint{"use a smaller --batch-size, or more --train-samples"});
  return d;
}

// The command that evaluates `checkpoint`, a checkpoint of this run, on its test data.
std::string eval_command(const TrainArgs& a, const std::string& checkpoint) {
  return "mixprec eval --model " + a.model + " --checkpoint " + checkpoint + " --data " + a.data;
}

// Restores the state saved at `a.resume` (whose settings were checked before); returns the step it
// continues after, and sets `trace_row` to the trace row of that step the checkpoint stores.
int64_t resume(const TrainArgs& a, train::Model& model, train::TrainOptions& topts,
               std::string& trace_row) {
  const train::ResumeInfo info = train::load_training_state(a.resume, model);
  if (const auto it = info.metadata.find(TraceWriter::kTraceRowKey); it != info.metadata.end())
    trace_row = it->second;
  MIXPREC_CHECK(a.max_steps < 0 || a.max_steps > info.global_step, "--max-steps ", a.max_steps,
                ": the run in ", a.resume, " is already at step ", info.global_step,
                Hint{"--max-steps counts all steps, resumed ones too"});
  MIXPREC_CHECK(
      info.epoch < a.epochs, "--resume ", a.resume, ": the run already finished its ", a.epochs,
      " epochs (step ", info.global_step, "); nothing is left to train",
      Hint{"to evaluate it (a run stopped after its last step skips its final evaluation): " +
           eval_command(a, a.resume)});
  topts.initial_epoch = info.epoch;
  topts.start_batch = info.batch;
  std::printf("resuming from %s at epoch %lld, batch %lld (step %lld)\n", a.resume.c_str(),
              static_cast<long long>(info.epoch + 1), static_cast<long long>(info.batch),
              static_cast<long long>(info.global_step));
  return info.global_step;
}

void print_summary(const RunResult& r) {
  const History& h = r.history;
  if (const nn::DistributedGradReducer* red = r.step.grad_reducer()) {
    const nn::GradReducerStats& st = red->stats();
    const double bytes =
        static_cast<double>(st.reductions) * static_cast<double>(st.bytes_per_reduction);
    std::printf(
        "data parallel: waited %.2f s for gradient all-reduces and %.2f s for the ranks' agreement "
        "(%.1f%% of training); %.0f%% of the gradient bytes were reduced when backward ended\n",
        st.wait_seconds, st.sync_seconds,
        100.0 * (st.wait_seconds + st.sync_seconds) / std::max(r.train_seconds, 1e-9),
        100.0 * static_cast<double>(st.bytes_done_early) / std::max(bytes, 1.0));
  }
  if (r.resumed_at < 0)
    std::printf("%lld steps (%lld skipped) in %.1f s, %.0f samples/s, peak memory %.1f MB\n",
                static_cast<long long>(h.steps_this_run),
                static_cast<long long>(h.skipped_this_run), r.train_seconds, r.samples_per_second,
                static_cast<double>(r.peak) / 1e6);
  else
    std::printf(
        "%lld steps this run (%lld skipped) in %.1f s, %.0f samples/s, peak memory %.1f MB; "
        "%lld steps in total (resumed at step %lld)\n",
        static_cast<long long>(h.steps_this_run), static_cast<long long>(h.skipped_this_run),
        r.train_seconds, r.samples_per_second, static_cast<double>(r.peak) / 1e6,
        static_cast<long long>(h.total_steps), static_cast<long long>(r.resumed_at));
}

// After a stop that the user did not ask for with --max-steps: what was saved and how to go on.
void print_how_to_continue(const TrainArgs& a, const train::Model& model, bool checkpoint_saved,
                           const ParallelRun& par) {
  if (a.checkpoint.empty()) {
    std::printf("no checkpoint was saved (no --checkpoint): this run cannot be resumed\n");
  } else if (!checkpoint_saved) {
    std::printf(
        "the checkpoint could not be saved (see the error): this run cannot be resumed from step "
        "%lld\n",
        static_cast<long long>(model.global_step()));
  } else {
    std::printf("saved %s at step %lld; continue with:\n  %s\n", a.checkpoint.c_str(),
                static_cast<long long>(model.global_step()),
                (launcher_prefix(par) + resume_command(command_line(), a.checkpoint)).c_str());
  }
  std::fflush(stdout);
}

void print_header(const TrainArgs& a, const Data& d, const amp::TrainOneStepCell& step,
                  const std::string& optimizer, int threads, const ParallelRun& par) {
  const bool custom = a.custom_lists();
  const std::string amp =
      custom ? (a.white_list.empty() ? "custom black list " + a.black_list
                                     : "custom white list " + a.white_list)
             : "amp_level " + std::string(amp_level_name(parse_amp_level(a.amp_level)));
  std::printf("mixprec %s: training %s on %s (%lld samples, %lld steps/epoch, batch %lld)\n",
              MIXPREC_VERSION, a.model.c_str(), a.data.c_str(),
              static_cast<long long>(d.train.num_samples() * par.ranks),
              static_cast<long long>(d.train.num_batches()), static_cast<long long>(a.batch_size));
  std::printf("%s, dtype %s, loss scale %s, optimizer %s lr %g, %d threads, cpu: %s\n", amp.c_str(),
              a.dtype.c_str(),
              step.loss_scale_manager() ? step.loss_scale_manager()->description().c_str() : "none",
              optimizer.c_str(), a.opt.lr, threads, describe(cpu_features()).c_str());
  if (a.opt.weight_decay > 0 || a.max_grad_norm > 0 || a.accumulation_steps > 1) {
    char clip[48] = "off";
    if (a.max_grad_norm > 0) std::snprintf(clip, sizeof clip, "at global norm %g", a.max_grad_norm);
    std::printf("weight decay %g, gradient clipping %s, %lld batch%s per update\n",
                a.opt.weight_decay, clip, static_cast<long long>(a.accumulation_steps),
                a.accumulation_steps == 1 ? "" : "es");
  }
  if (const nn::DistributedGradReducer* red = step.grad_reducer())
    std::printf(
        "data parallel: %d ranks x batch %lld = global batch %lld, %lld samples per rank per "
        "epoch; gradients "
        "averaged in %s, %d bucket%s (%.1f MB per step), %s; %d thread%s per rank\n",
        par.ranks, static_cast<long long>(a.batch_size),
        static_cast<long long>(a.batch_size * par.ranks),
        static_cast<long long>(d.train.num_samples()), a.grad_allreduce_dtype.c_str(),
        red->stats().buckets, red->stats().buckets == 1 ? "" : "s",
        static_cast<double>(red->stats().bytes_per_reduction) / 1e6,
        a.grad_overlap ? "started during backward" : "after backward", threads,
        threads == 1 ? "" : "s");
  const bool fp32 = !custom && parse_amp_level(a.amp_level) == AmpLevel::O0;
  if (fp32) std::printf("note: O0 trains in fp32; --dtype is ignored\n");
}

// Test metrics at the end: those of the last epoch when training ended at an epoch boundary,
// else a fresh evaluation; none with --no-eval or after an interruption.
std::map<std::string, double> final_metrics(const TrainArgs& a, train::Model& model,
                                            const History& history, const dataset::Dataset& test,
                                            bool stopped_early) {
  if (a.no_eval || stopped_early) return {};
  std::map<std::string, double> metrics{};
  const nlohmann::json& last =
      history.epoch_metrics.empty() ? nlohmann::json() : history.epoch_metrics.back();
  if (last.contains("test_loss") && model.next_batch() == 0) {
    if (last.contains("test_accuracy")) metrics["Accuracy"] = last["test_accuracy"].get<double>();
    metrics["Loss"] = last["test_loss"].get<double>();
  } else {
    metrics = model.eval(test);
  }
  std::printf("%s\n", describe_metrics(metrics).c_str());
  return metrics;
}

// A stop signal that arrived since the last look (during training or any final phase): recorded
// in the report's "interrupted" and announced once; returns the signal (0: none).
int note_stop_signal(RunResult& r, const train::Model& model, bool& announced) {
  const int sig = StopSignals::received();
  if (sig && !announced) {
    announced = true;
    r.interrupted = std::string("stopped by ") + StopSignals::name(sig);
    std::fprintf(stderr, "mixprec: %s after step %lld\n", r.interrupted.c_str(),
                 static_cast<long long>(model.global_step()));
    std::fflush(stderr);
  }
  return sig;
}

// Runs one final write; a failure is added to `errors` (so that the other writes still happen).
template <class F> bool attempt(std::vector<std::string>& errors, F&& write) {
  try {
    write();
    return true;
  } catch (const Error& e) {
    errors.push_back(e.what());
    return false;
  }
}

// The run's output files; a checkpoint is never a stream (a FIFO, /dev/stdout).
struct OutputPath {
  const std::string& path;
  const char* flag;
  bool stream_ok;
};
std::vector<OutputPath> output_paths(const TrainArgs& a) {
  return {{a.report, "--report", true},
          {a.checkpoint, "--checkpoint", false},
          {a.trace, "--trace", true}};
}

// The command line, checked, and what follows from it before anything is built: the data-parallel
// group (joined here), the outputs (rank 0 alone writes the report and the trace; the library
// lets only rank 0 write the checkpoint), the thread count, the settings a resume must match.
struct Setup {
  TrainArgs a;
  ParallelRun par;
  int threads = 0;
  io::Metadata settings{};
};

// --dtype auto becomes bf16 or f16 here, before the settings are recorded: a resumed run keeps its
// checkpoint's; a new one takes the type measured faster on this machine (rank 0 measures, the
// other ranks take its answer). A run in 16 bits says what its dtype buys here, from the
// measurement.
void resolve_dtype(TrainArgs& a, const ParallelRun& par) {
  const bool fp32 = !a.custom_lists() && parse_amp_level(a.amp_level) == AmpLevel::O0;
  if (a.dtype == "auto" && !a.resume.empty()) {
    const io::Metadata m = io::read_safetensors_metadata(a.resume);
    const auto it = m.find("cli.dtype");
    a.dtype = it != m.end() ? it->second : "bf16";
    std::printf("dtype auto: %s, as the run being resumed\n", a.dtype.c_str());
    return;
  }
  if (fp32) {
    if (a.dtype == "auto") a.dtype = "bf16";  // recorded, unused
    return;
  }
  if (a.device != "cpu") {  // the rates below are the CPU's
    if (a.dtype == "auto") {
      a.dtype = "f16";
      std::printf("dtype auto: f16 on %s (the GPU default; not measured)\n", a.device.c_str());
    }
    return;
  }
  std::string chosen = a.dtype;
  if (par.rank == 0) {
    const amp::PrecisionRates rates = amp::measure_precision_rates();
    if (chosen == "auto") chosen = std::string(dtype_name(rates.faster_low()));
    std::printf("measured on this machine (mixprec info):\n%s\n", rates.describe().c_str());
    const DType low = parse_low_dtype(chosen);
    std::printf(
        "this run: its 16-bit GEMMs and convolutions in %s, at %.2fx their f32 rate here%s\n",
        chosen.c_str(), rates.combined(low) / rates.combined(DType::f32),
        a.dtype == "auto" ? " (--dtype auto)" : "");
  }
  if (par.on) comm::broadcast(chosen, 0);
  a.dtype = chosen;
}

// A checkpoint whose weights or optimizer state hold NaN/inf trains nothing (every step skipped, or
// NaN spreads): refused, naming the tensors, unless --allow-nonfinite-weights (the load then
// warns).
void check_finite_state(const TrainArgs& a) {
  if (a.allow_nonfinite_weights) return;
  const std::vector<std::string> bad = io::read_safetensors(a.resume).warnings;
  if (bad.empty()) return;
  std::string what = bad[0];
  for (size_t i = 1; i < bad.size() && i < 4; ++i) what += "; " + bad[i];
  if (bad.size() > 4) what += "; and " + std::to_string(bad.size() - 4) + " more tensors";
  MIXPREC_CHECK(false, "--resume ", a.resume, ": the checkpoint holds NaN/inf: ", what,
                "; a run resumed from it would skip every step or spread NaN",
                Hint{"resume from an earlier checkpoint of the run (--save-every N keeps one every "
                     "N steps), or pass "
                     "--allow-nonfinite-weights to resume anyway (`mixprec inspect` shows each "
                     "tensor's values)"});
}

// The names of --white-list / --black-list, checked before any data is read (an unknown name is a
// usage error): applied to a throwaway copy of the network (build() seeds before its own).
void check_custom_lists(const TrainArgs& a) {
  if (!a.custom_lists()) return;
  as_usage_error([&] {
    with_prefix(a.white_list.empty() ? "--black-list: " : "--white-list: ", [&] {
      amp::custom_mixed_precision(
          *nn::make_model(a.model),
          {.white_list = split_list(a.white_list), .black_list = split_list(a.black_list)},
          DType::bf16);
    });
  });
}

Setup parse(const TrainArgs& args) {
  as_usage_error([&] { validate(args); });
  check_custom_lists(args);
  use_device(args.device);
  Setup s{args, start_parallel(args)};
  place_rank_on_gpu(args.device, s.par);
  if (s.par.rank != 0) s.a.report = s.a.trace = "";
  if (s.par.rank == 0)
    for (const OutputPath& o : output_paths(s.a)) check_writable(o.path, o.flag, o.stream_ok);
  s.threads = set_threads(parallel_threads(s.a, s.par));
  resolve_dtype(s.a, s.par);
  set_mode(s.a.mode);
  s.settings = trajectory_settings(s.a, s.threads);
  if (!s.a.resume.empty()) {
    check_same_settings(io::read_safetensors_metadata(s.a.resume), s.settings, s.a.resume);
    check_finite_state(s.a);
  }
  return s;
}

// What a run trains and records: the network, data, optimizer and Model (which refers to the
// others, so a Session stays where it was built), the precision table, and the callbacks whose
// records the end of the run reads.
struct Session {
  std::shared_ptr<nn::Cell> net;
  Data data;
  std::unique_ptr<optim::Optimizer> optimizer{};
  nn::SoftmaxCrossEntropyWithLogits loss_fn{kTrainingLoss};
  std::unique_ptr<train::Model> model{};
  std::vector<amp::PrecisionRow> precision_rows{};
  nlohmann::json recipe{};  // recipe_json of the step, for the report
  std::shared_ptr<History> history{};
  std::shared_ptr<train::OverflowGuard> guard{};
  std::shared_ptr<TraceWriter> trace{};
};

std::unique_ptr<Session> build(const Setup& s) {
  const TrainArgs& a = s.a;
  manual_seed(a.seed);
  std::unique_ptr<Session> run(new Session{nn::make_model(a.model), load_data(a, s.par)});
  // The schedule spans the planned run (epochs); --max-steps only stops early, so a run that
  // stops and resumes follows the same learning rates as one that never stopped.
  // With accumulation the optimizer steps once per accumulation_steps batches.
  const int64_t batches = a.epochs * run->data.train.num_batches();
  const int64_t updates = batches / a.accumulation_steps;
  MIXPREC_CHECK(updates > 0, "--accumulation-steps ", a.accumulation_steps, ": more than the ",
                batches, " batches of the whole run (", a.epochs, " epoch",
                a.epochs == 1 ? "" : "s", " of ", run->data.train.num_batches(),
                "): no update would happen",
                Hint{"use --accumulation-steps " + std::to_string(batches) +
                     " or fewer, or more --epochs or "
                     "--train-samples"});
  run->optimizer = make_training_optimizer(a, run->net->trainable_params(), updates);
  std::map<std::string, train::MetricHandle> metrics{{"Loss", train::Loss()}};
  if (!nn::is_language_model(a.model)) metrics.emplace("Accuracy", train::Accuracy());
  // A custom list configures the network itself (MindSpore's custom_mixed_precision); the Model
  // then builds the train step at O0, which keeps the network's own AMP configuration.
  if (a.custom_lists())
    amp::custom_mixed_precision(
        *run->net, {.white_list = split_list(a.white_list), .black_list = split_list(a.black_list)},
        parse_low_dtype(a.dtype));
  run->model = std::make_unique<train::Model>(*run->net, run->loss_fn, *run->optimizer,
                                              training_model_options(a, std::move(metrics)));
  print_header(a, run->data, run->model->train_network(), run->optimizer->name(), s.threads, s.par);
  if (a.show_precision || !a.report.empty()) {
    const dataset::Batch sample = run->data.train.get_batch(0, 0);
    run->recipe = recipe_json(a, run->model->train_network(), sample.image, sample.label);
    run->precision_rows = amp::precision_table(
        *run->net, sample.image.slice(0, 0, std::min<int64_t>(8, sample.size())));
    if (a.show_precision)
      std::printf("%s", amp::format_precision_table(run->precision_rows).c_str());
  }
  return run;
}

// Progress, history (with the per-epoch evaluation), the overflow guard, the rank check, the
// trace, periodic checkpoints and the stop-signal check. Every check has passed by now: only here
// are missing output directories created.
std::vector<train::CallbackHandle> make_callbacks(const Setup& s, Session& run, int64_t resumed_at,
                                                  const std::string& trace_row) {
  const TrainArgs& a = s.a;
  run.history =
      std::make_shared<History>(a.no_eval || !a.eval_every_epoch ? nullptr : &run.data.test, s.par);
  run.guard = std::make_shared<train::OverflowGuard>(
      train::GuardOptions{.action = train::parse_on_overflow(a.on_overflow),
                          .max_skip_rate = a.max_skip_rate,
                          .print = s.par.rank == 0});
  std::vector<train::CallbackHandle> callbacks{train::ProgressBar(a.print_every), run.history,
                                               run.guard};
  if (s.par.on && a.check_ranks > 0)
    callbacks.emplace_back(train::RankConsistencyCheck(a.check_ranks));
  if (s.par.rank == 0)
    for (const OutputPath& o : output_paths(a)) create_parent_dirs(o.path, o.flag);
  if (!a.trace.empty())
    callbacks.emplace_back(run.trace =
                               std::make_shared<TraceWriter>(a.trace, resumed_at, trace_row));
  if (a.save_every > 0)
    callbacks.emplace_back(train::CheckpointSaver(a.checkpoint, a.save_every, false, s.settings));
  callbacks.emplace_back(train::LambdaCallback(
      [](train::RunContext& c) { c.stop_requested |= StopSignals::received() != 0; },
      /*may_lag=*/true));
  return callbacks;
}

// Trains; what the run produced, for its end.
RunResult train_session(const Setup& s, Session& run,
                        const std::vector<train::CallbackHandle>& callbacks,
                        const train::TrainOptions& topts, int64_t resumed_at) {
  const Device device = get_context().device;  // --device: on a GPU, its memory
  reset_peak_memory(device);
  const auto train_start = std::chrono::steady_clock::now();
  run.model->train(s.a.epochs, run.data.train, callbacks, topts);
  RunResult r{*run.history, *run.guard, run.model->train_network(), run.precision_rows, s.par};
  r.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
  r.peak = memory_stats(device).peak_bytes;
  r.optimizer = run.optimizer->name();
  r.recipe = run.recipe;
  r.threads = s.threads;
  r.resumed_at = resumed_at;
  return r;
}

// After training: the final metrics, the checkpoint, the summary and the report, each attempted
// whatever happened to the others; after an early stop, how to continue. A stop signal is looked
// for after each phase. Exit status: 1 if any write failed (each failure printed with its path
// and reason), else 128 + the signal, else 3 after a guard stop, else 0.
int finish(const Setup& s, Session& run, RunResult& r, std::chrono::steady_clock::time_point t0) {
  const TrainArgs& a = s.a;
  train::Model& model = *run.model;
  bool announced = false;
  std::vector<std::string> errors;
  if (run.trace && !run.trace->error().empty()) {
    errors.push_back(run.trace->error() + " (training stopped at step " +
                     std::to_string(model.global_step()) + ")");
    r.interrupted = "stopped: " + run.trace->error();
  }
  note_stop_signal(r, model, announced);
  // Evaluation is collective: the ranks decide together whether the run stopped early.
  r.metrics =
      final_metrics(a, model, r.history, run.data.test,
                    agreed(!r.interrupted.empty() || !r.guard.stop_reason().empty(), r.par));
  note_stop_signal(r, model, announced);
  const bool checkpoint_saved = !a.checkpoint.empty() && attempt(errors, [&] {
    io::Metadata extra =
        s.settings;  // and the trace row a failed write left out, which a resumed trace rewrites
    if (run.trace && !run.trace->error().empty() && !run.trace->last_row().empty())
      extra[TraceWriter::kTraceRowKey] = run.trace->last_row();
    with_prefix("--checkpoint ", [&] { train::save_training_state(a.checkpoint, model, extra); });
    std::printf("saved checkpoint %s (fp32 weights + training state for --resume)\n",
                a.checkpoint.c_str());
  });
  note_stop_signal(r, model, announced);
  if (!r.guard.stop_reason().empty())
    std::fprintf(stderr, "mixprec: %s\n", r.guard.stop_reason().c_str());
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.samples_per_second =
      static_cast<double>(r.history.steps_this_run * a.batch_size * r.par.ranks) /
      std::max(r.train_seconds, 1e-9);
  print_summary(r);
  if (!a.report.empty()) attempt(errors, [&] { report::write_run_summary(a, r); });
  note_stop_signal(r, model, announced);
  const bool left_to_train =
      model.next_epoch() < a.epochs && (a.max_steps < 0 || model.global_step() < a.max_steps);
  if (!r.interrupted.empty() && left_to_train)
    print_how_to_continue(a, model, checkpoint_saved, r.par);
  if (!r.interrupted.empty() && !left_to_train && !a.no_eval && r.metrics.empty() &&
      r.par.rank == 0)
    std::printf(
        "the final evaluation was skipped (%s); %s\n", r.interrupted.c_str(),
        checkpoint_saved
            ? ("evaluate the saved checkpoint with:\n  " + eval_command(a, a.checkpoint)).c_str()
            : "no checkpoint was saved, so there is nothing to evaluate later");
  std::fflush(stdout);
  for (const std::string& e : errors) std::fprintf(stderr, "mixprec: error: %s\n", e.c_str());
  const int sig = note_stop_signal(r, model, announced);  // last look, just before the exit status
  if (!errors.empty()) return 1;
  if (sig) return 128 + sig;
  return r.guard.stop_reason().empty() ? 0 : 3;  // --on-overflow stop ended the run early
}

// Parse, build, resume, train; then evaluate, save and report (finish).
int run_train(const TrainArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const Setup s = parse(args);
  const std::unique_ptr<Session> run = build(s);
  train::TrainOptions topts{.max_steps = s.a.max_steps};
  std::string trace_row;
  const int64_t resumed_at = s.a.resume.empty() ? -1 : resume(s.a, *run->model, topts, trace_row);
  const std::vector<train::CallbackHandle> callbacks =
      make_callbacks(s, *run, resumed_at, trace_row);
  StopSignals signals;  // from here to the exit status: a first SIGINT/SIGTERM only stops training
  RunResult r = train_session(s, *run, callbacks, topts, resumed_at);
  return finish(s, *run, r, t0);
}

// The options of a data-parallel run (they change nothing in a single process).
void add_parallel_options(CLI::App* cmd, TrainArgs& a) {
  cmd->add_option("--check-ranks", a.check_ranks,
                  "Data parallel (mpirun): every N steps compare a hash of every parameter, the "
                  "loss scale and the step "
                  "counters across the ranks; stop naming the first difference (0: off)")
      ->capture_default_str()
      ->check(integer_range(0, kNoMax, std::nullopt, "0: off"));
  cmd->add_option("--grad-allreduce-dtype", a.grad_allreduce_dtype,
                  "Data parallel: f32 | bf16 (half the bytes; summed with f32 arithmetic)")
      ->capture_default_str();
  cmd->add_option("--grad-bucket-mb", a.grad_bucket_mb,
                  "Data parallel: gradients travel in buckets of about this many MB (the first, of "
                  "the last layers, 1 MB)")
      ->capture_default_str();
  cmd->add_flag("!--no-grad-overlap", a.grad_overlap,
                "Data parallel: all-reduce the gradients after backward instead of during it (to "
                "measure the overlap)");
}

}  // namespace

Command register_train(CLI::App& app) {
  // The defaults shown are the default model's; another model's registry row replaces each one not
  // given (apply_model_defaults), and the help names the models that differ.
  auto a = std::make_shared<TrainArgs>(model_defaults(TrainArgs{}.model));
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a zoo model on Fashion-MNIST (or any MNIST-format data) with AMP");
  std::string models;
  for (const auto& m : nn::model_names()) models += (models.empty() ? "" : "|") + m;
  const auto differing = [](const char* what, auto field) {
    const std::string models = models_differing(field);
    return models.empty() ? std::string() : std::string(" (") + what + models + ")";
  };
  const auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  cmd->add_option("--model", a->model,
                  "Network: " + models +
                      "; each has its own defaults for the options below that name models")
      ->capture_default_str()
      ->check(CLI::IsMember(nn::model_names()));
  cmd->add_option("--data", a->data,
                  "Directory with MNIST-format IDX files (raw or .gz); for " + language_models() +
                      " a text file or folder" +
                      differing("", [](const nn::ZooTraining& t) { return default_data(t.data); }))
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "Epochs to train")
      ->capture_default_str()
      ->check(integer_range(1, kMaxEpochs));
  cmd->add_option("--max-steps", a->max_steps, "Stop after this many steps in total (-1: no limit)")
      ->capture_default_str()
      ->check(integer_range(1, kNoMax, -1, "no limit"));
  cmd->add_option(
         "--batch-size", a->batch_size,
         "Batch size (the last partial batch is dropped)" +
             differing("", [](const nn::ZooTraining& t) { return std::to_string(t.batch_size); }))
      ->capture_default_str()
      ->check(integer_range(1));
  cmd->add_option("--train-samples", a->train_samples,
                  "Use only the first N training samples (-1: all)")
      ->capture_default_str()
      ->check(integer_range(1, kNoMax, -1, "all"));
  cmd->add_option("--optimizer", a->opt.name,
                  "momentum|sgd|adam|adamw" +
                      differing("", [](const nn::ZooTraining& t) { return t.optimizer; }))
      ->capture_default_str()
      ->check(CLI::IsMember({"momentum", "sgd", "adam", "adamw"}));
  cmd->add_option(
         "--lr", a->opt.lr,
         "Learning rate" + differing("", [&](const nn::ZooTraining& t) { return number(t.lr); }))
      ->capture_default_str();
  cmd->add_option("--momentum", a->opt.momentum,
                  "Momentum (momentum optimizer)" +
                      differing("", [&](const nn::ZooTraining& t) { return number(t.momentum); }))
      ->capture_default_str();
  cmd->add_option(
         "--weight-decay", a->opt.weight_decay,
         "Weight decay" +
             differing("", [&](const nn::ZooTraining& t) { return number(t.weight_decay); }))
      ->capture_default_str();
  cmd->add_option("--lr-schedule", a->opt.schedule,
                  "cosine (from --lr to 0 over the run) | constant (the seed's fixed rate) | step "
                  "(x0.1 every third)" +
                      differing("", [](const nn::ZooTraining& t) { return t.lr_schedule; }))
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "cosine", "step"}));
  cmd->add_option("--warmup-steps", a->opt.warmup_steps,
                  "Linear learning-rate warm-up steps" +
                      differing("without it: ",
                                [&](const nn::ZooTraining& t) {
                                  return number(100 * t.warmup_fraction) + "% of the updates";
                                }))
      ->capture_default_str()
      ->check(integer_range(0));
  cmd->add_option(
         "--max-grad-norm", a->max_grad_norm,
         "Clip the gradients by their global norm, after unscaling (0: off)" +
             differing("", [&](const nn::ZooTraining& t) { return number(t.max_grad_norm); }))
      ->capture_default_str();
  cmd->add_option("--accumulation-steps", a->accumulation_steps,
                  "Batches per optimizer update (gradients summed; one overflowing batch skips the "
                  "whole update)")
      ->capture_default_str()
      ->check(integer_range(1, int64_t{1} << 20));
  cmd->add_option("--seed", a->seed, "Seed for weights and data order (0 to 2^64-1)")
      ->capture_default_str()
      ->check(seed_validator());
  cmd->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)")
      ->capture_default_str()
      ->check(integer_range(0, kMaxThreads, std::nullopt, "0: OMP_NUM_THREADS or all cores"));
  cmd->add_option("--device", a->device, kDeviceHelp)->capture_default_str();
  cmd->add_option("--mode", a->mode,
                  "pynative (eager, each op as it comes) | graph (capture the train step once per "
                  "input shape, "
                  "replay it with planned memory; bitwise equal)")
      ->capture_default_str();
  cmd->add_option("--amp-level", a->amp_level,
                  "O0 (fp32) | O1 (white list low) | O2 (all but black list low, fp32 BatchNorm) | "
                  "O3 (all low) | auto" +
                      differing("", [](const nn::ZooTraining& t) { return t.amp_level; }))
      ->capture_default_str();
  cmd->add_option("--white-list", a->white_list,
                  "Custom mixed precision instead of --amp-level (MindSpore's "
                  "custom_mixed_precision): these ops or cells "
                  "(comma-separated, e.g. Dense,scaled_dot_product_attention) run in --dtype, the "
                  "rest in fp32");
  cmd->add_option(
      "--black-list", a->black_list,
      "Custom mixed precision instead of --amp-level: these ops or cells (comma-separated, e.g. "
      "LayerNorm,softmax) run in fp32, the rest in --dtype");
  cmd->add_option("--dtype", a->dtype,
                  "Low-precision dtype: auto (the faster 16-bit type on this machine, measured at "
                  "start; a resumed run "
                  "keeps its checkpoint's) | bf16 | f16")
      ->capture_default_str();
  cmd->add_option("--keep-batchnorm-fp32", a->keep_bn,
                  "true|false (default: true at O2, false otherwise)")
      ->capture_default_str();
  cmd->add_option("--loss-scale", a->loss_scale,
                  "default|none|fixed:S|fixed-drop:S|dynamic[:INIT,FACTOR,WINDOW]|dynamic-torch "
                  "(default: dynamic 2^24,2,2000 at O2, none otherwise)")
      ->capture_default_str();
  cmd->add_option("--report", a->report, "Write a JSON summary here");
  cmd->add_option(
      "--checkpoint", a->checkpoint,
      "Save here at the end (safetensors: fp32 weights, readable by eval/inspect, plus the "
      "training state); "
      "an existing file is refused unless --resume continues it or --overwrite is given");
  cmd->add_flag("--overwrite", a->overwrite, "Let a new run replace an existing --checkpoint file");
  cmd->add_option("--save-every", a->save_every,
                  "Also save the checkpoint every N steps (needs --checkpoint)")
      ->capture_default_str()
      ->check(integer_range(0, kNoMax, std::nullopt, "0: only at the end"));
  cmd->add_option("--resume", a->resume,
                  "Continue a run from a checkpoint it saved (same settings; bit-identical)");
  cmd->add_flag("--allow-nonfinite-weights", a->allow_nonfinite_weights,
                "Let --resume continue from a checkpoint whose weights or optimizer state hold "
                "NaN/inf (refused "
                "otherwise; the load warns naming each such tensor)");
  cmd->add_option("--trace", a->trace,
                  "Write a per-step CSV (step, epoch, loss, scale, skipped, overflow, lr); with "
                  "--resume, continue it");
  cmd->add_flag("--show-precision", a->show_precision,
                "Print what dtype each cell computes in, before training");
  cmd->add_flag("--no-eval", a->no_eval, "Skip the test-set evaluation");
  cmd->add_flag("!--no-eval-every-epoch", a->eval_every_epoch,
                "Evaluate only at the end, not after every epoch");
  cmd->add_flag("--check-numerics", a->check_numerics,
                "Check every op of every step for inf/NaN (slower); without it only overflowing "
                "steps are replayed");
  cmd->add_option("--on-overflow", a->on_overflow,
                  "warn|stop|promote: on a forward overflow or persistent skipping, warn, stop "
                  "training (exit status 3), "
                  "or switch the offending cell to fp32 and continue (escalating to its producer, "
                  "then the whole network; "
                  "exit status 3 if even that overflows)")
      ->capture_default_str()
      ->check(CLI::IsMember({"warn", "stop", "promote"}));
  cmd->add_option("--grad-stats", a->grad_stats_every, "Gradient statistics every N steps (0: off)")
      ->capture_default_str()
      ->check(integer_range(0, kNoMax, std::nullopt, "0: off"));
  cmd->add_option("--max-skip-rate", a->max_skip_rate,
                  "Warn when more than this share of steps is skipped after warm-up")
      ->capture_default_str();
  cmd->add_option("--print-every", a->print_every,
                  "Progress line every N steps, N >= 1 (when not a terminal)")
      ->capture_default_str()
      ->check(integer_range(1));
  add_parallel_options(cmd, *a);
  return {cmd, [a, cmd] {
            apply_model_defaults(*a, [cmd](const char* flag) { return cmd->count(flag) > 0; });
            a->amp_level_given = cmd->count("--amp-level") > 0;
            return run_train(*a);
          }};
}

}  // namespace mixprec::cli
