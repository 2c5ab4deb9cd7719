// Shape and strides: dimension sizes and element strides, row-major (C order) by default.
// Kept as plain vectors of int64_t; the helpers here are the only place that computes sizes,
// contiguous strides and wrapped (negative) dimension indices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixprec {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Product of sizes; 1 for a scalar shape {}. Throws on a negative size or int64 overflow.
int64_t shape_numel(const Shape& shape);
// Row-major strides in elements.
Strides contiguous_strides(const Shape& shape);
// "[2, 3, 4]".
std::string shape_str(const Shape& shape);
// True if `strides` address every element of `shape` exactly once with no gaps: row-major or any
// permutation of it (channels-last, a transpose). Size-1 dims are ignored.
bool is_dense(const Shape& shape, const Strides& strides);
// Maps a possibly negative dimension to [0, ndim); throws with `what` in the message if invalid.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");

}  // namespace mixprec
