// The report document (see page.h): head with inline CSS and a Content-Security-Policy that
// blocks every fetch and script, the run summary header and cards, warnings and notes, then the
// chart and table sections (page_charts.cpp, page_tables.cpp) and the run details.
#include "page.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "html.h"
#include "page_sections.h"

namespace mixprec::report {
namespace {

constexpr const char* kStyle = R"css(
:root { --fg: #1b1f24; --muted: #5b6470; --line: #d8dde3; --bg: #ffffff; --card: #f5f7fa; --low: #fff0d6; --warn: #fde2e1; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub, .muted, figcaption { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; margin: 18px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.card .k { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 20px; font-weight: 600; margin-top: 2px; }
.card .d { font-size: 12px; color: var(--muted); }
.warnings { background: var(--warn); border: 1px solid #f3b5b2; border-radius: 6px; padding: 8px 14px; }
.warnings + .notes { margin-top: 10px; }
.notes { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; }
.callout { background: var(--low); border-radius: 6px; padding: 8px 12px; }
figure { margin: 14px 0 22px; }
figcaption { font-size: 12px; margin-top: 2px; }
svg.chart { width: 100%; height: auto; display: block; font-family: inherit; }
svg .title { font-size: 15px; font-weight: 600; fill: var(--fg); }
svg .legend, svg .tick { font-size: 11px; fill: var(--muted); }
svg .axis-title { font-size: 12px; fill: var(--fg); }
svg .plot { fill: #fbfcfd; stroke: #9aa4af; }
svg .grid { stroke: #e6e9ed; }
svg .strip { fill: #f1f3f5; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 10px; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--card); font-weight: 600; }
tbody tr:nth-child(even) { background: #fafbfc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.mono, code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
td.low { background: var(--low); }
td.warn { background: var(--warn); }
table.kv td:first-child { color: var(--muted); width: 220px; }
footer { margin-top: 36px; font-size: 12px; color: var(--muted); }
)css";

std::string card(const std::string& key, const std::string& value, const std::string& detail = "") {
  return "<div class=\"card\"><div class=\"k\">" + escape(key) + "</div><div class=\"v\">" +
         escape(value) + "</div>" +
         (detail.empty() ? "" : "<div class=\"d\">" + escape(detail) + "</div>") + "</div>\n";
}

std::string header(const Run& r, const Trace* t) {
  std::string sub = r.amp_level + (r.dtype.empty() ? "" : " · " + r.dtype);
  if (!r.loss_scale_manager.empty()) sub += " · loss scale " + r.loss_scale_manager;
  if (!r.optimizer.empty())
    sub += " · " + r.optimizer +
           (std::isfinite(r.learning_rate) ? " lr " + fmt_num(r.learning_rate) : "");
  if (std::isfinite(r.batch_size)) sub += " · batch " + fmt_int(r.batch_size);
  if (std::isfinite(r.epochs)) sub += " · " + fmt_int(r.epochs) + " epoch(s)";
  std::string out = "<header>\n<h1>mixprec run report: " + escape(r.model) +
                    "</h1>\n<div class=\"sub\">" + escape(sub) +
                    "</div>\n<div class=\"sub\">from <code>" + escape(r.path) + "</code>" +
                    (t ? " and <code>" + escape(t->path) + "</code>" : "") + "</div>\n</header>\n";
  return out;
}

std::string cards(const Run& r) {
  std::string out = "<div class=\"cards\">\n";
  out += card("model", r.model, r.amp_level + (r.dtype.empty() ? "" : " / " + r.dtype));
  out +=
      card("test accuracy", std::isfinite(r.test_accuracy) ? fmt_percent(r.test_accuracy, 4) : "—",
           std::isfinite(r.test_loss) ? "test loss " + fmt_num(r.test_loss) : "");
  out += card("final train loss", fmt_num(r.train_loss), "mean over the last epoch");
  out += card(
      "throughput",
      std::isfinite(r.samples_per_second) ? fmt_num(std::round(r.samples_per_second)) + " /s" : "—",
      "training samples per second");
  out += card("peak memory", fmt_bytes(r.peak_memory_bytes), "tensor allocations");
  const bool have_skips = std::isfinite(r.skipped_steps) && std::isfinite(r.steps) && r.steps > 0;
  out += card("skipped steps", fmt_int(r.skipped_steps),
              have_skips
                  ? "of " + fmt_int(r.steps) + " (" + fmt_percent(r.skipped_steps / r.steps) + ")"
                  : "");
  const std::string scale = fmt_scale(r.loss_scale_final);  // "65536 (2^16)"
  const size_t paren = scale.find(" (");
  out += card(
      "final loss scale", scale.substr(0, paren),
      paren == std::string::npos ? "" : "= " + scale.substr(paren + 2, scale.size() - paren - 3));
  out +=
      card("wall time", std::isfinite(r.wall_seconds) ? fmt_num(r.wall_seconds, 3) + " s" : "—",
           std::isfinite(r.train_seconds) ? "training " + fmt_num(r.train_seconds, 3) + " s" : "");
  return out + "</div>\n";
}

// Notes derived from the numbers: skipped fraction, non-finite losses, unknown trace columns.
std::vector<std::string> derived_notes(const Run& r, const Trace* t) {
  std::vector<std::string> notes;
  if (std::isfinite(r.skipped_steps) && r.skipped_steps > 0 && std::isfinite(r.steps) &&
      r.steps > 0)
    notes.push_back(fmt::format(
        "{} of {} steps ({}) were skipped: their gradients held inf/NaN, so the update was "
        "dropped and the loss scale lowered.",
        fmt_int(r.skipped_steps), fmt_int(r.steps), fmt_percent(r.skipped_steps / r.steps)));
  if (t && t->has("loss")) {
    const auto& l = t->col("loss");
    const auto bad = std::count_if(l.begin(), l.end(), [](double v) { return !std::isfinite(v); });
    if (bad)
      notes.push_back(
          fmt::format("{} step(s) had a non-finite loss in the forward pass (not an underflow "
                      "problem: look at the overflow events).",
                      bad));
  }
  if (t && !t->ignored.empty()) {
    std::string cols;
    for (const auto& c : t->ignored) cols += (cols.empty() ? "" : ", ") + c;
    notes.push_back("trace columns not shown: " + cols);
  }
  return notes;
}

std::string notes_box(const Run& r, const Trace* t) {
  std::string out;
  if (!r.warnings.empty()) {
    out += "<div class=\"warnings\"><b>Warnings</b><ul>\n";
    for (const auto& w : r.warnings) out += "<li>" + escape(w) + "</li>\n";
    out += "</ul></div>\n";
  }
  const auto notes = derived_notes(r, t);
  if (!notes.empty()) {
    out += "<div class=\"notes\"><b>Notes</b><ul>\n";
    for (const auto& n : notes) out += "<li>" + escape(n) + "</li>\n";
    out += "</ul></div>\n";
  }
  return out;
}

std::string details(const Run& r) {
  std::vector<std::vector<Cell>> rows;
  auto add = [&](const char* k, const std::string& v) {
    if (!v.empty() && v != "—") rows.push_back({{k, ""}, {v, ""}});
  };
  add("model", r.model);
  add("amp_level", r.amp_level);
  add("dtype", r.dtype);
  add("loss_scale_manager", r.loss_scale_manager);
  add("optimizer", r.optimizer);
  add("learning_rate", fmt_num(r.learning_rate, 6));
  add("batch_size", fmt_int(r.batch_size));
  add("epochs", fmt_int(r.epochs));
  add("steps", fmt_int(r.steps));
  add("seed", fmt_int(r.seed));
  add("threads", fmt_int(r.threads));
  add("data", r.data);
  add("cpu_features", r.cpu_features);
  add("mixprec_version", r.mixprec_version);
  return section("details", "Run details", html_table({"key", "value"}, rows, "kv"));
}

}  // namespace

std::string section(const std::string& id, const std::string& title, const std::string& body) {
  return "<section id=\"" + id + "\">\n<h2>" + escape(title) + "</h2>\n" + body + "</section>\n";
}

std::string render_page(const Run& run, const Trace* trace, const PageOptions& options) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>mixprec "
      "report: " +
      escape(run.model) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  out += header(run, trace);
  out += cards(run);
  out += notes_box(run, trace);
  out += chart_sections(run, trace, options);
  out += table_sections(run, trace, options);
  out += details(run);
  out += "<footer>Generated by <code>mixprec report</code>" +
         (run.mixprec_version.empty() ? std::string()
                                      : " for a run of mixprec " + escape(run.mixprec_version)) +
         ". Self-contained: no scripts, no external resources.</footer>\n";
  return out + "</main>\n</body>\n</html>\n";
}

}  // namespace mixprec::report
