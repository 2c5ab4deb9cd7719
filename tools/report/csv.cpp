// Trace CSV reader (see csv.h). Line-oriented: a quoted field may hold commas but not a line
// break (the trace never writes one). Blank lines are skipped; a trailing '\r' is dropped; a last
// line without '\n' is a cut row and refused.
#include "csv.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "mixprec/error.h"

namespace mixprec::report {
namespace {

bool is_known(std::string_view name, const auto& table) {
  return std::find(std::begin(table), std::end(table), name) != std::end(table);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Parses a whole field as a double; an empty field is NaN (a value the writer did not have).
bool parse_number(std::string_view field, double& out) {
  const std::string s(trim(field));
  if (s.empty()) {
    out = NAN;
    return true;
  }
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);  // out of range gives inf or 0, which is what it was
  return end == s.c_str() + s.size();
}

// Where each header column goes: a numeric or text column of the Trace, or nowhere.
struct Slot {
  std::vector<double>* num = nullptr;
  std::vector<std::string>* txt = nullptr;
  std::string name;
};

std::vector<Slot> parse_header(Trace& t, const std::vector<std::string>& names,
                               const std::string& where) {
  std::vector<Slot> slots;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name(trim(names[i]));
    for (size_t k = 0; k < i; ++k)
      MIXPREC_CHECK(
          trim(names[k]) != name, where, ": column '", name, "' appears twice in the header",
          Hint{"a trace has one header line, e.g. step,epoch,loss,scale,skipped,overflow,lr"});
    Slot s{.name = name};
    if (is_known(name, kNumericColumns)) {
      s.num = &t.numeric[name];
    } else if (is_known(name, kTextColumns)) {
      s.txt = &t.text[name];
    } else {
      t.ignored.push_back(name);
    }
    slots.push_back(std::move(s));
  }
  return slots;
}

}  // namespace

const std::vector<double>& Trace::col(std::string_view column) const {
  auto it = numeric.find(column);
  MIXPREC_ASSERT(it != numeric.end(), "trace column '", column, "' is absent; check has() first");
  return it->second;
}

bool split_csv_line(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  fields.push_back(std::move(cur));
  return !quoted;
}

Trace parse_trace(std::istream& in, const std::string& name) {
  Trace t{.path = name};
  std::string line;
  std::vector<std::string> fields;
  std::vector<Slot> slots;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    const std::string where = "trace '" + name + "', line " + std::to_string(lineno);
    // Every line the trace writer makes ends with '\n': one without is a row cut short, whatever
    // its fields look like (a cut "1,1," can still have as many fields as the header).
    MIXPREC_CHECK(!in.eof(), where, ": the file ends without a line end: this row was cut short",
                  Hint{"its run stopped mid-write (a full disk, a kill); resume the run to rewrite "
                       "the row, or "
                       "delete the cut line"});
    MIXPREC_CHECK(split_csv_line(line, fields), where, ": unterminated quote");
    if (slots.empty()) {
      slots = parse_header(t, fields, where);
      continue;
    }
    MIXPREC_CHECK(fields.size() == slots.size(), where, ": expected ", slots.size(),
                  " fields (as in the header), got ", fields.size(),
                  Hint{"every row needs one value per header column; was the file cut short?"});
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].txt) slots[i].txt->push_back(fields[i]);
      if (!slots[i].num) continue;
      double v = 0;
      MIXPREC_CHECK(parse_number(fields[i], v), where, ", column '", slots[i].name,
                    "': expected a number, got '", fields[i].substr(0, 40), "'");
      slots[i].num->push_back(v);
    }
    ++t.rows;
  }
  MIXPREC_CHECK(!in.bad(), "trace '", name, "': read error after line ", lineno);
  MIXPREC_CHECK(!slots.empty(), "trace '", name, "': empty file, expected a header line",
                Hint{"write one with `mixprec train --trace FILE`"});
  return t;
}

Trace read_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MIXPREC_CHECK(f.good(), "trace '", path, "': cannot read: ", std::strerror(errno),
                Hint{"pass the CSV that `mixprec train --trace FILE` wrote"});
  return parse_trace(f, path);
}

}  // namespace mixprec::report
