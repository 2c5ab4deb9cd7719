// `mixprec info`: what this build and this machine offer (version, CPU features, converter
// path, oneDNN) and the f32, bf16 and f16 rates measured here, so that a bug report or a benchmark
// names what it ran on and a user sees what O2 buys here.
#include <omp.h>

#include <cstdio>

#include "commands.h"
#include "mixprec/amp/rates.h"
#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "mixprec/version.h"

#if MIXPREC_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace mixprec::cli {

Command register_info(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("info", "Print the build configuration and the CPU features in use");
  return {cmd, [] {
            std::printf("mixprec %s\n", MIXPREC_VERSION);
            std::printf("cpu features (detected): %s\n", describe(detect_cpu_features()).c_str());
            std::printf("cpu features (in use):   %s\n", describe(cpu_features()).c_str());
            std::printf("f32<->f16/bf16 converters: %s\n",
                        std::string(isa_name(active_convert_isa())).c_str());
#if MIXPREC_WITH_ONEDNN
            const dnnl_version_t* v = dnnl_version();
            std::printf("oneDNN: %d.%d.%d (cpu runtime %s)\n", v->major, v->minor, v->patch,
                        v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
#else
    std::printf("oneDNN: disabled at build time (reference kernels only)\n");
#endif
            std::printf("measured on this machine, %d threads (what O2 buys here):\n%s\n",
                        omp_get_max_threads(), amp::measure_precision_rates().describe().c_str());
            return 0;
          }};
}

}  // namespace mixprec::cli
