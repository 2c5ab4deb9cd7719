// The cpu backend's vector math (ops/cpu/simd.h, simd_math.inc) through its row kernels: erf and
// exp against the f64 functions in ulps, the gelu forms and their gradients against their f64
// formulas, the special values (-0, +-inf, NaN, the tails), and the same bits from every
// instruction set this CPU has, at every row length (the tails run on padded copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"

namespace mixprec {
namespace {
using ops::cpu::activation_rows;
using ops::cpu::simd::Activation;
using ops::cpu::simd::Isa;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The instruction sets this CPU runs (MIXPREC_ISA caps them too), the best first.
std::vector<Isa> isas_here() {
  std::vector<Isa> out;
  const Isa best = ops::cpu::simd::best_isa();
  if (best == Isa::avx512) out.push_back(Isa::avx512);
  if (best != Isa::scalar) out.push_back(Isa::avx2);
  out.push_back(Isa::scalar);
  return out;
}

std::vector<float> run(Activation act, Isa isa, const std::vector<float>& a,
                       const std::vector<float>* b = nullptr) {
  std::vector<float> out(a.size());
  activation_rows(act, isa, a.data(), b ? b->data() : nullptr, out.data(),
                  static_cast<int64_t>(a.size()));
  return out;
}

// The spacing of f32 values at |y| (f32 rounding of y): 2^(e - 23) for y in [2^e, 2^(e+1)), and
// the subnormal spacing below the normal range.
double ulp_at(double y) {
  const float f = std::fabs(static_cast<float>(y));
  if (f < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  int e;
  std::frexp(f, &e);
  return std::ldexp(1.0, e - 24);
}

// Every finite f32 of one sign, taking every `stride`-th bit pattern, plus the largest.
std::vector<float> finite_floats(uint32_t stride, bool negative) {
  std::vector<float> v;
  for (uint64_t bits = 0; bits < 0x7F800000u; bits += stride)
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits) | (negative ? 0x80000000u : 0)));
  v.push_back(negative ? -std::numeric_limits<float>::max() : std::numeric_limits<float>::max());
  return v;
}

// The largest error in ulps of act's results against f(x) in f64, over xs, on the best ISA.
double max_ulps(Activation act, const std::vector<float>& xs, double (*f)(double), float* worst) {
  const std::vector<float> y = run(act, isas_here().front(), xs);
  double max_err = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = f(xs[i]);
    const double err = std::fabs(y[i] - exact) / ulp_at(exact);
    if (err > max_err) {
      max_err = err;
      *worst = xs[i];
    }
  }
  return max_err;
}

TEST(SimdMath, ErfIsWithinOneUlpOfF64AcrossTheWholeRange) {
  // Every 61st bit pattern of each sign: 34.6 million inputs a sign, every binade.
  for (bool negative : {false, true}) {
    float worst = 0;
    const double err = max_ulps(
        Activation::erf, finite_floats(61, negative), [](double x) { return std::erf(x); }, &worst);
    EXPECT_LE(err, 1.0) << "erf at " << worst;  // the fit's own bound is 0.86
    RecordProperty(negative ? "erf_max_ulps_negative" : "erf_max_ulps_positive",
                   std::to_string(err));
  }
}

TEST(SimdMath, ErfExhaustiveSlow) {
  // Every positive finite f32 (erf is odd, bit for bit: ErfSpecialValuesAndOddness), 2^24 at a
  // time.
  double err = 0;
  float worst = 0;
  std::vector<float> xs;
  for (uint64_t lo = 0; lo < 0x7F800000u; lo += 1u << 24) {
    xs.clear();
    for (uint64_t bits = lo; bits < std::min<uint64_t>(lo + (1u << 24), 0x7F800000u); ++bits)
      xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    float w = 0;
    const double e = max_ulps(
        Activation::erf, xs, [](double x) { return std::erf(x); }, &w);
    if (e > err) err = e, worst = w;
  }
  EXPECT_LE(err, 1.0) << "erf at " << worst;
  std::printf("erf: at most %.3f ulp over every positive finite f32 (worst at %.9g)\n", err, worst);
}

TEST(SimdMath, ErfSpecialValuesAndOddness) {
  for (Isa isa : isas_here()) {
    const std::vector<float> x = {0.0f,  -0.0f,  kInf,    -kInf,  kNaN, 4.0f, -4.0f,
                                  3.92f, 1e-30f, -1e-30f, 1e-45f, 0.5f, 1.0f, 3.5f};
    const std::vector<float> y = run(Activation::erf, isa, x);
    EXPECT_EQ(std::bit_cast<uint32_t>(y[0]), 0u) << ops::cpu::simd::isa_name(isa);
    EXPECT_EQ(std::bit_cast<uint32_t>(y[1]), 0x80000000u) << "erf(-0) must be -0";
    EXPECT_EQ(y[2], 1.0f);
    EXPECT_EQ(y[3], -1.0f);
    EXPECT_TRUE(std::isnan(y[4]));
    EXPECT_EQ(y[5], 1.0f);
    EXPECT_EQ(y[6], -1.0f);
    EXPECT_EQ(y[7], 1.0f);  // erf(3.92) rounds to 1 in f32
    EXPECT_FLOAT_EQ(y[8], static_cast<float>(1.1283791670955126 * 1e-30));  // 2/sqrt(pi) x
    EXPECT_EQ(y[9], -y[8]);
    EXPECT_FLOAT_EQ(y[11], 0.5204998778f);
    EXPECT_FLOAT_EQ(y[12], 0.8427007929f);
    // Odd: erf(-x) = -erf(x) bit for bit, at piece edges and between them.
    std::vector<float> pos;
    for (float v = 0.0f; v < 4.5f; v += 0.0371f) pos.push_back(v);
    std::vector<float> neg(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) neg[i] = -pos[i];
    const std::vector<float> yp = run(Activation::erf, isa, pos),
                             yn = run(Activation::erf, isa, neg);
    for (size_t i = 0; i < pos.size(); ++i) EXPECT_EQ(yn[i], -yp[i]) << "at " << pos[i];
  }
}

TEST(SimdMath, ExpIsWithinTwoUlpOfF64AndFlushesOnlyBelowTheNormalRange) {
  std::vector<float> xs;
  for (bool negative : {false, true})
    for (float v : finite_floats(97, negative))
      if (v > -87.33f && v < 88.72f) xs.push_back(v);
  float worst = 0;
  const double err = max_ulps(
      Activation::exp, xs, [](double x) { return std::exp(x); }, &worst);
  EXPECT_LE(err, 2.0) << "exp at " << worst;
  RecordProperty("exp_max_ulps", std::to_string(err));
  for (Isa isa : isas_here()) {
    const std::vector<float> y =
        run(Activation::exp, isa, {0.0f, -0.0f, -kInf, kInf, kNaN, -88.0f, 88.72f, 89.0f, -1e-30f});
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[3], kInf);
    EXPECT_TRUE(std::isnan(y[4]));
    EXPECT_EQ(y[5], 0.0f) << "subnormal results are flushed";
    EXPECT_TRUE(std::isfinite(y[6]));
    EXPECT_NEAR(y[6] / std::exp(static_cast<double>(88.72f)), 1.0, 2.5e-7);
    EXPECT_EQ(y[7], kInf);
    EXPECT_EQ(y[8], 1.0f);
  }
}

// The f64 formulas of elementwise_problem.h.
double gelu_erf64(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_erf_grad64(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double gelu_tanh_arg64(double x) { return std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x); }
double gelu_tanh64(double x) { return 0.5 * x * (1 + std::tanh(gelu_tanh_arg64(x))); }
double gelu_tanh_grad64(double x) {
  const double t = std::tanh(gelu_tanh_arg64(x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// The error bound of an f32 evaluation of these formulas: a few ulps of the result, plus what
// rounding 1 + erf (or its derivative's terms) to f32 costs where the result is small against
// x: 2^-23 |x| for the forward forms, 2^-22 for the gradients. The reference kernels (libm's erf
// and tanh in float) have the same bound.
TEST(SimdMath, GeluFormsAndGradientsMatchTheirF64Formulas) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.0013f) x.push_back(v);
  for (float v : {1e-30f, -1e-30f, 1e-6f, -1e-6f, 60.0f, -60.0f, 1e4f, -1e4f}) x.push_back(v);
  const std::vector<float> g(x.size(), 1.0f);
  struct Case {
    Activation act;
    double (*f)(double);
    bool grad;
  };
  for (const Case& c : {Case{Activation::gelu_erf, gelu_erf64, false},
                        Case{Activation::gelu_tanh, gelu_tanh64, false},
                        Case{Activation::gelu_erf_grad, gelu_erf_grad64, true},
                        Case{Activation::gelu_tanh_grad, gelu_tanh_grad64, true}}) {
    const std::vector<float> y =
        c.grad ? run(c.act, isas_here().front(), g, &x) : run(c.act, isas_here().front(), x);
    for (size_t i = 0; i < x.size(); ++i) {
      const double exact = c.f(x[i]);
      const double bound = 4 * ulp_at(exact) + (c.grad ? 0x1p-22 : 0x1p-23 * std::fabs(x[i]));
      ASSERT_LE(std::fabs(y[i] - exact), bound)
          << "activation " << static_cast<int>(c.act) << " at x = " << x[i] << ": " << y[i]
          << " against " << exact;
    }
  }
}

TEST(SimdMath, GeluSpecialValues) {
  for (Isa isa : isas_here()) {
    const std::vector<float> x = {0.0f, -0.0f, kInf, -kInf, kNaN, -20.0f};
    const std::vector<float> one(x.size(), 1.0f);
    const std::vector<float> fe = run(Activation::gelu_erf, isa, x);
    const std::vector<float> ft = run(Activation::gelu_tanh, isa, x);
    for (const std::vector<float>* f : {&fe, &ft}) {
      EXPECT_EQ((*f)[0], 0.0f);
      EXPECT_EQ((*f)[2], kInf);
      EXPECT_TRUE(std::isnan((*f)[4]));
      EXPECT_LE(std::fabs((*f)[5]), 1e-30f);
    }
    EXPECT_TRUE(std::isnan(fe[3])) << "-inf * (1 + erf(-inf)) = -inf * 0, as the formula";
    const std::vector<float> ge = run(Activation::gelu_erf_grad, isa, one, &x);
    const std::vector<float> gt = run(Activation::gelu_tanh_grad, isa, one, &x);
    for (const std::vector<float>* d : {&ge, &gt}) {
      EXPECT_EQ((*d)[0], 0.5f);  // the derivative at 0 is 1/2
      EXPECT_EQ((*d)[1], 0.5f);
      EXPECT_TRUE(std::isnan((*d)[2])) << "inf * 0 in the formula";
      EXPECT_TRUE(std::isnan((*d)[3]));
      EXPECT_TRUE(std::isnan((*d)[4]));
    }
  }
}

// The bits of every activation, from every ISA, at row lengths 1..70: the tails, run on padded
// copies, give what the full vectors give.
TEST(SimdMath, EveryIsaAndEveryRowLengthGiveTheSameBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> a(70), b(70);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = nd(rng);
    b[i] = nd(rng);
  }
  a[3] = 0.0f, a[4] = -0.0f, a[5] = kInf, a[6] = kNaN, a[7] = -4.0f, a[8] = 0.5f;
  b[9] = -kInf, b[10] = 3.9f, b[11] = -1e-20f;
  for (Activation act :
       {Activation::erf, Activation::exp, Activation::gelu_erf, Activation::gelu_tanh,
        Activation::gelu_erf_grad, Activation::gelu_tanh_grad}) {
    const bool grad = act == Activation::gelu_erf_grad || act == Activation::gelu_tanh_grad;
    const std::vector<float> whole = run(act, Isa::scalar, a, grad ? &b : nullptr);
    for (Isa isa : isas_here())
      for (size_t n = 1; n <= a.size(); ++n) {
        std::vector<float> out(n);
        activation_rows(act, isa, a.data(), grad ? b.data() : nullptr, out.data(),
                        static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(whole[i]))
              << "activation " << static_cast<int>(act) << " on " << ops::cpu::simd::isa_name(isa)
              << ", row of " << n << ", element " << i;
      }
  }
}

// exp's narrower forms (exp_nonpositive, exp_in_range) against exp, bit for bit: the number of
// inputs where they differ, over the bit patterns [from, to] taken every `stride`-th, plus
// `extra`. One copy per ISA, by pointer (no vector crosses into this file's untargeted code).
#define MIXPREC_EXP_FORM_DIFFS                                                                     \
  struct NonPositive {                                                                             \
    V operator()(V x) const { return exp_nonpositive(x); }                                         \
  };                                                                                               \
  struct InRange {                                                                                 \
    V operator()(V x) const { return exp_in_range(x); }                                            \
  };                                                                                               \
  template <class Form>                                                                            \
  int64_t diffs(uint64_t from, uint64_t to, uint32_t stride, std::initializer_list<float> extra) { \
    int64_t n = 0;                                                                                 \
    float xs[kLanes], a[kLanes], b[kLanes];                                                        \
    int l = 0;                                                                                     \
    auto add = [&](float x) {                                                                      \
      xs[l++] = x;                                                                                 \
      if (l < kLanes) return;                                                                      \
      storeu(a, exp(loadu(xs)));                                                                   \
      storeu(b, Form()(loadu(xs)));                                                                \
      for (int i = 0; i < kLanes; ++i)                                                             \
        n += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);                       \
      l = 0;                                                                                       \
    };                                                                                             \
    for (uint64_t bits = from; bits <= to; bits += stride)                                         \
      add(std::bit_cast<float>(static_cast<uint32_t>(bits)));                                      \
    for (float x : extra) add(x);                                                                  \
    while (l != 0) add(-1.0f);                                                                     \
    return n;                                                                                      \
  }                                                                                                \
  int64_t form_diffs(bool in_range, uint64_t from, uint64_t to, uint32_t stride,                   \
                     std::initializer_list<float> extra) {                                         \
    return in_range ? diffs<InRange>(from, to, stride, extra)                                      \
                    : diffs<NonPositive>(from, to, stride, extra);                                 \
  }
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace exp_avx512 {
using namespace ops::cpu::simd::avx512;
MIXPREC_EXP_FORM_DIFFS
}  // namespace exp_avx512
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace exp_avx2 {
using namespace ops::cpu::simd::avx2;
MIXPREC_EXP_FORM_DIFFS
}  // namespace exp_avx2
#pragma GCC pop_options
namespace exp_scalar {
using namespace ops::cpu::simd::scalar;
MIXPREC_EXP_FORM_DIFFS
}  // namespace exp_scalar

// A form's differing inputs on one ISA, `wide` the widest ISA's stride (the others' larger).
int64_t form_diffs(Isa isa, bool in_range, uint64_t from, uint64_t to, uint32_t wide,
                   std::initializer_list<float> x) {
  return isa == Isa::avx512 ? exp_avx512::form_diffs(in_range, from, to, wide, x)
         : isa == Isa::avx2 ? exp_avx2::form_diffs(in_range, from, to, wide * 7 + 1, x)
                            : exp_scalar::form_diffs(in_range, from, to, wide * 61 + 1, x);
}

TEST(SimdMath, ExpNarrowFormsAreExpBitForBitOnTheirDomains) {
  // exp_nonpositive: every non-positive f32 from -0 to past -88 (1.1 billion on the widest ISA),
  // with -inf, far negatives and NaN. exp_in_range: every 5th f32 of [-88, 88] and both ends.
  const std::initializer_list<float> neg = {-kInf,        -0.0f,        0.0f,    -87.3365479f,
                                            -87.3365402f, -87.3365555f, -100.0f, -1e30f,
                                            -3.4e38f,     kNaN};
  const std::initializer_list<float> ends = {88.0f,   -88.0f, 87.9999924f, -87.9999924f,
                                             -100.0f, -1e30f, -3.4e38f,    -kInf};
  for (Isa isa : isas_here()) {
    EXPECT_EQ(form_diffs(isa, false, 0x80000000u, 0xC2B00000u, 1, neg), 0)
        << "exp_nonpositive on " << ops::cpu::simd::isa_name(isa);
    EXPECT_EQ(form_diffs(isa, true, 0u, 0x42B00000u, 5, ends) +
                  form_diffs(isa, true, 0x80000000u, 0xC2B00000u, 5, {}),
              0)
        << "exp_in_range on " << ops::cpu::simd::isa_name(isa);
  }
}

}  // namespace
}  // namespace mixprec
