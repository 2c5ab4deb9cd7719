// The kernel profile: time per (op, phase, kernel), summed over the dispatches made while it is
// on. MIXPREC_PROFILE=1 turns it on for a whole process and prints the table at exit; a program
// may turn it on around the work it wants measured instead (`mixprec bench --profile`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixprec::ops {

bool profiling();
void set_profiling(bool on);

struct ProfileRow {
  std::string op, phase, impl;  // e.g. "linear", "backward_data", "onednn"
  double seconds;
  int64_t calls;
};
std::vector<ProfileRow> profile_rows();  // the most time first
void profile_reset();

}  // namespace mixprec::ops
