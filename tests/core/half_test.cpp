// 16-bit float conversions against an independent oracle. The oracle never uses bit tricks: it
// lists every finite positive f16/bf16 value as a double, sorted, plus the "next value if the
// exponent were unbounded" (2^16 for f16, 2^128 for bf16) standing for overflow to inf, and
// rounds by picking the nearest neighbour, breaking ties toward the even encoding.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/half.h"

namespace mixprec {
namespace {

struct Format {
  int mant_bits;   // 10 for f16, 7 for bf16
  int exp_bits;    // 5, 8
  uint16_t inf;    // 0x7c00, 0x7f80
};
constexpr Format kF16{10, 5, 0x7c00};
constexpr Format kBF16{7, 8, 0x7f80};

// Value of a 16-bit pattern computed with ldexp, no bit tricks.
double decode(const Format& f, uint16_t bits) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const int e = (bits >> f.mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = bits & ((1 << f.mant_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << f.exp_bits) - 1) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - f.mant_bits);
  return sign * std::ldexp(m + (1 << f.mant_bits), e - bias - f.mant_bits);
}

struct Oracle {
  Format fmt;
  std::vector<double> values;  // finite non-negative values, ascending, then the overflow sentinel
  std::vector<uint16_t> codes;

  explicit Oracle(Format f) : fmt(f) {
    for (uint32_t b = 0; b < f.inf; ++b) {
      values.push_back(decode(f, static_cast<uint16_t>(b)));
      codes.push_back(static_cast<uint16_t>(b));
    }
    const int bias = (1 << (f.exp_bits - 1)) - 1;
    values.push_back(std::ldexp(1.0, bias + 1));  // first value past the largest finite
    codes.push_back(f.inf);                        // its mantissa is even (zero)
  }

  uint16_t round(float x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (std::isinf(a)) return sign | fmt.inf;
    if (a >= values.back()) return sign | fmt.inf;
    auto hi = std::lower_bound(values.begin(), values.end(), a);
    const size_t i = static_cast<size_t>(hi - values.begin());
    if (values[i] == a) return sign | codes[i];
    const double below = values[i - 1], above = values[i];
    uint16_t code;
    if (a - below < above - a) code = codes[i - 1];
    else if (a - below > above - a) code = codes[i];
    else code = (codes[i - 1] & 1) ? codes[i] : codes[i - 1];
    return sign | code;
  }
};

const Oracle& f16_oracle() {
  static const Oracle o(kF16);
  return o;
}
const Oracle& bf16_oracle() {
  static const Oracle o(kBF16);
  return o;
}

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// Expected NaN encoding: quiet, sign and top payload bits kept.
uint16_t expected_f16_nan(uint32_t x) { return ((x >> 16) & 0x8000) | 0x7e00 | ((x >> 13) & 0x3ff); }
uint16_t expected_bf16_nan(uint32_t x) { return static_cast<uint16_t>((x >> 16) | 0x40); }

void check_f32_to_f16(float x) {
  const uint32_t xb = std::bit_cast<uint32_t>(x);
  const uint16_t got = f32_to_f16_bits(x);
  const uint16_t want = std::isnan(x) ? expected_f16_nan(xb) : f16_oracle().round(x);
  ASSERT_EQ(got, want) << std::hex << "f32 bits 0x" << xb << " (" << x << ")";
}
void check_f32_to_bf16(float x) {
  const uint32_t xb = std::bit_cast<uint32_t>(x);
  const uint16_t got = f32_to_bf16_bits(x);
  const uint16_t want = std::isnan(x) ? expected_bf16_nan(xb) : bf16_oracle().round(x);
  ASSERT_EQ(got, want) << std::hex << "f32 bits 0x" << xb << " (" << x << ")";
}

TEST(F16, HandComputedValues) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65519.99f), 0x7bff);  // just below the midpoint: stays finite
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);   // the midpoint ties to even: inf
  EXPECT_EQ(f32_to_f16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even 0
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);  // above half: rounds up
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even 2
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: to even 1.0
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: up to even
  EXPECT_FLOAT_EQ(f16_bits_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_f32(0x03ff), std::ldexp(1023.0f, -24));
}

TEST(BF16, HandComputedValues) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7f7fff)), 0x7f7f);             // largest finite
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00008000)), 0x0000);  // subnormal tie to even 0
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00018000)), 0x0002);  // subnormal tie up to even
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x00010001)), 0x0001);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f800001)), 0x7fc0);  // sNaN: quiet, payload lost low
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0xffa00000)), 0xffe0);
  EXPECT_EQ(bf16_bits_to_f32(0x4049), 3.140625f);
}

TEST(F16, ExhaustiveRoundTripAllBitPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = f16_bits_to_f32(h);
    const double d = decode(kF16, h);
    if (std::isnan(d)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(f32_to_f16_bits(f), h | 0x0200) << std::hex << b;  // comes back quiet
    } else {
      ASSERT_EQ(static_cast<double>(f), d) << std::hex << b;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
      ASSERT_EQ(f32_to_f16_bits(f), h) << std::hex << b;
    }
  }
}

TEST(BF16, ExhaustiveRoundTripAllBitPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_f32(h);
    const double d = decode(kBF16, h);
    if (std::isnan(d)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(f32_to_bf16_bits(f), h | 0x0040) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(f), d) << std::hex << b;
      ASSERT_EQ(f32_to_bf16_bits(f), h) << std::hex << b;
    }
  }
}

// Every halfway point and its two neighbours (one f32 ulp either side), for every finite f16
// and bf16 interval, plus the classic boundary values.
std::vector<float> boundary_values(const Oracle& o) {
  std::vector<float> out;
  for (size_t i = 0; i + 1 < o.values.size(); ++i) {
    const double mid = 0.5 * (o.values[i] + o.values[i + 1]);
    const float m = static_cast<float>(mid);
    if (static_cast<double>(m) != mid) continue;  // not representable in f32: no exact tie
    for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY), static_cast<float>(o.values[i])}) {
      out.push_back(v);
      out.push_back(-v);
    }
  }
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu,
                     0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffc00001u, 0x7fbfffffu,
                     0x7fffffffu, 0xffffffffu, 0x477fefffu, 0x477ff000u, 0x33000000u, 0x33000001u,
                     0x387fc000u, 0x387fe000u, 0x38800000u})
    out.push_back(from_bits(b));
  return out;
}

TEST(F16, BoundaryValuesAgainstOracle) {
  const auto vals = boundary_values(f16_oracle());
  EXPECT_GT(vals.size(), 200000u);
  for (float v : vals) check_f32_to_f16(v);
}

TEST(BF16, BoundaryValuesAgainstOracle) {
  const auto vals = boundary_values(bf16_oracle());
  EXPECT_GT(vals.size(), 200000u);
  for (float v : vals) check_f32_to_bf16(v);
}

// 10^7 random f32 bit patterns (every exponent) and 10^7 random values inside the f16 range.
TEST(F16, RandomValuesAgainstOracle) {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 10'000'000; ++i) {
    check_f32_to_f16(from_bits(static_cast<uint32_t>(rng())));
    const float in_range = std::ldexp(static_cast<float>(rng() >> 40) / 16777216.0f,
                                      static_cast<int>(rng() % 45) - 28);
    check_f32_to_f16((i & 1) ? in_range : -in_range);
  }
}

TEST(BF16, RandomValuesAgainstOracle) {
  std::mt19937_64 rng(4321);
  for (int i = 0; i < 10'000'000; ++i) check_f32_to_bf16(from_bits(static_cast<uint32_t>(rng())));
}

TEST(Half, F64NarrowingAvoidsDoubleRounding) {
  // 1 + 2^-11 + 2^-40 is just above the f16 tie at 1 + 2^-11: must round up to 1 + 2^-10.
  // Rounding to f32 first would land on the tie and then round to even (1.0).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(to_f16(x).bits, 0x3c01);
  EXPECT_EQ(to_f16(static_cast<float>(x)).bits, 0x3c00);
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(to_bf16(y).bits, 0x3f81);
  EXPECT_EQ(to_bf16(-y).bits, 0xbf81);
  EXPECT_EQ(to_f16(1e300).bits, 0x7c00);
  EXPECT_EQ(to_bf16(-1e300).bits, 0xff80);
  EXPECT_EQ(to_f16(std::ldexp(1.0, -25)).bits, 0x0000);
  EXPECT_EQ(to_f16(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)).bits, 0x0001);
}

// ---------------------------------------------------------------- vector paths == scalar

template <class Fn>
void for_all_f32_bits(Fn&& fn) {
  constexpr uint64_t kChunk = 1 << 20;
#pragma omp parallel for schedule(dynamic)
  for (uint64_t c = 0; c < (uint64_t{1} << 32) / kChunk; ++c) fn(static_cast<uint32_t>(c * kChunk), kChunk);
}

TEST(Convert, VectorPathsMatchScalarOnEveryF32BitPatternExhaustive) {
  for (ConvertIsa isa : available_convert_isas()) {
    if (isa == ConvertIsa::scalar) continue;
    const ConvertKernels& k = convert_kernels(isa);
    std::atomic<int64_t> mismatches{0};
    for_all_f32_bits([&](uint32_t start, uint64_t n) {
      std::vector<float> src(n);
      std::vector<f16> h(n);
      std::vector<bf16> b(n);
      for (uint64_t i = 0; i < n; ++i) src[i] = from_bits(start + static_cast<uint32_t>(i));
      k.f32_to_f16(src.data(), h.data(), static_cast<int64_t>(n));
      k.f32_to_bf16(src.data(), b.data(), static_cast<int64_t>(n));
      int64_t bad = 0;
      for (uint64_t i = 0; i < n; ++i) {
        bad += h[i].bits != f32_to_f16_bits(src[i]);
        bad += b[i].bits != f32_to_bf16_bits(src[i]);
      }
      mismatches += bad;
    });
    EXPECT_EQ(mismatches.load(), 0) << isa_name(isa);
  }
}

TEST(Convert, VectorPathsMatchScalarWidening) {
  std::vector<uint16_t> all(65536 + 13);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  for (ConvertIsa isa : available_convert_isas()) {
    const ConvertKernels& k = convert_kernels(isa);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{15}, int64_t{31}, int64_t{33},
                      static_cast<int64_t>(all.size())}) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      k.f16_to_f32(reinterpret_cast<const f16*>(all.data()), a.data(), n);
      k.bf16_to_f32(reinterpret_cast<const bf16*>(all.data()), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(f16_bits_to_f32(all[i])))
            << isa_name(isa) << " f16 0x" << std::hex << all[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(b[i]), std::bit_cast<uint32_t>(bf16_bits_to_f32(all[i])))
            << isa_name(isa) << " bf16 0x" << std::hex << all[i];
      }
    }
  }
}

TEST(Convert, TailsAndOddLengthsMatchScalar) {
  std::mt19937 rng(7);
  for (ConvertIsa isa : available_convert_isas()) {
    const ConvertKernels& k = convert_kernels(isa);
    for (int64_t n = 0; n < 70; ++n) {
      std::vector<float> src(static_cast<size_t>(n));
      for (auto& v : src) v = from_bits(rng());
      std::vector<f16> h(static_cast<size_t>(n) + 1, f16{0xabcd});
      std::vector<bf16> b(static_cast<size_t>(n) + 1, bf16{0xabcd});
      k.f32_to_f16(src.data(), h.data(), n);
      k.f32_to_bf16(src.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(h[i].bits, f32_to_f16_bits(src[i]));
        ASSERT_EQ(b[i].bits, f32_to_bf16_bits(src[i]));
      }
      EXPECT_EQ(h[n].bits, 0xabcd) << "wrote past the end, n=" << n;
      EXPECT_EQ(b[n].bits, 0xabcd) << "wrote past the end, n=" << n;
    }
  }
}

TEST(Convert, ConvertRowBetweenAllDtypes) {
  const std::vector<double> vals{0.0, 1.0, -2.5, 3.75, 100.0, -7.0};
  for (DType s : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
      std::vector<unsigned char> sb(vals.size() * 8), db(vals.size() * 8);
      convert_row(vals.data(), DType::f64, sb.data(), s, static_cast<int64_t>(vals.size()));
      convert_row(sb.data(), s, db.data(), d, static_cast<int64_t>(vals.size()));
      std::vector<double> back(vals.size());
      convert_row(db.data(), d, back.data(), DType::f64, static_cast<int64_t>(vals.size()));
      for (size_t i = 0; i < vals.size(); ++i) {
        const double expect = (is_floating(s) && is_floating(d)) ? vals[i] : std::trunc(vals[i]);
        EXPECT_EQ(back[i], expect) << dtype_name(s) << " -> " << dtype_name(d) << " at " << i;
      }
    }
  }
  const float nan = std::nanf("");
  uint8_t flags[3];
  const float bsrc[3] = {0.0f, -0.5f, nan};
  convert_row(bsrc, DType::f32, flags, DType::boolean, 3);
  EXPECT_EQ(flags[0], 0);
  EXPECT_EQ(flags[1], 1);
  EXPECT_EQ(flags[2], 1);
}

}  // namespace
}  // namespace mixprec
