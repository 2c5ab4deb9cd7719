// Table sections of the report page (see page_sections.h). Long event lists show the first
// PageOptions::max_rows rows and count the rest; every input string goes through a Cell (escaped).
// Gradient statistics show the latest row per parameter, in order of first appearance.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "html.h"
#include "page_sections.h"

namespace mixprec::report {
namespace {

// Low-precision dtypes get a highlight in the precision table.
std::string dtype_class(const std::string& d) {
  return d.find("f16") != std::string::npos ? "low" : "";
}

std::string more_rows_note(size_t shown, size_t total) {
  return shown < total
             ? fmt::format("<p class=\"muted\">… {} more row(s) not shown.</p>\n", total - shown)
             : "";
}

std::string precision_section(const Run& r) {
  if (r.precision_table.empty()) return "";
  std::vector<std::vector<Cell>> rows;
  for (const PrecisionEntry& e : r.precision_table) {
    std::string ops;
    for (const auto& op : e.ops) ops += (ops.empty() ? "" : ", ") + op;
    rows.push_back({{e.cell, "mono"},
                    {e.type, ""},
                    {ops, "mono"},
                    {e.compute, dtype_class(e.compute)},
                    {e.weights, dtype_class(e.weights)},
                    {e.output, dtype_class(e.output)}});
  }
  const std::string note =
      "<p class=\"muted\">What each cell computed in during one forward pass; "
      "low-precision dtypes are highlighted.</p>\n";
  return section("precision", "Precision per cell",
                 note + html_table({"cell", "type", "ops", "compute", "weights", "output"}, rows));
}

// Per-cell counts of overflow events: the answer to "which layer overflowed?".
std::string overflow_by_cell(const Run& r) {
  struct Count {
    size_t forward = 0, backward = 0, other = 0;
    double first = INFINITY;
  };
  std::vector<std::string> order;
  std::map<std::string, Count> counts;
  for (const OverflowEvent& e : r.overflow_events) {
    if (!counts.count(e.cell)) order.push_back(e.cell);
    Count& c = counts[e.cell];
    (e.phase == "forward" ? c.forward : e.phase == "backward" ? c.backward : c.other) += 1;
    if (std::isfinite(e.step)) c.first = std::min(c.first, e.step);
  }
  std::vector<std::vector<Cell>> rows;
  for (const auto& cell : order) {
    const Count& c = counts[cell];
    rows.push_back({{cell, "mono"},
                    {fmt_int(static_cast<double>(c.forward + c.backward + c.other)), "num"},
                    {fmt_int(static_cast<double>(c.forward)), "num"},
                    {fmt_int(static_cast<double>(c.backward)), "num"},
                    {std::isfinite(c.first) ? fmt_int(c.first) : "—", "num"}});
  }
  return "<h3>By cell</h3>\n" +
         html_table({"cell", "events", "forward", "backward", "first step"}, rows);
}

std::string overflow_section(const Run& r, const PageOptions& o) {
  if (r.overflow_events.empty()) return "";
  const OverflowEvent& f = r.overflow_events.front();
  std::string body = "<p>First overflow: step " + escape(fmt_int(f.step)) + ", " + escape(f.phase) +
                     " pass, cell <code>" + escape(f.cell) + "</code>, op <code>" + escape(f.op) +
                     "</code> in " + escape(f.dtype) + " (largest |input| " +
                     escape(fmt_num(f.input_max_abs)) + ").</p>\n";
  body += overflow_by_cell(r);
  std::vector<std::vector<Cell>> rows;
  const size_t shown = std::min(o.max_rows, r.overflow_events.size());
  for (size_t i = 0; i < shown; ++i) {
    const OverflowEvent& e = r.overflow_events[i];
    rows.push_back({{fmt_int(e.step), "num"},
                    {e.phase, ""},
                    {e.cell, "mono"},
                    {e.op, "mono"},
                    {e.dtype, dtype_class(e.dtype)},
                    {fmt_num(e.input_max_abs), "num"},
                    {e.detail, ""}});
  }
  body += "<h3>Events</h3>\n" +
          html_table({"step", "phase", "cell", "op", "dtype", "max |input|", "detail"}, rows) +
          more_rows_note(shown, r.overflow_events.size());
  return section("overflows", fmt::format("Overflow events ({})", r.overflow_events.size()), body);
}

std::string grad_stats_section(const Run& r) {
  if (r.grad_stats.empty()) return "";
  std::vector<std::string> order;
  std::map<std::string, const GradStat*> latest;
  for (const GradStat& g : r.grad_stats) {
    auto [it, fresh] = latest.try_emplace(g.param, &g);
    if (fresh)
      order.push_back(g.param);
    else if (!(g.step < it->second->step))
      it->second = &g;  // later rows win ties; NaN steps count as latest
  }
  double recommended = INFINITY;
  std::vector<std::vector<Cell>> rows;
  for (const auto& p : order) {
    const GradStat& g = *latest[p];
    if (std::isfinite(g.recommended_scale) && g.recommended_scale > 0)
      recommended = std::min(recommended, g.recommended_scale);
    rows.push_back(
        {{g.param, "mono"},
         {fmt_int(g.step), "num"},
         {fmt_num(g.max_abs), "num"},
         {fmt_percent(g.underflow_fraction), g.underflow_fraction > 0.01 ? "num warn" : "num"},
         {fmt_percent(g.zero_fraction), "num"},
         {fmt_scale(g.recommended_scale), "num"}});
  }
  std::string body;
  if (std::isfinite(recommended)) {
    body += "<p class=\"callout\">Recommended loss scale: <b>" + escape(fmt_scale(recommended)) +
            "</b> (the smallest of the per-parameter recommendations below, at their latest step";
    if (std::isfinite(r.loss_scale_final))
      body += "; the run ended at " + escape(fmt_scale(r.loss_scale_final));
    body += ").</p>\n";
  }
  body +=
      "<p class=\"muted\">Latest statistics per parameter gradient; underflow above 1% is "
      "highlighted.</p>\n";
  body += html_table({"parameter", "step", "max |grad|", "underflow", "zeros", "recommended scale"},
                     rows);
  return section("grad-stats", fmt::format("Gradient statistics ({} parameters)", order.size()),
                 body);
}

std::string promotions_section(const Run& r, const PageOptions& o) {
  if (r.promotions.empty()) return "";
  std::vector<std::vector<Cell>> rows;
  const size_t shown = std::min(o.max_rows, r.promotions.size());
  for (size_t i = 0; i < shown; ++i) {
    const Promotion& p = r.promotions[i];
    rows.push_back({{fmt_int(p.step), "num"},
                    {p.cell, "mono"},
                    {p.from, dtype_class(p.from)},
                    {p.to, dtype_class(p.to)}});
  }
  return section("promotions", fmt::format("Precision promotions ({})", r.promotions.size()),
                 html_table({"step", "cell", "from", "to"}, rows) +
                     more_rows_note(shown, r.promotions.size()));
}

// Counts of the trace's offending_op column (non-empty values), most frequent first.
std::string offending_ops_section(const Trace* t) {
  if (!t || !t->text.count("offending_op")) return "";
  std::map<std::string, size_t> counts;
  for (const auto& v : t->text.at("offending_op"))
    if (!v.empty()) ++counts[v];
  if (counts.empty()) return "";
  std::vector<std::pair<std::string, size_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::vector<Cell>> rows;
  for (const auto& [op, n] : sorted)
    rows.push_back({{op, "mono"}, {fmt_int(static_cast<double>(n)), "num"}});
  return section("offending-ops", "Offending ops in the trace", html_table({"op", "steps"}, rows));
}

}  // namespace

std::string table_sections(const Run& run, const Trace* trace, const PageOptions& o) {
  return precision_section(run) + overflow_section(run, o) + grad_stats_section(run) +
         promotions_section(run, o) + offending_ops_section(trace);
}

}  // namespace mixprec::report
