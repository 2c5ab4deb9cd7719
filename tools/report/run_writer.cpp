// Run summary JSON writer (see run_writer.h); the field names are those run.cpp reads.
#include "run_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../output_file.h"
#include "mixprec/context.h"
#include "mixprec/cpu_features.h"
#include "mixprec/version.h"

namespace mixprec::report {
namespace {

using cli::RunResult;
using cli::TrainArgs;
using nlohmann::json;

json overflow_json(const train::OverflowGuard& guard) {
  json events = json::array();
  for (const train::OverflowRecord& r : guard.events())
    events.push_back({{"step", r.step},
                      {"phase", r.event.phase},
                      {"cell", r.event.cell.empty() ? "(network)" : r.event.cell},
                      {"op", r.event.op_name},
                      {"dtype", std::string(dtype_name(r.event.dtype))},
                      {"input_max_abs", r.event.input_max_abs},
                      {"detail", r.event.detail},
                      {"nonfinite_count", r.event.nonfinite_count},
                      {"loss_finite", r.loss_finite},
                      {"loss_scale", r.loss_scale}});
  return events;
}

// Data parallel: how the gradients travelled and what waiting for them cost (rank 0's view).
json parallel_json(const TrainArgs& a, const nn::DistributedGradReducer& red, const RunResult& r) {
  const nn::GradReducerStats& st = red.stats();
  const double reductions = static_cast<double>(std::max<int64_t>(st.reductions, 1));
  const double started = static_cast<double>(st.buckets_started_early) / (reductions * st.buckets);
  return {{"ranks", r.par.ranks},
          {"grad_allreduce_dtype", a.grad_allreduce_dtype},
          {"overlap", a.grad_overlap},
          {"buckets", st.buckets},
          {"bytes_per_step", st.bytes_per_reduction},
          {"reductions", st.reductions},
          {"pack_seconds", st.pack_seconds},
          {"wait_seconds", st.wait_seconds},
          {"sync_seconds", st.sync_seconds},
          {"wait_share_of_training",
           (st.wait_seconds + st.sync_seconds) / std::max(r.train_seconds, 1e-9)},
          {"buckets_started_during_backward", started},
          {"buckets_done_before_backward_ended",
           static_cast<double>(st.buckets_done_early) / (reductions * st.buckets)},
          {"bytes_done_before_backward_ended",
           static_cast<double>(st.bytes_done_early) /
               (reductions * static_cast<double>(std::max<int64_t>(st.bytes_per_reduction, 1)))},
          {"bucket_mb", a.grad_bucket_mb},
          {"check_ranks", a.check_ranks}};
}

json promotions_json(const train::OverflowGuard& guard) {
  json promos = json::array();
  for (const train::Promotion& p : guard.promotions())
    promos.push_back({{"step", p.step}, {"cell", p.cell}, {"from", p.from}, {"to", p.to}});
  return promos;
}

json precision_json(const std::vector<amp::PrecisionRow>& rows) {
  json table = json::array();
  for (const amp::PrecisionRow& p : rows)
    table.push_back({{"cell", p.cell},
                     {"type", p.type},
                     {"ops", p.ops},
                     {"compute", p.compute},
                     {"weights", p.weights},
                     {"output", p.output}});
  return table;
}

}  // namespace

json graph_mode_json(const amp::GraphModeInfo& g) {
  return {{"replays", g.replays},
          {"captures", g.captures},
          {"eager_steps", g.eager_steps},
          {"fallback", g.fallback},
          {"kernels", g.plan.kernels},
          {"fused", g.plan.fused},
          {"casts_elided", g.plan.casts_elided},
          {"arena_bytes", g.plan.arena_bytes},
          {"planned_buffers", g.plan.planned_buffers},
          {"unplanned_bytes", g.plan.unplanned_bytes},
          {"held_bytes", g.plan.held_bytes},
          {"eager_peak_bytes", g.plan.eager_peak_bytes}};
}

namespace {

// The run's progress and results: steps, skips, losses, test metrics, loss scale.
void add_results(json& j, const TrainArgs& a, const RunResult& r) {
  const cli::History& h = r.history;
  j["epochs"] = a.epochs;
  j["mode"] = a.mode;
  const amp::GraphModeInfo& g = r.step.graph_mode_info();
  if (parse_mode(a.mode) == Mode::graph) j["graph_mode"] = graph_mode_json(g);
  j["steps"] = h.total_steps;
  j["steps_this_run"] = h.steps_this_run;
  j["resumed_at_step"] = r.resumed_at >= 0 ? json(r.resumed_at) : json(nullptr);
  j["skipped_steps"] = r.step.skipped_steps();
  j["skipped_steps_this_run"] = h.skipped_this_run;
  j["loss_scale_final"] =
      r.step.loss_scale_manager() ? r.step.loss_scale_manager()->get_loss_scale() : 1.0;
  j["loss_scale_manager"] =
      r.step.loss_scale_manager() ? r.step.loss_scale_manager()->description() : "none";
  j["train_loss"] = h.epoch_losses.empty() ? NAN : h.epoch_losses.back();
  j["train_loss_per_epoch"] = h.epoch_losses;
  // A language model has no accuracy: its evaluation is the loss, also in bits per byte.
  const bool evaluated = r.metrics.contains("Loss");
  j["test_accuracy"] =
      r.metrics.contains("Accuracy") ? json(r.metrics.at("Accuracy")) : json(nullptr);
  j["test_loss"] = evaluated ? json(r.metrics.at("Loss")) : json(nullptr);
  if (evaluated && !r.metrics.contains("Accuracy"))
    j["test_bits_per_byte"] = r.metrics.at("Loss") / std::log(2.0);
  j["samples_per_second"] = r.samples_per_second;
  j["peak_memory_bytes"] = r.peak;
  j["wall_seconds"] = r.wall;
  j["train_seconds"] = r.train_seconds;
}

// The settings the run was started with, and where it ran.
void add_settings(json& j, const TrainArgs& a, const RunResult& r) {
  j["batch_size"] = a.batch_size;
  j["global_batch_size"] = a.batch_size * r.par.ranks;
  j["ranks"] = r.par.ranks;
  if (const nn::DistributedGradReducer* red = r.step.grad_reducer())
    j["data_parallel"] = parallel_json(a, *red, r);
  j["optimizer"] = r.optimizer;
  j["learning_rate"] = a.opt.lr;
  if (!r.recipe.is_null()) j["recipe"] = r.recipe;
  j["seed"] = a.seed;
  j["threads"] = r.threads;
  j["keep_batchnorm_fp32"] = a.keep_bn;
  j["data"] = a.data;
  j["mixprec_version"] = MIXPREC_VERSION;
  j["cpu_features"] = describe(cpu_features());
}

}  // namespace

json run_summary_json(const TrainArgs& a, const RunResult& r) {
  const AmpLevel level = parse_amp_level(a.amp_level);
  json j;
  j["model"] = a.model;
  j["amp_level"] = std::string(amp_level_name(level));
  j["dtype"] = level == AmpLevel::O0 ? "f32" : a.dtype;
  add_results(j, a, r);
  add_settings(j, a, r);
  j["epoch_metrics"] = r.history.epoch_metrics;
  j["grad_stats"] = r.history.grad_stats;
  j["overflow_events"] = overflow_json(r.guard);
  j["overflow_event_count"] = r.guard.event_count();
  j["promotions"] = promotions_json(r.guard);
  j["warnings"] = r.guard.warnings();
  j["on_overflow"] = a.on_overflow;
  j["check_numerics"] = a.check_numerics;
  if (!r.guard.stop_reason().empty()) j["stopped"] = r.guard.stop_reason();
  if (!r.interrupted.empty()) j["interrupted"] = r.interrupted;
  j["precision_table"] = precision_json(r.precision_rows);
  return j;
}

void write_run_summary(const TrainArgs& a, const RunResult& r) {
  cli::write_file_replacing(a.report, run_summary_json(a, r).dump(2) + "\n", "--report");
  std::printf("wrote report %s\n", a.report.c_str());
}

}  // namespace mixprec::report
