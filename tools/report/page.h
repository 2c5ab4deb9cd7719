// The `mixprec report` page: a self-contained HTML document (inline CSS and inline SVG, no
// scripts, no external fonts, images or links; a Content-Security-Policy forbids loading any)
// summarising one training run. Sections render only when their data is present. It reads
// nothing itself: the caller loads the run JSON and, optionally, the trace CSV.
#pragma once

#include <cstddef>
#include <string>

#include "csv.h"
#include "run.h"

namespace mixprec::report {

struct PageOptions {
  size_t max_points = 2000;  // per-step series longer than this are min/max downsampled
  size_t max_rows = 200;     // longest event table shown; the rest is counted
};

// `trace` may be null (then the loss chart uses the per-epoch losses of the JSON).
std::string render_page(const Run& run, const Trace* trace, const PageOptions& options = {});

}  // namespace mixprec::report
