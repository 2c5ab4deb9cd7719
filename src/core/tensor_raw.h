// Non-differentiable view and copy primitives behind Tensor's methods. The ops layer wraps
// them (src/ops/shape.cpp) to record autograd history; nothing else should call them directly.
#pragma once

#include <optional>

#include "mixprec/tensor.h"

namespace mixprec::detail {

Tensor raw_view(const Tensor& t, const Shape& shape);  // throws if not viewable
std::optional<Tensor> raw_try_view(const Tensor& t, const Shape& shape);
Shape infer_reshape(const Shape& requested, int64_t numel);  // resolves one -1
Tensor raw_permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor raw_slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor raw_copy(const Tensor& t, DType dtype);  // packed row-major copy, converted to dtype
// A copy converted to dtype that keeps t's memory layout when t is dense in some dimension
// order (channels-last stays channels-last through a cast); row-major otherwise.
Tensor raw_convert(const Tensor& t, DType dtype);

}  // namespace mixprec::detail
