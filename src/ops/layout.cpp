// NCHW / channels-last detection, allocation and conversion, and the f32 copies of dense
// tensors that low_via_f32 works on (see layout.h).
#include "ops/layout.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/capture.h"
#include "core/strided_copy.h"
#include "mixprec/convert.h"

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

Tensor empty_output(const Shape& shape, DType dtype, Device device,
                    std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs) {
    if (!t->defined() || t->shape() != shape || t->is_contiguous()) continue;
    if (!is_dense(t->shape(), t->strides())) continue;
    auto storage =
        Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
    return Tensor::from_storage(std::move(storage), shape, t->strides(), 0, dtype);
  }
  return Tensor::empty(shape, {.dtype = dtype, .device = device});
}

bool fills_its_span(const Tensor& t) { return is_dense(t.shape(), t.strides()); }

Tensor empty_f32_like(const Tensor& t) {
  if (t.numel() == 0 || !fills_its_span(t))
    return Tensor::empty(t.shape(), {.dtype = DType::f32, .device = t.device()});
  auto storage = Storage::allocate(static_cast<size_t>(t.numel()) * sizeof(float), t.device());
  return Tensor::from_storage(std::move(storage), t.shape(), t.strides(), 0, DType::f32);
}

Tensor widen_to_f32(const Tensor& t) {
  Tensor out = empty_f32_like(t);
  round_into(t, out);  // exact: every 16-bit float is an f32
  return out;
}

void round_into(const Tensor& src, const Tensor& dst) {
  // One vectorised run when both share a dense layout (the copy merges dims in memory order),
  // split over the threads when it is long.
  mixprec::detail::strided_copy(src, dst);
}

}  // namespace mixprec::ops::detail
