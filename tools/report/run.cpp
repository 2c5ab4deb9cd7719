// Run summary JSON reader (see run.h): nlohmann::json parse, then a typed walk that names the
// offending field on any type mismatch. Never throws anything but mixprec::Error.
#include "run.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mixprec/error.h"

namespace mixprec::report {
namespace {

using nlohmann::json;

std::string describe(const json& v) {
  std::string d = v.dump();
  if (d.size() > 40) d = d.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + d;
}

// One JSON object and its path in the file; typed getters that name the field on a mismatch.
class Obj {
 public:
  Obj(const json& j, const std::string& file, std::string path)
      : j_(j), file_(file), path_(std::move(path)) {
    MIXPREC_CHECK(j.is_object(), "run report '", file_,
                  "': ", path_.empty() ? "the top level" : "'" + path_ + "'",
                  ": expected a JSON object, got ", describe(j),
                  Hint{"pass the file that `mixprec train --report FILE` wrote"});
  }
  std::string field(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  // nullptr when absent or null.
  const json* get(const char* key, bool required = false) const {
    auto it = j_.find(key);
    const bool present = it != j_.end() && !it->is_null();
    MIXPREC_CHECK(present || !required, "run report '", file_, "': field '", field(key),
                  "' is missing", Hint{"pass the file that `mixprec train --report FILE` wrote"});
    return present ? &*it : nullptr;
  }
  std::string str(const char* key, bool required = false) const {
    const json* v = get(key, required);
    if (!v) return {};
    expect(v->is_string(), key, "a string", *v);
    return v->get<std::string>();
  }
  double num(const char* key) const {
    const json* v = get(key);
    if (!v) return NAN;
    expect(v->is_number(), key, "a number", *v);
    return v->get<double>();
  }
  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    const json* v = array(key);
    for (size_t i = 0; v && i < v->size(); ++i) {
      expect((*v)[i].is_string(), fmt::format("{}[{}]", key, i), "a string", (*v)[i]);
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }
  const json* array(const char* key) const {
    const json* v = get(key);
    if (v) expect(v->is_array(), key, "an array", *v);
    return v;
  }
  const std::string& file() const { return file_; }

 private:
  void expect(bool ok, const std::string& key, const char* what, const json& got) const {
    MIXPREC_CHECK(ok, "run report '", file_, "': field '", field(key), "': expected ", what,
                  ", got ", describe(got));
  }
  const json& j_;
  const std::string& file_;
  std::string path_;
};

// Applies `read(Obj)` to each element of the array `key` (absent: nothing).
template <class T, class F> std::vector<T> read_array(const Obj& o, const char* key, F read) {
  std::vector<T> out;
  const json* a = o.array(key);
  for (size_t i = 0; a && i < a->size(); ++i)
    out.push_back(read(Obj((*a)[i], o.file(), fmt::format("{}[{}]", o.field(key), i))));
  return out;
}

void read_summary(const Obj& o, Run& r) {
  r.model = o.str("model", true);
  r.amp_level = o.str("amp_level", true);
  r.dtype = o.str("dtype");
  r.loss_scale_manager = o.str("loss_scale_manager");
  r.optimizer = o.str("optimizer");
  r.cpu_features = o.str("cpu_features");
  r.mixprec_version = o.str("mixprec_version");
  r.data = o.str("data");
  r.epochs = o.num("epochs");
  r.steps = o.num("steps");
  r.skipped_steps = o.num("skipped_steps");
  r.batch_size = o.num("batch_size");
  r.learning_rate = o.num("learning_rate");
  r.seed = o.num("seed");
  r.threads = o.num("threads");
  r.loss_scale_final = o.num("loss_scale_final");
  r.train_loss = o.num("train_loss");
  r.test_accuracy = o.num("test_accuracy");
  r.test_loss = o.num("test_loss");
  r.samples_per_second = o.num("samples_per_second");
  r.peak_memory_bytes = o.num("peak_memory_bytes");
  r.wall_seconds = o.num("wall_seconds");
  r.train_seconds = o.num("train_seconds");
  if (const json* a = o.array("train_loss_per_epoch")) {
    for (size_t i = 0; i < a->size(); ++i) {
      const json& v = (*a)[i];
      MIXPREC_CHECK(v.is_null() || v.is_number(), "run report '", o.file(),
                    "': field 'train_loss_per_epoch[", i, "]': expected a number, got ",
                    describe(v));
      r.train_loss_per_epoch.push_back(v.is_null() ? NAN : v.get<double>());
    }
  }
  r.warnings = o.strings("warnings");
}

void read_sections(const Obj& o, Run& r) {
  r.epoch_metrics = read_array<EpochMetric>(o, "epoch_metrics", [](const Obj& e) {
    return EpochMetric{e.num("epoch"), e.num("train_loss"), e.num("test_accuracy"),
                       e.num("test_loss")};
  });
  r.precision_table = read_array<PrecisionEntry>(o, "precision_table", [](const Obj& e) {
    return PrecisionEntry{e.str("cell"),    e.str("type"),    e.strings("ops"),
                          e.str("compute"), e.str("weights"), e.str("output")};
  });
  r.overflow_events = read_array<OverflowEvent>(o, "overflow_events", [](const Obj& e) {
    return OverflowEvent{e.num("step"),  e.str("phase"),         e.str("cell"),  e.str("op"),
                         e.str("dtype"), e.num("input_max_abs"), e.str("detail")};
  });
  r.grad_stats = read_array<GradStat>(o, "grad_stats", [](const Obj& e) {
    return GradStat{e.num("step"),          e.str("param"),
                    e.num("max_abs"),       e.num("underflow_fraction"),
                    e.num("zero_fraction"), e.num("recommended_scale")};
  });
  r.promotions = read_array<Promotion>(o, "promotions", [](const Obj& e) {
    return Promotion{e.num("step"), e.str("cell"), e.str("from"), e.str("to")};
  });
}

}  // namespace

Run parse_run(std::istream& in, const std::string& name) {
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (const size_t p = what.find("] ");
        what.starts_with("[json.exception") && p != std::string::npos)
      what = what.substr(p + 2);
    MIXPREC_CHECK(false, "run report '", name, "': not valid JSON: ", what,
                  Hint{"pass the file that `mixprec train --report FILE` wrote"});
  }
  Run r;
  r.path = name;
  const Obj top(j, name, "");
  read_summary(top, r);
  read_sections(top, r);
  return r;
}

Run read_run(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MIXPREC_CHECK(f.good(), "run report '", path, "': cannot read: ", std::strerror(errno),
                Hint{"pass the JSON that `mixprec train --report FILE` wrote"});
  return parse_run(f, path);
}

}  // namespace mixprec::report
