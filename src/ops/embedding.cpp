// embedding (row gather) and dropout (inverted, counter-based mask), forward and backward side
// by side. Both are plain OpenMP loops (no oneDNN primitive fits). Invariants: embedding's
// backward scatter-adds in acc_dtype with one thread per weight row, positions in order (no
// atomics), so it is deterministic; dropout's mask bit for element i depends only on the
// generator's (seed, counter) and i, so it is the same for any thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

// ---------------------------------------------------------------- embedding

namespace {

// Indices as a contiguous i64 vector, every one checked against [0, num).
std::vector<int64_t> checked_indices(const Tensor& indices, int64_t num) {
  MIXPREC_CHECK(indices.dtype() == DType::i32 || indices.dtype() == DType::i64,
                "embedding: expected i32 or i64 indices, got ", dtype_name(indices.dtype()),
                Hint{"cast the indices with astype(DType::i64)"});
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i)
    MIXPREC_CHECK(idx[i] >= 0 && idx[i] < num, "embedding: index ", idx[i], " (at flat position ", i,
                  ") is out of range for ", num, " embeddings (valid: 0..", num - 1, ")");
  return idx;
}

// grad [n, dim] (contiguous) scattered into a zero [num, dim] table in acc dtype. Positions
// are bucketed by row (counting sort, stable); each row sums its positions in order.
Tensor embedding_backward(const Tensor& grad, const std::vector<int64_t>& idx, int64_t num, int64_t dim) {
  const DType acc = acc_dtype(grad.dtype());
  Tensor out = zeros({num, dim}, {.dtype = acc, .device = grad.device()});
  std::vector<int64_t> start(static_cast<size_t>(num) + 1, 0), pos(idx.size());
  for (int64_t r : idx) ++start[static_cast<size_t>(r) + 1];
  for (size_t r = 0; r < static_cast<size_t>(num); ++r) start[r + 1] += start[r];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < idx.size(); ++i) pos[static_cast<size_t>(fill[static_cast<size_t>(idx[i])]++)] = static_cast<int64_t>(i);
  const Tensor g = grad.contiguous();
  visit_float(g.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T* gb = static_cast<const T*>(g.data_ptr());
    A* ob = static_cast<A*>(out.data_ptr());
#pragma omp parallel for schedule(dynamic, 64) if (static_cast<int64_t>(idx.size()) * dim > 32768)
    for (int64_t r = 0; r < num; ++r) {
      A* orow = ob + r * dim;
      for (int64_t k = start[static_cast<size_t>(r)]; k < start[static_cast<size_t>(r) + 1]; ++k) {
        const T* grow = gb + pos[static_cast<size_t>(k)] * dim;
        for (int64_t j = 0; j < dim; ++j) orow[j] += static_cast<A>(load(grow[j]));
      }
    }
  });
  return out;
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
  std::vector<int64_t> idx = checked_indices(indices, num);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, {.dtype = w.dtype(), .device = w.device()});
  const Tensor wc = w.detach().contiguous();
  const size_t row_bytes = static_cast<size_t>(dim) * w.itemsize();
  const char* wb = static_cast<const char*>(wc.data_ptr());
  char* ob = static_cast<char*>(out.data_ptr());
  const int64_t n = static_cast<int64_t>(idx.size());
#pragma omp parallel for schedule(static) if (n * dim > 32768)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(ob + static_cast<size_t>(i) * row_bytes, wb + static_cast<size_t>(idx[static_cast<size_t>(i)]) * row_bytes, row_bytes);
  if (graph::needs_grad({&w})) {
    auto shared_idx = std::make_shared<const std::vector<int64_t>>(std::move(idx));
    record(OpId::embedding, {w}, out, [shared_idx, num, dim, n](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{embedding_backward(g[0].reshape({n, dim}), *shared_idx, num, dim)};
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
  const Tensor mask = dropout_mask(x.shape(), p, gen);
  const double scale = 1.0 / (1.0 - p);
  Tensor out = pointwise(OpId::dropout, "forward", PointwiseFn::dropout, {x, mask}, x.dtype(), scale);
  if (graph::needs_grad({&x})) {
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
