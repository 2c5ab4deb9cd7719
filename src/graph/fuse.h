// GRAPH_MODE's fusion pass over a captured plan's kernels (internal to src/graph). It rewrites
// recorded kernel calls (ops::RecordedCall) into fused ones and empties the calls they absorb;
// the plan drops the empty ones after memory planning. Every fusion keeps eager's bits: see
// docs/design.md, "GRAPH_MODE", and fuse.cpp for the patterns and their conditions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::graph::fusion {

// What the plan knows about one storage the recorded kernels use.
struct Holding {
  bool internal = false;         // made in the step, held by nothing outside the recorded kernels
  bool output = false;           // made in the step, one of the plan's outputs (never fused away)
  std::vector<int64_t> kernels;  // the kernels that hold a view of it, ascending
  // The kernels that may write it, ascending: those that reported writing it (capture_writes),
  // and each holder that reported no writes at all.
  std::vector<int64_t> writers;
  int64_t first_touch = -1, last_touch = -1;  // kernels that reached its memory (data_ptr())
};
using Holdings = std::unordered_map<const Storage*, Holding>;

// Fuses what it can in `kernels`, given who holds each storage; returns the number of kernel
// calls it removed (their slots are left empty). verbose: one line per fusion on stderr.
int64_t fuse(std::vector<std::function<void()>>& kernels, const Holdings& holdings, bool verbose);

// A storage whose bytes become another's: the result of a cast cast straight back, which is the
// first cast's source, bit for bit.
struct Alias {
  std::shared_ptr<Storage> storage;  // the second cast's result
  std::shared_ptr<Storage> target;   // the first cast's source ...
  int64_t byte_offset = 0;           // ... from this byte on
  int64_t last = 0;                  // the last kernel that uses `storage`: target lives as long
};

// Removes each cast of a 16-bit tensor x to f32 whose result (or a reshape of it) is cast straight
// back to x's dtype in the same memory order (the second cast gives x's bits), when nothing
// writes x until the second cast's result is last used and nothing but that cast writes the
// result; the result then aliases x.
// Appends the aliases to `aliases`; returns the number of casts removed (slots left empty).
int64_t elide_round_trip_casts(std::vector<std::function<void()>>& kernels, const Holdings& holdings,
                               std::vector<Alias>& aliases, bool verbose);

}  // namespace mixprec::graph::fusion
