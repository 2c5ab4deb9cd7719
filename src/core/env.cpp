// The table of MIXPREC_* environment switches and their checked reader (see env.h). A switch
// accepts either one of a list of words or a decimal integer in a range; the error lists the
// words (or the range) and the default, so the fix is in the message. MIXPREC_DISABLE_KERNELS is
// not here: its names are the build's kernels, which dispatch checks itself.
#include "mixprec/env.h"

#include <charconv>
#include <cstdlib>
#include <span>

#include "mixprec/error.h"

namespace mixprec::env {
namespace {

constexpr std::string_view kOnOff[] = {"0", "1"};
constexpr std::string_view kIsa[] = {"scalar", "avx2", "avx512"};
constexpr std::string_view kAllocator[] = {"caching", "system"};
constexpr std::string_view kKernelChoice[] = {"measure", "measure-once", "first"};

struct Switch {
  std::string_view name;
  std::span<const std::string_view> words;  // empty: an integer in [min, max]
  int64_t min = 0, max = 0;
  std::string_view fallback;  // what an unset switch means, for the hint
};

constexpr Switch kSwitches[] = {
    {"MIXPREC_ISA", kIsa, 0, 0, "every instruction set the CPU has"},
    {"MIXPREC_ALLOCATOR", kAllocator, 0, 0, "caching"},
    {"MIXPREC_CACHE_LIMIT_MB", {}, 0, int64_t{1} << 40, "4096"},
    {"MIXPREC_GRAPH_FUSE", kOnOff, 0, 0, "1"},
    {"MIXPREC_GRAPH_DEBUG", kOnOff, 0, 0, "0"},
    {"MIXPREC_VERBOSE", kOnOff, 0, 0, "0"},
    {"MIXPREC_PROFILE", kOnOff, 0, 0, "0"},
    {"MIXPREC_KERNEL_CHOICE", kKernelChoice, 0, 0, "measure"},
    {"MIXPREC_WARN_UNDONE_CAST", kOnOff, 0, 0, "1"},
    {"MIXPREC_DETERMINISTIC", kOnOff, 0, 0, "0"},
};

const Switch& find(std::string_view name) {
  for (const Switch& s : kSwitches)
    if (s.name == name) return s;
  MIXPREC_ASSERT(false, "environment switch ", name, " is not in env.cpp's table");
  return kSwitches[0];
}

std::optional<int64_t> parse_integer(std::string_view v) {
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return out;
}

std::string accepted(const Switch& s) {
  if (s.words.empty())
    return "an integer from " + std::to_string(s.min) + " to " + std::to_string(s.max);
  std::string out;
  for (size_t i = 0; i < s.words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == s.words.size() ? " or " : ", ") + std::string(s.words[i]);
  return out;
}

bool valid(const Switch& s, std::string_view v) {
  if (s.words.empty()) {
    const auto n = parse_integer(v);
    return n && *n >= s.min && *n <= s.max;
  }
  for (std::string_view w : s.words)
    if (w == v) return true;
  return false;
}

}  // namespace

std::optional<std::string> get(std::string_view name) {
  const Switch& s = find(name);
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  MIXPREC_CHECK(
      valid(s, v), name, ": expected ", accepted(s), ", got '", v, "'",
      Hint{"set " + std::string(name) + " to one of those, or unset it for the default (" +
           std::string(s.fallback) + ")"});
  return std::string(v);
}

int64_t get_integer(std::string_view name, int64_t fallback) {
  MIXPREC_ASSERT(find(name).words.empty(), name, " is not an integer switch");
  const auto v = get(name);
  return v ? *parse_integer(*v) : fallback;
}

void check_environment() {
  for (const Switch& s : kSwitches) (void)get(s.name);
}

}  // namespace mixprec::env
