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

// Pinned host staging for uploads (data batches): upload() copies a CPU tensor into one of two
// pinned buffers, queues the host-to-device copy on a copy stream and makes the device's compute
// stream wait for it, so the copy of batch k+1 overlaps the step of batch k and the host never
// waits for the GPU (only, before reusing a buffer, for the copy issued two uploads earlier).
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
