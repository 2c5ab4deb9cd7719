// Errors: MIXPREC_CHECK for user mistakes (throws mixprec::Error with an actionable message and
// an optional `hint:`), MIXPREC_ASSERT for our own invariants ("this is a bug in mixprec").
// The library never exits or aborts; the CLI catches mixprec::Error and prints it.
// Message template: "<op>: expected <what>, got <value>" followed by "\n  hint: <fix>".
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixprec {

// Tag for the actionable part of a message: MIXPREC_CHECK(c, "...", Hint{"call .contiguous()"}).
struct Hint {
  std::string text;
};

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string hint, std::source_location where, bool internal);
  const std::string& message() const noexcept { return message_; }
  const std::string& hint() const noexcept { return hint_; }
  const std::source_location& where() const noexcept { return where_; }
  bool internal() const noexcept { return internal_; }

 private:
  std::string message_;
  std::string hint_;
  std::source_location where_;
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
[[noreturn]] void throw_error(std::source_location where, bool internal, const char* cond,
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
      ::mixprec::detail::throw_error(std::source_location::current(), false,                \
                                     #cond __VA_OPT__(, ) __VA_ARGS__);                     \
  } while (0)

#define MIXPREC_ASSERT(cond, ...)                                                           \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::mixprec::detail::throw_error(std::source_location::current(), true,                 \
                                     #cond __VA_OPT__(, ) __VA_ARGS__);                     \
  } while (0)

// For hot loops: compiled out unless MIXPREC_DEBUG_CHECKS is defined (Debug builds define it).
#ifdef MIXPREC_DEBUG_CHECKS
#define MIXPREC_DEBUG_ASSERT(cond, ...) MIXPREC_ASSERT(cond __VA_OPT__(, ) __VA_ARGS__)
#else
#define MIXPREC_DEBUG_ASSERT(cond, ...) ((void)0)
#endif
