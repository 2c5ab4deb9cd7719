// The weight cast cache, internal to the library (autocast, the optimizers' working copies and
// the AMP configuration use it; users see only its effect). Defined in ops/autocast.cpp.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "mixprec/tensor.h"

namespace mixprec {

// Low-precision copies of fp32 tensors (weights), keyed by storage id and checked against the
// storage version, so an in-place change or an optimizer step invalidates the entry.
// Entries marked persistent are the O2/O3 working copies the optimizer refreshes in its update
// pass; the others live for one step (clear_step()).
class CastCache {
 public:
  // The cached cast of `src` to `dtype`, or undefined if absent or stale.
  Tensor lookup(const Tensor& src, DType dtype) const;
  void store(const Tensor& src, const Tensor& low, bool persistent = false);
  void clear_step();  // drops the non-persistent entries
  void clear();
  size_t size() const { return entries_.size(); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Key {
    uint64_t storage_id;
    int64_t offset;
    DType dtype;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.storage_id * 31 + static_cast<uint64_t>(k.offset) * 7 +
                                   static_cast<uint64_t>(k.dtype));
    }
  };
  struct Entry {
    uint64_t version;
    Shape shape;
    Tensor low;
    bool persistent;
  };
  std::unordered_map<Key, Entry, KeyHash> entries_;
  mutable int64_t hits_ = 0;
  mutable int64_t misses_ = 0;
};

}  // namespace mixprec
