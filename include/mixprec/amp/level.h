// AMP levels (MindSpore's amp_level O0-O3, and auto) and what each asks of the autocast mechanism
// (ops/autocast.h): one cast rule per op policy, the rule for norms, and whether every cell of the
// network casts at its boundary. The table is DESIGN.md's "AMP semantics"; tests/amp checks what
// actually runs against it. auto_mixed_precision (amp/amp.h) puts these states on a network.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "mixprec/ops/autocast.h"

namespace mixprec {

enum class AmpLevel : uint8_t { O0, O1, O2, O3, auto_ };
std::string_view amp_level_name(AmpLevel level);
// "O0".."O3", "auto" (case-insensitive "o2" too); throws listing the valid levels otherwise.
AmpLevel parse_amp_level(std::string_view s);

namespace amp {
// The autocast state of `level` with low dtype `low`: O1 casts to_low ops to `low` and their
// outputs back to fp32; O2 runs every op in `low` but to_fp32 ones (output cast back to `low`);
// O3 runs everything in `low`; auto follows each op's policy. Norms (BatchNorm, LayerNorm) keep
// fp32 parameters, statistics and arithmetic at O2 and O3 when `keep_norm_fp32` (default: at O2
// only). O0 is the empty state (autocast off).
AutocastState level_state(AmpLevel level, DType low = DType::bf16,
                          std::optional<bool> keep_norm_fp32 = std::nullopt);
}  // namespace amp

}  // namespace mixprec
