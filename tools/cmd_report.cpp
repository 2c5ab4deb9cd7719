// `mixprec report RUN.json [--trace trace.csv] -o report.html`: renders the JSON summary of
// `mixprec train --report` (and its per-step --trace CSV) as one self-contained HTML page.
// Reading and rendering live in tools/report/; this file parses the command line and writes the
// page to a temporary file that is renamed into place, so a failed run leaves no half page.
#include <cstdio>
#include <optional>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/error.h"
#include "output_file.h"
#include "report/page.h"
#include "train_common.h"

namespace mixprec::cli {
namespace {

struct ReportArgs {
  std::string run, trace, output;
  size_t max_points = 2000;
};

int run_report(const ReportArgs& a) {
  as_usage_error([&] {
    MIXPREC_CHECK(a.max_points >= 16, "--max-points: expected at least 16, got ", a.max_points);
  });
  const report::Run run = report::read_run(a.run);
  std::optional<report::Trace> trace;
  if (!a.trace.empty()) trace = report::read_trace(a.trace);
  const std::string html =
      report::render_page(run, trace ? &*trace : nullptr, {.max_points = a.max_points});
  write_file_replacing(a.output, html, "-o");
  std::printf("wrote %s (%zu kB)%s\n", a.output.c_str(), (html.size() + 999) / 1000,
              trace ? "" : "; pass --trace FILE for per-step curves");
  return 0;
}

}  // namespace

Command register_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Render a run (train --report JSON, optional --trace CSV) as a self-contained HTML page");
  cmd->add_option("run", a->run, "The JSON written by `mixprec train --report FILE`")->required();
  cmd->add_option("--trace", a->trace, "The per-step CSV written by `mixprec train --trace FILE`");
  cmd->add_option("-o,--output", a->output, "Where to write the HTML page")->required();
  cmd->add_option("--max-points", a->max_points,
                  "Downsample per-step curves longer than this (min/max buckets)")
      ->capture_default_str()
      ->check(integer_range(16));
  return {cmd, [a] { return run_report(*a); }};
}

}  // namespace mixprec::cli
