// Pointwise ops: hand-computed values, forward in f32/f16/bf16 against the f64 oracle, f64
// gradient checks, broadcasting and non-contiguous inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "op_test_util.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/elementwise_problem.h"
#include "ops/layout.h"

namespace mixprec {
namespace {
using testing::gradcheck;
using testing::matches_f64_in_all_dtypes;
using testing::random;
using V = std::vector<Tensor>;

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  double lo, hi;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return ops::neg(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return ops::exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return ops::log(x); }, 0.5, 3},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, 0.5, 3},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(x); }, 0.5, 3},
      {"abs", [](const Tensor& x) { return ops::abs(x); }, -2, 2},
      {"relu", [](const Tensor& x) { return ops::relu(x); }, -2, 2},
      {"leaky_relu", [](const Tensor& x) { return ops::leaky_relu(x, 0.1); }, -2, 2},
      {"gelu_erf", [](const Tensor& x) { return ops::gelu(x); }, -3, 3},
      {"gelu_tanh", [](const Tensor& x) { return ops::gelu(x, ops::GeluApproximation::tanh); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, -3, 3},
      {"silu", [](const Tensor& x) { return ops::silu(x); }, -3, 3},
      {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.5, 0.7); }, -2, 2},
      {"pow_scalar", [](const Tensor& x) { return ops::pow(x, 3.0); }, -2, 2},
      {"add_scalar", [](const Tensor& x) { return ops::add(x, 1.5); }, -2, 2},
      {"mul_scalar", [](const Tensor& x) { return ops::mul(x, -2.5); }, -2, 2},
  };
}

TEST(Unary, HandComputedValues) {
  const Tensor x = Tensor::from_vector<float>({-2.0f, -0.5f, 0.0f, 1.0f}, {4});
  EXPECT_EQ(ops::relu(x).to_vector<float>(), (std::vector<float>{0, 0, 0, 1}));
  EXPECT_EQ(ops::abs(x).to_vector<float>(), (std::vector<float>{2, 0.5f, 0, 1}));
  EXPECT_EQ(ops::leaky_relu(x, 0.5).to_vector<float>(), (std::vector<float>{-1, -0.25f, 0, 1}));
  EXPECT_EQ(ops::clamp(x, -1.0, 0.5).to_vector<float>(), (std::vector<float>{-1, -0.5f, 0, 0.5f}));
  EXPECT_FLOAT_EQ(static_cast<float>(ops::gelu(x).at({3})), 0.8413447f);
  EXPECT_FLOAT_EQ(static_cast<float>(ops::gelu(x, ops::GeluApproximation::tanh).at({3})), 0.8411920f);
  EXPECT_FLOAT_EQ(static_cast<float>(ops::sigmoid(x).at({2})), 0.5f);
  EXPECT_FLOAT_EQ(static_cast<float>(ops::silu(x).at({3})), 0.7310586f);
  EXPECT_FLOAT_EQ(static_cast<float>(ops::exp(x).at({3})), std::exp(1.0f));
}

TEST(Unary, ForwardMatchesF64InEveryDtype) {
  for (const auto& c : unary_cases()) {
    const Tensor x = random({257}, 11, DType::f64, c.lo, c.hi);
    EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return c.fn(in[0]); }, {x})) << c.name;
  }
}

TEST(Unary, GradCheck) {
  for (const auto& c : unary_cases()) {
    Tensor x = random({3, 5}, 12, DType::f64, c.lo, c.hi);
    // Keep kinks away from finite-difference steps.
    if (std::string(c.name) == "abs" || std::string(c.name).find("relu") != std::string::npos ||
        std::string(c.name) == "clamp") {
      x = ops::add(x, ops::mul(ops::abs(x), 0.0)).detach();
      auto v = x.to_vector<double>();
      for (double& e : v)
        if (std::fabs(e) < 1e-3 || std::fabs(e + 0.5) < 1e-3 || std::fabs(e - 0.7) < 1e-3) e += 0.01;
      x = Tensor::from_vector<double>(v, x.shape());
    }
    EXPECT_TRUE(gradcheck([&](const V& in) { return c.fn(in[0]); }, {x})) << c.name;
  }
}

TEST(Unary, NonContiguousInput) {
  const Tensor x = random({6, 4}, 13, DType::f32).transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(testing::all_close(ops::exp(x), ops::exp(x.contiguous())));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::tanh(in[0].transpose(0, 1)); }, {random({3, 2}, 14)}));
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  double lo, hi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return ops::add(a, b); }, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return ops::sub(a, b); }, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); }, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return ops::div(a, b); }, 0.5, 2},
      {"pow", [](const Tensor& a, const Tensor& b) { return ops::pow(a, b); }, 0.5, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return ops::maximum(a, b); }, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return ops::minimum(a, b); }, -2, 2},
  };
}

TEST(Binary, ForwardMatchesF64InEveryDtypeWithBroadcasting) {
  for (const auto& c : binary_cases()) {
    const Tensor a = random({4, 1, 5}, 21, DType::f64, c.lo, c.hi);
    const Tensor b = random({3, 1}, 22, DType::f64, c.lo, c.hi);
    EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return c.fn(in[0], in[1]); }, {a, b}))
        << c.name;
    EXPECT_EQ(c.fn(a, b).shape(), (Shape{4, 3, 5}));
  }
}

TEST(Binary, GradCheckWithBroadcasting) {
  for (const auto& c : binary_cases()) {
    EXPECT_TRUE(gradcheck([&](const V& in) { return c.fn(in[0], in[1]); },
                          {random({2, 1, 3}, 31, DType::f64, c.lo, c.hi),
                           random({4, 1}, 32, DType::f64, c.lo + 0.01, c.hi + 0.01)}))
        << c.name;
  }
}

TEST(Binary, MixedDtypesPromote) {
  const Tensor a = random({3}, 41, DType::bf16);
  const Tensor b = random({3}, 42, DType::f32);
  EXPECT_EQ(ops::add(a, b).dtype(), DType::f32);
  EXPECT_EQ(ops::add(a, a).dtype(), DType::bf16);
  EXPECT_EQ(ops::mul(a, random({3}, 43, DType::f16)).dtype(), DType::f32);
  EXPECT_THROW(ops::add(random({3}, 1), random({4}, 2)), Error);
  EXPECT_THROW(ops::add(random({3}, 1), Tensor::from_vector<int64_t>({1, 2, 3}, {3})), Error);
}

TEST(Binary, F16OverflowsToInfLikeAnAccelerator) {
  const Tensor a = Tensor::from_vector<float>({60000.0f, 1.0f}, {2}).astype(DType::f16);
  const Tensor s = ops::add(a, a);
  EXPECT_TRUE(std::isinf(s.at({0})));
  EXPECT_EQ(s.at({1}), 2.0);
  EXPECT_EQ(ops::mul(a, 2.0).dtype(), DType::f16);
  EXPECT_TRUE(std::isinf(ops::mul(a, 2.0).at({0})));
}

TEST(Where, SelectsAndRoutesGradients) {
  const Tensor cond = Tensor::from_vector<uint8_t>({1, 0, 1}, {3}).astype(DType::boolean);
  Tensor a = Tensor::from_vector<float>({1, 2, 3}, {3}).set_requires_grad(true);
  Tensor b = Tensor::from_vector<float>({10, 20, 30}, {3}).set_requires_grad(true);
  Tensor y = ops::where(cond, a, b);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 20, 3}));
  ops::sum(y).backward();
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0, 1, 0}));
  EXPECT_TRUE(gradcheck([&](const V& in) { return ops::where(cond, in[0], in[1]); },
                        {random({2, 3}, 51), random({3}, 52)}));
}

TEST(MaskedFill, FillsAndBlocksGradient) {
  const Tensor mask = Tensor::from_vector<uint8_t>({0, 1}, {1, 2});
  Tensor x = ones({2, 2}).set_requires_grad(true);
  Tensor y = ops::masked_fill(x, mask, -1e9);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, -1e9f, 1, -1e9f}));
  ops::sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 0, 1, 0}));
  EXPECT_TRUE(gradcheck([&](const V& in) { return ops::masked_fill(in[0], mask, 2.0); }, {random({3, 2}, 53)}));
}

TEST(Operators, ArithmeticOnTensors) {
  const Tensor a = Tensor::from_vector<float>({1, 2}, {2});
  const Tensor b = Tensor::from_vector<float>({4, 8}, {2});
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{5, 10}));
  EXPECT_EQ((b / a - 1.0).to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ((-a * 2.0).to_vector<float>(), (std::vector<float>{-2, -4}));
  EXPECT_EQ((0.5 * b / 2.0).to_vector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

TEST(Elementwise, ChannelsLastLayoutIsKept) {
  const Tensor nhwc = testing::random({2, 5, 4, 3}, 71, DType::f32).permute({0, 3, 1, 2});  // [2,3,5,4]
  ASSERT_FALSE(nhwc.is_contiguous());
  const Tensor r = ops::relu(nhwc);
  EXPECT_EQ(r.strides(), nhwc.strides());
  EXPECT_TRUE(testing::all_close(r, ops::relu(nhwc.contiguous())));
  const Tensor bias = testing::random({1, 3, 1, 1}, 72, DType::f32);
  const Tensor s = ops::add(nhwc, bias);
  EXPECT_EQ(s.strides(), nhwc.strides());
  EXPECT_TRUE(testing::all_close(s, ops::add(nhwc.contiguous(), bias)));
  EXPECT_TRUE(testing::gradcheck([](const V& in) { return ops::mul(in[0].permute({0, 3, 1, 2}), in[1]); },
                                 {testing::random({2, 3, 2, 2}, 73), testing::random({1, 2, 1, 1}, 74)}));
}

TEST(Relu, NanPropagates) {
  const Tensor x = Tensor::from_vector<float>({NAN, -INFINITY, -1.0f, 2.0f}, {4});
  const auto y = ops::relu(x).to_vector<float>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 2.0f);
}

// f16/bf16 relu runs on the bits: it must give exactly what the widened f32 computation gives
// on every special value, keep the layout, and its gradient must pass g only where y > 0.
TEST(Relu, SixteenBitKernelsMatchTheF32DefinitionOnSpecialValues) {
  for (DType d : {DType::bf16, DType::f16}) {
    const double tiny = d == DType::f16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
    const std::vector<double> xs = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, tiny, -tiny, 1.5, -1.5, 3e4, -3e4};
    const Tensor x = Tensor::from_vector(xs, {static_cast<int64_t>(xs.size())}, d).set_requires_grad(true);
    const Tensor y = ops::relu(x);
    ASSERT_EQ(y.dtype(), d);
    const std::vector<float> got = y.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const float xi = x.to_vector<float>()[i];
      if (std::isnan(xi)) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      const float want = xi > 0 ? xi : 0.0f;
      EXPECT_EQ(got[i], want) << dtype_name(d) << " x=" << xi;
      EXPECT_FALSE(std::signbit(got[i])) << dtype_name(d) << " x=" << xi << ": relu gives +0, not -0";
    }
    // Gradient: g where y > 0 (+inf and the subnormal included), +0 elsewhere, even where g is
    // inf or NaN.
    std::vector<double> gs(xs.size(), 2.0);
    gs[4] = INFINITY;  // at x = 0
    gs[9] = NAN;       // at x = -1.5
    const Tensor g = Tensor::from_vector(gs, {static_cast<int64_t>(gs.size())}, d);
    const std::vector<float> dx = grad(ops::sum(ops::mul(y.astype(DType::f32), g.astype(DType::f32))), {x})[0].to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const bool pass = got[i] > 0;
      EXPECT_EQ(dx[i], pass ? 2.0f : 0.0f) << dtype_name(d) << " at " << i;
    }
    // Channels-last input: the output keeps the layout and equals the contiguous result.
    const Tensor nhwc = testing::random({2, 5, 4, 3}, 75, DType::f32).astype(d).permute({0, 3, 1, 2});
    const Tensor r = ops::relu(nhwc);
    EXPECT_EQ(r.strides(), nhwc.strides());
    EXPECT_TRUE(testing::all_close(r, ops::relu(nhwc.contiguous()), {0, 0}));
    EXPECT_TRUE(testing::all_close(r, ops::relu(nhwc.astype(DType::f32)).astype(d), {0, 0}));
  }
}

// The bits16 ReLU kernels at every vector width this CPU runs (each OpenMP chunk's loop is
// compiled per instruction set): every 16-bit pattern of both formats, the length odd and past the
// parallel threshold, against the f32 definition element by element, forward and mask, bit for bit.
TEST(Relu, SixteenBitKernelsAtEveryVectorWidthGiveTheF32DefinitionOnEveryPattern) {
  using ops::cpu::simd::Isa;
  std::vector<Isa> isas{Isa::scalar};
  if (ops::cpu::simd::best_isa() != Isa::scalar) isas.push_back(Isa::avx2);
  if (ops::cpu::simd::best_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  const int64_t n = 3 * 65536 + 17;
  std::vector<uint16_t> xb(static_cast<size_t>(n)), gb(xb.size());
  for (size_t i = 0; i < xb.size(); ++i) {
    xb[i] = static_cast<uint16_t>(i);
    gb[i] = static_cast<uint16_t>(i * 40503u + 7u);  // every pattern as a gradient too, shuffled
  }
  for (DType d : {DType::bf16, DType::f16}) {
    const Tensor x = Tensor::from_data(xb.data(), d, {n}, {.dtype = d});
    const Tensor g = Tensor::from_data(gb.data(), d, {n}, {.dtype = d});
    const std::vector<float> xf = x.astype(DType::f32).to_vector<float>();
    std::vector<uint16_t> want_y(xb.size()), want_dx(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) {
      want_y[i] = std::isnan(xf[i]) || xf[i] > 0 ? xb[i] : uint16_t{0};
      want_dx[i] = xf[i] > 0 ? gb[i] : uint16_t{0};  // y > 0 exactly where x > 0
    }
    for (Isa isa : isas) {
      const Tensor y = Tensor::empty({n}, {.dtype = d}), dx = Tensor::empty({n}, {.dtype = d});
      ops::cpu::relu_bits16_isa({.fn = ops::PointwiseFn::relu, .in = {x, Tensor(), Tensor()}, .out = y}, isa);
      ops::cpu::relu_bits16_isa({.fn = ops::PointwiseFn::relu_mask, .in = {g, y, Tensor()}, .out = dx}, isa);
      const auto* yb = static_cast<const uint16_t*>(y.data_ptr());
      const auto* db = static_cast<const uint16_t*>(dx.data_ptr());
      int64_t bad_y = 0, bad_dx = 0;
      for (size_t i = 0; i < xb.size(); ++i) {
        bad_y += yb[i] != want_y[i];
        bad_dx += db[i] != want_dx[i];
      }
      EXPECT_EQ(bad_y, 0) << dtype_name(d) << " " << ops::cpu::simd::isa_name(isa) << ": relu";
      EXPECT_EQ(bad_dx, 0) << dtype_name(d) << " " << ops::cpu::simd::isa_name(isa) << ": mask";
    }
  }
}

// GRAPH_MODE fuses relu(add(a, b)) into one add_relu pass (elementwise_problem.h): every kernel
// that accepts it must give the two eager ops' bits, on special values and sums that round to
// -0, overflow or cancel, with broadcasting.
TEST(AddRelu, EveryAcceptingKernelGivesAddThenReluBitForBit) {
  int runs = 0;
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const double tiny = d == DType::f16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -150);
    const std::vector<double> as = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, -0.0, tiny, 1.5, 3e4, 6e4, 1.0};
    const std::vector<double> bs = {1.0, 1.0, -INFINITY, 1.0, -0.0, -0.0, 0.0, -2 * tiny, -1.5, 3e4, 6e4, -1.0 - 1e-3};
    const auto n = static_cast<int64_t>(as.size());
    const Tensor a = ops::add(Tensor::from_vector(as, {n}, d), testing::random({3, n}, 76, d, -2, 2));
    const Tensor b = Tensor::from_vector(bs, {n}, d);  // broadcast along a's rows
    const Tensor want = ops::relu(ops::add(a, b));
    ops::PointwiseProblem p{.fn = ops::PointwiseFn::add_relu, .a = 0, .b = 0, .in = {a, b, Tensor()},
                            .out = Tensor::empty(want.shape(), {.dtype = d})};
    for (const ops::Impl<ops::PointwiseProblem>& k : testing::accepting_kernels(p)) {
      p.out.fill_(7.0);
      k.run(p);
      const std::vector<double> wv = want.astype(DType::f64).to_vector<double>();
      const std::vector<double> gv = p.out.astype(DType::f64).to_vector<double>();
      for (size_t i = 0; i < wv.size(); ++i) {
        if (std::isnan(wv[i])) {
          EXPECT_TRUE(std::isnan(gv[i])) << k.name << " " << dtype_name(d) << " at " << i;
          continue;
        }
        EXPECT_EQ(gv[i], wv[i]) << k.name << " " << dtype_name(d) << " at " << i;
        EXPECT_FALSE(std::signbit(gv[i])) << k.name << " " << dtype_name(d) << " at " << i << ": +0, never -0";
      }
      ++runs;
    }
  }
  EXPECT_GE(runs, 6) << "the cpu and ref kernels, three dtypes";
}

// Same-shape arithmetic on dense tensors of one dtype: the vector rows' direct path (a 16-bit
// value widened in a register, the result rounded once as it is stored) gives every other
// accepting kernel's bits (the reference's included), on special values and sums that round to
// -0, overflow or cancel, in both layouts of an image.
TEST(Arithmetic, EveryAcceptingKernelGivesTheSameBitsOnDenseTensors) {
  int direct = 0;
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (ops::PointwiseFn fn : {ops::PointwiseFn::add, ops::PointwiseFn::sub, ops::PointwiseFn::mul,
                               ops::PointwiseFn::add_relu}) {
      const double tiny = d == DType::f16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -150);
      const std::vector<double> as = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, -0.0, tiny, 1.5, 3e4, 6e4, 1.0};
      const std::vector<double> bs = {1.0, 1.0, -INFINITY, 1.0, -0.0, -0.0, 0.0, -2 * tiny, -1.5, 3e4, 6e4, -1.0 - 1e-3};
      const auto n = static_cast<int64_t>(as.size());
      // [2, 12, 7, 3] images: the special values along C, random beside them; row-major and
      // channels-last (both operands and the output in the same layout).
      const Tensor sa = ops::broadcast_to(Tensor::from_vector(as, {1, n, 1, 1}, d), {2, n, 7, 3});
      const Tensor sb = ops::broadcast_to(Tensor::from_vector(bs, {1, n, 1, 1}, d), {2, n, 7, 3});
      const Tensor ra = testing::random({2, n, 7, 3}, 80, d, -2, 2);
      for (bool nhwc : {false, true}) {
        const auto lay = [&](const Tensor& t) {
          return nhwc ? ops::detail::to_image(ops::contiguous(t), ops::detail::ImageLayout::nhwc)
                      : ops::contiguous(t);
        };
        const Tensor a = lay(sa);  // the special values themselves, -0 kept
        const Tensor b = lay(ops::add(sb, ra));
        std::vector<uint64_t> first;
        std::string first_name;
        ops::PointwiseProblem p{.fn = fn, .a = 0, .b = 0, .in = {a, b, Tensor()},
                                .out = ops::detail::empty_output(a.shape(), d, a.device(), {&a})};
        for (const ops::Impl<ops::PointwiseProblem>& k : testing::accepting_kernels(p)) {
          p.out.fill_(7.0);
          k.run(p);
          std::vector<uint64_t> got;
          for (double v : ops::contiguous(p.out).astype(DType::f64).to_vector<double>())
            got.push_back(std::isnan(v) ? 1 : std::bit_cast<uint64_t>(v));  // any NaN alike
          if (first.empty()) {
            first = got;
            first_name = k.name;
          } else {
            EXPECT_EQ(got, first) << k.name << " vs " << first_name << ", " << dtype_name(d) << " "
                                  << ops::pointwise_fn_name(fn) << (nhwc ? " channels-last" : "");
          }
          if (k.name == "vector_rows") ++direct;
        }
      }
    }
  EXPECT_EQ(direct, 24) << "vector_rows accepts every case: three dtypes, four ops, two layouts";
}

// The direct path at every vector width: gelu's forms and the arithmetic on f32, bf16 and f16,
// lengths past a row of 4096 with a tail; each 16-bit result is the f32 rows' result rounded once.
TEST(Arithmetic, DirectRowsAtEveryWidthAreTheF32RowsRoundedOnce) {
  using ops::cpu::simd::Isa;
  std::vector<Isa> isas{Isa::scalar};
  if (ops::cpu::simd::best_isa() != Isa::scalar) isas.push_back(Isa::avx2);
  if (ops::cpu::simd::best_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  const int64_t n = 4096 + 1000 + 13;
  for (ops::PointwiseFn fn : {ops::PointwiseFn::gelu_tanh, ops::PointwiseFn::gelu_erf, ops::PointwiseFn::gelu_tanh_grad,
                              ops::PointwiseFn::gelu_erf_grad, ops::PointwiseFn::add, ops::PointwiseFn::mul,
                              ops::PointwiseFn::add_relu})
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      const bool binary = fn != ops::PointwiseFn::gelu_tanh && fn != ops::PointwiseFn::gelu_erf;
      const Tensor a = testing::random({n}, 81, d, -6, 6), b = testing::random({n}, 82, d, -3, 3);
      const auto run = [&](const Tensor& x, const Tensor& y, Isa isa) {
        ops::PointwiseProblem p{.fn = fn, .a = 0, .b = 0, .in = {x, binary ? y : Tensor(), Tensor()},
                                .out = Tensor::empty({n}, {.dtype = x.dtype()})};
        EXPECT_TRUE(ops::cpu::vector_rows_direct(p, isa));
        return p.out;
      };
      const Tensor want = run(a.astype(DType::f32), b.astype(DType::f32), Isa::scalar).astype(d);
      for (Isa isa : isas)
        EXPECT_TRUE(testing::all_close(run(a, b, isa), want, {0, 0}))
            << ops::pointwise_fn_name(fn) << " " << dtype_name(d) << " " << ops::cpu::simd::isa_name(isa);
    }
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

// table16 (gelu's forms on 16-bit values by lookup) against the row kernel it is made from, on
// every ISA here: every one of the 65536 inputs (NaNs, infinities, subnormals and -0 included),
// then a 13-value tail; the gradients with g cycling through specials and random values. Bit for
// bit, but for one case: a NaN g times a NaN factor is NaN with either operand's sign and payload
// (x86 returns the first operand's, and the compiler orders a product's operands as it likes).
TEST(Gelu, Table16GivesTheRowKernelsBitsForEverySixteenBitInput) {
  using ops::cpu::simd::Isa;
  if (ops::cpu::simd::best_isa() == Isa::scalar) GTEST_SKIP() << "no AVX2: table16 declines";
  std::vector<Isa> isas{Isa::scalar, Isa::avx2};
  if (ops::cpu::simd::best_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  const int64_t n = 65536 + 13;
  const auto bits_of = [](const Tensor& t) {
    std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
    std::memcpy(b.data(), t.data_ptr(), b.size() * 2);
    return b;
  };
  const auto tensor_of = [](const std::vector<uint16_t>& b, DType d) {
    Tensor t = Tensor::empty({static_cast<int64_t>(b.size())}, {.dtype = d});
    std::memcpy(t.data_ptr(), b.data(), b.size() * 2);
    return t;
  };
  for (DType d : {DType::bf16, DType::f16}) {
    const uint16_t nan1 = d == DType::bf16 ? 0x7FC0 : 0x7E00, nan2 = d == DType::bf16 ? 0xFFC1 : 0xFE01;
    const uint16_t inf = d == DType::bf16 ? 0x7F80 : 0x7C00;
    const uint16_t specials[] = {nan1, nan2, inf, static_cast<uint16_t>(inf | 0x8000), 0x0000, 0x8000, 0x0001, 0x3C00};
    std::vector<uint16_t> xb(n), gb = bits_of(testing::random({n}, 83, DType::f32, -3, 3).astype(d));
    for (int64_t i = 0; i < n; ++i) {
      xb[i] = static_cast<uint16_t>(i < 65536 ? i : i * 4099);
      if (i % 7 == 0) gb[i] = specials[(i / 7) % 8];
    }
    const Tensor x = tensor_of(xb, d), g = tensor_of(gb, d);
    for (ops::PointwiseFn fn : {ops::PointwiseFn::gelu_erf, ops::PointwiseFn::gelu_tanh,
                                ops::PointwiseFn::gelu_erf_grad, ops::PointwiseFn::gelu_tanh_grad}) {
      const bool grad = fn == ops::PointwiseFn::gelu_erf_grad || fn == ops::PointwiseFn::gelu_tanh_grad;
      for (Isa isa : isas) {
        ops::PointwiseProblem p{.fn = fn, .a = 0, .b = 0,
                                .in = {grad ? g : x, grad ? x : Tensor(), Tensor()},
                                .out = Tensor::empty({n}, {.dtype = d})};
        ASSERT_EQ(ops::cpu::table16_declines(p), "");
        ASSERT_TRUE(ops::cpu::vector_rows_direct(p, isa));
        const std::vector<uint16_t> want = bits_of(p.out);
        p.out.fill_(7.0);
        ops::cpu::table16_on(p, isa);
        const std::vector<uint16_t> got = bits_of(p.out);
        int64_t bad = 0;
        size_t first = 0;
        const auto is_nan = [&](uint16_t b) {
          return d == DType::bf16 ? (b & 0x7FFF) > 0x7F80 : (b & 0x7FFF) > 0x7C00;
        };
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] != want[i] && !(grad && is_nan(gb[i]) && is_nan(got[i]) && is_nan(want[i])) &&
              bad++ == 0)
            first = i;
        EXPECT_EQ(bad, 0) << dtype_name(d) << " " << ops::pointwise_fn_name(fn) << " "
                          << ops::cpu::simd::isa_name(isa) << ": first at x bits 0x" << std::hex
                          << xb[first] << ", g bits 0x" << gb[first] << ": 0x" << got[first]
                          << " against 0x" << want[first];
      }
    }
  }
}

TEST(Gelu, Table16DeclinesWhatItCannotLookUp) {
  if (ops::cpu::simd::best_isa() == ops::cpu::simd::Isa::scalar) GTEST_SKIP() << "no AVX2";
  const Tensor x16 = testing::random({4, 6}, 84, DType::f32).astype(DType::bf16);
  const auto problem = [](ops::PointwiseFn fn, const Tensor& a, const Tensor& b, DType out) {
    return ops::PointwiseProblem{.fn = fn, .a = 0, .b = 0, .in = {a, b, Tensor()},
                                 .out = Tensor::empty(a.shape(), {.dtype = out})};
  };
  EXPECT_EQ(ops::cpu::table16_declines(problem(ops::PointwiseFn::gelu_erf, x16, Tensor(), DType::bf16)), "");
  EXPECT_NE(ops::cpu::table16_declines(problem(ops::PointwiseFn::gelu_erf, x16.astype(DType::f32), Tensor(), DType::f32)), "");
  EXPECT_NE(ops::cpu::table16_declines(problem(ops::PointwiseFn::add, x16, x16, DType::bf16)), "");
  EXPECT_NE(ops::cpu::table16_declines(problem(ops::PointwiseFn::gelu_erf_grad, x16, x16.astype(DType::f16), DType::bf16)), "");
  EXPECT_NE(ops::cpu::table16_declines(problem(ops::PointwiseFn::gelu_erf, ops::transpose(x16, 0, 1), Tensor(), DType::bf16)), "");
  // Only gelu's 16-bit forms are timed by dispatch; the other pointwise problems keep the order.
  EXPECT_TRUE(problem(ops::PointwiseFn::gelu_tanh_grad, x16, x16, DType::bf16).measured());
  EXPECT_FALSE(problem(ops::PointwiseFn::gelu_erf, x16.astype(DType::f32), Tensor(), DType::f32).measured());
  EXPECT_FALSE(problem(ops::PointwiseFn::add, x16, x16, DType::bf16).measured());
}

}  // namespace
}  // namespace mixprec
