// Dispatch support: MIXPREC_VERBOSE, the forced-implementation scope, and the log line format.
#include "dispatch.h"

#include <cstdlib>

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

}  // namespace mixprec::ops
