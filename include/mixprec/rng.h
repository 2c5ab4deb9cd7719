// Counter-based random numbers (Philox4x32-10). Element i of a random tensor depends only on
// (seed, offset, i), never on thread count or machine, so runs reproduce everywhere. A Generator
// is (seed, offset); each draw advances the offset past the counters it used, and its state can be
// saved and restored exactly (checkpoints do).
#pragma once

#include <array>
#include <cstdint>

#include "mixprec/tensor.h"

namespace mixprec {

// Philox4x32 with 10 rounds: 128-bit counter, 64-bit key -> four uint32.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n Philox blocks (4 uint32 each) and returns the first block's counter.
  uint64_t advance(uint64_t blocks) {
    const uint64_t start = offset_;
    offset_ += blocks;
    return start;
  }
  // Block `counter` of this generator's stream (no state change).
  std::array<uint32_t, 4> block(uint64_t counter) const;
  // A single uniform uint64 / double in [0, 1), advancing the state (for shuffles and the like).
  uint64_t next_u64();
  double next_double();

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator that initializers use when given none.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Standard normal (Box-Muller in f64), and uniform [low, high). Floating dtypes only.
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor uniform(const Shape& shape, double low, double high, Generator& gen,
               TensorOptions options = {});
Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen,
              TensorOptions options = {});

}  // namespace mixprec
