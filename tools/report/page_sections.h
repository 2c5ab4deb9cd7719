// Internal to the report page: the chart and table sections that page.cpp assembles. Each
// returns an empty string when its data is absent, never a placeholder. Not a public API.
#pragma once

#include <string>

#include "page.h"

namespace mixprec::report {

// <section> with an id, an <h2> title (escaped) and a trusted body.
std::string section(const std::string& id, const std::string& title, const std::string& body);

// Loss per step (raw and smoothed), loss scale (log2), learning rate, extra trace columns, and
// the per-epoch loss and accuracy charts.
std::string chart_sections(const Run& run, const Trace* trace, const PageOptions& o);

// Precision table, overflow events (with a per-cell summary), latest gradient statistics per
// parameter with the recommended loss scale, promotions, offending ops from the trace.
std::string table_sections(const Run& run, const Trace* trace, const PageOptions& o);

}  // namespace mixprec::report
