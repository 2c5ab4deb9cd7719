// Chart sections of the report page (see page_sections.h): per-step charts from the trace and
// per-epoch charts from the run JSON. Long series are min/max downsampled to
// PageOptions::max_points; skipped and overflow steps are drawn as tick strips under the plot.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "html.h"
#include "page_sections.h"
#include "svg_chart.h"

namespace mixprec::report {
namespace {

constexpr const char* kBlue = "#1f77b4";
constexpr const char* kDarkBlue = "#0b3d91";
constexpr const char* kOrange = "#ff7f0e";
constexpr const char* kGreen = "#2ca02c";
constexpr const char* kRed = "#d62728";
constexpr const char* kPurple = "#9467bd";

std::string figure(const ChartSpec& spec, const std::string& caption) {
  return "<figure>\n" + render_chart(spec) + "<figcaption>" + caption +
         "</figcaption>\n</figure>\n";
}

// x of per-step series: the step column, else 1, 2, ... rows.
std::vector<double> step_axis(const Trace& t) {
  if (t.has("step")) return t.col("step");
  std::vector<double> x(t.rows);
  std::iota(x.begin(), x.end(), 1.0);
  return x;
}

std::vector<double> flagged_steps(const Trace& t, std::string_view column,
                                  const std::vector<double>& x) {
  std::vector<double> out;
  if (!t.has(column)) return out;
  const auto& c = t.col(column);
  for (size_t i = 0; i < c.size(); ++i)
    if (std::isfinite(c[i]) && c[i] != 0) out.push_back(x[i]);
  return out;
}

// Tick strips for skipped and overflow steps, and a caption fragment with their counts.
std::vector<MarkStrip> step_strips(const Trace& t, const std::vector<double>& x,
                                   std::string& caption) {
  std::vector<MarkStrip> strips;
  if (t.has("skipped")) {
    strips.push_back({"skipped", kRed, flagged_steps(t, "skipped", x)});
    caption += fmt::format("; {} skipped step(s) marked in red", strips.back().x.size());
  }
  if (t.has("overflow")) {
    strips.push_back({"overflow", kOrange, flagged_steps(t, "overflow", x)});
    caption +=
        fmt::format("; {} step(s) with inf/NaN gradients marked in orange", strips.back().x.size());
  }
  return strips;
}

// When a few spikes would flatten the curve, clip the y axis at 1.5 x the 99th percentile.
void clip_spikes(ChartSpec& spec, const std::vector<double>& y, std::string& caption) {
  std::vector<double> v;
  for (const double e : y)
    if (std::isfinite(e)) v.push_back(e);
  if (v.size() < 20) return;
  std::sort(v.begin(), v.end());
  const double p99 = v[v.size() * 99 / 100], top = v.back();
  if (p99 <= 0 || top <= 3 * p99) return;
  spec.y_range = std::pair{std::min(v.front(), 0.0), 1.5 * p99};
  caption +=
      fmt::format("; y axis clipped at {} (spikes reach {})", fmt_num(1.5 * p99), fmt_num(top));
}

std::string downsample_note(size_t n, const PageOptions& o) {
  return n > o.max_points ? fmt::format(" (downsampled to min/max of {} buckets)", o.max_points / 2)
                          : "";
}

std::string loss_chart(const Trace& t, const PageOptions& o) {
  const std::vector<double> x = step_axis(t);
  const std::vector<double>& y = t.col("loss");
  const double window = std::clamp(static_cast<double>(y.size()) / 50.0, 5.0, 500.0);
  const size_t bad = std::count_if(y.begin(), y.end(), [](double v) { return !std::isfinite(v); });
  std::string caption =
      fmt::format("{} steps{}; smoothed: exponential moving average over ~{:.0f} steps", y.size(),
                  downsample_note(y.size(), o), window);
  if (bad) caption += fmt::format("; {} non-finite loss value(s) left out", bad);
  ChartSpec spec{
      .title = "Training loss per step", .x_label = "step", .y_label = "loss", .integer_x = true};
  auto [rx, ry] = downsample_minmax(x, y, o.max_points);
  auto [sx, sy] = downsample_minmax(x, smooth_ema(y, window), o.max_points);
  spec.series.push_back(
      {.name = "loss (raw)", .color = kBlue, .x = rx, .y = ry, .width = 1, .opacity = 0.45});
  spec.series.push_back(
      {.name = "loss (smoothed)", .color = kDarkBlue, .x = sx, .y = sy, .width = 2.2});
  spec.strips = step_strips(t, x, caption);
  clip_spikes(spec, y, caption);
  return figure(spec, escape(caption));
}

std::string scale_chart(const Trace& t, const PageOptions& o) {
  const std::vector<double> x = step_axis(t);
  const std::vector<double>& y = t.col("scale");
  size_t down = 0, up = 0;
  for (size_t i = 1; i < y.size(); ++i) {
    down += y[i] < y[i - 1];
    up += y[i] > y[i - 1];
  }
  std::string caption =
      fmt::format("{} decrease(s), {} increase(s){}", down, up, downsample_note(y.size(), o));
  ChartSpec spec{.title = "Loss scale per step",
                 .x_label = "step",
                 .y_label = "loss scale",
                 .log2_y = true,
                 .integer_x = true};
  auto [dx, dy] = downsample_minmax(x, y, o.max_points);
  spec.series.push_back({.name = "loss scale", .color = kPurple, .x = dx, .y = dy, .width = 2});
  spec.strips = step_strips(t, x, caption);
  return figure(spec, escape(caption));
}

// A plain per-step chart of one trace column (learning rate, casts, ...), if it varies.
std::string column_chart(const Trace& t, std::string_view column, const std::string& title,
                         const std::string& y_label, const PageOptions& o) {
  const std::vector<double>& y = t.col(column);
  double lo = INFINITY, hi = -INFINITY;
  for (const double v : y)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo < hi)) return "";  // no data, or a constant (the run details say it)
  ChartSpec spec{
      .title = title, .x_label = "step", .y_label = y_label, .integer_x = true, .height = 240};
  auto [dx, dy] = downsample_minmax(step_axis(t), y, o.max_points);
  spec.series.push_back(
      {.name = std::string(column), .color = kGreen, .x = dx, .y = dy, .width = 1.8});
  return figure(spec,
                escape(fmt::format("trace column '{}'{}", column, downsample_note(y.size(), o))));
}

struct EpochSeries {
  std::vector<double> epoch, train_loss, test_loss, accuracy;
};

// Per-epoch values: epoch_metrics when present, else train_loss_per_epoch plus the final test loss.
EpochSeries epoch_series(const Run& r) {
  EpochSeries s;
  for (size_t i = 0; i < r.epoch_metrics.size(); ++i) {
    const EpochMetric& m = r.epoch_metrics[i];
    s.epoch.push_back(std::isfinite(m.epoch) ? m.epoch : static_cast<double>(i + 1));
    s.train_loss.push_back(m.train_loss);
    s.test_loss.push_back(m.test_loss);
    s.accuracy.push_back(m.test_accuracy);
  }
  if (!s.epoch.empty()) return s;
  for (size_t i = 0; i < r.train_loss_per_epoch.size(); ++i) {
    s.epoch.push_back(static_cast<double>(i + 1));
    s.train_loss.push_back(r.train_loss_per_epoch[i]);
    s.test_loss.push_back(i + 1 == r.train_loss_per_epoch.size() ? r.test_loss : NAN);
  }
  return s;
}

bool any_finite(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
}

std::string epoch_charts(const Run& r, bool have_trace) {
  const EpochSeries s = epoch_series(r);
  std::string out;
  const double last = s.epoch.empty() ? 1 : *std::max_element(s.epoch.begin(), s.epoch.end());
  const std::pair<double, double> xr{std::min(1.0, s.epoch.empty() ? 1.0 : s.epoch.front()) - 0.25,
                                     last + 0.25};
  if ((!have_trace && any_finite(s.train_loss)) || any_finite(s.test_loss)) {
    ChartSpec spec{.title = "Loss per epoch",
                   .x_label = "epoch",
                   .y_label = "loss",
                   .integer_x = true,
                   .x_range = xr,
                   .height = 280};
    spec.series.push_back({.name = "train (mean over the epoch)",
                           .color = kBlue,
                           .x = s.epoch,
                           .y = s.train_loss,
                           .width = 2,
                           .dots = true});
    if (any_finite(s.test_loss))
      spec.series.push_back({.name = "test",
                             .color = kOrange,
                             .x = s.epoch,
                             .y = s.test_loss,
                             .width = 2,
                             .dots = true});
    out += figure(spec, have_trace
                            ? "from the run JSON"
                            : "from the run JSON (no --trace given: per-step loss unavailable)");
  }
  if (any_finite(s.accuracy)) {
    ChartSpec spec{.title = "Test accuracy per epoch",
                   .x_label = "epoch",
                   .y_label = "accuracy",
                   .integer_x = true,
                   .x_range = xr,
                   .height = 280};
    spec.series.push_back({.name = "test accuracy",
                           .color = kGreen,
                           .x = s.epoch,
                           .y = s.accuracy,
                           .width = 2,
                           .dots = true});
    out += figure(spec, "from epoch_metrics in the run JSON");
  }
  return out;
}

}  // namespace

std::string chart_sections(const Run& run, const Trace* t, const PageOptions& o) {
  std::string body;
  if (t && t->has("loss")) body += loss_chart(*t, o);
  body += epoch_charts(run, t && t->has("loss"));
  if (t && t->has("scale")) body += scale_chart(*t, o);
  if (t && t->has("lr"))
    body += column_chart(*t, "lr", "Learning rate per step", "learning rate", o);
  if (t && t->has("low_flops_fraction"))
    body +=
        column_chart(*t, "low_flops_fraction", "Fraction of FLOPs in low precision", "fraction", o);
  if (t && t->has("casts")) body += column_chart(*t, "casts", "Casts per step", "casts", o);
  if (t && t->has("cast_bytes"))
    body += column_chart(*t, "cast_bytes", "Bytes cast per step", "bytes", o);
  return body.empty() ? "" : section("charts", "Curves", body);
}

}  // namespace mixprec::report
