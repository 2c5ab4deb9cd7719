// The counter-based RNG: Philox known-answer vectors (Random123), determinism across thread
// counts and draws, distribution moments, and uniform draws that stay inside [low, high).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "mixprec/mixprec.h"

namespace mixprec {
namespace {

TEST(Rng, PhiloxKnownAnswers) {
  // Random123 kat_vectors: philox4x32 10 rounds.
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Rng, SameSeedSameTensorsWhateverTheThreadCount) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Generator g1(42);
  const auto a = randn({100003}, g1).to_vector<float>();
  const auto a2 = rand({77}, g1).to_vector<float>();
  omp_set_num_threads(2);
  Generator g2(42);
  const auto b = randn({100003}, g2).to_vector<float>();
  const auto b2 = rand({77}, g2).to_vector<float>();
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a2, b2);
  EXPECT_EQ(g1.offset(), g2.offset());
  Generator g3(43);
  EXPECT_NE(randn({16}, g3).to_vector<float>(), std::vector<float>(a.begin(), a.begin() + 16));
}

TEST(Rng, StateRestoreReproducesTheStream) {
  Generator g(7);
  (void)randn({10}, g);
  const uint64_t off = g.offset();
  const auto first = rand({50}, g).to_vector<double>();
  g.set_state(7, off);
  EXPECT_EQ(rand({50}, g).to_vector<double>(), first);
}

TEST(Rng, NormalMomentsAndUniformRange) {
  Generator g(1);
  const auto n = randn({200000}, g, {.dtype = DType::f64}).to_vector<double>();
  double mean = 0, var = 0;
  for (double v : n) mean += v;
  mean /= static_cast<double>(n.size());
  for (double v : n) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n.size());
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const auto u = uniform({100000}, -1.0, 1.0, g, {.dtype = d}).to_vector<double>();
    double lo = 1, hi = -1;
    for (double v : u) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GE(lo, -1.0);
    EXPECT_LT(hi, 1.0) << dtype_name(d);
    EXPECT_GT(hi, 0.99);
  }
  EXPECT_THROW(randn({2}, g, {.dtype = DType::i32}), Error);
}

}  // namespace
}  // namespace mixprec
