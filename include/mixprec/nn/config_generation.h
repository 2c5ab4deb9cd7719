// A process-wide counter of changes to how cells compute: bumped by Cell::to_float, by a change of
// a cell's train mode and by every AMP level applied (auto_mixed_precision and friends). A
// GRAPH_MODE plan (amp::TrainOneStepCell) captured under one generation is never replayed under
// another, so, e.g., OverflowGuard's promotion of a cell to fp32 takes effect in graph mode too.
#pragma once

#include <cstdint>

namespace mixprec::nn {

uint64_t config_generation();
void bump_config_generation();

}  // namespace mixprec::nn
