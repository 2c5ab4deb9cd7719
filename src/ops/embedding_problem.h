// The embedding family's problems (ops/embedding.cpp). Kernels: ref::embedding_* (the only ones).
// Invariants the op establishes: indices are a contiguous i64 [n] tensor, each already checked to
// lie in [0, num_embeddings); weight and grad are contiguous; dweight is a zero-filled
// [num_embeddings, dim] tensor in acc_dtype(grad).
#pragma once

#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// out[i, :] = weight[indices[i], :] (out [n, dim] in weight's dtype, or the indices' shape + dim).
struct EmbeddingFwdProblem {
  Tensor weight, indices, out;
  Device device() const { return weight.device(); }
  std::string describe() const;
};

// dweight[indices[i], :] += grad[i, :], each row summing its positions in order.
struct EmbeddingBwdProblem {
  Tensor grad, indices, dweight;
  Device device() const { return grad.device(); }
  std::string describe() const;
};

}  // namespace mixprec::ops
