// The run summary JSON that `mixprec train --report` writes, and run.h reads back for `mixprec
// report`: the run's settings, per-epoch losses and test metrics, final metrics, timings, memory,
// loss-scale and overflow history, promotions, warnings, the precision table and, data parallel,
// the ranks, global batch and the gradient all-reduce's costs (rank 0's view). NaN becomes null.
#pragma once

#include <nlohmann/json.hpp>

#include "../train_run.h"
#include "../train_settings.h"

namespace mixprec::report {

// What GRAPH_MODE did (train's "graph_mode" and bench's "graph"): calls, the last plan's
// statistics.
nlohmann::json graph_mode_json(const amp::GraphModeInfo& g);
nlohmann::json run_summary_json(const cli::TrainArgs& a, const cli::RunResult& r);
// Writes run_summary_json to a.report (a file replaced atomically, or a stream) and says so.
void write_run_summary(const cli::TrainArgs& a, const cli::RunResult& r);

}  // namespace mixprec::report
