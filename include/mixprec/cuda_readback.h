// Reading a device value on the host without waiting for the GPU: the found-inf flag or the
// loss scale of an AMP step for logging. request() queues a copy of a one-element tensor into
// pinned memory behind the work already queued on its device's stream; poll() answers the value
// once that copy has run, and nothing (std::nullopt) before, never blocking. Without the CUDA
// backend the constructor throws mixprec::Error (cuda.h explains).
#pragma once

#include <memory>
#include <optional>

#include "mixprec/device.h"
#include "mixprec/tensor.h"

namespace mixprec::cuda {

class Readback {
 public:
  explicit Readback(Device device = Device::cuda());
  ~Readback();
  Readback(const Readback&) = delete;
  Readback& operator=(const Readback&) = delete;
  // Queues the copy of `scalar` (one element, any dtype, on this device); replaces the last one.
  void request(const Tensor& scalar);
  // The requested value once its copy has finished; nullopt before that or if none was requested.
  std::optional<double> poll();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mixprec::cuda
