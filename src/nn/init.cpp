// Initializers: each draws from a counter-based Generator, so the same seed gives the same
// weights on every machine and thread count.
#include "mixprec/nn/init.h"

#include <cmath>

#include "mixprec/error.h"

namespace mixprec::init {

std::pair<int64_t, int64_t> fans(const Shape& shape) {
  MIXPREC_CHECK(shape.size() >= 2, "initializer: fan_in/fan_out need at least 2 dims, got ",
                shape_str(shape));
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

static double kaiming_std(const Shape& shape, double a, FanMode mode, const std::string& nl) {
  const auto [fan_in, fan_out] = fans(shape);
  const int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  double gain = 1.0;
  if (nl == "leaky_relu") gain = std::sqrt(2.0 / (1.0 + a * a));
  else if (nl == "relu") gain = std::sqrt(2.0);
  else if (nl == "tanh") gain = 5.0 / 3.0;
  else MIXPREC_CHECK(nl == "linear" || nl == "sigmoid", "initializer: unknown nonlinearity '", nl,
                     "' (expected leaky_relu, relu, tanh, linear or sigmoid)");
  return gain / std::sqrt(static_cast<double>(fan));
}

Initializer Normal(double sigma, double mean) {
  return {"Normal(sigma=" + std::to_string(sigma) + ")", [=](const Shape& s, DType d, Generator& g) {
            return normal(s, mean, sigma, g, {.dtype = d});
          }};
}

Initializer Uniform(double scale) {
  return {"Uniform(scale=" + std::to_string(scale) + ")", [=](const Shape& s, DType d, Generator& g) {
            return uniform(s, -scale, scale, g, {.dtype = d});
          }};
}

Initializer HeUniform(double a, FanMode mode, const std::string& nl) {
  return {"HeUniform", [=](const Shape& s, DType d, Generator& g) {
            const double bound = std::sqrt(3.0) * kaiming_std(s, a, mode, nl);
            return uniform(s, -bound, bound, g, {.dtype = d});
          }};
}

Initializer HeNormal(double a, FanMode mode, const std::string& nl) {
  return {"HeNormal", [=](const Shape& s, DType d, Generator& g) {
            return normal(s, 0.0, kaiming_std(s, a, mode, nl), g, {.dtype = d});
          }};
}

Initializer XavierUniform(double gain) {
  return {"XavierUniform", [=](const Shape& s, DType d, Generator& g) {
            const auto [fi, fo] = fans(s);
            const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
            return uniform(s, -bound, bound, g, {.dtype = d});
          }};
}

Initializer Zero() {
  return {"Zero", [](const Shape& s, DType d, Generator&) { return zeros(s, {.dtype = d}); }};
}
Initializer One() {
  return {"One", [](const Shape& s, DType d, Generator&) { return ones(s, {.dtype = d}); }};
}
Initializer Constant(double v) {
  return {"Constant", [v](const Shape& s, DType d, Generator&) { return full(s, v, {.dtype = d}); }};
}

Tensor initialize(const Initializer& init, const Shape& shape, DType dtype, Generator& gen) {
  MIXPREC_CHECK(static_cast<bool>(init.make), "initialize: empty initializer");
  return init.make(shape, dtype, gen);
}

Tensor initialize(const Initializer& init, const Shape& shape, DType dtype) {
  return initialize(init, shape, dtype, default_generator());
}

}  // namespace mixprec::init
