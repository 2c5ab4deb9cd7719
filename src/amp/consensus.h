// The amp layer's internals shared by the loss-scaling code and the train step (src/amp/step/):
// the cross-rank agreement on finite flags that keeps data-parallel ranks deciding alike, and the
// check of a gradient list.
#pragma once

#include <span>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::amp::detail {
// In place: each flag (1 = non-finite) becomes its maximum over the ranks, in one all-reduce;
// left as it is outside data-parallel mode or with the consensus switched off for a test.
void agree_on_flags(std::span<double> nonfinite_flags);
// Whether agree_on_flags combines (data parallel, and not switched off for a test): the ranks
// then take the same decisions, and may make the collective calls that follow from them.
bool ranks_agree();
// Throws naming `who` and the index of the first undefined tensor; also if `tensors` is empty
// and !allow_empty.
void check_gradient_list(const std::vector<Tensor>& tensors, const char* who, bool allow_empty);
}  // namespace mixprec::amp::detail
