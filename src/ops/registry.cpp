// Name lookups over the op registry (the table itself is constexpr in ops/registry.h).
#include "mixprec/ops/registry.h"

namespace mixprec {

std::optional<OpId> find_op(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.id;
  return std::nullopt;
}

}  // namespace mixprec
