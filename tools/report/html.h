// Small HTML building blocks for `mixprec report`: escaping, number formatting and tables.
// Everything that comes from an input file goes through escape() (or a table cell, which
// escapes); the builders never emit scripts or references to anything outside the page.
// Not a template engine: the page layout lives in page.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mixprec::report {

// Escapes &, <, >, " and ' and replaces control bytes (except tab and newline) with '?', so the
// result is safe in element content and in quoted attribute values.
std::string escape(std::string_view s);

// Numbers for people: "—" for NaN, integers without decimals, otherwise `digits` significant
// digits; fmt_bytes gives "12.3 MB"; fmt_scale gives "65536 (2^16)" for powers of two.
std::string fmt_num(double v, int digits = 4);
std::string fmt_int(double v);
std::string fmt_percent(double fraction, int digits = 3);
std::string fmt_bytes(double bytes);
std::string fmt_scale(double scale);

// One table cell: `text` is escaped; `cls` (trusted, ours) becomes the class attribute.
struct Cell {
  std::string text;
  std::string cls;
};

// A <table> with an escaped header row and rows of cells (a row longer or shorter than the
// header is rendered as it is); `cls` (trusted) is the table's class.
std::string html_table(const std::vector<std::string>& header,
                       const std::vector<std::vector<Cell>>& rows, const std::string& cls = "");

}  // namespace mixprec::report
