// Reference embedding kernels (the only ones; no oneDNN primitive fits): the forward copies
// rows; the backward scatter-adds in acc_dtype with one thread per weight row, positions bucketed
// by row (counting sort, stable) and summed in order (no atomics), so it is deterministic.
#include <cstring>
#include <vector>

#include "ops/ref/kernels.h"

namespace mixprec::ops::ref {

void embedding_fwd(const EmbeddingFwdProblem& p) {
  const int64_t dim = p.weight.shape()[1];
  const size_t row_bytes = static_cast<size_t>(dim) * p.weight.itemsize();
  const char* wb = static_cast<const char*>(p.weight.data_ptr());
  char* ob = static_cast<char*>(p.out.data_ptr());
  const int64_t* idx = p.indices.data<int64_t>();
  const int64_t n = p.indices.numel();
#pragma omp parallel for schedule(static) if (n * dim > 32768)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(ob + static_cast<size_t>(i) * row_bytes,
                wb + static_cast<size_t>(idx[i]) * row_bytes, row_bytes);
}

void embedding_bwd(const EmbeddingBwdProblem& p) {
  const Tensor& out = p.dweight;
  const int64_t num = out.shape()[0], dim = out.shape()[1];
  const int64_t n_idx = p.indices.numel();
  const int64_t* idxp = p.indices.data<int64_t>();
  const std::vector<int64_t> idx(idxp, idxp + n_idx);
  std::vector<int64_t> start(static_cast<size_t>(num) + 1, 0), pos(idx.size());
  for (int64_t r : idx) ++start[static_cast<size_t>(r) + 1];
  for (size_t r = 0; r < static_cast<size_t>(num); ++r) start[r + 1] += start[r];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < idx.size(); ++i)
    pos[static_cast<size_t>(fill[static_cast<size_t>(idx[i])]++)] = static_cast<int64_t>(i);
  const Tensor& g = p.grad;
  visit_float(g.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T* gb = static_cast<const T*>(g.data_ptr());
    A* ob = static_cast<A*>(out.data_ptr());
#pragma omp parallel for schedule(dynamic, 64) if (static_cast <int64_t>(idx.size()) * dim > 32768)
    for (int64_t r = 0; r < num; ++r) {
      A* orow = ob + r * dim;
      for (int64_t k = start[static_cast<size_t>(r)]; k < start[static_cast<size_t>(r) + 1]; ++k) {
        const T* grow = gb + pos[static_cast<size_t>(k)] * dim;
        for (int64_t j = 0; j < dim; ++j) orow[j] += static_cast<A>(load(grow[j]));
      }
    }
  });
}

}  // namespace mixprec::ops::ref
