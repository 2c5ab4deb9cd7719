// mixprec::Error: the single exception type of the library. what() holds the message and, when
// there is one, the hint on its own line; where() keeps the throwing source location for logs.
#include "mixprec/error.h"

namespace mixprec {

static std::string compose(const std::string& message, const std::string& hint) {
  return hint.empty() ? message : message + "\n  hint: " + hint;
}

Error::Error(std::string message, std::string hint, SourceLocation where, bool internal)
    : std::runtime_error(compose(message, hint)),
      message_(std::move(message)),
      hint_(std::move(hint)),
      where_(where),
      internal_(internal) {}

}  // namespace mixprec
