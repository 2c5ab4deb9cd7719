// Dataset transforms as plain loops over core tensors: each reads its input in any dtype
// (visit_dtype), computes in f64 and rounds once to f32. Per-channel parameters index dim 1.
// Not here: ops-layer arithmetic (the data layer depends on the core layer only).
#include "mixprec/data/transforms.h"

#include <cmath>
#include <sstream>

#include "mixprec/error.h"

namespace mixprec::dataset::transforms {
namespace {

std::string fmt_list(const std::vector<double>& v) {
  std::ostringstream s;
  if (v.size() == 1) {
    s << v[0];
    return s.str();
  }
  s << '[';
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << ']';
  return s.str();
}

// Per-channel parameters of out = (in * scale + shift) / divisor.
struct Affine {
  double scale, shift, divisor;
};

// out[i] = (in[i] * scale + shift) / divisor as f32, with the parameters of element i's channel
// c (dim 1; one set for every element when there is one set or the input has < 2 dims).
Tensor affine_f32(const Tensor& input, const std::vector<Affine>& params, const std::string& name) {
  MIXPREC_CHECK(input.defined(), name, ": expected a defined tensor");
  const Tensor in = input.contiguous();
  const int64_t channels = in.dim() >= 2 ? in.size(1) : 1;
  const size_t nparams = params.size();
  MIXPREC_CHECK(nparams == 1 || static_cast<int64_t>(nparams) == channels, name, ": expected 1 or ",
                channels, " per-channel values for input of shape ", shape_str(in.shape()),
                ", got ", nparams);
  const int64_t outer = in.dim() >= 1 ? in.size(0) : 1;
  const int64_t inner = outer * channels == 0 ? 0 : in.numel() / (outer * channels);
  Tensor out = Tensor::empty(in.shape(), {.dtype = DType::f32});
  float* dst = out.data<float>();
  visit_dtype(in.dtype(), [&]<class T>() {
    const T* src = static_cast<const T*>(in.data_ptr());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t c = 0; c < channels; ++c) {
        const size_t p = nparams == 1 ? 0 : static_cast<size_t>(c);
        const Affine& f = params[p];
        const int64_t base = (o * channels + c) * inner;
        for (int64_t i = base; i < base + inner; ++i)
          dst[i] = static_cast<float>((to_double(src[i]) * f.scale + f.shift) / f.divisor);
      }
    }
  });
  return out;
}

}  // namespace

Transform rescale(double scale, double shift) {
  std::ostringstream name;
  name << "rescale(" << scale << ", " << shift << ")";
  return {name.str(), [scale, shift, n = name.str()](const Tensor& x) {
            return affine_f32(x, {{scale, shift, 1.0}}, n);
          }};
}

Transform normalize(double mean, double std) {
  return normalize(std::vector<double>{mean}, std::vector<double>{std});
}

Transform normalize(std::vector<double> mean, std::vector<double> std) {
  const std::string name = "normalize(" + fmt_list(mean) + ", " + fmt_list(std) + ")";
  MIXPREC_CHECK(!mean.empty() && mean.size() == std.size(), name,
                ": expected as many means as stds (at least one), got ", mean.size(), " and ",
                std.size());
  std::vector<Affine> params(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    MIXPREC_CHECK(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] > 0, name,
                  ": expected finite means and stds > 0, got mean ", mean[c], " std ", std[c],
                  " for channel ", c);
    params[c] = {1.0, -mean[c], std[c]};
  }
  return {name, [params, name](const Tensor& x) { return affine_f32(x, params, name); }};
}

Transform type_cast(DType dtype) {
  return {"type_cast(" + std::string(dtype_name(dtype)) + ")",
          [dtype](const Tensor& x) { return x.astype(dtype); }};
}

}  // namespace mixprec::dataset::transforms
