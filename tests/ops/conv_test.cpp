// ops::conv2d: hand-computed values and padding rules, forward against the f64 oracle in every
// dtype, f64 gradient checks (reference kernels), oneDNN against the reference (f32 tight, bf16
// and the f16 emulation within tolerance) on the zoo's shapes, channels-last and
// non-contiguous inputs, the fused ReLU, f32 weight gradients for bf16, f16 overflow, errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "mixprec/cpu_features.h"
#include "mixprec/amp/level.h"
#include "mixprec/version.h"
#include "op_test_util.h"
#include "core/autograd_graph.h"
#include "ops/conv_problem.h"
#include "ops/cpu/kernels.h"
#include "ops/dispatch.h"

namespace mixprec {
namespace {
using ops::Conv2dOptions;
using ops::PadMode;
using testing::all_close;
using testing::gradcheck;
using testing::matches_f64_in_all_dtypes;
using testing::random;
using V = std::vector<Tensor>;

struct ConvCase {
  const char* name;
  Shape x, w;
  bool bias;
  Conv2dOptions o;
};

// The zoo's convolutions (smaller batches) and the corner cases of the geometry.
std::vector<ConvCase> cases() {
  return {
      {"simplenet", {2, 1, 28, 28}, {32, 1, 3, 3}, true, {.pad_mode = PadMode::valid}},
      {"lenet_pad2",
       {2, 1, 28, 28},
       {6, 1, 5, 5},
       true,
       {.pad_mode = PadMode::pad, .padding = {2, 2, 2, 2}}},
      {"lenet_conv2", {2, 6, 14, 14}, {16, 6, 5, 5}, true, {}},
      {"convnet_same", {2, 32, 14, 14}, {64, 32, 3, 3}, true, {.pad_mode = PadMode::same}},
      {"resnet_strided",
       {2, 32, 14, 14},
       {64, 32, 3, 3},
       false,
       {.stride = {2, 2}, .pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}}},
      {"resnet_shortcut", {2, 32, 14, 14}, {64, 32, 1, 1}, false, {.stride = {2, 2}}},
      {"groups2", {2, 8, 9, 9}, {6, 4, 3, 3}, true, {.pad_mode = PadMode::same, .groups = 2}},
      {"dilation2",
       {2, 4, 11, 11},
       {5, 4, 3, 3},
       true,
       {.pad_mode = PadMode::pad, .padding = {2, 2, 2, 2}, .dilation = {2, 2}}},
      {"same_stride2_asym",
       {2, 3, 8, 8},
       {4, 3, 3, 3},
       true,
       {.stride = {2, 2}, .pad_mode = PadMode::same}},
      {"rect_even_kernel",
       {1, 3, 7, 10},
       {2, 3, 2, 4},
       true,
       {.stride = {1, 2}, .pad_mode = PadMode::same}},
  };
}

// Weights scaled like an initialiser (1/sqrt(fan_in)) so outputs stay O(1).
V case_inputs(const ConvCase& c, uint64_t seed, DType dt = DType::f64) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.w[1] * c.w[2] * c.w[3]));
  return {random(c.x, seed, dt), random(c.w, seed + 1, dt, -scale, scale),
          c.bias ? random({c.w[0]}, seed + 2, dt) : Tensor()};
}

Tensor channels_last(const Tensor& x) {
  return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}

bool strides_are_nhwc(const Tensor& y) {
  const Shape& s = y.shape();
  return y.strides() == Strides{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

// Forward, then the node's own backward with a fixed output gradient: y, dx, dw, db in the
// dtypes the kernels produce (no engine casts).
struct ConvRun {
  Tensor y, dx, dw, db;
};
ConvRun run_conv(const V& in, const Conv2dOptions& o, std::string_view impl, Tensor gy = {}) {
  ops::ForceImpl force(impl);
  V leaves;
  for (const Tensor& t : in) leaves.push_back(t.defined() ? t.detach().set_requires_grad(true) : t);
  const Tensor y = ops::conv2d(leaves[0], leaves[1], leaves[2], o);
  if (!gy.defined()) gy = random(y.shape(), 7, y.dtype());
  NoGradGuard ng;
  const V g = y.grad_fn()->backward({gy});
  return {y.detach(), g[0], g[1], g[2]};
}

// f32 natively; f16 always and bf16 without AVX-512 through the f32 emulation (low_via_f32).
bool onednn_computes(DType d) {
#if MIXPREC_WITH_ONEDNN
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
#else
  (void)d;
  return false;
#endif
}

::testing::AssertionResult runs_close(const ConvRun& a, const ConvRun& b, testing::Tolerance tol,
                                      testing::Tolerance grad_tol) {
  if (auto r = all_close(a.y, b.y, tol); !r) return r << " (y)";
  if (auto r = all_close(a.dx, b.dx, tol); !r) return r << " (dx)";
  if (auto r = all_close(a.dw, b.dw, grad_tol); !r) return r << " (dw)";
  if (a.db.defined())
    if (auto r = all_close(a.db, b.db, grad_tol); !r) return r << " (db)";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- values and padding rules

TEST(Conv2d, HandComputed) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const Tensor w = Tensor::from_vector<float>({1, 0, 0, 1}, {1, 1, 2, 2});
  const Tensor b = Tensor::from_vector<float>({0.5f}, {1});
  EXPECT_EQ(ops::conv2d(x, w, b).to_vector<float>(),
            (std::vector<float>{6.5f, 8.5f, 12.5f, 14.5f}));
  // same, stride 1, 2x2 kernel: one row/column of padding, at the bottom/right.
  const Tensor s = ops::conv2d(x, w, {}, {.pad_mode = PadMode::same});
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{6, 8, 3, 12, 14, 6, 7, 8, 9}));
  // Explicit padding top 1, left 1 only, stride 2.
  const Tensor p =
      ops::conv2d(x, w, {}, {.stride = {2, 2}, .pad_mode = PadMode::pad, .padding = {1, 0, 1, 0}});
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{1, 3, 7, 14}));
  // Fused ReLU clamps the negatives.
  const Tensor r = ops::conv2d(x, ops::neg(w), b, {.activation = ops::Activation::relu});
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  // Groups: each output channel sees only its group's input channel.
  const Tensor x2 = ops::concat({x, ops::mul(x, 10.0)}, 1);
  const Tensor g = ops::conv2d(x2, ones({2, 1, 1, 1}), {}, {.groups = 2});
  EXPECT_EQ(g.at({0, 1, 2, 2}), 90.0);
  EXPECT_EQ(g.at({0, 0, 2, 2}), 9.0);
  // Dilation 2 on a 3x3 input with a 2x2 kernel reads the four corners.
  EXPECT_EQ(ops::conv2d(x, ones({1, 1, 2, 2}), {}, {.dilation = {2, 2}}).to_vector<float>(),
            (std::vector<float>{20}));
}

TEST(Conv2d, SamePaddingPutsTheExtraAtBottomRight) {
  // in 8, k 3, stride 2: out 4, total padding 1 -> top 0, bottom 1 (TensorFlow/MindSpore).
  const V in = case_inputs(cases()[8], 3);
  const Tensor same =
      ops::conv2d(in[0], in[1], in[2], {.stride = {2, 2}, .pad_mode = PadMode::same});
  const Tensor expl = ops::conv2d(
      in[0], in[1], in[2], {.stride = {2, 2}, .pad_mode = PadMode::pad, .padding = {0, 1, 0, 1}});
  EXPECT_EQ(same.shape(), (Shape{2, 4, 4, 4}));
  EXPECT_TRUE(all_close(same, expl));
  // in 5, k 3, stride 2: out 3, total 2 -> 1 and 1; in 7 stride 3: out 3, total 2.
  const Tensor x5 = random({1, 1, 5, 7}, 4);
  const Tensor w = random({1, 1, 3, 3}, 5);
  EXPECT_TRUE(all_close(
      ops::conv2d(x5, w, {}, {.stride = {2, 3}, .pad_mode = PadMode::same}),
      ops::conv2d(x5, w, {},
                  {.stride = {2, 3}, .pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}})));
  // Even kernel, stride 1: total 1, all at the bottom/right.
  const Tensor w2 = random({1, 1, 2, 2}, 6);
  EXPECT_TRUE(
      all_close(ops::conv2d(x5, w2, {}, {.pad_mode = PadMode::same}),
                ops::conv2d(x5, w2, {}, {.pad_mode = PadMode::pad, .padding = {0, 1, 0, 1}})));
}

TEST(Conv2d, ForwardMatchesF64InEveryDtype) {
  for (const ConvCase& c : cases()) {
    for (bool relu : {false, true}) {
      Conv2dOptions o = c.o;
      o.activation = relu ? ops::Activation::relu : ops::Activation::none;
      EXPECT_TRUE(matches_f64_in_all_dtypes(
          [&](const V& in) { return ops::conv2d(in[0], in[1], in[2], o); }, case_inputs(c, 11)))
          << c.name << (relu ? " relu" : "");
    }
  }
}

// ---------------------------------------------------------------- gradients

TEST(Conv2d, GradCheck) {
  const std::vector<ConvCase> small = {
      {"valid_bias", {2, 2, 5, 5}, {3, 2, 3, 3}, true, {}},
      {"same_stride2",
       {1, 2, 6, 5},
       {2, 2, 3, 3},
       true,
       {.stride = {2, 2}, .pad_mode = PadMode::same}},
      {"pad_asym",
       {1, 1, 4, 5},
       {2, 1, 2, 3},
       false,
       {.pad_mode = PadMode::pad, .padding = {1, 0, 2, 1}}},
      {"groups2_dilation2",
       {1, 4, 6, 6},
       {4, 2, 2, 2},
       true,
       {.pad_mode = PadMode::same, .dilation = {2, 2}, .groups = 2}},
      {"shortcut_1x1_s2", {2, 3, 5, 5}, {2, 3, 1, 1}, false, {.stride = {2, 2}}},
      {"relu", {1, 2, 5, 5}, {3, 2, 3, 3}, true, {.activation = ops::Activation::relu}},
  };
  for (const ConvCase& c : small) {
    const V in = case_inputs(c, 21);
    EXPECT_TRUE(gradcheck([&](const V& v) { return ops::conv2d(v[0], v[1], v[2], c.o); }, in))
        << c.name;
  }
  // Channels-last input (the permute happens inside, so the conv sees NHWC strides).
  const ConvCase& c = small[1];
  EXPECT_TRUE(gradcheck(
      [&](const V& v) {
        return ops::conv2d(v[0].permute({0, 3, 1, 2}), v[1], v[2], c.o);
      },
      {random({1, 6, 5, 2}, 22), random(c.w, 23), random({2}, 24)}));
}

TEST(Conv2d, OnlySomeInputsRequireGrad) {
  const V in = case_inputs(cases()[6], 31, DType::f32);
  Tensor w = in[1].detach().set_requires_grad(true);
  ops::sum(ops::conv2d(in[0], w, in[2], cases()[6].o)).backward();
  ASSERT_TRUE(w.grad().defined());
  Tensor b = in[2].detach().set_requires_grad(true);  // bias only
  ops::sum(ops::conv2d(in[0], in[1], b, cases()[6].o)).backward();
  // d sum(y) / d b[c] = N * oh * ow.
  EXPECT_NEAR(b.grad().at({0}), 2 * 9 * 9, 1e-3);
}

// ---------------------------------------------------------------- fast kernels vs reference

// The implementation dispatch picks by default (oneDNN, im2col + oneDNN GEMM for small
// reductions, or f16 via f32) against the reference.
TEST(Conv2d, FastPathsMatchReference) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    if (!onednn_computes(d)) GTEST_SKIP() << "no oneDNN kernels for " << dtype_name(d);
    const testing::Tolerance tol =
        d == DType::f32 ? testing::Tolerance{1e-5, 1e-5} : testing::tolerance_for(d);
    for (const ConvCase& c : cases()) {
      const V in = case_inputs(c, 41, d);
      const ConvRun fast = run_conv(in, c.o, "");
      const ConvRun ref = run_conv(in, c.o, "ref");
      // Weight gradients sum N*oh*ow products in f32 in different orders: looser for 16-bit
      // inputs only because the summed values are larger.
      EXPECT_TRUE(runs_close(fast, ref, tol, {1e-4, 1e-4})) << c.name << " " << dtype_name(d);
      EXPECT_EQ(fast.dw.dtype(), acc_dtype(d)) << c.name;
    }
  }
}

// Without AVX-512 oneDNN 2.6 has no bf16 convolution: bf16 goes through the f32 emulation (widen,
// oneDNN f32, round once) rather than to the scalar reference kernel. Every case that some fast
// implementation takes in f32 is taken by a fast one in bf16 too, and matches the reference.
TEST(Conv2d, Bf16RunsOnAFastPathWhereverF32Does) {
#if MIXPREC_WITH_ONEDNN
  auto fast_impl = [](const V& in, const Conv2dOptions& o) -> std::string {
    for (const char* impl : {"direct_c1", "im2col_gemm", "onednn", "low_via_f32"}) {
      try {
        (void)run_conv(in, o, impl);
        return impl;
      } catch (const Error&) {
      }
    }
    return "";
  };
  int emulated = 0;
  for (const ConvCase& c : cases()) {
    if (fast_impl(case_inputs(c, 61, DType::f32), c.o).empty()) continue;
    const V in = case_inputs(c, 61, DType::bf16);
    const std::string impl = fast_impl(in, c.o);
    ASSERT_FALSE(impl.empty()) << c.name << ": bf16 would run in the reference kernel";
    if (impl == "low_via_f32") ++emulated;
    const ConvRun fast = run_conv(in, c.o, impl);
    const ConvRun ref = run_conv(in, c.o, "ref");
    EXPECT_TRUE(runs_close(fast, ref, testing::tolerance_for(DType::bf16), {1e-4, 1e-4})) << c.name << " " << impl;
  }
  if (!cpu_features().avx512f) {
    EXPECT_GT(emulated, 0) << "without AVX-512 some bf16 case must take the f32 emulation";
  }
#else
  GTEST_SKIP() << "built without oneDNN";
#endif
}

TEST(Conv2d, Bf16WeightAndBiasGradientsAreF32) {
  const ConvCase c = cases()[3];
  const V in = case_inputs(c, 51, DType::bf16);
  for (const char* impl : {"", "ref"}) {
    const ConvRun r = run_conv(in, c.o, impl);
    EXPECT_EQ(r.y.dtype(), DType::bf16);
    EXPECT_EQ(r.dx.dtype(), DType::bf16);
    EXPECT_EQ(r.dw.dtype(), DType::f32) << impl;
    EXPECT_EQ(r.db.dtype(), DType::f32) << impl;
    // The same computation in f64 on the same (bf16) values: the f32 gradient is far closer
    // than a bf16 rounding (2^-9 relative) would allow.
    V in64;
    for (const Tensor& t : in) in64.push_back(t.astype(DType::f64));
    const ConvRun e =
        run_conv(in64, c.o, "", random(r.y.shape(), 7, DType::bf16).astype(DType::f64));
    EXPECT_TRUE(all_close(r.dw, e.dw, {1e-5, 1e-5})) << impl;
    EXPECT_TRUE(all_close(r.db, e.db, {1e-5, 1e-5})) << impl;
  }
}

TEST(Conv2d, ChannelsLastInputGivesChannelsLastOutputAndSameValues) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (const ConvCase& c : {cases()[3], cases()[4], cases()[6]}) {
      V in = case_inputs(c, 61, d);
      V in_cl = in;
      in_cl[0] = channels_last(in[0]);
      ASSERT_TRUE(strides_are_nhwc(in_cl[0]));
      const ConvRun a = run_conv(in, c.o, "");
      const ConvRun b = run_conv(in_cl, c.o, "");
      EXPECT_TRUE(strides_are_nhwc(b.y)) << c.name;
      EXPECT_TRUE(strides_are_nhwc(b.dx)) << c.name;
      const testing::Tolerance tol =
          d == DType::f32 ? testing::Tolerance{1e-5, 1e-5} : testing::tolerance_for(d);
      EXPECT_TRUE(runs_close(b, a, tol, {1e-4, 1e-4})) << c.name << " " << dtype_name(d);
    }
  }
}

TEST(Conv2d, OutputsAreChannelsLastWhateverTheInputLayout) {
  const Tensor x = random({2, 6, 6, 1}, 62, DType::f32).permute({0, 3, 1, 2});
  const Tensor w = random({4, 1, 3, 3}, 63, DType::f32);
  EXPECT_TRUE(strides_are_nhwc(ops::conv2d(x, w)));
  EXPECT_TRUE(strides_are_nhwc(ops::conv2d(x.clone(), w)));
  EXPECT_TRUE(all_close(ops::conv2d(x, w), ops::conv2d(x.clone(), w)));
  const Tensor x3 = random({2, 3, 6, 6}, 64, DType::f32);  // NCHW with 3 channels
  const Tensor w3 = random({4, 3, 3, 3}, 65, DType::f32);
  EXPECT_TRUE(strides_are_nhwc(ops::conv2d(x3, w3)));
}

TEST(Conv2d, Im2colGemmMatchesReferenceForSmallReductions) {
  // The first layers of the zoo (1 input channel), forced onto the im2col path, every dtype.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const ops::Conv2dOptions& o :
         {ops::Conv2dOptions{}, ops::Conv2dOptions{.pad_mode = ops::PadMode::pad, .padding = {2, 2, 2, 2}},
          ops::Conv2dOptions{.stride = {2, 2}, .pad_mode = ops::PadMode::same, .activation = ops::Activation::relu},
          ops::Conv2dOptions{.output_format = ops::MemoryFormat::contiguous},
          ops::Conv2dOptions{.stride = {2, 2}, .pad_mode = ops::PadMode::same, .activation = ops::Activation::relu,
                             .output_format = ops::MemoryFormat::contiguous}}) {
      const Tensor x = random({3, 1, 12, 12}, 66, d).set_requires_grad(true);
      const Tensor w = random({8, 1, 5, 5}, 67, DType::f32).astype(d).set_requires_grad(true);
      const Tensor b = random({8}, 68, DType::f32).astype(d).set_requires_grad(true);
      auto run = [&](const char* impl) {
        ops::ForceImpl force(impl);
        Tensor y = ops::conv2d(x, w, b, o);
        auto g = grad(ops::sum(ops::mul(y.astype(DType::f32), random(y.shape(), 69, DType::f32))), {x, w, b});
        return std::pair{y, g};
      };
      const auto [yi, gi] = run("im2col_gemm");
      const auto [yr, gr] = run("ref");
      EXPECT_EQ(yi.is_contiguous(), o.output_format == ops::MemoryFormat::contiguous);
      const testing::Tolerance tol = d == DType::f32 ? testing::Tolerance{1e-5, 1e-5} : testing::tolerance_for(d);
      EXPECT_TRUE(all_close(yi, yr, tol)) << dtype_name(d);
      EXPECT_TRUE(all_close(gi[0], gr[0], tol)) << dtype_name(d) << " dx";
      EXPECT_TRUE(all_close(gi[1], gr[1], {1e-4, 1e-4})) << dtype_name(d) << " dw";
      EXPECT_TRUE(all_close(gi[2], gr[2], {1e-4, 1e-4})) << dtype_name(d) << " db";
      EXPECT_EQ(gi[1].dtype(), w.dtype());
    }
  }
}

// conv2d forced onto `impl`: y, and the gradients of w (and b, when defined) for a random f32
// output gradient drawn from `seed`, then x's when x requires grad (backward-data).
std::pair<Tensor, V> forward_and_weight_grads(const char* impl, const Tensor& x, const Tensor& w,
                                             const Tensor& b, const ops::Conv2dOptions& o, uint64_t seed) {
  ops::ForceImpl force(impl);
  Tensor y = ops::conv2d(x, w, b, o);
  V wrt = b.defined() ? V{w, b} : V{w};
  if (x.requires_grad()) wrt.push_back(x);
  V g = grad(ops::sum(ops::mul(y.astype(DType::f32), random(y.shape(), seed, DType::f32))), wrt);
  return {y, g};
}

// A direct kernel's forward (yd) and gradients (gd: dw, [db,] ...) against the reference's: y to
// f32's or the dtype's tolerance; dW and db are f32 sums in another order, then rounded to the
// parameter's dtype: one rounding of that dtype apart at most.
void expect_direct_matches_reference(const Tensor& yd, const V& gd, const Tensor& yr, const V& gr, DType d,
                                     const Tensor& w, bool bias, const std::string& what) {
  const testing::Tolerance tol = d == DType::f32 ? testing::Tolerance{1e-5, 1e-5} : testing::tolerance_for(d);
  EXPECT_TRUE(all_close(yd, yr, tol)) << what;
  const testing::Tolerance gtol = d == DType::f32 ? testing::Tolerance{1e-4, 1e-4} : testing::tolerance_for(d);
  EXPECT_TRUE(all_close(gd[0], gr[0], gtol)) << what << " dw";
  if (bias) {
    EXPECT_TRUE(all_close(gd[1], gr[1], gtol)) << what << " db";
  }
  EXPECT_EQ(gd[0].dtype(), w.dtype());
}

// A case of the kernel tests below: input and weight shapes, options, whether there is a bias.
struct KernelCase {
  Shape x, w;
  ops::Conv2dOptions o;
  bool bias;
};

TEST(Conv2d, DirectSingleChannelMatchesReference) {
  // First layers (1 input channel, stride 1, up to 8 output channels, channels-last or
  // contiguous) forced onto the direct kernel: forward and backward-weights, every dtype, widths
  // that are and are not multiples of 16, full and partial channel blocks, with and without bias
  // and ReLU.
  if (!cpu_features().avx2 || !cpu_features().fma) GTEST_SKIP() << "direct_c1 needs AVX2 and FMA";
  const ops::Conv2dOptions pad2{.pad_mode = ops::PadMode::pad, .padding = {2, 2, 2, 2}};
  const std::vector<KernelCase> cases = {
      {{3, 1, 12, 12}, {6, 1, 5, 5}, pad2, true},                                          // lenet
      {{2, 1, 28, 28}, {8, 1, 3, 3}, {}, false},
      {{2, 1, 28, 28}, {7, 1, 3, 3}, {.pad_mode = ops::PadMode::same, .activation = ops::Activation::relu}, true},
      {{2, 1, 9, 37}, {5, 1, 7, 2}, {.pad_mode = ops::PadMode::pad, .padding = {1, 3, 0, 4}}, true},
      {{1, 1, 5, 5}, {3, 1, 1, 1}, {.activation = ops::Activation::relu}, false},
      // Contiguous (NCHW) outputs: a full and a partial channel block.
      {{3, 1, 28, 28}, {8, 1, 3, 3}, {.output_format = ops::MemoryFormat::contiguous}, true},
      {{2, 1, 9, 37}, {5, 1, 5, 3}, {.pad_mode = ops::PadMode::pad, .padding = {2, 1, 0, 3}, .activation = ops::Activation::relu, .output_format = ops::MemoryFormat::contiguous}, true},
  };
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const KernelCase& c : cases) {
      const Tensor x = random(c.x, 91, d);
      const Tensor w = random(c.w, 92, DType::f32).astype(d).set_requires_grad(true);
      const Tensor b = c.bias ? random({c.w[0]}, 93, DType::f32).astype(d).set_requires_grad(true) : Tensor();
      const auto [yd, gd] = forward_and_weight_grads("direct_c1", x, w, b, c.o, 94);
      const auto [yr, gr] = forward_and_weight_grads("ref", x, w, b, c.o, 94);
      const std::string what = shape_str(c.w) + " " + std::string(dtype_name(d));
      if (c.o.output_format == ops::MemoryFormat::contiguous)
        EXPECT_TRUE(yd.is_contiguous()) << what;
      else
        EXPECT_TRUE(strides_are_nhwc(yd)) << what;
      expect_direct_matches_reference(yd, gd, yr, gr, d, w, c.bias, what);
    }
  }
  // NaN propagates through the fused ReLU, and f16 overflows to inf, as on the reference path.
  ops::ForceImpl force("direct_c1");
  Tensor xn = zeros({1, 1, 4, 4});
  xn.fill_(std::nan(""));
  EXPECT_TRUE(std::isnan(ops::conv2d(xn, ones({8, 1, 3, 3}), Tensor(), {.activation = ops::Activation::relu})
                             .at({0, 3, 1, 1})));
  const Tensor big = full({1, 1, 4, 4}, 60000.0, {.dtype = DType::f16});
  const Tensor y = ops::conv2d(big, ones({2, 1, 3, 3}, {.dtype = DType::f16}));
  EXPECT_TRUE(std::isinf(y.at({0, 1, 0, 0})));
  // An inf in the last input column, with a partial last block (ow 20): the weight-gradient taps
  // that never read that column stay finite, as in the reference (the block's spare lanes must
  // not compute 0 * inf).
  {
    std::vector<float> xv = random({1, 1, 4, 20}, 95, DType::f32).to_vector<float>();
    xv[1 * 20 + 19] = INFINITY;  // row 1, last column
    const Tensor xi = Tensor::from_vector(xv, {1, 1, 4, 20});
    const Tensor wi = random({4, 1, 5, 5}, 96, DType::f32).set_requires_grad(true);
    auto dw_of = [&](const char* impl) {
      ops::ForceImpl f(impl);
      const Tensor y = ops::conv2d(xi, wi, Tensor(), pad2);
      return grad(ops::sum(ops::mul(y, random(y.shape(), 97, DType::f32))), {wi})[0].to_vector<float>();
    };
    const std::vector<float> a = dw_of("direct_c1"), r = dw_of("ref");
    int finite = 0;
    for (size_t k = 0; k < r.size(); ++k) {
      EXPECT_EQ(std::isfinite(a[k]), std::isfinite(r[k])) << "dw element " << k;
      if (std::isfinite(r[k])) {
        ++finite;
        EXPECT_NEAR(a[k], r[k], 1e-4 * (1 + std::fabs(r[k]))) << k;
      }
    }
    EXPECT_GT(finite, 0);
  }
  // Wider layers go to im2col + GEMM, which measures faster there.
  EXPECT_THROW(ops::conv2d(zeros({1, 1, 6, 6}), ones({9, 1, 3, 3})), Error);
}

TEST(Conv2d, DirectSmallChannelsMatchesReference) {
  // Few input channels (2-16), 8-32 output channels, channels-last, stride 1, forced onto the
  // direct kernels: forward (bias, ReLU), backward-data and backward-weights, every dtype; each register count
  // (8, 16, 24, 32 channels), rows with and without a partial pixel block, (tap, channel) counts
  // with and without a partial block, asymmetric padding.
  const CpuFeatures& f = cpu_features();
  if (!f.avx2 || !f.fma || f.avx512f) GTEST_SKIP() << "direct_small runs on AVX2 machines without AVX-512";
  const std::vector<KernelCase> cases = {
      {{3, 6, 14, 14}, {16, 6, 5, 5}, {}, true},  // lenet's second conv
      {{2, 3, 9, 11}, {8, 3, 3, 3}, {.pad_mode = ops::PadMode::same, .activation = ops::Activation::relu}, true},
      {{2, 16, 7, 7}, {32, 16, 3, 3}, {.pad_mode = ops::PadMode::pad, .padding = {1, 1, 1, 1}}, false},
      {{1, 2, 5, 13}, {24, 2, 7, 2}, {.pad_mode = ops::PadMode::pad, .padding = {1, 3, 0, 4}, .activation = ops::Activation::relu}, true},
      {{2, 5, 4, 4}, {16, 5, 1, 1}, {}, true},
  };
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const KernelCase& c : cases) {
      const Tensor x = channels_last(random(c.x, 81, d)).set_requires_grad(true);
      const Tensor w = random(c.w, 82, DType::f32, -0.5, 0.5).astype(d).set_requires_grad(true);
      const Tensor b = c.bias ? random({c.w[0]}, 83, DType::f32).astype(d).set_requires_grad(true) : Tensor();
      const auto [yd, gd] = forward_and_weight_grads("direct_small", x, w, b, c.o, 84);
      const auto [yr, gr] = forward_and_weight_grads("ref", x, w, b, c.o, 84);
      const std::string what = shape_str(c.x) + " * " + shape_str(c.w) + " " + std::string(dtype_name(d));
      EXPECT_TRUE(strides_are_nhwc(yd)) << what;
      expect_direct_matches_reference(yd, gd, yr, gr, d, w, c.bias, what);
      // dx: sums of cout * (taps that read the input) products in another order, one rounding.
      const testing::Tolerance gtol = d == DType::f32 ? testing::Tolerance{1e-4, 1e-4} : testing::tolerance_for(d);
      EXPECT_TRUE(all_close(gd.back(), gr.back(), gtol)) << what << " dx";
      EXPECT_EQ(gd.back().dtype(), d);
    }
  }
  // NaN propagates through the fused ReLU; an inf in the input reaches exactly the weight-gradient
  // taps that read it, as in the reference.
  ops::ForceImpl force("direct_small");
  Tensor xn = channels_last(zeros({1, 4, 5, 5}));
  xn.fill_(std::nan(""));
  EXPECT_TRUE(std::isnan(ops::conv2d(xn, ones({8, 4, 3, 3}), Tensor(), {.activation = ops::Activation::relu})
                             .at({0, 7, 1, 1})));
  {
    std::vector<float> xv = random({1, 3, 6, 9}, 85, DType::f32).to_vector<float>();
    xv[(2 * 6 + 5) * 9 + 8] = INFINITY;  // channel 2, last row, last column
    const Tensor xi = channels_last(Tensor::from_vector(xv, {1, 3, 6, 9}));
    const Tensor wi = random({8, 3, 3, 3}, 86, DType::f32).set_requires_grad(true);
    auto dw_of = [&](const char* impl) {
      ops::ForceImpl fi(impl);
      const Tensor y = ops::conv2d(xi, wi, Tensor(), {});
      return grad(ops::sum(ops::mul(y, random(y.shape(), 87, DType::f32))), {wi})[0].to_vector<float>();
    };
    const std::vector<float> a = dw_of("direct_small"), r = dw_of("ref");
    int infinite = 0;
    for (size_t k = 0; k < r.size(); ++k) {
      EXPECT_EQ(std::isfinite(a[k]), std::isfinite(r[k])) << "dw element " << k;
      infinite += !std::isfinite(r[k]);
      if (std::isfinite(r[k])) {
        EXPECT_NEAR(a[k], r[k], 1e-4 * (1 + std::fabs(r[k]))) << k;
      }
    }
    EXPECT_EQ(infinite, 8) << "one tap of channel 2 per output channel reads the last row's last column";
  }
  EXPECT_THROW(ops::conv2d(channels_last(zeros({1, 4, 6, 6})), ones({12, 4, 3, 3})), Error)
      << "12 output channels: not a multiple of 8";
}

TEST(Conv2d, NonContiguousInput) {
  const ConvCase c = cases()[6];
  const V in = case_inputs(c, 71, DType::f32);
  const Tensor wide = random({2, 8, 9, 18}, 72, DType::f32);
  const Tensor x = wide.slice(3, 0, 18, 2);  // every other column
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(
      all_close(ops::conv2d(x, in[1], in[2], c.o), ops::conv2d(x.contiguous(), in[1], in[2], c.o)));
  const Tensor wt =
      in[1].permute({0, 1, 3, 2}).contiguous().permute({0, 1, 3, 2});  // strided weight
  EXPECT_TRUE(all_close(ops::conv2d(in[0], wt, in[2], c.o), ops::conv2d(in[0], in[1], in[2], c.o)));
  EXPECT_TRUE(gradcheck([&](const V& v) { return ops::conv2d(v[0].slice(3, 0, 8, 2), v[1]); },
                        {random({1, 2, 5, 8}, 73), random({2, 2, 2, 2}, 74)}));
}

TEST(Conv2d, FusedReluMatchesConvThenRelu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const ConvCase& c : {cases()[0], cases()[3], cases()[6]}) {
      const V in = case_inputs(c, 81, d);
      Conv2dOptions fused = c.o;
      fused.activation = ops::Activation::relu;
      V a, b;
      for (const Tensor& t : in) {
        a.push_back(t.defined() ? t.detach().set_requires_grad(true) : t);
        b.push_back(t.defined() ? t.detach().set_requires_grad(true) : t);
      }
      const Tensor y1 = ops::conv2d(a[0], a[1], a[2], fused);
      const Tensor y2 = ops::relu(ops::conv2d(b[0], b[1], b[2], c.o));
      // Rounding commutes with ReLU, so the values agree exactly.
      EXPECT_TRUE(all_close(y1, y2, {0, 0})) << c.name << " " << dtype_name(d);
      const Tensor gy = random(y1.shape(), 82, d);
      ops::sum(ops::mul(y1, gy)).backward();
      ops::sum(ops::mul(y2, gy)).backward();
      for (size_t i = 0; i < 3; ++i)
        if (a[i].defined()) {
          EXPECT_TRUE(all_close(a[i].grad(), b[i].grad(), {0, 0})) << c.name << " input " << i;
        }
    }
  }
}

TEST(Conv2d, FusedReluGradientPassesExactlyWhereTheOutputIsPositive) {
  // Outputs +inf, the smallest positive subnormal, 0 (from -1) and NaN: the gradient passes the
  // first two only, as for a separate relu (the 16-bit mask works on the bits).
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const double tiny = d == DType::f16 ? std::ldexp(1.0, -24) : d == DType::bf16 ? std::ldexp(1.0, -133) : std::ldexp(1.0, -149);
    const Tensor x = Tensor::from_vector(std::vector<double>{INFINITY, tiny, -1.0, NAN}, {1, 1, 1, 4}, d)
                         .set_requires_grad(true);
    const Tensor w = ones({1, 1, 1, 1}, {.dtype = d});
    const Tensor g = Tensor::from_vector(std::vector<double>{2.0, 3.0, 5.0, 7.0}, {1, 1, 1, 4}, d);
    const Tensor y = ops::conv2d(x, w, Tensor(), {.activation = ops::Activation::relu});
    ASSERT_EQ(y.at({0, 0, 0, 1}), tiny) << dtype_name(d);
    const Tensor dx = grad(ops::sum(ops::mul(y, g)), {x})[0];
    EXPECT_EQ(dx.at({0, 0, 0, 0}), 2.0) << dtype_name(d);
    EXPECT_EQ(dx.at({0, 0, 0, 1}), 3.0) << dtype_name(d);
    EXPECT_EQ(dx.at({0, 0, 0, 2}), 0.0) << dtype_name(d);
    EXPECT_EQ(dx.at({0, 0, 0, 3}), 0.0) << dtype_name(d);
  }
}

TEST(Conv2d, F16OverflowsToInfLikeAnAccelerator) {
  const Tensor x = full({1, 1, 3, 3}, 60000.0, {.dtype = DType::f16});
  const Tensor w = ones({2, 1, 3, 3}, {.dtype = DType::f16});
  const Tensor w_small = full({1, 1, 3, 3}, 0.1, {.dtype = DType::f16});
  for (const char* impl : {"", "ref"}) {
    ops::ForceImpl force(impl);
    const Tensor y = ops::conv2d(x, w);  // 9 * 60000 = 540000 > 65504
    EXPECT_EQ(y.dtype(), DType::f16);
    EXPECT_TRUE(std::isinf(y.at({0, 0, 0, 0})) && y.at({0, 0, 0, 0}) > 0) << impl;
    // 9 * 60000 * 0.1 (rounded) = 53990.6: finite, rounded once to f16.
    const double expect = 9 * 60000 * static_cast<double>(to_f32(to_f16(0.1f)));
    EXPECT_NEAR(ops::conv2d(x, w_small).at({0, 0, 0, 0}), expect, 32.0) << impl;
  }
}

TEST(Conv2d, MixedInputDtypesPromote) {
  const Tensor x = random({1, 2, 4, 4}, 91, DType::bf16);
  const Tensor w = random({3, 2, 3, 3}, 92, DType::f32);
  const Tensor y = ops::conv2d(x, w);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, ops::conv2d(x.astype(DType::f32), w)));
}

TEST(Conv2d, AutocastO1RunsInLowAndReturnsF32) {
  const Tensor x = random({1, 2, 6, 6}, 93, DType::f32);
  const Tensor w = random({3, 2, 3, 3}, 94, DType::f32);
  std::vector<OpRecord> trace;
  AutocastState s = amp::level_state(AmpLevel::O1, DType::bf16);
  Tensor y;
  {
    AutocastScope scope(s);
    OpRecorder rec(&trace);
    y = ops::conv2d(x, w);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  bool saw_conv = false;
  for (const OpRecord& r : trace)
    if (r.op == OpId::conv2d) {
      saw_conv = true;
      EXPECT_EQ(r.compute_dtype, DType::bf16);
    }
  EXPECT_TRUE(saw_conv);
  EXPECT_TRUE(all_close(
      y, ops::conv2d(x.astype(DType::bf16), w.astype(DType::bf16)).astype(DType::f32), {0, 0}));
}

TEST(Conv2d, RejectsBadShapesAndOptions) {
  const Tensor x = random({1, 4, 5, 5}, 95, DType::f32);
  EXPECT_THROW(ops::conv2d(x, random({6, 2, 3, 3}, 1, DType::f32), {}, {.groups = 3}), Error);
  EXPECT_THROW(ops::conv2d(x, random({6, 3, 3, 3}, 1, DType::f32)), Error);  // Cin mismatch
  EXPECT_THROW(ops::conv2d(x, random({6, 4, 3, 3}, 1, DType::f32), random({5}, 2, DType::f32)),
               Error);
  EXPECT_THROW(ops::conv2d(x, random({6, 4, 3, 3}, 1, DType::f32), {}, {.padding = {1, 1, 1, 1}}),
               Error);
  EXPECT_THROW(ops::conv2d(x, random({6, 4, 7, 7}, 1, DType::f32)), Error);  // kernel > input
  EXPECT_THROW(ops::conv2d(x, random({6, 4, 3, 3}, 1, DType::f32), {}, {.stride = {0, 1}}), Error);
  EXPECT_THROW(ops::conv2d(random({4, 5, 5}, 3, DType::f32), random({6, 4, 3, 3}, 1, DType::f32)),
               Error);
  try {
    ops::conv2d(x, random({6, 4, 3, 3}, 1, DType::f32), {}, {.padding = {1, 1, 1, 1}});
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("PadMode::pad"), std::string::npos);
  }
}

// The bf16 weight gradient through AVX512-BF16's pair dot product (cpu/conv_bf16_pairs.cpp),
// forced for backward-weights only: dW and db against the reference kernel's (f32 sums in another
// order, then rounded to the parameters' bf16: the dtype's tolerance), over odd and even output
// widths (the last pair's missing partner), strides 1 and 2, asymmetric padding, 3x2 and 3x5
// kernels, input channels of 32 and 64 (two vectors a tile, the interleaved channel order) and
// 48 (one vector, a last 16 in order); the same bits on 1 and 2 threads; an inf in the input
// reaches exactly the taps that read it; what it declines.
TEST(Conv2d, Bf16PairsWeightGradientMatchesReference) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16))
    GTEST_SKIP() << "bf16_pairs needs AVX512-BF16, which this CPU lacks";
  const ops::Conv2dOptions pad1{.pad_mode = ops::PadMode::pad, .padding = {1, 1, 1, 1}};
  const std::vector<KernelCase> cases = {
      {{2, 32, 9, 9}, {32, 32, 3, 3}, pad1, true},                        // odd OW
      {{2, 32, 8, 10}, {32, 32, 3, 3}, pad1, false},                      // even OW
      {{1, 16, 6, 8}, {16, 16, 3, 5}, {.pad_mode = ops::PadMode::pad, .padding = {1, 1, 2, 2}}, true},
      {{2, 32, 10, 10}, {64, 32, 3, 3}, {.stride = {2, 2}, .pad_mode = ops::PadMode::pad, .padding = {1, 1, 1, 1}}, false},
      {{3, 64, 7, 7}, {16, 64, 3, 3}, {.stride = {2, 2}, .pad_mode = ops::PadMode::pad, .padding = {1, 1, 1, 1}}, true},
      {{1, 48, 7, 6}, {16, 48, 3, 2}, {.pad_mode = ops::PadMode::pad, .padding = {1, 0, 2, 1}}, true},
  };
  for (const KernelCase& c : cases) {
    const Tensor x = channels_last(random(c.x, 71, DType::bf16));
    const Tensor w = random(c.w, 72, DType::f32, -0.5, 0.5).astype(DType::bf16).set_requires_grad(true);
    const Tensor b = c.bias ? random({c.w[0]}, 73, DType::f32).astype(DType::bf16).set_requires_grad(true) : Tensor();
    const auto [yd, gd] = forward_and_weight_grads("bf16_pairs", x, w, b, c.o, 74);
    const auto [yr, gr] = forward_and_weight_grads("ref", x, w, b, c.o, 74);
    const std::string what = shape_str(c.x) + " * " + shape_str(c.w);
    expect_direct_matches_reference(yd, gd, yr, gr, DType::bf16, w, c.bias, what);
    // The kernel's own output (f32, before the parameter's rounding): the same bits whatever the
    // thread count.
    std::vector<Tensor> by_threads;
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      ops::ForceImpl force("bf16_pairs");
      const Tensor y = ops::conv2d(x, w.detach(), Tensor(), c.o);
      Tensor dw = zeros(c.w, {.dtype = DType::f32});
      ops::dispatch(OpId::conv2d, "backward_weights",
                    ops::ConvBwdWeightsProblem{x, channels_last(random(y.shape(), 75, DType::bf16)), dw, Tensor(),
                                               ops::conv_geometry(c.x, c.w, c.o)});
      by_threads.push_back(dw);
    }
    omp_set_num_threads(saved);
    EXPECT_EQ(by_threads[0].to_vector<float>(), by_threads[1].to_vector<float>()) << what;
  }
  // An inf in the last column of an odd-width input (9: the last pair has no partner), read by
  // the taps kw <= 1 of the last output column, and of an even-width one (10): exactly the
  // reference's infinite dW entries.
  for (int64_t width : {9, 10}) {
    std::vector<float> xv = random({1, 32, 5, width}, 76, DType::f32).to_vector<float>();
    xv[static_cast<size_t>((3 * 5 + 2) * width + width - 1)] = INFINITY;  // channel 3, row 2, last column
    const Tensor xi = channels_last(Tensor::from_vector(xv, {1, 32, 5, width}).astype(DType::bf16));
    const Tensor wi = random({16, 32, 3, 3}, 77, DType::f32).astype(DType::bf16).set_requires_grad(true);
    auto dw_of = [&](const char* impl) {
      ops::ForceImpl fi(impl);
      const Tensor y = ops::conv2d(xi, wi, Tensor(), pad1);
      return grad(ops::sum(ops::mul(y.astype(DType::f32), random(y.shape(), 78, DType::f32))), {wi})[0]
          .astype(DType::f32)
          .to_vector<float>();
    };
    const std::vector<float> a = dw_of("bf16_pairs"), r = dw_of("ref");
    int infinite = 0;
    for (size_t k = 0; k < r.size(); ++k) {
      EXPECT_EQ(std::isfinite(a[k]), std::isfinite(r[k])) << "dw element " << k;
      EXPECT_EQ(std::isnan(a[k]), std::isnan(r[k])) << "dw element " << k;
      infinite += !std::isfinite(r[k]);
    }
    EXPECT_GT(infinite, 0);
  }
  // What it declines: f32, input channels not a multiple of 16, output channels not of 16.
  auto why = [&](DType d, int64_t cin, int64_t cout) {
    const ops::ConvGeometry q = ops::conv_geometry({1, cin, 4, 4}, {cout, cin, 3, 3}, pad1);
    const Tensor x = channels_last(zeros({1, cin, 4, 4}, {.dtype = d}));
    const Tensor dy = channels_last(zeros({1, cout, 4, 4}, {.dtype = d}));
    return ops::cpu::conv_bf16_pairs_bwd_weights_declines(
        ops::ConvBwdWeightsProblem{x, dy, zeros({cout, cin, 3, 3}), Tensor(), q});
  };
  EXPECT_EQ(why(DType::bf16, 32, 16), "");
  EXPECT_EQ(why(DType::f32, 32, 16), "not bf16");
  EXPECT_EQ(why(DType::bf16, 8, 16), "input channels not a multiple of 16");
  EXPECT_EQ(why(DType::bf16, 32, 24), "output channels not a multiple of 16");
  EXPECT_EQ(why(DType::bf16, 512, 256), "a weight of more than 2^20 elements");  // 3x3x512x256
  EXPECT_EQ(ops::cpu::conv_bf16_pairs_bwd_weights_declines(ops::ConvBwdWeightsProblem{
                channels_last(zeros({1, 32, 4, 4}, {.dtype = DType::bf16})),
                channels_last(zeros({1, 16, 4, 4}, {.dtype = DType::bf16})), zeros({16, 32, 1, 1}),
                Tensor(), ops::conv_geometry({1, 32, 4, 4}, {16, 32, 1, 1}, {})}),
            "a 1x1 kernel (oneDNN's measured faster)");
}

}  // namespace
}  // namespace mixprec
