// Name lookups over the op registry (the table itself is constexpr in ops/registry.h).
#include "mixprec/ops/registry.h"

namespace mixprec {

std::string_view policy_name(AmpPolicy p) {
  switch (p) {
    case AmpPolicy::keep: return "keep";
    case AmpPolicy::to_low: return "to_low";
    case AmpPolicy::to_fp32: return "to_fp32";
    case AmpPolicy::promote: return "promote";
  }
  return "?";
}

std::optional<OpId> find_op(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.id;
  return std::nullopt;
}

}  // namespace mixprec
