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

bool interleaved_views(const std::vector<const Tensor*>& ts) {
  if (ts.size() < 2) return false;
  const Tensor& t0 = *ts[0];
  if (!t0.defined() || t0.numel() == 0 || t0.dim() == 0 || t0.strides().back() != 1) return false;
  std::vector<int64_t> offsets;
  for (const Tensor* t : ts) {
    if (!t->defined() || t->storage() != t0.storage() || t->dtype() != t0.dtype() ||
        t->shape() != t0.shape() || t->strides() != t0.strides())
      return false;
    offsets.push_back(t->offset());
  }
  // The innermost dims that are dense from stride 1 (by stride, size-1 dims aside): one block.
  std::vector<size_t> dims;
  for (size_t d = 0; d < t0.shape().size(); ++d)
    if (t0.shape()[d] != 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [&](size_t a, size_t b) { return t0.strides()[a] < t0.strides()[b]; });
  int64_t block = 1;
  size_t k = 0;
  for (; k < dims.size() && t0.strides()[dims[k]] == block; ++k) block *= t0.shape()[dims[k]];
  // The rest repeat the block at multiples of the smallest outer stride (the period).
  const int64_t period = k < dims.size() ? t0.strides()[dims[k]] : INT64_MAX;
  if (period < block) return false;  // a broadcast (stride-0) dim, or a block overlapping itself
  for (size_t j = k; j < dims.size(); ++j) {
    if (t0.strides()[dims[j]] % period != 0) return false;
    // Each view's own elements distinct too: every outer stride past the extent of those below.
    if (j > k && t0.strides()[dims[j]] < t0.strides()[dims[j - 1]] * t0.shape()[dims[j - 1]])
      return false;
  }
  std::sort(offsets.begin(), offsets.end());
  for (size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] - offsets[i - 1] < block) return false;  // distinct, a block apart
  return period == INT64_MAX || offsets.back() - offsets.front() + block <= period;
}

std::vector<Tensor> empty_interleaved_like(const std::vector<const Tensor*>& ts) {
  const Tensor& t0 = *ts[0];
  int64_t span = 1;  // elements from a view's offset to its last element, inclusive
  for (size_t d = 0; d < t0.shape().size(); ++d) span += (t0.shape()[d] - 1) * t0.strides()[d];
  int64_t end = 0;
  for (const Tensor* t : ts) end = std::max(end, t->offset() + span);
  const auto storage =
      Storage::allocate(static_cast<size_t>(end) * dtype_size(t0.dtype()), t0.device());
  std::vector<Tensor> out;
  for (const Tensor* t : ts)
    out.push_back(Tensor::from_storage(storage, t->shape(), t->strides(), t->offset(), t->dtype()));
  return out;
}

}  // namespace mixprec::ops::detail
