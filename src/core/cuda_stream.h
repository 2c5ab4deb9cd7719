// CUDA-typed internals shared by the runtime (core/cuda_runtime.cpp) and the kernels
// (core/*.cu, ops/cuda/): the error check, the per-device compute stream and the strided copy
// kernel's launcher. Built only with MIXPREC_CUDA. Invariant every kernel relies on: all work
// on a device's tensors is queued on that device's one compute stream (stream(d)), so the
// caching allocator may hand a freed block to the next request without waiting (stream order).
#pragma once

#include <cuda_runtime_api.h>

#include "mixprec/device.h"
#include "mixprec/tensor.h"

namespace mixprec::cuda_detail {

// Throws mixprec::Error naming the call and CUDA's message when e is not cudaSuccess.
void check(cudaError_t e, const char* call, const char* file, int line);
#define MIXPREC_CUDA_CHECK(expr) ::mixprec::cuda_detail::check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: a bad configuration is reported at once, not at the next sync.
#define MIXPREC_CUDA_LAUNCHED() MIXPREC_CUDA_CHECK(cudaGetLastError())

// Makes `device` current on this thread (checks it first) and returns its compute stream.
cudaStream_t activate(Device device);

// Blocks of `threads` for a grid-stride loop over n elements: enough blocks to fill the GPU
// (capped), at least one.
unsigned grid_for(int64_t n, unsigned threads);

// Element-wise strided copy with dtype conversion between two tensors on the same CUDA device
// (core/cuda_copy.cu). Queued on the device's stream; no host synchronisation.
void strided_copy_kernel(const Tensor& src, const Tensor& dst);

}  // namespace mixprec::cuda_detail
