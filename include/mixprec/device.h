// Device: where a tensor's storage lives and where its kernels run. CPU is the only backend
// built today; CUDA is a real value so that every kernel checks it and a CUDA backend can be
// added behind the same interfaces without touching the layers above ops.
#pragma once

#include <cstdint>
#include <string>

namespace mixprec {

struct Device {
  enum class Type : uint8_t { cpu, cuda };
  Type type = Type::cpu;
  int index = 0;

  static constexpr Device cpu() { return Device{Type::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return Device{Type::cuda, index}; }
  constexpr bool is_cpu() const { return type == Type::cpu; }
  constexpr bool is_cuda() const { return type == Type::cuda; }
  friend constexpr bool operator==(Device a, Device b) = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace mixprec
