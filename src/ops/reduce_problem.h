// The reduction family's problems (sum, mean, max, argmax; ops/reduce.cpp). Kernels:
// ref::reduce_* (the only ones; plain strided loops, thread-count independent).
// Invariants the op establishes: the plan describes x (its own strides, no copy); outputs are
// contiguous and preallocated: sum's in x's dtype (accumulated in acc_dtype, rounded once),
// max's index in i64, max's backward gx zero-filled in g's dtype.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::ops {

struct ReducePlan {
  std::vector<int64_t> axes;    // sorted, unique, wrapped
  Shape out_shape;              // without the reduced dims
  Shape keep_shape;             // with size-1 reduced dims (keepdims)
  Shape kept_sizes, red_sizes;  // sizes of kept / reduced dims (input order)
  Strides kept_strides, red_strides;
  int64_t red_count = 1;
};

// out[o] = scale * (sum of x over the reduced dims of output o).
struct ReduceSumProblem {
  Tensor x, out;
  ReducePlan plan;
  double scale = 1.0;
  Device device() const { return x.device(); }
  std::string describe() const;
  // Every tensor its kernels write (GRAPH_MODE's planning: core/capture.h, capture_writes).
  static constexpr auto writes() { return std::array{&ReduceSumProblem::out}; }
};

// index[o] = the flat position (in the reduced space) of the first maximum of output o's
// elements, a NaN winning; values[o] = that element (values may be undefined: argmax).
struct ReduceMaxProblem {
  Tensor x, values, index;
  ReducePlan plan;
  Device device() const { return x.device(); }
  std::string describe() const;
};

// gx (zeros, contiguous, x's shape) receives g[o] at element index[o] of output o's reduced space.
struct ReduceMaxBwdProblem {
  Tensor g, index;  // g contiguous in gx's dtype
  ReducePlan plan;
  Tensor gx;
  Device device() const { return gx.device(); }
  std::string describe() const;
};

}  // namespace mixprec::ops
