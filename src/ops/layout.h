// Memory layouts the ops and their kernels share (no autograd node, no op trace, any device).
// Images: an [N, C, H, W] tensor is either NCHW (row-major) or channels-last (NHWC strides for
// the NCHW shape); these helpers detect the layout, allocate outputs in it, and convert tensors
// into it (a copy only when the layout or dtype differs). Rule: a tensor is channels-last when
// its strides are not exactly row-major and match NHWC order (size-1 dims ignored); so
// [N, 1, H, W] is channels-last only if built that way. Dense tensors: packed copies and outputs
// that keep a dense input's memory order, so oneDNN reads and writes them without reorders.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::ops::detail {

enum class ImageLayout { nchw, nhwc };

// True if x is 4-D and channels-last by the rule above.
bool is_channels_last(const Tensor& x);
// True if x is 4-D and in `layout` (NCHW: is_contiguous; NHWC: the rule above, or C == 1).
bool has_layout(const Tensor& x, ImageLayout layout);
// The layout an op should produce for input x: nhwc if x is channels-last, else nchw.
inline ImageLayout layout_of(const Tensor& x) {
  return is_channels_last(x) ? ImageLayout::nhwc : ImageLayout::nchw;
}
Strides image_strides(const Shape& nchw, ImageLayout layout);
// Uninitialised [N, C, H, W] tensor in the layout.
Tensor empty_image(const Shape& nchw, DType dtype, ImageLayout layout,
                   Device device = Device::cpu());
// x itself if it is already in `layout` with `dtype`, else a converted copy in that layout.
// Not differentiable (use on detached tensors inside kernels and backward functions).
Tensor to_image(const Tensor& x, ImageLayout layout, DType dtype);
inline Tensor to_image(const Tensor& x, ImageLayout layout) {
  return to_image(x, layout, x.dtype());
}

// ---------------------------------------------------------------- dense tensors
// t (detached) as a contiguous tensor of dtype `dt`; t itself when it already is one.
inline Tensor packed(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t.detach();
  Tensor out = Tensor::empty(t.shape(), {.dtype = dt, .device = t.device()});
  out.copy_(t.detach());
  return out;
}

// The strides of a dense tensor with t's shape and t's memory order (dims sorted by stride,
// outermost first); contiguous strides when t's strides overlap or leave gaps.
inline Strides dense_strides_like(const Tensor& t) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  const size_t nd = s.size();
  std::vector<size_t> order(nd);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return st[a] > st[b]; });
  Strides out(nd, 1);
  int64_t expected = 1;
  bool dense = true;
  for (size_t k = nd; k-- > 0;) {
    const size_t d = order[k];
    out[d] = expected;
    if (s[d] != 1 && st[d] != expected) dense = false;
    expected *= s[d];
  }
  return dense ? out : contiguous_strides(s);
}

// An uninitialised tensor of `shape` with the given dense strides.
inline Tensor empty_strided(const Shape& shape, const Strides& strides, DType dt, Device dev) {
  const int64_t n = shape_numel(shape);
  auto storage = Storage::allocate(static_cast<size_t>(n) * dtype_size(dt), dev);
  return Tensor::from_storage(std::move(storage), shape, strides, 0, dt);
}

// t (detached) with exactly `strides` (a dense layout), copying only when it differs.
inline Tensor with_strides(const Tensor& t, const Strides& strides) {
  bool same = true;
  for (size_t d = 0; d < strides.size(); ++d)
    if (t.shape()[d] != 1 && t.strides()[d] != strides[d]) same = false;
  if (same) return t.detach();
  Tensor out = empty_strided(t.shape(), strides, t.dtype(), t.device());
  out.copy_(t.detach());
  return out;
}

// A new output of `shape` that keeps the memory layout of the first (defined) input with the same
// shape whose strides are a dense permutation (channels-last stays channels-last through
// relu/add); row-major otherwise.
Tensor empty_output(const Shape& shape, DType dtype, Device device,
                    std::initializer_list<const Tensor*> inputs);

// True if t's elements fill [data_ptr, data_ptr + numel) exactly once, in any dim order (a
// permuted packed tensor, e.g. the transposed view W^T of a packed W, or a channels-last image).
bool fills_its_span(const Tensor& t);
// t as f32 with t's strides when it fills its span (one vectorised conversion of the span),
// else a contiguous f32 copy.
Tensor widen_to_f32(const Tensor& t);
// An uninitialised f32 tensor with t's shape, and t's strides when it fills its span.
Tensor empty_f32_like(const Tensor& t);
// dst = src rounded once into dst's dtype; same shape (strides may differ).
void round_into(const Tensor& src, const Tensor& dst);

// True for views of one storage with one dtype, shape and strides (unit last stride) whose
// element sets are disjoint by construction: each is a dense block of its innermost dims repeated
// at multiples of one period (its outer strides), and their offsets are distinct, at least a block
// apart and within one period (q, k and v of a packed [B, L, 3, H, D] projection seen as three
// [B, H, L, D]).
bool interleaved_views(const std::vector<const Tensor*>& ts);
// New uninitialised tensors laid out as `ts` are (interleaved_views): one new storage, the same
// strides and offsets, so that their gradients can be one tensor too (ops::unbind's backward).
std::vector<Tensor> empty_interleaved_like(const std::vector<const Tensor*>& ts);

}  // namespace mixprec::ops::detail
