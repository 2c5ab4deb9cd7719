// Strided element copy with dtype conversion: the one kernel behind contiguous(), clone(),
// astype() and copy_(). Dimensions that are contiguous in both tensors are merged first, so the
// common cases run as long contiguous rows through convert_row (vectorised converters).
#pragma once

#include "mixprec/tensor.h"

namespace mixprec::detail {

// dst and src have the same shape; dtypes may differ. Does not bump dst's version.
void strided_copy(const Tensor& src, const Tensor& dst);

}  // namespace mixprec::detail
