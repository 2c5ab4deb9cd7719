// set_context / get_context.
#include "mixprec/context.h"

#include <omp.h>

#include <string>

#include "mixprec/error.h"

namespace mixprec {
namespace {
ContextOptions g_context;
}

void set_context(const ContextOptions& options) {
  MIXPREC_CHECK(options.device.is_cpu(), "set_context: device ", options.device.str(),
                " is not available in this build (cpu only)",
                Hint{"the CUDA backend is not built; use Device::cpu()"});
  MIXPREC_CHECK(options.threads >= 0, "set_context: threads must be >= 0, got ", options.threads);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  g_context = options;
}

const ContextOptions& get_context() { return g_context; }

const char* mode_name(Mode mode) { return mode == Mode::graph ? "graph" : "pynative"; }

Mode parse_mode(std::string_view name) {
  if (name == "graph") return Mode::graph;
  MIXPREC_CHECK(name == "pynative", "unknown execution mode '", std::string(name), "'",
                Hint{"the modes are pynative (eager, the default) and graph"});
  return Mode::pynative;
}

}  // namespace mixprec
