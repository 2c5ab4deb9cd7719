// Dispatch support: the kernel lists' storage and their one-time registration, the registered
// kernel names and MIXPREC_DISABLE_KERNELS, MIXPREC_VERBOSE,
// the forced-implementation scope, the log line format and MIXPREC_PROFILE's table.
#include "ops/dispatch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <typeindex>
#include <unordered_map>
#include <vector>

namespace mixprec::ops {
namespace {
thread_local std::string_view t_forced;
}

namespace detail {
// Keyed by the problem's type: one list per type even when a test binary or a benchmark
// instantiates kernel_list<P>() in its own module. The lists live as long as the process.
void* kernel_list_storage(const std::type_info& problem, void* (*make)()) {
  static std::mutex mu;
  static auto* lists = new std::unordered_map<std::type_index, void*>();
  std::lock_guard<std::mutex> lock(mu);
  void*& slot = (*lists)[std::type_index(problem)];
  if (!slot) slot = make();
  return slot;
}

namespace {
std::mutex& names_mutex() {
  static std::mutex mu;
  return mu;
}
std::set<std::string, std::less<>>& kernel_names() {
  static auto* names = new std::set<std::string, std::less<>>();
  return *names;
}
}  // namespace

void note_kernel_name(std::string_view name) {
  std::lock_guard<std::mutex> lock(names_mutex());
  kernel_names().emplace(name);
}

bool kernel_disabled(std::string_view name) {
  // Parsed once, after registration (dispatch calls this only once the lists are filled).
  static const std::set<std::string, std::less<>>* const disabled =
      []() -> const std::set<std::string, std::less<>>* {
    const char* v = std::getenv("MIXPREC_DISABLE_KERNELS");
    if (v == nullptr || *v == '\0') return nullptr;
    std::set<std::string, std::less<>> out;  // on the heap only once checked: a throw leaks nothing
    std::lock_guard<std::mutex> lock(names_mutex());
    std::string_view rest(v);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (item.empty()) continue;
      if (!kernel_names().contains(item)) {
        std::string known;
        for (const std::string& n : kernel_names()) known += (known.empty() ? "" : ", ") + n;
        MIXPREC_CHECK(false, "MIXPREC_DISABLE_KERNELS: no kernel is named '", item, "'",
                      Hint{"the kernels of this build: " + known});
      }
      out.emplace(item);
    }
    return new std::set<std::string, std::less<>>(std::move(out));
  }();
  return disabled != nullptr && disabled->contains(name);
}
}  // namespace detail

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, register_backends);
}

std::string desc(const Tensor& t) {
  if (!t.defined()) return "none";
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape());
}

std::string desc_with_strides(const Tensor& t) {
  if (!t.defined()) return "none";
  std::string s = desc(t) + "{";
  for (size_t i = 0; i < t.strides().size(); ++i) {
    if (i) s += ',';
    s += std::to_string(t.strides()[i]);
  }
  return s + '}';
}

int verbose_level() {
  static const int level = [] {
    const char* v = std::getenv("MIXPREC_VERBOSE");
    return v ? std::atoi(v) : 0;
  }();
  return level;
}

ForceImpl::ForceImpl(std::string_view name) : prev_(t_forced) { t_forced = name; }
ForceImpl::~ForceImpl() { t_forced = prev_; }
std::string_view forced_impl() { return t_forced; }

void log_dispatch(OpId op, std::string_view phase, std::string_view chosen,
                  const std::string& problem, const std::string& declined) {
  std::fprintf(
      stderr, "mixprec: %.*s %.*s -> %.*s  %s%s%s\n", static_cast<int>(op_name(op).size()),
      op_name(op).data(), static_cast<int>(phase.size()), phase.data(),
      static_cast<int>(chosen.size()), chosen.data(), problem.c_str(),
      declined.empty() ? "" : "  [declined: ", declined.empty() ? "" : (declined + "]").c_str());
}

void detail::log_measured(OpId op, std::string_view phase, const choice::Choice& c, bool cached,
                          const std::string& problem) {
  std::string times;
  for (const auto& [name, t] : c.seconds)
    times += (times.empty() ? "" : ", ") + name + " " + std::to_string(t * 1e3) + " ms";
  std::string how = "is the fastest, measured";
  if (c.pinned)
    how = "pinned (a resumed run's choice)";
  else if (cached)
    how = "chosen earlier, measured";
  else if (c.runs > 1)
    how = "is the fastest, best of " + std::to_string(c.runs) + " runs' times";
  std::fprintf(stderr, "mixprec: %.*s %.*s: %s %s (%s)  %s\n", static_cast<int>(op_name(op).size()),
               op_name(op).data(), static_cast<int>(phase.size()), phase.data(), c.kernel.c_str(),
               how.c_str(), times.c_str(), problem.c_str());
}

namespace {

struct ProfileEntry {
  double seconds = 0;
  int64_t calls = 0;
  ProfileWork work;
};

// "1.2 TFLOP/s"-style: the rate a row's calls reached (its FLOPs per second where it has
// products, else its bytes per second), "" when the problem reports neither.
std::string achieved(const ProfileEntry& e) {
  char buf[48] = "";
  if (e.seconds <= 0) return buf;
  if (e.work.flops > 0)
    std::snprintf(buf, sizeof buf, "%.0f GFLOP/s", e.work.flops / e.seconds / 1e9);
  else if (e.work.bytes > 0)
    std::snprintf(buf, sizeof buf, "%.1f GB/s", e.work.bytes / e.seconds / 1e9);
  return buf;
}

struct Profile {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, std::string>, ProfileEntry> entries;
  ~Profile() {
    if (entries.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [k, v] : entries) {
      total += v.seconds;
      const std::string rate = achieved(v);
      rows.emplace_back(v.seconds, std::get<0>(k) + " " + std::get<1>(k) + " [" + std::get<2>(k) +
                                       "] x" + std::to_string(v.calls) +
                                       (rate.empty() ? "" : ", " + rate));
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "mixprec profile (MIXPREC_PROFILE=1): %.1f ms in kernels\n", total * 1e3);
    for (const auto& [t, name] : rows)
      std::fprintf(stderr, "  %9.2f ms %5.1f%%  %s\n", t * 1e3, 100 * t / total, name.c_str());
  }
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

namespace {
std::atomic<int>& profiling_flag() {  // -1: not read yet
  static std::atomic<int> flag{-1};
  return flag;
}
}  // namespace

bool profiling() {
  int on = profiling_flag().load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = std::getenv("MIXPREC_PROFILE");
    on = v && *v && std::string_view(v) != "0";
    profiling_flag().store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

void set_profiling(bool on) { profiling_flag().store(on, std::memory_order_relaxed); }

std::vector<ProfileRow> profile_rows() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  std::vector<ProfileRow> rows;
  for (const auto& [k, v] : p.entries)
    rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), v.seconds, v.calls, v.work});
  std::sort(rows.begin(), rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  return rows;
}

void profile_reset() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.entries.clear();
}

double profile_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void profile_add(std::string_view op, std::string_view phase, std::string_view impl, double seconds,
                 ProfileWork work) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  auto& e = p.entries[{std::string(op), std::string(phase), std::string(impl)}];
  e.seconds += seconds;
  ++e.calls;
  e.work.flops += work.flops;
  e.work.bytes += work.bytes;
}

double touched_bytes(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  int64_t span = 1;  // elements from the first to the last, each dim's extent once
  for (size_t d = 0; d < t.shape().size(); ++d)
    span += (t.shape()[d] - 1) * std::abs(t.strides()[d]);
  return static_cast<double>(std::min(span, t.numel()) * static_cast<int64_t>(t.itemsize()));
}

}  // namespace mixprec::ops
