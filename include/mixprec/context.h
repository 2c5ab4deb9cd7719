// The global execution context (MindSpore's ms.set_context): the default device, the number of
// CPU threads and the execution mode. It holds no AMP state (that is per thread, behind RAII scopes).
#pragma once

#include <string_view>

#include "mixprec/device.h"

namespace mixprec {

// MindSpore's execution modes. pynative: every op runs as it is called (eager). graph: a train
// step (amp::TrainOneStepCell) is captured once per input shape/dtype and then replayed as a
// static plan with planned memory (src/graph, docs/design.md "GRAPH_MODE"); bitwise equal to
// pynative. Steps that cannot be captured run eagerly (MIXPREC_VERBOSE=1 says why).
enum class Mode { pynative, graph };

struct ContextOptions {
  Device device = Device::cpu();
  int threads = 0;  // 0: leave OpenMP's default (OMP_NUM_THREADS or all cores)
  Mode mode = Mode::pynative;
};

// "pynative" / "graph", and back (throws for another name).
const char* mode_name(Mode mode);
Mode parse_mode(std::string_view name);

// Validates and applies the options; throws for a device this build cannot run on.
void set_context(const ContextOptions& options);
const ContextOptions& get_context();

}  // namespace mixprec
