// Inline-SVG line charts (see svg_chart.h). Layout, top to bottom: title, legend, plot area
// (grid, series), x tick labels, mark strips, x axis title; the y axis title is rotated on the
// left. Coordinates are written with one decimal to keep long series small.
#include "svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "html.h"

namespace mixprec::report {
namespace {

constexpr double kLeft = 72, kRight = 24, kTop = 52, kBottomAxis = 46, kStripRow = 16;

// A linear map from one interval to another (in log2 units when `log2`).
struct Axis {
  double d0 = 0, d1 = 1;  // domain (log2 of the value when log2)
  double p0 = 0, p1 = 1;  // pixels
  bool log2 = false;
  double value_to_domain(double v) const { return log2 ? std::log2(v) : v; }
  double pixel(double v) const {
    const double t = (value_to_domain(v) - d0) / (d1 - d0);
    return p0 + std::clamp(t, 0.0, 1.0) * (p1 - p0);
  }
  bool usable(double v) const { return plottable(v) && (!log2 || v > 0); }
  // Finite and small enough that the span of two values is finite too.
  static bool plottable(double v) { return std::isfinite(v) && std::fabs(v) <= 1e150; }
};

std::string fmt_tick(double v, double step) {
  if (std::fabs(v) < step * 1e-9) v = 0;
  if (std::fabs(v) >= 1e6 || (std::fabs(v) < 1e-3 && v != 0)) return fmt::format("{:.3g}", v);
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

// Finite [min, max] of the usable values of `vals` over all series (x or y).
std::pair<double, double> data_range(const ChartSpec& s, bool y, const Axis& probe) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& ser : s.series) {
    for (size_t i = 0; i < std::min(ser.x.size(), ser.y.size()); ++i) {
      if (!Axis::plottable(ser.x[i]) || !probe.usable(ser.y[i])) continue;
      const double v = y ? ser.y[i] : ser.x[i];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  return {lo, hi};
}

std::string axis_text(double x, double y, const char* anchor, const std::string& body,
                      const char* extra = "") {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\"{}>{}</text>\n", x, y,
                     anchor, extra, body);
}

// Y axis: domain, grid lines and tick labels.
std::string y_axis(const ChartSpec& s, Axis& ay, double x0, double x1) {
  const bool fixed = s.y_range && Axis::plottable(s.y_range->first) &&
                     Axis::plottable(s.y_range->second) && s.y_range->first < s.y_range->second;
  auto [lo, hi] = fixed ? *s.y_range : data_range(s, true, ay);
  std::string out;
  std::vector<double> ticks;
  if (s.log2_y) {
    double a = std::floor(std::log2(lo)), b = std::ceil(std::log2(hi));
    if (a == b) {
      a -= 1;
      b += 1;
    }
    ay.d0 = a;
    ay.d1 = b;
    const double step = std::max(1.0, std::ceil((b - a) / 8));
    for (double e = a; e <= b + 1e-9; e += step) ticks.push_back(e);
  } else {
    if (lo == hi) {  // a constant: +-10% around it (+-1 around zero)
      const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
    ticks = nice_ticks(lo, hi, 6);
    ay.d0 = fixed ? lo : std::min(lo, ticks.front());
    ay.d1 = fixed ? hi : std::max(hi, ticks.back());
  }
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (const double t : ticks) {
    if (t < ay.d0 - 1e-9 * step || t > ay.d1 + 1e-9 * step) continue;
    const double py = ay.p0 + (t - ay.d0) / (ay.d1 - ay.d0) * (ay.p1 - ay.p0);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>\n", x0, x1,
        py, py);
    const std::string label =
        s.log2_y ? fmt::format("2<tspan dy=\"-6\" font-size=\"9\">{:.0f}</tspan>", t)
                 : fmt_tick(t, step);
    out += axis_text(x0 - 6, py + 4, "end", label, " class=\"tick\"");
  }
  return out;
}

// X axis: domain, grid lines and tick labels (at `label_y`).
std::string x_axis(const ChartSpec& s, Axis& ax, const Axis& ay, double y0, double y1,
                   double label_y) {
  auto [lo, hi] = s.x_range ? *s.x_range : data_range(s, false, ay);
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  ax.d0 = lo;
  ax.d1 = hi;
  std::string out;
  std::vector<double> ticks = nice_ticks(lo, hi, 8);
  if (s.integer_x && ticks.size() > 1 &&
      ticks[1] - ticks[0] < 1) {  // a short range: every whole number
    ticks.clear();
    for (double t = std::ceil(lo); t <= hi; t += 1) ticks.push_back(t);
  }
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (const double t : ticks) {
    if (t < lo - 1e-9 * step || t > hi + 1e-9 * step) continue;
    if (s.integer_x && t != std::round(t)) continue;
    const double px = ax.pixel(t);
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>\n", px, px,
        y0, y1);
    out += axis_text(px, label_y, "middle", fmt_tick(t, step), " class=\"tick\"");
  }
  return out;
}

std::string draw_series(const Series& ser, const Axis& ax, const Axis& ay) {
  fmt::memory_buffer pts, dots;
  size_t n = 0;
  for (size_t i = 0; i < std::min(ser.x.size(), ser.y.size()); ++i) {
    if (!Axis::plottable(ser.x[i]) || !ay.usable(ser.y[i])) continue;
    const double px = ax.pixel(ser.x[i]), py = ay.pixel(ser.y[i]);
    fmt::format_to(std::back_inserter(pts), "{}{:.1f},{:.1f}", n ? " " : "", px, py);
    if (ser.dots)
      fmt::format_to(std::back_inserter(dots),
                     "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>", px, py,
                     ser.color);
    ++n;
  }
  std::string out = fmt::format(
      "<polyline class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"none\" "
      "stroke=\"{}\" "
      "stroke-width=\"{}\" stroke-opacity=\"{}\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
      escape(ser.name), n, ser.color, ser.width, ser.opacity, fmt::to_string(pts));
  return out + fmt::to_string(dots) + (ser.dots ? "\n" : "");
}

std::string draw_strip(const MarkStrip& m, const Axis& ax, double y, double x0) {
  std::vector<bool> seen(static_cast<size_t>(std::max(ax.p1, 1.0)) + 2, false);
  fmt::memory_buffer d;
  for (const double x : m.x) {
    if (!std::isfinite(x) || x < std::min(ax.d0, ax.d1) || x > std::max(ax.d0, ax.d1)) continue;
    const double px = std::round(ax.pixel(x));
    const auto col = static_cast<size_t>(std::max(px, 0.0));
    if (col >= seen.size() || seen[col]) continue;
    seen[col] = true;
    fmt::format_to(std::back_inserter(d), "M{:.0f} {:.1f}v10", px, y);
  }
  std::string out = fmt::format(
      "<rect class=\"strip\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"10\"/>\n", ax.p0,
      y, ax.p1 - ax.p0);
  out += axis_text(x0 - 6, y + 9, "end", escape(m.name), " class=\"tick\"");
  if (d.size() > 0)
    out += fmt::format(
        "<path class=\"marks\" data-strip=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" d=\"{}\"/>\n",
        escape(m.name), m.color, fmt::to_string(d));
  return out;
}

std::string legend(const ChartSpec& s, double x, double y) {
  std::string out;
  for (const auto& ser : s.series) {
    out += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"3\" "
        "stroke-opacity=\"{}\"/>\n",
        x, x + 18, y - 4, y - 4, ser.color, std::max(ser.opacity, 0.5));
    out += axis_text(x + 24, y, "start", escape(ser.name), " class=\"legend\"");
    x += 24 + 7.0 * static_cast<double>(ser.name.size()) + 22;
  }
  return out;
}

}  // namespace

std::string render_chart(const ChartSpec& s) {
  const double W = s.width, H = s.height;
  const double strips = static_cast<double>(s.strips.size());
  const double x0 = kLeft, x1 = W - kRight, y0 = kTop, y1 = H - kBottomAxis - strips * kStripRow;
  Axis ax{.p0 = x0, .p1 = x1}, ay{.p0 = y1, .p1 = y0, .log2 = s.log2_y};
  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" "
      "aria-label=\"{}\">\n<title>{}</title>\n",
      W, H, escape(s.title), escape(s.title));
  out += axis_text(x0, 22, "start", escape(s.title), " class=\"title\"");
  out += legend(s, x0, 42);
  const auto [ylo, yhi] = data_range(s, true, ay);
  if (!(ylo <= yhi)) {
    out += fmt::format(
        "<rect class=\"plot\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n", x0,
        y0, x1 - x0, y1 - y0);
    out += axis_text((x0 + x1) / 2, (y0 + y1) / 2, "middle", "no finite data to plot",
                     " class=\"tick\"");
    return out + "</svg>\n";
  }
  out += fmt::format(
      "<rect class=\"plot\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n", x0,
      y0, x1 - x0, y1 - y0);
  out += y_axis(s, ay, x0, x1);
  out += x_axis(s, ax, ay, y0, y1, y1 + 16);
  for (const auto& ser : s.series) out += draw_series(ser, ax, ay);
  for (size_t i = 0; i < s.strips.size(); ++i)
    out += draw_strip(s.strips[i], ax, y1 + 24 + static_cast<double>(i) * kStripRow, x0);
  out += axis_text((x0 + x1) / 2, H - 8, "middle", escape(s.x_label), " class=\"axis-title\"");
  out += fmt::format(
      "<text class=\"axis-title\" transform=\"translate(16 {:.1f}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      (y0 + y1) / 2, escape(s.y_label) + (s.log2_y ? " (log2 axis)" : ""));
  return out + "</svg>\n";
}

std::pair<std::vector<double>, std::vector<double>> downsample_minmax(const std::vector<double>& x,
                                                                      const std::vector<double>& y,
                                                                      size_t max_points) {
  std::vector<double> fx, fy;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    fx.push_back(x[i]);
    fy.push_back(y[i]);
  }
  const size_t buckets = std::max<size_t>(max_points / 2, 1);
  if (fx.size() <= std::max<size_t>(max_points, 2)) return {fx, fy};
  std::vector<double> ox, oy;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t i0 = b * fx.size() / buckets, i1 = (b + 1) * fx.size() / buckets;
    if (i0 >= i1) continue;
    size_t lo = i0, hi = i0;
    for (size_t i = i0; i < i1; ++i) {
      if (fy[i] < fy[lo]) lo = i;
      if (fy[i] > fy[hi]) hi = i;
    }
    for (const size_t i : {std::min(lo, hi), std::max(lo, hi)}) {
      ox.push_back(fx[i]);
      oy.push_back(fy[i]);
      if (lo == hi) break;
    }
  }
  return {ox, oy};
}

std::vector<double> smooth_ema(const std::vector<double>& y, double window) {
  const double a = 1.0 - 1.0 / std::max(window, 1.0);
  std::vector<double> out(y.size(), NAN);
  double acc = 0, weight = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::isfinite(y[i])) {
      acc = a * acc + (1 - a) * y[i];
      weight = a * weight + (1 - a);
    }
    if (weight > 0) out[i] = acc / weight;
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    lo -= 1;
    hi += 1;
  }
  const double raw = (hi - lo) / std::max(target - 1, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (int k = 0; k < 100; ++k) {
    const double t = first + k * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return ticks;
}

}  // namespace mixprec::report
