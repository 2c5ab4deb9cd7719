// HTML escaping, number formatting and table markup for `mixprec report`.
// Pure string functions: no I/O, no state. Invariant: no byte of an input string reaches the
// output unescaped.
#include "html.h"

#include <fmt/format.h>

#include <cmath>

namespace mixprec::report {

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string fmt_num(double v, int digits) {
  if (std::isnan(v)) return "—";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e7) return fmt::format("{:.0f}", v);
  return fmt::format("{:.{}g}", v, digits);
}

std::string fmt_int(double v) {
  if (!std::isfinite(v)) return fmt_num(v);
  return fmt::format("{:.0f}", std::round(v));
}

std::string fmt_percent(double fraction, int digits) {
  if (!std::isfinite(fraction)) return fmt_num(fraction);
  return fmt::format("{:.{}g}%", fraction * 100.0, digits);
}

std::string fmt_bytes(double bytes) {
  if (!std::isfinite(bytes)) return fmt_num(bytes);
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (std::fabs(bytes) >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string fmt_scale(double scale) {
  if (!std::isfinite(scale) || scale <= 0) return fmt_num(scale);
  const double e = std::log2(scale);
  const std::string v =
      scale == std::trunc(scale) && scale < 1e15 ? fmt::format("{:.0f}", scale) : fmt_num(scale, 6);
  if (e == std::round(e)) return fmt::format("{} (2^{:.0f})", v, e);
  return fmt::format("{} (2^{:.2f})", v, e);
}

std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<Cell>>& rows, const std::string& cls) {
  std::string out =
      cls.empty() ? "<table>\n<thead><tr>" : "<table class=\"" + cls + "\">\n<thead><tr>";
  for (size_t i = 0; i < header.size(); ++i) {  // numeric columns (by their first row) align right
    const bool num =
        !rows.empty() && i < rows[0].size() && rows[0][i].cls.find("num") != std::string::npos;
    out += (num ? "<th class=\"num\">" : "<th>") + escape(header[i]) + "</th>";
  }
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const auto& c : row)
      out += (c.cls.empty() ? std::string("<td>") : "<td class=\"" + c.cls + "\">") +
             escape(c.text) + "</td>";
    out += "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
  return out;
}

}  // namespace mixprec::report
