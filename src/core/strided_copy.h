// Strided element copy with dtype conversion: the one kernel behind contiguous(), clone(),
// astype() and copy_(). Dimensions that are contiguous in both tensors are merged first, so the
// common cases run as long contiguous rows through convert_row (vectorised converters).
#pragma once

#include "mixprec/tensor.h"

namespace mixprec::detail {

// A copy's index space: size-1 dims dropped, neighbours contiguous in both tensors merged (at
// least one dim). The CPU loop and the CUDA kernel (core/cuda_copy.cu) both walk this.
struct CopyLayout {
  Shape sizes;
  Strides src, dst;
};
CopyLayout coalesce(const Shape& shape, const Strides& src_strides, const Strides& dst_strides);

// dst and src have the same shape; dtypes may differ. Does not bump dst's version.
void strided_copy(const Tensor& src, const Tensor& dst);

// The work strided_copy runs (and records while a step is captured): a named type, so that
// GRAPH_MODE's planning can find copies and casts among the recorded kernels
// (std::function::target) and remove a cast that is cast straight back.
struct CopyKernel {
  Tensor src, dst;
  void operator()() const;
};

}  // namespace mixprec::detail
