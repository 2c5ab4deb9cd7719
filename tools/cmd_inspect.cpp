// `mixprec inspect FILE`: lists the tensors of a safetensors checkpoint (name, dtype, shape,
// element count, a value summary) and its metadata. Reads through the hardened parser, so a
// hostile file gives an error naming the field instead of a crash.
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::cli {

Command register_inspect(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto stats = std::make_shared<bool>(true);
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Print the tensors, dtypes, shapes and metadata of a checkpoint");
  cmd->add_option("file", *file, "A .safetensors file")->required();
  cmd->add_flag("!--no-stats", *stats, "Do not compute min/max/mean of each tensor");
  return {cmd, [file, stats] {
            const io::SafetensorsFile f = io::read_safetensors(*file);
            std::printf("%s: %zu tensors\n", file->c_str(), f.tensors.size());
            int64_t total = 0;
            for (const auto& [name, t] : f.tensors) {
              total += t.numel();
              std::printf("  %-40s %-5s %-18s %10lld", name.c_str(),
                          std::string(dtype_name(t.dtype())).c_str(), shape_str(t.shape()).c_str(),
                          static_cast<long long>(t.numel()));
              if (*stats && t.numel() > 0) {
                double lo = INFINITY, hi = -INFINITY, sum = 0;
                int64_t bad = 0;
                for (double v : t.to_vector<double>()) {
                  if (!std::isfinite(v)) {
                    ++bad;
                    continue;
                  }
                  lo = std::min(lo, v);
                  hi = std::max(hi, v);
                  sum += v;
                }
                std::printf("  min %-11.4g max %-11.4g mean %-11.4g", lo, hi,
                            sum / static_cast<double>(t.numel() - bad));
                if (bad) std::printf(" non-finite %lld", static_cast<long long>(bad));
              }
              std::printf("\n");
            }
            std::printf("%lld elements in all\n", static_cast<long long>(total));
            if (!f.metadata.empty()) {
              std::printf("metadata:\n");
              for (const auto& [k, v] : f.metadata)
                std::printf("  %s = %s\n", k.c_str(), v.c_str());
            }
            for (const auto& w : f.warnings) std::printf("warning: %s\n", w.c_str());
            return 0;
          }};
}

}  // namespace mixprec::cli
