// DType name parsing (the traits table itself is constexpr in dtype.h).
#include "mixprec/dtype.h"

namespace mixprec {

std::optional<DType> parse_dtype(std::string_view s) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},      {"float32", DType::f32}, {"fp32", DType::f32},
      {"float", DType::f32},    {"f64", DType::f64},     {"float64", DType::f64},
      {"fp64", DType::f64},     {"double", DType::f64},  {"f16", DType::f16},
      {"float16", DType::f16},  {"fp16", DType::f16},    {"half", DType::f16},
      {"bf16", DType::bf16},    {"bfloat16", DType::bf16}, {"i32", DType::i32},
      {"int32", DType::i32},    {"i64", DType::i64},     {"int64", DType::i64},
      {"u8", DType::u8},        {"uint8", DType::u8},    {"bool", DType::boolean},
  };
  for (const Alias& a : kAliases)
    if (a.name == s) return a.dtype;
  return std::nullopt;
}

}  // namespace mixprec
