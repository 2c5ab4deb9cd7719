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

// What a call is charged with besides its time: the FLOPs of its products (GEMMs, convolutions,
// attention; 0 for the others) and the bytes of the tensors it reads and writes (each tensor's
// span in memory, counted once), so a row's floor is flops / GEMM rate + bytes / bandwidth.
struct ProfileWork {
  double flops = 0, bytes = 0;
};

struct ProfileRow {
  std::string op, phase, impl;  // e.g. "linear", "backward_data", "onednn"
  double seconds;
  int64_t calls;
  ProfileWork work;  // summed over the calls
};
std::vector<ProfileRow> profile_rows();  // the most time first
void profile_reset();

}  // namespace mixprec::ops
