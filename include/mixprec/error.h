// Errors: MIXPREC_CHECK for user mistakes (throws mixprec::Error with an actionable message and
// an optional `hint:`), MIXPREC_ASSERT for our own invariants ("this is a bug in mixprec").
// The library never exits or aborts; the CLI catches mixprec::Error and prints it.
// Message template: "<op>: expected <what>, got <value>" followed by "\n  hint: <fix>".
#pragma once

#include <cstdint>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixprec {

// Compatibility shim: libstdc++ 12 declares std::source_location only when the compiler has
// __builtin_source_location (g++ 11+, clang 15+). clang 14 (the Debian fuzzing compiler, see
// scripts/fuzz.sh) lacks it, so there SourceLocation is a minimal stand-in with the same
// accessors, filled from __builtin_FILE/LINE/FUNCTION (column is 0). Everywhere else it *is*
// std::source_location. Not an ABI contract: build a program and libmixprec with one compiler.
#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
struct SourceLocation {
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          const char* function = __builtin_FUNCTION(),
                                          std::uint_least32_t line = __builtin_LINE()) noexcept {
    SourceLocation l;
    l.file_ = file;
    l.function_ = function;
    l.line_ = line;
    return l;
  }
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return 0; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
};
#endif

// Tag for the actionable part of a message: MIXPREC_CHECK(c, "...", Hint{"call .contiguous()"}).
struct Hint {
  std::string text;
};

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string hint, SourceLocation where, bool internal);
  const std::string& message() const noexcept { return message_; }
  const std::string& hint() const noexcept { return hint_; }
  const SourceLocation& where() const noexcept { return where_; }
  bool internal() const noexcept { return internal_; }

 private:
  std::string message_;
  std::string hint_;
  SourceLocation where_;
  bool internal_;
};

namespace detail {

struct MessageBuilder {
  std::ostringstream text;
  std::string hint;
  template <class T>
  void add(const T& v) {
    if constexpr (std::is_same_v<T, Hint>) {
      hint = v.text;
    } else {
      text << v;
    }
  }
};

template <class... Args>
[[noreturn]] void throw_error(SourceLocation where, bool internal, const char* cond,
                              const Args&... args) {
  MessageBuilder b;
  (b.add(args), ...);
  std::string msg = b.text.str();
  if (internal) {
    msg = "internal error (this is a bug in mixprec): `" + std::string(cond) + "` failed" +
          (msg.empty() ? "" : ": " + msg);
  } else if (msg.empty()) {
    msg = std::string("check failed: ") + cond;
  }
  throw Error(std::move(msg), std::move(b.hint), where, internal);
}

}  // namespace detail
}  // namespace mixprec

#define MIXPREC_CHECK(cond, ...)                                                            \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::mixprec::detail::throw_error(::mixprec::SourceLocation::current(), false,           \
                                     #cond __VA_OPT__(, ) __VA_ARGS__);                     \
  } while (0)

#define MIXPREC_ASSERT(cond, ...)                                                           \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::mixprec::detail::throw_error(::mixprec::SourceLocation::current(), true,            \
                                     #cond __VA_OPT__(, ) __VA_ARGS__);                     \
  } while (0)

// For hot loops: compiled out unless MIXPREC_DEBUG_CHECKS is defined (Debug builds define it).
#ifdef MIXPREC_DEBUG_CHECKS
#define MIXPREC_DEBUG_ASSERT(cond, ...) MIXPREC_ASSERT(cond __VA_OPT__(, ) __VA_ARGS__)
#else
#define MIXPREC_DEBUG_ASSERT(cond, ...) ((void)0)
#endif
