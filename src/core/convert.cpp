// Scalar row converters, run-time selection of the vector ones, and convert_row between any two
// dtypes. Selection happens once (first use), from cpu_features(), so MIXPREC_ISA caps it too.
#include "mixprec/convert.h"

#include <cstring>

#include "convert_internal.h"
#include "mixprec/cpu_features.h"

namespace mixprec {
namespace convert_detail {

void f32_to_f16_scalar(const float* src, f16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f16(src[i]);
}
void f16_to_f32_scalar(const f16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
void f32_to_bf16_scalar(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}
void bf16_to_f32_scalar(const bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}

}  // namespace convert_detail

namespace {
using namespace convert_detail;

constexpr ConvertKernels kScalar{f32_to_f16_scalar, f16_to_f32_scalar, f32_to_bf16_scalar,
                                 bf16_to_f32_scalar};
constexpr ConvertKernels kAvx2{f32_to_f16_avx2, f16_to_f32_avx2, f32_to_bf16_avx2,
                               bf16_to_f32_avx2};
// f32->f16 stays on 256-bit VCVTPS2PH: its 512-bit form runs at about half the rate on the
// AVX-512 machines measured (bench/convert_bench: 29 vs 53 GB/s in L1; equal once memory-bound).
constexpr ConvertKernels kAvx512{f32_to_f16_avx2, f16_to_f32_avx512, f32_to_bf16_avx512,
                                 bf16_to_f32_avx512};

bool isa_supported(ConvertIsa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case ConvertIsa::scalar: return true;
    case ConvertIsa::avx2_f16c: return f.avx2 && f.f16c;
    case ConvertIsa::avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.f16c;
  }
  return false;
}

const ConvertKernels& active() {
  static const ConvertKernels& k = convert_kernels(active_convert_isa());
  return k;
}

}  // namespace

std::string_view isa_name(ConvertIsa isa) {
  switch (isa) {
    case ConvertIsa::scalar: return "scalar";
    case ConvertIsa::avx2_f16c: return "avx2+f16c";
    case ConvertIsa::avx512: return "avx512";
  }
  return "?";
}

std::vector<ConvertIsa> available_convert_isas() {
  std::vector<ConvertIsa> out;
  for (ConvertIsa isa : {ConvertIsa::scalar, ConvertIsa::avx2_f16c, ConvertIsa::avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

ConvertIsa active_convert_isa() { return available_convert_isas().back(); }

const ConvertKernels& convert_kernels(ConvertIsa isa) {
  MIXPREC_CHECK(isa_supported(isa), "convert_kernels: this CPU lacks ", isa_name(isa),
                " (has: ", describe(cpu_features()), ")");
  switch (isa) {
    case ConvertIsa::scalar: return kScalar;
    case ConvertIsa::avx2_f16c: return kAvx2;
    case ConvertIsa::avx512: return kAvx512;
  }
  return kScalar;
}

void f32_to_f16_row(const float* src, f16* dst, int64_t n) { active().f32_to_f16(src, dst, n); }
void f16_to_f32_row(const f16* src, float* dst, int64_t n) { active().f16_to_f32(src, dst, n); }
void f32_to_bf16_row(const float* src, bf16* dst, int64_t n) {
  active().f32_to_bf16(src, dst, n);
}
void bf16_to_f32_row(const bf16* src, float* dst, int64_t n) {
  active().bf16_to_f32(src, dst, n);
}

namespace {

// Element conversion for the general path. Float sources narrow with correct rounding via
// store<>; integer destinations truncate.
template <class D, class S>
D convert_one(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (StorageFloat<D>) {
    if constexpr (std::is_same_v<S, double>) return store<D>(v);
    else if constexpr (StorageFloat<S>) return store<D>(static_cast<float>(load(v)));
    else if constexpr (std::is_same_v<D, double>) return static_cast<double>(v);
    else return store<D>(static_cast<double>(v));  // integer -> narrow float: round once
  } else {
    if constexpr (StorageFloat<S>) return static_cast<D>(load(v));
    else return static_cast<D>(v);
  }
}

}  // namespace

void convert_row(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  if (n <= 0) return;
  if (sdt == ddt || (sdt == DType::u8 && ddt == DType::boolean)) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(sdt));
    return;
  }
  if (sdt == DType::f32 && ddt == DType::f16)
    return f32_to_f16_row(static_cast<const float*>(src), static_cast<f16*>(dst), n);
  if (sdt == DType::f16 && ddt == DType::f32)
    return f16_to_f32_row(static_cast<const f16*>(src), static_cast<float*>(dst), n);
  if (sdt == DType::f32 && ddt == DType::bf16)
    return f32_to_bf16_row(static_cast<const float*>(src), static_cast<bf16*>(dst), n);
  if (sdt == DType::bf16 && ddt == DType::f32)
    return bf16_to_f32_row(static_cast<const bf16*>(src), static_cast<float*>(dst), n);
  if (ddt == DType::boolean) {  // any nonzero (NaN included) is true
    visit_dtype(sdt, [&]<class S>() {
      const S* s = static_cast<const S*>(src);
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = to_double(s[i]) != 0.0 ? 1 : 0;
    });
    return;
  }
  visit_dtype(sdt, [&]<class S>() {
    visit_dtype(ddt, [&]<class D>() {
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = convert_one<D, S>(s[i]);
    });
  });
}

}  // namespace mixprec
