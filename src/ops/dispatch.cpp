// Dispatch support: MIXPREC_VERBOSE, the forced-implementation scope, and the log line format.
#include "ops/dispatch.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace mixprec::ops {
namespace {
thread_local std::string_view t_forced;
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
  std::fprintf(stderr, "mixprec: %.*s %.*s -> %.*s  %s%s%s\n", static_cast<int>(op_name(op).size()),
               op_name(op).data(), static_cast<int>(phase.size()), phase.data(),
               static_cast<int>(chosen.size()), chosen.data(), problem.c_str(),
               declined.empty() ? "" : "  [declined: ", declined.empty() ? "" : (declined + "]").c_str());
}

namespace {

struct Profile {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, int64_t>> entries;
  ~Profile() {
    if (entries.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [k, v] : entries) {
      total += v.first;
      rows.emplace_back(v.first, std::get<0>(k) + " " + std::get<1>(k) + " [" + std::get<2>(k) + "] x" +
                                     std::to_string(v.second));
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

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("MIXPREC_PROFILE");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}

double profile_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void profile_add(std::string_view op, std::string_view phase, std::string_view impl, double seconds) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  auto& e = p.entries[{std::string(op), std::string(phase), std::string(impl)}];
  e.first += seconds;
  ++e.second;
}

}  // namespace mixprec::ops
