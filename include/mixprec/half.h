// 16-bit floating-point storage types: f16 (IEEE binary16) and bf16 (bfloat16). They are storage,
// not arithmetic: load, widen to float, compute, round on store. Every narrowing conversion here
// rounds to nearest, ties to even; NaN stays NaN (quieted, sign and top payload bits kept),
// ±inf stays ±inf, subnormals are exact in both directions, and f16 overflows to inf from
// 65520 up (65519.99 -> 65504). These scalar functions are the reference the vector converters
// in convert.h must match bit for bit.
#pragma once

#include <bit>
#include <cstdint>

namespace mixprec {

struct f16 {
  uint16_t bits = 0;
  friend constexpr bool operator==(f16 a, f16 b) { return a.bits == b.bits; }
};
struct bf16 {
  uint16_t bits = 0;
  friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

// f32 -> f16, round to nearest even. NaN -> quiet NaN with the top 10 payload bits (matches F16C).
constexpr uint16_t f32_to_f16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {  // below 2^-14: f16 subnormal or zero
    if (ax <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (2^-25 is a tie, to even 0)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t t = ax - 0x38000000u;  // rebias exponent 127 -> 15
  t += 0xfffu + ((t >> 13) & 1u);
  return static_cast<uint16_t>(sign | (t >> 13));
}

// f16 -> f32, exact. A signalling NaN comes back quiet (bit 22 set), as F16C's VCVTPH2PS does.
constexpr float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) {
    const uint32_t nan_quiet = m ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | nan_quiet);
  }
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    e = 1;
    while ((m & 0x400u) == 0) {  // normalise the subnormal
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

// f32 -> bf16, round to nearest even; NaN -> quiet NaN (bit 6 set), sign and top payload kept.
// Unlike VCVTNEPS2BF16 (which flushes f32 subnormals to zero) subnormals round exactly.
constexpr uint16_t f32_to_bf16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// bf16 -> f32, exact (a bit shift; the NaN payload is kept as is).
constexpr float bf16_bits_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// f64 -> f32 rounding to odd, so that a second rounding to a format with at most 22 fraction
// bits is correctly rounded (no double rounding in f64 -> f16 / bf16).
inline float f64_to_f32_round_to_odd(double d) {
  float r = static_cast<float>(d);  // round to nearest even
  if (static_cast<double>(r) == d || d != d) return r;
  uint32_t bits = std::bit_cast<uint32_t>(r);
  // Step back toward zero if rounding went away from zero, giving the truncated value.
  const double ar = r < 0 ? -static_cast<double>(r) : static_cast<double>(r);
  const double ad = d < 0 ? -d : d;
  if (ar > ad) --bits;  // magnitude decrement (inf -> FLT_MAX works too)
  return std::bit_cast<float>(bits | 1u);
}

constexpr f16 to_f16(float v) { return f16{f32_to_f16_bits(v)}; }
constexpr bf16 to_bf16(float v) { return bf16{f32_to_bf16_bits(v)}; }
constexpr float to_f32(f16 v) { return f16_bits_to_f32(v.bits); }
constexpr float to_f32(bf16 v) { return bf16_bits_to_f32(v.bits); }
inline f16 to_f16(double v) { return to_f16(f64_to_f32_round_to_odd(v)); }
inline bf16 to_bf16(double v) { return to_bf16(f64_to_f32_round_to_odd(v)); }

}  // namespace mixprec
