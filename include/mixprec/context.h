// The global execution context (MindSpore's ms.set_context): the default device and the number
// of CPU threads. It holds no AMP state (that is per thread, behind RAII scopes).
#pragma once

#include "mixprec/device.h"

namespace mixprec {

struct ContextOptions {
  Device device = Device::cpu();
  int threads = 0;  // 0: leave OpenMP's default (OMP_NUM_THREADS or all cores)
};

// Validates and applies the options; throws for a device this build cannot run on.
void set_context(const ContextOptions& options);
const ContextOptions& get_context();

}  // namespace mixprec
