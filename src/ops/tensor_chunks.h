// The chunks of a list of tensors, numbered across all of them: the host multi-tensor kernels
// (the AMP unscale, the fused updates, the clip norm) run one parallel loop over every chunk of
// every tensor, not one per tensor (a parameter list is mostly tensors below one thread's worth of
// work). Chunk c of the list is chunk c - first[t] of tensor t, in tensor order, so a sum taken
// in chunk order is the same sum tensor by tensor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::ops {

class TensorChunks {
 public:
  // Chunks of `chunk` elements of each of ts (contiguous tensors).
  TensorChunks(const std::vector<Tensor>& ts, int64_t chunk)
      : chunk_(chunk), first_(ts.size() + 1, 0), size_(ts.size()) {
    for (size_t t = 0; t < ts.size(); ++t) {
      size_[t] = ts[t].numel();
      first_[t + 1] = first_[t] + (size_[t] + chunk - 1) / chunk;
      elements_ += size_[t];
    }
  }
  int64_t total() const { return first_.back(); }
  int64_t elements() const { return elements_; }
  // Chunk c's tensor and element range [lo, hi).
  void locate(int64_t c, size_t& t, int64_t& lo, int64_t& hi) const {
    t = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), c) - first_.begin() - 1);
    lo = (c - first_[t]) * chunk_;
    hi = std::min(size_[t], lo + chunk_);
  }

 private:
  int64_t chunk_;
  std::vector<int64_t> first_;  // first_[t]: the number of tensor t's chunk 0; back(): the total
  std::vector<int64_t> size_;
  int64_t elements_ = 0;
};

// True if no two of ts (contiguous) share an element: chunks of them can be written by different
// threads at once. A tensor listed twice is the case this rules out; disjoint views of one
// buffer (data parallel's buckets) pass.
inline bool disjoint_tensors(const std::vector<Tensor>& ts) {
  struct Span {
    const Storage* storage;
    int64_t lo, hi;
  };
  std::vector<Span> spans;
  for (const Tensor& t : ts)
    if (t.numel() > 0) spans.push_back({t.storage().get(), t.offset(), t.offset() + t.numel()});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.storage != b.storage ? a.storage < b.storage : a.lo < b.lo;
  });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].storage == spans[i - 1].storage && spans[i].lo < spans[i - 1].hi) return false;
  return true;
}

}  // namespace mixprec::ops
