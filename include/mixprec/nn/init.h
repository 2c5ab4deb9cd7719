// Parameter initializers (MindSpore's mindspore.common.initializer): Normal, Uniform, HeUniform,
// HeNormal, XavierUniform, Zero, One, Constant. An Initializer is a small value type; layers
// call initialize(init, shape) which draws from the default generator (manual_seed) unless one
// is given. Fans follow MindSpore/PyTorch: [out, in, k...] -> fan_in = in*prod(k).
#pragma once

#include <functional>
#include <string>

#include "mixprec/rng.h"
#include "mixprec/tensor.h"

namespace mixprec::init {

enum class FanMode { fan_in, fan_out };

struct Initializer {
  std::string name;  // "Normal(sigma=0.02)"
  std::function<Tensor(const Shape&, DType, Generator&)> make;
};

Initializer Normal(double sigma = 0.01, double mean = 0.0);
Initializer Uniform(double scale = 0.07);  // U(-scale, scale)
// Kaiming: gain = sqrt(2 / (1 + a^2)) for leaky_relu (1 for "linear"), std = gain / sqrt(fan).
Initializer HeUniform(double negative_slope = 0.0, FanMode mode = FanMode::fan_in,
                      const std::string& nonlinearity = "leaky_relu");
Initializer HeNormal(double negative_slope = 0.0, FanMode mode = FanMode::fan_in,
                     const std::string& nonlinearity = "leaky_relu");
Initializer XavierUniform(double gain = 1.0);
Initializer Zero();
Initializer One();
Initializer Constant(double value);

std::pair<int64_t, int64_t> fans(const Shape& shape);  // (fan_in, fan_out)
Tensor initialize(const Initializer& init, const Shape& shape, DType dtype = DType::f32);
Tensor initialize(const Initializer& init, const Shape& shape, DType dtype, Generator& gen);

}  // namespace mixprec::init
