// Inline-SVG line charts for `mixprec report`: axes with tick labels, a title, a legend, line
// series (optionally with dots), a linear or log2 y axis, and strips of tick marks under the plot
// (e.g. skipped or overflow steps). Pure: data in, an <svg> string out; no scripts, no external
// references. Non-finite points, |value| > 1e150, and y <= 0 on a log2 axis are left out; the
// line joins their neighbours. Downsampling and smoothing are separate helpers; render_chart draws
// what it gets.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::report {

struct Series {
  std::string name;   // legend text (escaped)
  std::string color;  // trusted CSS colour, e.g. "#1f77b4"
  std::vector<double> x, y;
  double width = 1.5;
  double opacity = 1.0;
  bool dots = false;  // draw a circle at every point (for short per-epoch series)
};

// A row of short vertical ticks under the plot, one per x (pixel-deduplicated).
struct MarkStrip {
  std::string name;
  std::string color;
  std::vector<double> x;
};

struct ChartSpec {
  std::string title, x_label, y_label;
  bool log2_y = false;
  bool integer_x = false;  // x ticks at whole numbers only (epochs, steps)
  std::optional<std::pair<double, double>> y_range{};  // fixed y range; values outside are clamped
  std::optional<std::pair<double, double>> x_range{};
  int width = 1160, height = 340;
  std::vector<Series> series{};
  std::vector<MarkStrip> strips{};
};

std::string render_chart(const ChartSpec& spec);

// About `max_points` points that keep the shape of a long series: the x range is cut into
// max_points/2 buckets of consecutive points and each bucket keeps its min and max (in x order).
// Non-finite y are dropped first. Returns the input unchanged when it is short enough.
std::pair<std::vector<double>, std::vector<double>> downsample_minmax(const std::vector<double>& x,
                                                                      const std::vector<double>& y,
                                                                      size_t max_points);

// Debiased exponential moving average with time constant `window` points; non-finite inputs
// repeat the previous smoothed value (NaN until the first finite one).
std::vector<double> smooth_ema(const std::vector<double>& y, double window);

// "Nice" tick values (1, 2, 5 times a power of ten) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace mixprec::report
