// The CUDA runtime as the library shows it: whether this build has the backend, how many GPUs
// are visible, a clear error when a CUDA device cannot be used, synchronisation, and pinned
// staging for uploads that overlap compute. Without MIXPREC_CUDA every call that needs a GPU
// throws mixprec::Error saying so; is_built()/device_count() just answer false/0.
// Tensors move between devices with Tensor::to(Device) (tensor.h).
#pragma once

#include <memory>
#include <string>

#include "mixprec/device.h"
#include "mixprec/tensor.h"

namespace mixprec::cuda {

bool is_built();     // compiled with -DMIXPREC_CUDA=ON
int device_count();  // GPUs visible to this process; 0 without the backend, a driver or a GPU
// Throws mixprec::Error, saying what is missing and what to do, unless `device` is a CUDA
// device this process can use.
void check_device(Device device);
// "NVIDIA H200, compute capability 9.0, 139 GiB" (checks the device first).
std::string describe(Device device);
// Waits until all work queued on the device's stream has finished.
void synchronize(Device device = Device::cuda());

// f32 GEMMs on tensor cores in TF32 (10-bit mantissa inputs): off unless asked for, as the
// results then differ from the f32 reference by ~1e-3 relative.
void set_allow_tf32(bool on);
bool allow_tf32();

// Deterministic algorithms only: cuDNN's convolutions then use only algorithms cuDNN reports as
// deterministic, and a convolution for which it offers none is an error naming it (the choice is
// cached per setting). Off unless asked for, here or by MIXPREC_DETERMINISTIC=1 (set_deterministic
// overrides the variable). The rest of the backend is deterministic either way: our kernels use
// no atomics, cuBLASLt's results are bitwise reproducible on one GPU model and toolkit
// (docs/cuda.md, "Determinism"). Without the backend: no effect, deterministic() is false.
void set_deterministic(bool on);
bool deterministic();

// Pinned host staging for uploads (data batches). Two slots, used in turn, each a pinned host
// buffer and a device buffer: upload() packs a CPU tensor into the slot's pinned buffer, queues
// its copy into the slot's device buffer on a copy stream, makes the compute stream wait for the
// copy, and returns a tensor over that device buffer. The copy waits only for the kernels queued
// before the slot's previous batch was dropped (its last tensor destroyed), not for all queued
// work, so uploading batch k+1 while batch k is in use and batch k-1 is gone overlaps the step on
// batch k. A batch still held when its slot comes round again makes the upload take a fresh
// block, whose copy waits for all queued work (correct, not overlapped). The host waits only
// before reusing a pinned buffer, for the copy issued two uploads earlier. The protocol:
// src/core/cuda_runtime.cpp; never run on a GPU yet (docs/cuda.md).
class Staging {
 public:
  explicit Staging(Device device = Device::cuda());
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  // A contiguous copy of `host` (a CPU tensor of any layout) on the staging's device.
  Tensor upload(const Tensor& host);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mixprec::cuda
