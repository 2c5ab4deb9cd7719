// oneDNN plumbing shared by every oneDNN kernel: the CPU engine and (per thread) stream, dtype
// mapping, memory descriptors built from a Tensor's dims and strides (so any strided layout,
// channels-last included, goes in without a reorder), and a primitive cache keyed by a string
// that names the op, shapes, strides, dtypes and attributes. Written against oneDNN 2.6 (the
// op-descriptor API; 3.x removed it). Built only with MIXPREC_WITH_ONEDNN.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "mixprec/tensor.h"

namespace mixprec::ops::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread

// oneDNN's memory type of f32, bf16, f16 (memory only: oneDNN 2.6 has no f16 CPU primitives), i32
// (s32) and u8; any other dtype is an error.
dnnl::memory::data_type data_type(DType d);
// The dtypes oneDNN computes in on this CPU: f32 always, bf16 where the CPU has AVX-512
// (oneDNN emulates bf16 on AVX512-F and runs it natively on AVX512-BF16 / AMX).
bool computes_in(DType d);
std::string why_not_computes_in(DType d);  // "" if computes_in(d)
// "" when a `d` problem runs through low_via_f32 (widen, compute in f32, round the output
// once): f16 always (no f16 primitives), bf16 where oneDNN cannot compute in it (AVX2 CPUs).
std::string why_not_via_f32(DType d);

dnnl::memory::dims dims_of(const Shape& s);
dnnl::memory::desc md(const Tensor& t);  // exact dims + strides
dnnl::memory::desc md(const Shape& shape, const Strides& strides, DType d);
dnnl::memory mem(const Tensor& t);  // wraps t's data (no copy)
dnnl::memory mem(const dnnl::memory::desc& d, void* data);

// Cache of primitive descriptors and primitives. The value type is up to the kernel.
class PrimitiveCache {
 public:
  template <class T>
  std::shared_ptr<T> get_or_create(const std::string& key, const std::function<T()>& make) {
    auto it = map_.find(key);
    if (it != map_.end()) return std::static_pointer_cast<T>(it->second);
    auto v = std::make_shared<T>(make());
    map_.emplace(key, v);
    return v;
  }
  size_t size() const { return map_.size(); }
  void clear() { map_.clear(); }

 private:
  std::unordered_map<std::string, std::shared_ptr<void>> map_;
};
PrimitiveCache& cache();  // per thread, like the stream

// Key building: key_add(k, tensor) appends "dtype[dims]{strides}".
void key_add(std::string& k, const Tensor& t);
void key_add(std::string& k, const std::string& s);
void key_add(std::string& k, int64_t v);

// Runs a primitive with the given arguments on this thread's stream and waits.
void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);

// oneDNN's own error text, for decline reasons.
std::string describe_error(const dnnl::error& e);

}  // namespace mixprec::ops::onednn
