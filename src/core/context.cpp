// set_context / get_context.
#include "mixprec/context.h"

#include <omp.h>

#include <string>

#include "mixprec/cuda.h"
#include "mixprec/error.h"

namespace mixprec {
namespace {
ContextOptions g_context;
}

void set_context(const ContextOptions& options) {
  // Throws, saying what is missing (the backend in this build, a driver, a GPU) and what to do.
  if (options.device.is_cuda()) cuda::check_device(options.device);
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
