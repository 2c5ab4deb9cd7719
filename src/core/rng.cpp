// Philox4x32-10 (Salmon et al., SC'11) and the random tensor factories built on it. Each pair of
// elements (2j, 2j+1) uses Philox block (offset + j): two 53-bit uniforms, then Box-Muller for
// normals, all in f64 and rounded once to the target dtype.
#include "mixprec/rng.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>

namespace mixprec {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

std::array<uint32_t, 4> Generator::block(uint64_t counter) const {
  return philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                    {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

uint64_t Generator::next_u64() {
  const auto b = block(advance(1));
  return (static_cast<uint64_t>(b[0]) << 32) | b[1];
}

double Generator::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

namespace {

inline double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1.0p-53;
}

enum class Dist { uniform, normal };

// The largest T strictly below x (x finite), for keeping uniform draws inside [low, high).
template <class T> T next_down(T x) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  } else {
    T r = x;
    if (r.bits & 0x8000u) ++r.bits;
    else if (r.bits == 0) r.bits = 0x8001u;
    else --r.bits;
    return r;
  }
}

template <class T> T uniform_value(double u, double low, double high) {
  T v = from_double<T>(low + (high - low) * u);
  if (high > low && to_double(v) >= high) v = next_down(from_double<T>(high));
  return v;
}

Tensor random_tensor(const Shape& shape, Generator& gen, TensorOptions options, Dist dist,
                     double a, double b) {
  MIXPREC_CHECK(is_floating(options.dtype), dist == Dist::normal ? "randn" : "rand",
                ": expected a floating dtype, got ", dtype_name(options.dtype));
  MIXPREC_CHECK(options.device.is_cpu(), "random tensors are generated on cpu; got ",
                options.device.str());
  Tensor out = Tensor::empty(shape, options);
  const int64_t n = out.numel();
  const int64_t pairs = (n + 1) / 2;
  const uint64_t base = gen.advance(static_cast<uint64_t>(pairs));
  visit_float(options.dtype, [&]<class T>() {
    T* dst = out.data<T>();
#pragma omp parallel for schedule(static) if (n > (1 << 15))
    for (int64_t j = 0; j < pairs; ++j) {
      const auto r = gen.block(base + static_cast<uint64_t>(j));
      const double v0 = u53(r[0], r[1]), v1 = u53(r[2], r[3]);
      T t0, t1;
      if (dist == Dist::normal) {
        const double radius = std::sqrt(-2.0 * std::log1p(-v0));  // 1 - v0 in (0, 1]
        const double theta = 2.0 * std::numbers::pi * v1;
        t0 = from_double<T>(a + b * radius * std::cos(theta));
        t1 = from_double<T>(a + b * radius * std::sin(theta));
      } else {
        t0 = uniform_value<T>(v0, a, b);
        t1 = uniform_value<T>(v1, a, b);
      }
      dst[2 * j] = t0;
      if (2 * j + 1 < n) dst[2 * j + 1] = t1;
    }
  });
  return out;
}

}  // namespace

Tensor randn(const Shape& shape, Generator& gen, TensorOptions options) {
  return random_tensor(shape, gen, options, Dist::normal, 0.0, 1.0);
}
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options) {
  return random_tensor(shape, gen, options, Dist::uniform, 0.0, 1.0);
}
Tensor uniform(const Shape& shape, double low, double high, Generator& gen, TensorOptions options) {
  MIXPREC_CHECK(low <= high, "uniform: expected low <= high, got ", low, " > ", high);
  return random_tensor(shape, gen, options, Dist::uniform, low, high);
}
Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen, TensorOptions options) {
  MIXPREC_CHECK(stddev >= 0, "normal: expected stddev >= 0, got ", stddev);
  return random_tensor(shape, gen, options, Dist::normal, mean, stddev);
}
Tensor randn(const Shape& shape, TensorOptions options) {
  return randn(shape, default_generator(), options);
}
Tensor rand(const Shape& shape, TensorOptions options) {
  return rand(shape, default_generator(), options);
}

}  // namespace mixprec
