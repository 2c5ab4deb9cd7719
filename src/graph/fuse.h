// GRAPH_MODE's fusion pass over a captured plan's kernels (internal to src/graph). It rewrites
// recorded kernel calls (ops::RecordedCall) into fused ones and empties the calls they absorb;
// the plan drops the empty ones after memory planning. Every fusion keeps eager's bits: see
// docs/design.md, "GRAPH_MODE", and fuse.cpp for the patterns and their conditions.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::graph::fusion {

// What the plan knows about one storage the recorded kernels use.
struct Holding {
  bool internal = false;         // made in the step, held by nothing outside the recorded kernels
  bool output = false;           // made in the step, one of the plan's outputs (never fused away)
  std::vector<int64_t> kernels;  // the kernels that hold a view of it, ascending
  int64_t first_touch = -1, last_touch = -1;  // kernels that reached its memory (data_ptr())
};
using Holdings = std::unordered_map<const Storage*, Holding>;

// Fuses what it can in `kernels`, given who holds each storage; returns the number of kernel
// calls it removed (their slots are left empty). verbose: one line per fusion on stderr.
int64_t fuse(std::vector<std::function<void()>>& kernels, const Holdings& holdings, bool verbose);

}  // namespace mixprec::graph::fusion
