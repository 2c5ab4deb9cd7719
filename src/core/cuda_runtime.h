// The core's hooks into the CUDA runtime, in plain C++ (no CUDA types): core/cuda_runtime.cpp
// defines them with MIXPREC_CUDA, core/cuda_none.cpp without (each then throws the "not built"
// error). allocator.cpp and strided_copy.cpp call them for every non-CPU device.
#pragma once

#include "mixprec/allocator.h"
#include "mixprec/tensor.h"

namespace mixprec::detail {

// The caching allocator of a CUDA device (checks the device first).
Allocator& cuda_allocator(Device device);
void cuda_empty_cache(Device device);
// strided_copy when src or dst is on a CUDA device: within one device by a kernel, across
// devices through a packed staging copy. Same contract as strided_copy (shapes equal, dtypes
// may differ).
void cuda_copy(const Tensor& src, const Tensor& dst);

}  // namespace mixprec::detail
