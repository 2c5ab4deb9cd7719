// DType: the element types mixprec knows, with one constexpr traits table (name, size,
// is_floating, accumulation dtype), the promotion lattice and dtype dispatch helpers.
// Invariants: kDTypeTraits has exactly one row per enum value, in enum order (static_asserted);
// promotion and accumulation are table lookups, never `if`s scattered through ops.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "mixprec/error.h"
#include "mixprec/half.h"

namespace mixprec {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 8;

struct DTypeTraits {
  DType dtype;
  std::string_view name;
  uint8_t size;
  bool is_floating;
  DType acc;  // the dtype reductions, norms and GEMM accumulation use for this input dtype
};

inline constexpr std::array<DTypeTraits, kNumDTypes> kDTypeTraits{{
    {DType::f32, "f32", 4, true, DType::f32},
    {DType::f64, "f64", 8, true, DType::f64},
    {DType::f16, "f16", 2, true, DType::f32},
    {DType::bf16, "bf16", 2, true, DType::f32},
    {DType::i32, "i32", 4, false, DType::i64},
    {DType::i64, "i64", 8, false, DType::i64},
    {DType::u8, "u8", 1, false, DType::i64},
    {DType::boolean, "bool", 1, false, DType::i64},
}};

consteval bool dtype_table_in_enum_order() {
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<int>(kDTypeTraits[i].dtype) != i) return false;
  return true;
}
static_assert(dtype_table_in_enum_order(), "kDTypeTraits rows must follow the DType enum order");

constexpr const DTypeTraits& traits(DType d) { return kDTypeTraits[static_cast<size_t>(d)]; }
constexpr std::string_view dtype_name(DType d) { return traits(d).name; }
constexpr size_t dtype_size(DType d) { return traits(d).size; }
constexpr bool is_floating(DType d) { return traits(d).is_floating; }
constexpr bool is_low_precision(DType d) { return d == DType::f16 || d == DType::bf16; }
constexpr DType acc_dtype(DType d) { return traits(d).acc; }

// Parses "f32", "float32", "fp16", "half", "bf16", "bfloat16", ...; nullopt if unknown.
std::optional<DType> parse_dtype(std::string_view s);

// Type promotion (c10's lattice, restricted to our dtypes). f16 with bf16 promotes to f32,
// because neither holds the other; floats win over integers; bool is the bottom.
namespace promote_table {
using enum DType;
inline constexpr DType kPromote[kNumDTypes][kNumDTypes] = {
    //          f32  f64  f16   bf16  i32  i64  u8    bool
    /* f32 */ {f32, f64, f32, f32, f32, f32, f32, f32},
    /* f64 */ {f64, f64, f64, f64, f64, f64, f64, f64},
    /* f16 */ {f32, f64, f16, f32, f16, f16, f16, f16},
    /* bf16*/ {f32, f64, f32, bf16, bf16, bf16, bf16, bf16},
    /* i32 */ {f32, f64, f16, bf16, i32, i64, i32, i32},
    /* i64 */ {f32, f64, f16, bf16, i64, i64, i64, i64},
    /* u8  */ {f32, f64, f16, bf16, i32, i64, u8, u8},
    /* bool*/ {f32, f64, f16, bf16, i32, i64, u8, boolean},
};
}  // namespace promote_table

constexpr DType promote(DType a, DType b) {
  return promote_table::kPromote[static_cast<size_t>(a)][static_cast<size_t>(b)];
}

// C++ element type for each dtype. Booleans are stored as uint8_t.
template <DType D> struct dtype_cpp;
template <> struct dtype_cpp<DType::f32> { using type = float; };
template <> struct dtype_cpp<DType::f64> { using type = double; };
template <> struct dtype_cpp<DType::f16> { using type = f16; };
template <> struct dtype_cpp<DType::bf16> { using type = bf16; };
template <> struct dtype_cpp<DType::i32> { using type = int32_t; };
template <> struct dtype_cpp<DType::i64> { using type = int64_t; };
template <> struct dtype_cpp<DType::u8> { using type = uint8_t; };
template <> struct dtype_cpp<DType::boolean> { using type = uint8_t; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

// Element types a floating kernel can load and store.
template <class T>
concept StorageFloat = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                       std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// Compute type for a storage type: f32 for f32/f16/bf16, f64 for f64.
template <class T> using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <StorageFloat T> constexpr compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return to_f32(v);
  else return v;
}
template <StorageFloat T, class V> constexpr T store(V v) {
  if constexpr (std::is_same_v<T, f16>) {
    if constexpr (std::is_same_v<V, double>) return to_f16(v);
    else return to_f16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bf16>) {
    if constexpr (std::is_same_v<V, double>) return to_bf16(v);
    else return to_bf16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// visit_float(dtype, [&]<class T>() { ... }) calls the lambda with T = float/double/f16/bf16.
template <class F>
decltype(auto) visit_float(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<f16>();
    case DType::bf16: return f.template operator()<bf16>();
    default: break;
  }
  MIXPREC_CHECK(false, "expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(d));
  __builtin_unreachable();
}

// visit_dtype: every dtype; bool is visited as uint8_t.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<f16>();
    case DType::bf16: return f.template operator()<bf16>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::u8:
    case DType::boolean: return f.template operator()<uint8_t>();
  }
  MIXPREC_ASSERT(false, "unknown dtype ", static_cast<int>(d));
  __builtin_unreachable();
}

// Scalar conversion through double for any element type (used by printing and item()).
template <class T> double to_double(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return to_f32(v);
  else return static_cast<double>(v);
}
template <class T> T from_double(double v) {
  if constexpr (std::is_same_v<T, f16>) return to_f16(v);
  else if constexpr (std::is_same_v<T, bf16>) return to_bf16(v);
  else return static_cast<T>(v);
}

}  // namespace mixprec
