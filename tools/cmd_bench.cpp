// `mixprec bench`: times one training step (forward, backward, unscale + check, optimizer) of a
// zoo model on synthetic data — warm-up first, then the median and minimum over N steps — and
// reads it against the machine: the GEMM rate and the memory bandwidth are measured on the
// spot, and floor = GEMM/conv FLOPs / GEMM rate + bytes moved / bandwidth. Writes JSON with
// --report. A step is the one `mixprec train --model X` runs, built by the same code
// (zoo_recipe.h): the model's optimizer and schedule, its clipping, its AMP level unless
// --amp-level or --configs names another, the level's default loss scaling; the report's "recipe"
// says what it was made of. Only the batch differs: synthetic, of the shape and dtype train feeds.
// --mode both times a pynative and a graph-mode copy of the same network, step for step
// alternately, so that their ratio comes from one run on a noisy machine. --model takes a comma
// list (or `all`, every zoo model) and --configs a list of LEVEL:DTYPE: one process times each
// model in each configuration in turn (one line each; --report then writes a JSON array), so a
// GPU's start-up (CUDA context, cuBLASLt, cuDNN) is paid once. On a GPU (--device cuda) the
// floor's rates are the GPU's, measured once per dtype in the process: a device GEMM and a
// device-to-device copy (no CPU probe).
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <vector>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/allocator.h"
#include "mixprec/amp/amp.h"
#include "mixprec/context.h"
#include "mixprec/cpu_features.h"
#include "mixprec/cuda.h"
#include "mixprec/graph/plan.h"
#include "mixprec/grad_mode.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/ops/ops.h"
#include "mixprec/ops/profile.h"
#include "mixprec/rng.h"
#include "mixprec/version.h"
#include "output_file.h"
#include "report/run_writer.h"
#include "train_common.h"
#include "zoo_recipe.h"

namespace mixprec::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Best-of-5 GFLOP/s of an n^3 GEMM in `dtype` through the op library on `device` (1024 on the
// CPU; 4096 on a GPU, where a smaller one would time the launch), waiting for the GPU each time.
double measure_gemm_gflops(DType dtype, Device device = Device::cpu()) {
  const int64_t n = device.is_cpu() ? 1024 : 4096;
  Generator g(1);
  const Tensor a = randn({n, n}, g, {.dtype = dtype}).to(device);
  const Tensor b = randn({n, n}, g, {.dtype = dtype}).to(device);
  NoGradGuard ng;
  auto wait = [&] {
    if (!device.is_cpu()) cuda::synchronize(device);
  };
  (void)ops::matmul(a, b);
  wait();
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t = clock_type::now();
    (void)ops::matmul(a, b);
    wait();
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * static_cast<double>(n * n * n) / best / 1e9;
}

// A GPU's memory bandwidth: best-of-5 device-to-device copy of 1 GiB (f32), bytes read plus
// written.
double measure_device_bandwidth_gbs(Device device) {
  const int64_t n = int64_t{1} << 28;
  const Tensor src = zeros({n}, {.device = device});
  Tensor dst = zeros({n}, {.device = device});
  dst.copy_(src);
  cuda::synchronize(device);
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t = clock_type::now();
    dst.copy_(src);
    cuda::synchronize(device);
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

// Best-of-5 memcpy bandwidth over 256 MiB, counting bytes read plus bytes written, with the
// step's OpenMP threads each copying its share: one thread alone reaches only part of what the
// step's threads can pull (here ~18 against ~32 GB/s), which would inflate the floor.
double measure_bandwidth_gbs() {
  const size_t n = size_t{256} << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto t = clock_type::now();
#pragma omp parallel
    {
      const size_t k = static_cast<size_t>(omp_get_thread_num()),
                   T = static_cast<size_t>(omp_get_num_threads());
      const size_t lo = n * k / T, hi = n * (k + 1) / T;
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    }
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * static_cast<double>(n) / best / 1e9;
}

// One synthetic batch for `model`, of the shapes and dtypes `mixprec train` feeds it (its
// registry row's input): for a language model [batch, L] byte tokens (a fixed pseudo-random
// sequence) with their next bytes as labels, else N(0, 1) images with labels i % classes.
std::pair<Tensor, Tensor> synthetic_batch(const std::string& model, int64_t batch) {
  const nn::ZooInput& in = nn::zoo_model(model).input;
  Shape shape{batch};
  shape.insert(shape.end(), in.sample.begin(), in.sample.end());
  if (nn::zoo_model(model).language_model) {
    MIXPREC_ASSERT(in.sample.size() == 1 && in.dtype == DType::u8 && in.classes <= 256,
                   "byte tokens");
    const size_t L = static_cast<size_t>(in.sample[0]);
    std::vector<uint8_t> tokens(static_cast<size_t>(batch) * L);
    std::vector<int32_t> next(tokens.size());
    uint32_t s = 7;
    for (size_t i = 0; i < tokens.size(); ++i) {
      s = s * 1664525u + 1013904223u;  // an LCG's high byte: every byte value occurs
      tokens[i] = static_cast<uint8_t>(s >> 24);
      if (i % L != 0) next[i - 1] = tokens[i];
    }
    for (size_t r = 1; r <= static_cast<size_t>(batch); ++r) next[r * L - 1] = 32;
    return {Tensor::from_vector(tokens, shape), Tensor::from_vector(next, shape)};
  }
  MIXPREC_ASSERT(in.dtype == DType::f32, "float images");
  Generator g(7);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<int32_t>(i % static_cast<size_t>(in.classes));
  return {randn(shape, g), Tensor::from_vector(labels, {batch})};
}

struct BenchArgs {
  // amp_level "": the model's training level (its registry row).
  std::string model = "mlp", amp_level, dtype = "bf16", loss_scale = "default", mode = "pynative",
              report;
  std::string configs;  // LEVEL:DTYPE,... (empty: --amp-level and --dtype)
  int64_t batch_size = 0, steps = 20, warmup = 5;
  int threads = 0;
  std::string device = "cpu";
  bool profile = false;
};

// One network trained in one execution mode, and what its timed steps measured: the network,
// loss, optimizer and Model that `mixprec train` builds for the same settings (`settings`).
struct Runner {
  Mode mode = Mode::pynative;
  TrainArgs settings;
  std::shared_ptr<nn::Cell> net;
  std::unique_ptr<nn::SoftmaxCrossEntropyWithLogits> loss_fn;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  amp::TrainOneStepCell* step = nullptr;  // model's
  std::vector<double> ms;
  int64_t transient = 0;    // the most live bytes one timed step added
  double pipelined_ms = 0;  // device steps: the mean of steps queued back to back (0: not measured)

  double median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double min() const { return *std::min_element(ms.begin(), ms.end()); }
  // One step in this runner's mode; timed (and its memory measured) when `timed`.
  void run(const Tensor& x, const Tensor& y, bool timed) {
    ContextOptions c = get_context();
    c.mode = mode;
    set_context(c);
    const auto t = clock_type::now();
    // sync(): on a GPU the step is queued; it has run once its flag and loss are back.
    if (!timed) {
      (void)(*step)(x, y);
      step->sync();
      return;
    }
    transient = std::max(transient, graph::measure_peak([&] {
                           (void)(*step)(x, y);
                           step->sync();
                         }));
    ms.push_back(1e3 * seconds_since(t));
  }
};

// The settings `mixprec train --model M` runs with (the model's registry row), with bench's
// --amp-level (when given), --dtype and --loss-scale.
TrainArgs train_settings_of(const BenchArgs& a) {
  TrainArgs t = model_defaults(a.model);
  if (!a.amp_level.empty()) t.amp_level = a.amp_level;
  t.dtype = a.dtype;
  t.loss_scale = a.loss_scale;
  return t;
}

// The step is built as train builds it (make_training_optimizer, training_model_options, the
// Model); the schedule spans the steps this run makes (warm-up, timed and pipelined ones).
Runner make_runner(const BenchArgs& a, Mode mode) {
  Runner r;
  r.mode = mode;
  r.settings = train_settings_of(a);
  manual_seed(0);
  r.net = nn::make_model(a.model);
  r.loss_fn = std::make_unique<nn::SoftmaxCrossEntropyWithLogits>(kTrainingLoss);
  const int64_t updates = std::max<int64_t>(a.warmup, 2) + 2 * a.steps;
  r.opt = make_training_optimizer(r.settings, r.net->trainable_params(), updates);
  r.model = std::make_unique<train::Model>(*r.net, *r.loss_fn, *r.opt,
                                           training_model_options(r.settings));
  r.step = &r.model->train_network();
  r.step->to(get_context().device);  // --device
  return r;
}

// The floor's rates on a GPU, measured once per GEMM dtype in this process.
struct DeviceRates {
  std::map<DType, double> gflops;
  double bandwidth_gbs = 0;
};

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// --profile: each (op, phase, kernel) of the timed steps, its time a step and its share of the
// kernels' time, the most first; and its own floor, the roofline's: the longer of its FLOPs
// (GEMMs, convolutions, attention) at the measured GEMM rate and the bytes of the tensors it reads
// and writes at the measured memory bandwidth, with the share of that floor it reached (the slow
// kernels are the small shares; above 1, its tensors came from cache).
// The kernels' total against the step's median and floor. Every dispatch is timed on its own, so
// on a GPU a kernel's time is its launch, not its run.
void print_profile(const std::vector<ops::ProfileRow>& rows, int64_t steps, double median_ms,
                   double floor_ms, double gflops, double bandwidth_gbs) {
  double total = 0;
  for (const ops::ProfileRow& r : rows) total += r.seconds;
  const double per_step = 1e3 * total / static_cast<double>(steps);
  std::printf(
      "  kernels: %.2f ms a step of the %.2f ms median (the rest: work outside dispatched kernels: "
      "autograd, "
      "allocation, the optimizer's and the unscale's host loops); the step's floor is %.2f ms\n",
      per_step, median_ms, floor_ms);
  std::printf(
      "  a kernel's floor: the longer of its FLOPs at %.0f GFLOP/s and its tensors' bytes at %.1f "
      "GB/s (above 1: its tensors came from cache; \"-\": the problem reports neither)\n",
      gflops, bandwidth_gbs);
  std::printf("  %10s %6s %7s %9s %8s %14s  %s\n", "ms/step", "share", "calls", "floor ms",
              "of floor", "reached", "op phase [kernel]");
  for (const ops::ProfileRow& r : rows) {
    const double ms = 1e3 * r.seconds / static_cast<double>(steps);
    const double floor =
        1e3 * std::max(r.work.flops / (gflops * 1e9), r.work.bytes / (bandwidth_gbs * 1e9)) /
        static_cast<double>(steps);
    char fl[16] = "-", of[16] = "-", reached[32] = "-";
    if (floor > 0) {
      std::snprintf(fl, sizeof fl, "%.3f", floor);
      std::snprintf(of, sizeof of, "%.2f", ms > 0 ? floor / ms : 0.0);
      if (r.work.flops > 0)
        std::snprintf(reached, sizeof reached, "%.0f GFLOP/s", r.work.flops / r.seconds / 1e9);
      else
        std::snprintf(reached, sizeof reached, "%.1f GB/s", r.work.bytes / r.seconds / 1e9);
    }
    std::printf("  %10.3f %5.1f%% %7lld %9s %8s %14s  %s %s [%s]\n", ms, 100 * r.seconds / total,
                static_cast<long long>(r.calls / steps), fl, of, reached, r.op.c_str(),
                r.phase.c_str(), r.impl.c_str());
  }
}

// A loss scale as 2^n when it is a power of two (what dynamic scaling keeps it at), else %g.
std::string scale_text(double scale) {
  int e = 0;
  if (scale > 0 && std::frexp(scale, &e) == 0.5) return "2^" + std::to_string(e - 1);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", scale);
  return buf;
}

// One model in one configuration (checked by run_bench): times it, prints its lines, returns
// its report.
nlohmann::json run_one(const BenchArgs& a, DeviceRates& rates) {
  const int threads = set_threads(a.threads);
  const AmpLevel level = parse_amp_level(a.amp_level);
  const DType low = parse_low_dtype(a.dtype);
  const int64_t batch = a.batch_size > 0 ? a.batch_size : nn::default_batch_size(a.model);
  std::vector<Runner> runners;
  if (a.mode == "both") {
    runners.push_back(make_runner(a, Mode::pynative));
    runners.push_back(make_runner(a, Mode::graph));
  } else {
    runners.push_back(make_runner(a, parse_mode(a.mode)));
  }
  nn::Cell* net = runners.front().net.get();
  amp::TrainOneStepCell* step = runners.front().step;
  const auto [x_host, y_host] = synthetic_batch(a.model, batch);
  const Tensor x = x_host.to(get_context().device), y = y_host.to(get_context().device);
  const nlohmann::json recipe =
      recipe_json(runners.front().settings, *step, x, y);  // before any step

  // FLOPs of one step from the op trace of a forward pass: each GEMM-like op runs forward,
  // backward-weights and (unless its input needs no gradient) backward-data.
  int64_t flops = 0;
  {
    std::vector<OpRecord> rec;
    OpRecorder r(&rec);
    EnableGradGuard eg(true);
    Tensor out = (*net)(x);
    for (const OpRecord& o : rec) flops += o.flops * (o.input_requires_grad ? 3 : 2);
  }
  int64_t param_count = 0;
  for (const Tensor& p : net->trainable_params()) param_count += p.numel();

  const Device device = get_context().device;
  // On the CPU f16 is emulated (its GEMMs run in f32); a GPU has f16 tensor cores.
  const DType gemm_dtype =
      level == AmpLevel::O0 || (low == DType::f16 && device.is_cpu()) ? DType::f32 : low;
  // The CPU's GEMM rate swings with the machine's state (bf16 between ~650 and ~1750 GFLOP/s
  // here), so it is measured before and after the timed steps and the better figure is the
  // floor's. A GPU's rates are measured once per process (DeviceRates), before any timing.
  double gflops_before = 0;
  if (device.is_cpu()) {
    gflops_before = measure_gemm_gflops(gemm_dtype);
  } else {
    if (!rates.gflops.contains(gemm_dtype))
      rates.gflops[gemm_dtype] = measure_gemm_gflops(gemm_dtype, device);
    if (rates.bandwidth_gbs == 0) rates.bandwidth_gbs = measure_device_bandwidth_gbs(device);
  }

  // Graph mode needs two untimed steps (a key's first runs eagerly, its second is captured).
  // A dynamic loss scale starts high (2^24) and halves on each overflow: f16 gradients overflow
  // for the first several steps, which skip the update and replay the step to name the op. They
  // are not the step training runs, so the warm-up goes on (up to kMaxSettle more steps) until
  // the last step of every runner applied its update.
  constexpr int64_t kMaxSettle = 64;
  int64_t warmup_steps = 0;
  auto any_skipped = [&] {
    for (const Runner& r : runners)
      if (r.step->last_step().skipped) return true;
    return false;
  };
  for (; warmup_steps < std::max<int64_t>(a.warmup, 2) ||
         (warmup_steps < std::max<int64_t>(a.warmup, 2) + kMaxSettle && any_skipped());
       ++warmup_steps)
    for (Runner& r : runners) r.run(x, y, false);
  const int64_t skipped_before = runners.front().step->skipped_steps();
  // Activation memory: what the forward pass keeps alive for backward (the graph's saved
  // tensors and outputs), measured as live bytes with the graph held minus live bytes before.
  // The input batch is a fresh copy the caller then drops, so it counts exactly when the graph
  // retains it (at O0 the first layer saves it; at O2 it saves the bf16 cast instead).
  // On a GPU (--device cuda) both are its memory (peak and activations; "step adds" stays the
  // host's).
  int64_t activation = 0;
  {
    const int64_t before = memory_stats(device).live_bytes;
    EnableGradGuard eg(true);
    Tensor input = x.clone();
    Tensor loss = step->network()(input, y);
    input = Tensor();
    activation = memory_stats(device).live_bytes - before;
  }
  reset_peak_memory(device);
  const bool profiled_before = ops::profiling();
  if (a.profile) {
    ops::profile_reset();
    ops::set_profiling(true);
  }
  for (int64_t i = 0; i < a.steps; ++i)
    for (Runner& r : runners) r.run(x, y, true);
  const int64_t skipped_timed = runners.front().step->skipped_steps() - skipped_before;
  const std::vector<ops::ProfileRow> profile =
      a.profile ? ops::profile_rows() : std::vector<ops::ProfileRow>{};
  if (a.profile) {
    ops::set_profiling(profiled_before);
    ops::profile_reset();
  }
  const int64_t peak = memory_stats(device).peak_bytes;
  // A device step returns before it has run, and the next one is queued without waiting for it
  // (up to TrainOneStepCell::kStepsInFlight): the step time above waits for each step, so it adds
  // the host's time to queue a step to the device's time to run it. Steps queued back to back
  // with one wait at the end measure what training sees.
  for (Runner& r : runners)
    if (r.step->steps_complete_later()) {
      ContextOptions c = get_context();
      c.mode = r.mode;
      set_context(c);
      const auto t = clock_type::now();
      for (int64_t i = 0; i < a.steps; ++i) (void)(*r.step)(x, y);
      r.step->sync();
      r.pipelined_ms = 1e3 * seconds_since(t) / static_cast<double>(a.steps);
    }

  const double gflops = device.is_cpu() ? std::max(gflops_before, measure_gemm_gflops(gemm_dtype))
                                        : rates.gflops.at(gemm_dtype);
  const double bw = device.is_cpu() ? measure_bandwidth_gbs() : rates.bandwidth_gbs;
  // Bytes a step must move: weights read in forward and backward (low copies at O2/O3), the
  // gradient written and read, the optimizer's fp32 state read and written (Momentum one slot,
  // Adam two), fp32 weights read and written, the low copy written; saved activations written in
  // forward and read in backward, twice over (values and their gradients).
  const bool low_weights = level == AmpLevel::O2 || level == AmpLevel::O3;
  const double state = 8.0 * static_cast<double>(step->optimizer().state().size()) /
                       static_cast<double>(std::max<size_t>(1, net->trainable_params().size()));
  const double wbytes = static_cast<double>(param_count) *
                        (low_weights ? 2 * 2 + 4 * 2 + state + 8 + 2 : 4 * 2 + 4 * 2 + state + 8);
  const double bytes = wbytes + 4.0 * static_cast<double>(std::max<int64_t>(activation, 0));
  const double floor_ms = 1e3 * (static_cast<double>(flops) / (gflops * 1e9) + bytes / (bw * 1e9));
  const char* dt = level == AmpLevel::O0 ? "f32" : a.dtype.c_str();
  for (const Runner& r : runners) {
    const double median = r.median();
    std::printf(
        "%s %s/%s batch %lld, %s mode: step median %.2f ms (min %.2f), %.0f samples/s; floor %.2f "
        "ms "
        "(%.2f GFLOP at %.0f GFLOP/s + %.1f MB at %.1f GB/s), efficiency %.2f; peak %.1f MB, step "
        "adds %.1f MB, "
        "activations %.1f MB; %d threads\n",
        a.model.c_str(), std::string(amp_level_name(level)).c_str(), dt,
        static_cast<long long>(batch), mode_name(r.mode), median, r.min(),
        1e3 * static_cast<double>(batch) / median, floor_ms, static_cast<double>(flops) / 1e9,
        gflops, bytes / 1e6, bw, floor_ms / median, static_cast<double>(peak) / 1e6,
        static_cast<double>(r.transient) / 1e6, static_cast<double>(activation) / 1e6, threads);
    if (r.pipelined_ms > 0)
      std::printf(
          "  steps in flight: %.2f ms a step, %.0f samples/s (%lld steps queued back to back, one "
          "wait at the end)\n",
          r.pipelined_ms, 1e3 * static_cast<double>(batch) / r.pipelined_ms,
          static_cast<long long>(a.steps));
    if (r.mode == Mode::graph) {
      const amp::GraphModeInfo& g = r.step->graph_mode_info();
      if (g.replays > 0)
        std::printf(
            "  graph: %lld kernels replayed (%lld fused away, %lld casts back removed); arena %.1f "
            "MB for %lld intermediates (%.1f MB one buffer each), "
            "eager step peak %.1f MB\n",
            static_cast<long long>(g.plan.kernels), static_cast<long long>(g.plan.fused),
            static_cast<long long>(g.plan.casts_elided),
            static_cast<double>(g.plan.arena_bytes) / 1e6,
            static_cast<long long>(g.plan.planned_buffers),
            static_cast<double>(g.plan.unplanned_bytes) / 1e6,
            static_cast<double>(g.plan.eager_peak_bytes) / 1e6);
      else
        std::printf("  graph: not replayed (%s)\n", g.fallback.c_str());
    }
  }
  std::printf("  the step of `mixprec train --model %s`: %s\n", a.model.c_str(),
              describe_recipe(recipe).c_str());
  if (skipped_before > 0)
    std::printf(
        "  warm-up: %lld steps, %lld of them skipped on overflow while the dynamic loss scale came "
        "down (to %s)%s\n",
        static_cast<long long>(warmup_steps), static_cast<long long>(skipped_before),
        scale_text(runners.front().step->last_step().loss_scale).c_str(),
        any_skipped() ? "; it was still skipping when the warm-up gave up" : "");
  if (skipped_timed > 0)
    std::printf(
        "  %lld of the %lld timed steps were skipped on overflow (no update, the step replayed to "
        "name the op): the median mixes them with full steps\n",
        static_cast<long long>(skipped_timed), static_cast<long long>(a.steps));
  if (!profile.empty())
    print_profile(profile, a.steps * static_cast<int64_t>(runners.size()), runners.front().median(),
                  floor_ms, gflops, bw);
  if (runners.size() == 2)
    std::printf(
        "graph vs pynative: %.2fx the speed (median step %.2f vs %.2f ms, alternated in this "
        "run)\n",
        runners[0].median() / runners[1].median(), runners[1].median(), runners[0].median());
  nlohmann::json j;
  {
    auto timings = [&](const Runner& r, nlohmann::json& j) {
      const double median = r.median();
      j["mode"] = mode_name(r.mode);
      j["step_ms_median"] = median;
      j["step_ms_min"] = r.min();
      j["step_ms_all"] = r.ms;
      j["samples_per_second"] = 1e3 * static_cast<double>(batch) / median;
      j["step_transient_bytes"] = r.transient;
      j["efficiency"] = floor_ms / median;
      j["skipped_steps"] = r.step->skipped_steps();
      j["warmup_steps"] = warmup_steps;
      j["skipped_steps_timed"] = skipped_timed;
      if (r.pipelined_ms > 0) j["step_ms_pipelined"] = r.pipelined_ms;  // device steps only
      if (r.mode == Mode::graph) j["graph"] = report::graph_mode_json(r.step->graph_mode_info());
    };
    j["model"] = a.model;
    j["recipe"] = recipe;
    j["amp_level"] = std::string(amp_level_name(level));
    j["dtype"] = dt;
    j["batch"] = batch;
    j["steps"] = a.steps;
    timings(runners.front(),
            j);  // --mode both: the pynative run here, the graph run under "graph_run"
    j["peak_memory_bytes"] = peak;
    j["activation_memory_bytes"] = activation;
    j["flops_per_step"] = flops;
    j["bytes_per_step_estimate"] = bytes;
    j["gemm_gflops_measured"] = gflops;
    j["gemm_dtype"] = std::string(dtype_name(gemm_dtype));
    j["bandwidth_gbs_measured"] = bw;
    j["floor_ms"] = floor_ms;
    j["threads"] = threads;
    j["device"] = device.str();
    j["cpu_features"] = describe(cpu_features());
    j["mixprec_version"] = MIXPREC_VERSION;
    if (runners.size() == 2) {
      nlohmann::json g;
      timings(runners[1], g);
      j["graph_run"] = g;
      j["graph_speedup"] = runners[0].median() / runners[1].median();
    }
  }
  return j;
}

int run_bench(const BenchArgs& a) {
  std::vector<std::string> models;
  std::vector<std::pair<std::string, std::string>> configs;  // (level, dtype)
  as_usage_error([&] {
    const std::vector<std::string> known = nn::model_names();
    models = a.model == "all" ? known : split_list(a.model);
    for (const std::string& m : models)
      MIXPREC_CHECK(std::find(known.begin(), known.end(), m) != known.end(), "--model: '", m,
                    "' is not a zoo model (expected all, or a comma list of: ", join_names(known),
                    ")");
    if (a.configs.empty()) {
      configs.emplace_back(a.amp_level, a.dtype);
    } else {
      for (const std::string& c : split_list(a.configs)) {
        const size_t colon = c.find(':');
        configs.emplace_back(c.substr(0, colon),
                             colon == std::string::npos ? a.dtype : c.substr(colon + 1));
      }
    }
    MIXPREC_CHECK(a.steps >= 1 && a.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
    MIXPREC_CHECK(a.batch_size >= 0,
                  "--batch-size: expected at least 0 (0: the model's default), got ", a.batch_size);
    MIXPREC_CHECK(a.threads >= 0, "--threads: expected at least 0, got ", a.threads);
    for (const auto& [level, dtype] : configs) {
      if (!level.empty())
        with_prefix(a.configs.empty() ? "--amp-level: " : "--configs: ",
                    [&] { (void)parse_amp_level(level); });
      (void)parse_low_dtype(dtype);
    }
    (void)parse_loss_scale(a.loss_scale);
    if (a.mode != "both") with_prefix("--mode: ", [&] { (void)parse_mode(a.mode); });
  });
  use_device(a.device);
  check_writable(a.report, "--report");
  DeviceRates rates;
  nlohmann::json reports = nlohmann::json::array();
  for (const std::string& m : models)
    for (const auto& [level, dtype] : configs) {
      BenchArgs one = a;
      one.model = m;
      one.amp_level = level.empty() ? nn::zoo_model(m).training.amp_level : level;
      one.dtype = dtype;
      reports.push_back(run_one(one, rates));
      std::fflush(stdout);
    }
  if (!a.report.empty())
    write_file_replacing(a.report, (reports.size() == 1 ? reports[0] : reports).dump(2) + "\n",
                         "--report");
  return 0;
}

}  // namespace

Command register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd =
      app.add_subcommand("bench", "Time one training step of a zoo model on synthetic data");
  cmd->add_option("--model", a->model,
                  "Network, a comma list of networks, or all (each timed in turn)")
      ->capture_default_str();
  cmd->add_option("--configs", a->configs,
                  "LEVEL:DTYPE,... (e.g. O0,O2:f16,O2:bf16): each model in each, in turn (default: "
                  "--amp-level, "
                  "--dtype)");
  cmd->add_option("--amp-level", a->amp_level,
                  "O0|O1|O2|O3|auto (default: the level `mixprec train` uses for the model)");
  cmd->add_option(
         "--dtype", a->dtype,
         "bf16|f16 (`mixprec info` measures which is faster here; train's --dtype auto picks it)")
      ->capture_default_str();
  cmd->add_option("--loss-scale", a->loss_scale, "As for train (default: the level's default)")
      ->capture_default_str();
  std::string batches;
  for (const nn::ZooModel& m : nn::zoo())
    batches += (batches.empty() ? "" : ", ") + std::string(m.name) + " " +
               std::to_string(m.bench_batch_size);
  cmd->add_option("--batch-size", a->batch_size,
                  "Batch size (0: the model's benchmark batch: " + batches + ")")
      ->capture_default_str()
      ->check(integer_range(0, kNoMax, std::nullopt, "0: the model's default"));
  cmd->add_option("--steps", a->steps, "Timed steps (the median is reported)")
      ->capture_default_str()
      ->check(integer_range(1, 1000000));
  cmd->add_option("--warmup", a->warmup,
                  "Untimed steps first (then more, up to 64, while a dynamic loss scale is still "
                  "skipping steps on overflow)")
      ->capture_default_str()
      ->check(integer_range(0, 1000000));
  cmd->add_option("--threads", a->threads, "OpenMP threads (0: default)")
      ->capture_default_str()
      ->check(integer_range(0, kMaxThreads, std::nullopt, "0: default"));
  cmd->add_option("--device", a->device, kDeviceHelp)->capture_default_str();
  cmd->add_option("--mode", a->mode,
                  "pynative (eager) | graph (captured step, replayed) | both (the two alternated "
                  "step by step, "
                  "with their ratio)")
      ->capture_default_str();
  cmd->add_option("--report", a->report, "Write JSON here");
  cmd->add_flag("--profile", a->profile,
                "Also time every kernel of the timed steps and print them: op, phase, kernel, ms a "
                "step, share, and the kernel's own floor (its FLOPs at the measured GEMM rate or "
                "its tensors' bytes at the measured bandwidth) with the share of it reached "
                "(MIXPREC_PROFILE=1 prints the times and rates for any command, at its exit)");
  return {cmd, [a] { return run_bench(*a); }};
}

}  // namespace mixprec::cli
