// NCHW / channels-last detection, allocation and conversion (see layout.h).
#include "ops/layout.h"

#include "core/strided_copy.h"

namespace mixprec::ops::detail {

Strides image_strides(const Shape& s, ImageLayout layout) {
  if (layout == ImageLayout::nchw) return contiguous_strides(s);
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

namespace {
// Strides equal to `want` on every dim of size > 1.
bool strides_match(const Tensor& x, const Strides& want) {
  for (size_t d = 0; d < 4; ++d)
    if (x.shape()[d] != 1 && x.strides()[d] != want[d]) return false;
  return true;
}
}  // namespace

bool is_channels_last(const Tensor& x) {
  if (x.dim() != 4) return false;
  if (x.strides() == contiguous_strides(x.shape())) return false;
  return strides_match(x, image_strides(x.shape(), ImageLayout::nhwc));
}

bool has_layout(const Tensor& x, ImageLayout layout) {
  if (x.dim() != 4) return false;
  if (layout == ImageLayout::nchw) return x.is_contiguous();
  return strides_match(x, image_strides(x.shape(), ImageLayout::nhwc));
}

Tensor empty_image(const Shape& s, DType dtype, ImageLayout layout, Device device) {
  if (layout == ImageLayout::nchw) return Tensor::empty(s, {.dtype = dtype, .device = device});
  const size_t bytes = static_cast<size_t>(shape_numel(s)) * dtype_size(dtype);
  return Tensor::from_storage(Storage::allocate(bytes, device), s, image_strides(s, layout), 0,
                              dtype);
}

Tensor to_image(const Tensor& x, ImageLayout layout, DType dtype) {
  if (x.dtype() == dtype && has_layout(x, layout)) return x;
  Tensor out = empty_image(x.shape(), dtype, layout, x.device());
  mixprec::detail::strided_copy(x, out);
  return out;
}

}  // namespace mixprec::ops::detail
