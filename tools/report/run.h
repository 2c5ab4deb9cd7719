// The run summary JSON of `mixprec train --report`, read into plain structs for the report.
// Only `model` and `amp_level` are required; every other field may be absent (numbers become NaN,
// strings empty, arrays empty) and unknown keys are ignored. A field of the wrong type is a
// mixprec::Error naming the file and the field path (e.g. "epoch_metrics[2].test_accuracy").
// JSON null counts as absent (the writer emits null for NaN).
#pragma once

#include <cmath>
#include <istream>
#include <string>
#include <vector>

namespace mixprec::report {

struct EpochMetric {
  double epoch = NAN, train_loss = NAN, test_accuracy = NAN, test_loss = NAN;
};

struct PrecisionEntry {
  std::string cell, type;
  std::vector<std::string> ops;
  std::string compute, weights, output;
};

struct OverflowEvent {
  double step = NAN;
  std::string phase, cell, op, dtype;
  double input_max_abs = NAN;
  std::string detail;
};

struct GradStat {
  double step = NAN;
  std::string param;
  double max_abs = NAN, underflow_fraction = NAN, zero_fraction = NAN, recommended_scale = NAN;
};

struct Promotion {
  double step = NAN;
  std::string cell, from, to;
};

struct Run {
  std::string path;
  // Identity and settings.
  std::string model, amp_level, dtype, loss_scale_manager, optimizer, cpu_features, mixprec_version,
      data;
  double epochs = NAN, steps = NAN, skipped_steps = NAN, batch_size = NAN, learning_rate = NAN,
         seed = NAN, threads = NAN;
  // Results.
  double loss_scale_final = NAN, train_loss = NAN, test_accuracy = NAN, test_loss = NAN,
         samples_per_second = NAN, peak_memory_bytes = NAN, wall_seconds = NAN, train_seconds = NAN;
  std::vector<double> train_loss_per_epoch;
  // Optional sections.
  std::vector<EpochMetric> epoch_metrics;
  std::vector<PrecisionEntry> precision_table;
  std::vector<OverflowEvent> overflow_events;
  std::vector<GradStat> grad_stats;
  std::vector<Promotion> promotions;
  std::vector<std::string> warnings;
};

// `name` is the file name used in errors.
Run parse_run(std::istream& in, const std::string& name);
Run read_run(const std::string& path);

}  // namespace mixprec::report
