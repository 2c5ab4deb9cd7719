// Image layouts for convolution and pooling: an [N, C, H, W] tensor is either NCHW (row-major)
// or channels-last (NHWC strides for the NCHW shape). These helpers detect the layout, allocate
// outputs in it, and convert tensors into it (a copy only when the layout or dtype differs).
// Rule: a tensor is channels-last when its strides are not exactly row-major and match NHWC
// order (size-1 dims ignored); so [N, 1, H, W] is channels-last only if built that way.
#pragma once

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

}  // namespace mixprec::ops::detail
