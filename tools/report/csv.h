// Reader for the per-step trace CSV of `mixprec train --trace`: a header line, then one row per
// step. Columns are found by header name; the known ones (kNumericColumns, kTextColumns) are
// kept, unknown ones are ignored and missing ones are simply absent. It does not interpret values.
// Invariants: every kept column has rows() values; a malformed row (wrong field count, a
// non-number in a numeric column, no line end) is a mixprec::Error naming the file and line.
#pragma once

#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::report {

// Columns parsed as numbers (an empty field, "nan" or "inf" are accepted) and as text.
inline constexpr std::string_view kNumericColumns[] = {
    "step",     "epoch", "loss",  "scale",      "skipped",
    "overflow", "lr",    "casts", "cast_bytes", "low_flops_fraction"};
inline constexpr std::string_view kTextColumns[] = {"offending_op"};

struct Trace {
  std::string path;
  size_t rows = 0;
  std::vector<std::string> ignored{};  // header names we do not know
  std::map<std::string, std::vector<double>, std::less<>> numeric{};
  std::map<std::string, std::vector<std::string>, std::less<>> text{};

  bool has(std::string_view column) const { return numeric.count(column) != 0; }
  // The numeric column; MIXPREC_ASSERT that it exists (check has() first).
  const std::vector<double>& col(std::string_view column) const;
};

// Splits one CSV line into fields (RFC 4180 quotes: "a,b" and "" inside quotes). Returns false
// on an unterminated quote.
bool split_csv_line(std::string_view line, std::vector<std::string>& fields);

// Reads a whole trace; `name` is the file name used in errors.
Trace parse_trace(std::istream& in, const std::string& name);
Trace read_trace(const std::string& path);

}  // namespace mixprec::report
