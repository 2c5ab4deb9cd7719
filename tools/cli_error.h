// How the CLI words and classifies errors: a library error gets the option it concerns put in
// front ("--report " + "PATH: cannot write ..."), and an error in the command line itself (a value
// out of range, an unknown choice, options that conflict) becomes a UsageError, which main()
// turns into exit status 2, like CLI11's own parse errors; every other error exits 1.
#pragma once

#include <string>
#include <utility>

#include "mixprec/error.h"

namespace mixprec::cli {

class UsageError : public Error {
 public:
  using Error::Error;
};

// Runs `fn`; a mixprec::Error it throws is rethrown (as the same kind) with `prefix` in front of
// its message, the hint kept.
template <class F> decltype(auto) with_prefix(const std::string& prefix, F&& fn) {
  try {
    return std::forward<F>(fn)();
  } catch (const UsageError& e) {
    throw UsageError(prefix + e.message(), e.hint(), e.where(), false);
  } catch (const Error& e) {
    throw Error(prefix + e.message(), e.hint(), e.where(), e.internal());
  }
}

// Runs `check` (the validation of a command line); a mixprec::Error it throws becomes a
// UsageError (exit status 2).
template <class F> void as_usage_error(F&& check) {
  try {
    std::forward<F>(check)();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    if (e.internal()) throw;
    throw UsageError(e.message(), e.hint(), e.where(), false);
  }
}

}  // namespace mixprec::cli
