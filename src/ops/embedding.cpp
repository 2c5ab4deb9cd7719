// embedding (row gather) and dropout (inverted, counter-based mask), forward and backward side
// by side. Embedding's kernels: embedding_problem.h; dropout applies its mask with a pointwise
// formula. Invariant: dropout's mask bit for element i depends only on the generator's (seed,
// counter) and i, so it is the same for any thread count.
#include <array>
#include <cmath>

#include "ops/dispatch.h"
#include "ops/embedding_problem.h"
#include "ops/layout.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

std::string EmbeddingFwdProblem::describe() const {
  return desc(weight) + " rows " + desc(indices) + " -> " + desc(out);
}
std::string EmbeddingBwdProblem::describe() const {
  return desc(grad) + " rows " + desc(indices) + " -> " + desc(dweight);
}

// ---------------------------------------------------------------- embedding

namespace {

// The indices as a new contiguous i64 tensor, every one checked against [0, num).
Tensor checked_indices(const Tensor& indices, int64_t num) {
  MIXPREC_CHECK(indices.dtype() == DType::i32 || indices.dtype() == DType::i64,
                "embedding: expected i32 or i64 indices, got ", dtype_name(indices.dtype()),
                Hint{"cast the indices with astype(DType::i64)"});
  Tensor idx = packed(indices, DType::i64).reshape({indices.numel()});
  if (idx.storage() == indices.storage()) idx = idx.clone();  // the node keeps its own copy
  // Indices on a GPU are not range-checked here: reading them would make every step wait for
  // the GPU. The CUDA kernel gives an out-of-range index a NaN row (ops/cuda/rows.cu), so a
  // train step sees a non-finite loss and skips the update.
  if (!idx.device().is_cpu()) return idx;
  // A kernel of its own, so that a captured step (core/capture.h) checks every batch's indices.
  mixprec::detail::run_kernel([idx, num] {
    const int64_t* p = idx.data<int64_t>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      MIXPREC_CHECK(p[i] >= 0 && p[i] < num, "embedding: index ", p[i], " (at flat position ", i,
                    ") is out of range for ", num, " embeddings (valid: 0..", num - 1, ")");
  });
  return idx;
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight0) {
  MIXPREC_CHECK(indices.defined(), "embedding: indices are undefined");
  Prepared p = autocast_inputs(OpId::embedding, {indices, weight0});
  const Tensor& w = p.in[1];
  check_floating("embedding", w, "weight");
  check_same_device("embedding", {&indices, &w});
  MIXPREC_CHECK(w.dim() == 2, "embedding: expected a weight of shape [num_embeddings, dim], got ",
                shape_str(w.shape()));
  const int64_t num = w.size(0), dim = w.size(1);
  const Tensor idx = checked_indices(indices, num);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  const EmbeddingFwdProblem f{w.detach().contiguous(), idx,
                              Tensor::empty(out_shape, {.dtype = w.dtype(), .device = w.device()})};
  dispatch(OpId::embedding, "forward", f);
  Tensor out = f.out;
  if (autograd::needs_grad({&w})) {
    const int64_t n = idx.numel();
    record(OpId::embedding, {w}, out, [idx, num, dim, n](const std::vector<Tensor>& g) {
      const Tensor grad = g[0].reshape({n, dim}).contiguous();
      const EmbeddingBwdProblem b{
          grad, idx,
          zeros({num, dim}, {.dtype = acc_dtype(grad.dtype()), .device = grad.device()})};
      dispatch(OpId::embedding, "backward", b);
      return std::vector<Tensor>{b.dweight};
    });
  }
  return finish(OpId::embedding, p, out, w.dtype());
}

// ---------------------------------------------------------------- dropout

namespace {

// mask[i] = 1 with probability 1 - p: element i keeps when word (i % 4) of Philox block
// base + i / 4, read as a uniform in [0, 1), is >= p.
Tensor dropout_mask(const Shape& shape, double p, Generator& gen) {
  Tensor mask = Tensor::empty(shape, {.dtype = DType::u8});
  const int64_t n = mask.numel();
  const int64_t blocks = (n + 3) / 4;
  const uint64_t base = gen.advance(static_cast<uint64_t>(blocks));
  // word / 2^32 >= p  <=>  word >= ceil(p * 2^32)
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(p * 4294967296.0));
  uint8_t* m = mask.data<uint8_t>();
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    const std::array<uint32_t, 4> words = gen.block(base + static_cast<uint64_t>(b));
    for (int64_t j = 0; j < 4 && b * 4 + j < n; ++j)
      m[b * 4 + j] = static_cast<uint64_t>(words[static_cast<size_t>(j)]) >= threshold ? 1 : 0;
  }
  return mask;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_floating("dropout", x, "input");
  MIXPREC_CHECK(p >= 0.0 && p < 1.0, "dropout: expected a drop probability p in [0, 1), got ", p,
                Hint{"p is the fraction of elements dropped; p = 1 would drop everything"});
  if (!training || p == 0.0) return x;
  // The mask is drawn on the host (the same bits on every device) and, for a GPU input, uploaded:
  // a queued copy, the host waits for nothing.
  const Tensor mask = dropout_mask(x.shape(), p, gen).to(x.device());
  const double scale = 1.0 / (1.0 - p);
  Tensor out =
      pointwise(OpId::dropout, "forward", PointwiseFn::dropout, {x, mask}, x.dtype(), scale);
  if (autograd::needs_grad({&x})) {
    record(OpId::dropout, {x}, out, [mask, scale](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{pointwise(OpId::dropout, "backward", PointwiseFn::dropout,
                                           {g[0], mask}, g[0].dtype(), scale)};
    });
  }
  Prepared none;  // dropout runs in its input's dtype at every level, and keeps an explicit choice
  none.in = {x};
  none.explicit_mark = explicit_dtype_mark(x);
  return finish(OpId::dropout, none, out, x.dtype());
}

}  // namespace mixprec::ops
