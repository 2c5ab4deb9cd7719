// oneDNN engine, streams, memory descriptors and the primitive cache (see context.h).
#include "ops/onednn/context.h"

#include "ops/kernel_choice.h"

#include "mixprec/cpu_features.h"
#include "mixprec/error.h"

namespace mixprec::ops::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

PrimitiveCache& cache() {
  thread_local PrimitiveCache c;
  return c;
}

dnnl::memory::data_type data_type(DType d) {
  using dt = dnnl::memory::data_type;
  switch (d) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i32: return dt::s32;
    case DType::u8: return dt::u8;
    default: break;
  }
  MIXPREC_CHECK(false, "oneDNN has no data type for ", dtype_name(d));
  return dt::undef;
}

std::string why_not_computes_in(DType d) {
  if (d == DType::f32) return "";
  if (d == DType::bf16) return cpu_features().avx512f ? "" : "bf16 needs AVX-512 in oneDNN 2.6";
  if (d == DType::f16) return "oneDNN 2.6 has no f16 CPU primitives";
  return std::string("oneDNN does not compute in ") + std::string(dtype_name(d));
}

bool computes_in(DType d) { return why_not_computes_in(d).empty(); }

std::string why_not_via_f32(DType d) {
  if (d == DType::f16) return "";
  // With measured kernel choice the f32 route is a candidate beside the native one (it wins on
  // CPUs whose bf16 GEMM is slower than their f32 GEMM); in the fixed order it stays out.
  if (d == DType::bf16)
    return computes_in(d) && kernel_choice() == KernelChoice::first ? "oneDNN computes in bf16 here"
                                                                    : "";
  return std::string("not a 16-bit float (") + std::string(dtype_name(d)) + ")";
}

dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::desc md(const Shape& shape, const Strides& strides, DType d) {
  if (shape.empty())  // oneDNN needs at least one dim
    return dnnl::memory::desc({1}, data_type(d), dnnl::memory::dims{1});
  return dnnl::memory::desc(dims_of(shape), data_type(d), dims_of(strides));
}

dnnl::memory::desc md(const Tensor& t) { return md(t.shape(), t.strides(), t.dtype()); }

dnnl::memory mem(const dnnl::memory::desc& d, void* data) {
  return dnnl::memory(d, engine(), data);
}

dnnl::memory mem(const Tensor& t) { return dnnl::memory(md(t), engine(), t.data_ptr()); }

void key_add(std::string& k, const Tensor& t) {
  if (!t.defined()) {
    k += "none;";
    return;
  }
  k += dtype_name(t.dtype());
  k += '[';
  for (int64_t v : t.shape()) k += std::to_string(v) + ',';
  k += "]{";
  for (int64_t v : t.strides()) k += std::to_string(v) + ',';
  k += "};";
}
void key_add(std::string& k, const std::string& s) {
  k += s;
  k += ';';
}
void key_add(std::string& k, int64_t v) {
  k += std::to_string(v);
  k += ';';
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  p.execute(stream(), args);
  stream().wait();
}

std::string describe_error(const dnnl::error& e) {
  return std::string("oneDNN: ") + e.what() +
         (e.status == dnnl_unimplemented ? " (unimplemented)" : "");
}

}  // namespace mixprec::ops::onednn
