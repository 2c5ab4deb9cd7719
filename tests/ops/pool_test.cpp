// ops::max_pool2d, avg_pool2d, adaptive_avg_pool2d: hand-computed values (padding,
// count_include_pad, ceil_mode, adaptive bins), forward against the f64 oracle in every dtype,
// f64 gradient checks (reference kernels), oneDNN against the reference (ties included: the
// gradient goes to the first maximum), channels-last and non-contiguous inputs, dtype policy.
#include <gtest/gtest.h>

#include "mixprec/cpu_features.h"
#include "mixprec/amp/level.h"
#include "mixprec/version.h"
#include "op_test_util.h"
#include "core/autograd_graph.h"
#include "ops/dispatch.h"

namespace mixprec {
namespace {
using ops::Pool2dOptions;
using testing::all_close;
using testing::gradcheck;
using testing::matches_f64_in_all_dtypes;
using testing::random;
using V = std::vector<Tensor>;

struct PoolCase {
  const char* name;
  Shape x;
  Pool2dOptions o;
};

std::vector<PoolCase> cases() {
  return {
      {"lenet_2x2", {2, 6, 28, 28}, {}},
      {"k3_s2_pad1", {2, 3, 9, 9}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {"k3_s2_ceil", {2, 3, 8, 8}, {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true}},
      {"k3_s2_pad1_ceil",
       {1, 2, 10, 10},
       {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}},
      {"rect", {1, 2, 7, 5}, {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}}},
      {"exclude_pad",
       {2, 3, 7, 7},
       {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}},
  };
}

using PoolFn = std::function<Tensor(const Tensor&)>;
struct Op {
  const char* name;
  std::function<PoolFn(const PoolCase&)> make;
};
std::vector<Op> ops_under_test() {
  return {
      {"max_pool2d",
       [](const PoolCase& c) -> PoolFn {
         return [o = c.o](const Tensor& x) { return ops::max_pool2d(x, o); };
       }},
      {"avg_pool2d",
       [](const PoolCase& c) -> PoolFn {
         return [o = c.o](const Tensor& x) { return ops::avg_pool2d(x, o); };
       }},
  };
}

Tensor channels_last(const Tensor& x) {
  return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}
bool strides_are_nhwc(const Tensor& y) {
  const Shape& s = y.shape();
  return y.strides() == Strides{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

// Forward, then the node's backward with a fixed output gradient.
struct PoolRun {
  Tensor y, dx;
};
PoolRun run_pool(const PoolFn& fn, const Tensor& x, std::string_view impl) {
  ops::ForceImpl force(impl);
  const Tensor y = fn(x.detach().set_requires_grad(true));
  const Tensor gy = random(y.shape(), 5, y.dtype());
  NoGradGuard ng;
  return {y.detach(), y.grad_fn()->backward({gy})[0]};
}

bool onednn_computes(DType d) {
#if MIXPREC_WITH_ONEDNN
  return d == DType::f32 || cpu_features().avx512f;
#else
  (void)d;
  return false;
#endif
}

// Small integers: many ties inside each window.
Tensor with_ties(const Shape& s, uint64_t seed, DType d) {
  auto v = random(s, seed, DType::f64, 0, 3).to_vector<double>();
  for (double& e : v) e = std::floor(e);
  return Tensor::from_vector<double>(v, s).astype(d);
}

// ---------------------------------------------------------------- values

TEST(MaxPool2d, HandComputed) {
  const Tensor x = arange(16).reshape({1, 1, 4, 4});
  EXPECT_EQ(ops::max_pool2d(x).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  // k3 s2 pad 1: windows rows/cols [-1, 2) and [1, 4).
  EXPECT_EQ(ops::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})
                .to_vector<float>(),
            (std::vector<float>{5, 7, 13, 15}));
  // ceil_mode on 5x5 with k2: 3x3 output, the last window holds one row/column.
  const Tensor x5 = arange(25).reshape({1, 1, 5, 5});
  EXPECT_EQ(ops::max_pool2d(x5, {.ceil_mode = true}).to_vector<float>(),
            (std::vector<float>{6, 8, 9, 16, 18, 19, 21, 23, 24}));
  EXPECT_EQ(ops::max_pool2d(x5).shape(), (Shape{1, 1, 2, 2}));
  // Negative values: padding never wins.
  EXPECT_EQ(ops::max_pool2d(ops::neg(ones({1, 1, 2, 2})),
                            {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}})
                .at({0, 0, 0, 0}),
            -1.0);
}

TEST(MaxPool2d, GradientGoesToTheFirstMaximum) {
  for (const char* impl : {"", "ref"}) {
    Tensor x = ones({1, 1, 4, 4}).set_requires_grad(true);
    {
      ops::ForceImpl force(impl);
      ops::sum(ops::max_pool2d(x)).backward();
    }
    const std::vector<float> g = x.grad().to_vector<float>();
    EXPECT_EQ(g, (std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0})) << impl;
  }
}

TEST(AvgPool2d, HandComputed) {
  const Tensor x = arange(16).reshape({1, 1, 4, 4});
  EXPECT_EQ(ops::avg_pool2d(x).to_vector<float>(), (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}));
  // k3 s2 pad 1, corner window covers x[0:2, 0:2] = {0, 1, 4, 5}: sum 10.
  const Pool2dOptions inc{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  EXPECT_FLOAT_EQ(static_cast<float>(ops::avg_pool2d(x, inc).at({0, 0, 0, 0})), 10.0f / 9);
  Pool2dOptions exc = inc;
  exc.count_include_pad = false;
  EXPECT_FLOAT_EQ(static_cast<float>(ops::avg_pool2d(x, exc).at({0, 0, 0, 0})), 10.0f / 4);
  // ceil_mode, 5x5 k2 s2 without padding: the last window (one element, x[4,4] = 24) divides
  // by 1 even with count_include_pad (PyTorch: the divisor is clipped to input + padding).
  const Tensor x5 = arange(25).reshape({1, 1, 5, 5});
  EXPECT_EQ(ops::avg_pool2d(x5, {.ceil_mode = true}).at({0, 0, 2, 2}), 24.0);
  EXPECT_EQ(ops::avg_pool2d(x5, {.ceil_mode = true}).at({0, 0, 0, 2}), (4 + 9) / 2.0);
  // ceil_mode with padding: a window past the padding divides by the part inside
  // input + padding. 4x4, k3 s2 p1 ceil: 3x3 output; the last window covers rows [3, 6), its
  // divisor rows [3, 5), its values row 3 only: x[3, 3] = 15 over 2 * 2.
  const Pool2dOptions cp{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  const Tensor y = ops::avg_pool2d(x, cp);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(static_cast<float>(y.at({0, 0, 2, 2})), 15.0f / 4);
  const Tensor x6 = arange(36).reshape({1, 1, 6, 6});
  const Tensor y6 = ops::avg_pool2d(x6, cp);  // (6 + 2 - 3) / 2 = 2.5 -> 4 outputs
  ASSERT_EQ(y6.shape(), (Shape{1, 1, 4, 4}));
  // Last window rows [5, 8) clip to [5, 7) for the divisor (6 + pad 1), and to [5, 6) in the
  // image: (35) / (2 * 2).
  EXPECT_FLOAT_EQ(static_cast<float>(y6.at({0, 0, 3, 3})), 35.0f / 4);
}

TEST(AdaptiveAvgPool2d, HandComputedBins) {
  // 5 -> 3 bins: [0, 2), [1, 4), [3, 5).
  const Tensor x = arange(5).reshape({1, 1, 1, 5});
  EXPECT_EQ(ops::adaptive_avg_pool2d(x, {1, 3}).to_vector<float>(),
            (std::vector<float>{0.5f, 2, 3.5f}));
  // Uniform bins are plain average pooling; (1, 1) is the global mean.
  const Tensor x4 = arange(16).reshape({1, 1, 4, 4});
  EXPECT_EQ(ops::adaptive_avg_pool2d(x4, {2, 2}).to_vector<float>(),
            (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}));
  EXPECT_EQ(ops::adaptive_avg_pool2d(x4, {1, 1}).to_vector<float>(), (std::vector<float>{7.5f}));
  // More outputs than inputs: bins overlap.
  EXPECT_EQ(ops::adaptive_avg_pool2d(arange(2).reshape({1, 1, 1, 2}), {1, 3}).to_vector<float>(),
            (std::vector<float>{0, 0.5f, 1}));
}

// ---------------------------------------------------------------- dtypes and gradients

TEST(Pool2d, ForwardMatchesF64InEveryDtype) {
  for (const Op& op : ops_under_test())
    for (const PoolCase& c : cases()) {
      const PoolFn fn = op.make(c);
      EXPECT_TRUE(
          matches_f64_in_all_dtypes([&](const V& in) { return fn(in[0]); }, {random(c.x, 11)}))
          << op.name << " " << c.name;
    }
  for (std::array<int64_t, 2> size : {std::array<int64_t, 2>{1, 1}, {3, 4}, {7, 7}, {5, 2}})
    EXPECT_TRUE(matches_f64_in_all_dtypes(
        [&](const V& in) { return ops::adaptive_avg_pool2d(in[0], size); },
        {random({2, 3, 14, 9}, 12)}))
        << size[0] << "x" << size[1];
}

TEST(Pool2d, GradCheck) {
  for (const Op& op : ops_under_test())
    for (const PoolCase& c : cases()) {
      if (c.x[2] > 10) continue;  // keep the finite differences cheap
      const PoolFn fn = op.make(c);
      EXPECT_TRUE(gradcheck([&](const V& in) { return fn(in[0]); }, {random(c.x, 21)}))
          << op.name << " " << c.name;
    }
  for (std::array<int64_t, 2> size : {std::array<int64_t, 2>{1, 1}, {2, 3}, {3, 3}})
    EXPECT_TRUE(gradcheck([&](const V& in) { return ops::adaptive_avg_pool2d(in[0], size); },
                          {random({2, 2, 6, 5}, 22)}))
        << size[0] << "x" << size[1];
}

TEST(Pool2d, OneDnnMatchesReference) {
  for (DType d : {DType::f32, DType::bf16}) {
    if (!onednn_computes(d)) GTEST_SKIP() << "no oneDNN kernels for " << dtype_name(d);
    for (const Op& op : ops_under_test())
      for (const PoolCase& c : cases()) {
        const PoolFn fn = op.make(c);
        // oneDNN declines ceil-mode average windows past the padding; the default dispatch
        // then runs the reference, which the comparison still covers.
        const bool declined =
            std::string(op.name) == "avg_pool2d" && std::string(c.name) == "k3_s2_pad1_ceil";
        for (bool ties : {false, true}) {
          const Tensor x = ties ? with_ties(c.x, 31, d) : random(c.x, 31, d);
          const PoolRun fast = run_pool(fn, x, declined ? "" : "onednn");
          const PoolRun ref = run_pool(fn, x, "ref");
          const testing::Tolerance tol =
              d == DType::f32 ? testing::Tolerance{1e-6, 1e-6} : testing::tolerance_for(d);
          EXPECT_TRUE(all_close(fast.y, ref.y, tol))
              << op.name << " " << c.name << " " << dtype_name(d);
          EXPECT_TRUE(all_close(fast.dx, ref.dx, tol))
              << op.name << " " << c.name << " " << dtype_name(d) << (ties ? " ties" : "");
        }
      }
    for (std::array<int64_t, 2> size : {std::array<int64_t, 2>{1, 1}, {7, 7}}) {
      const PoolFn fn = [size](const Tensor& x) { return ops::adaptive_avg_pool2d(x, size); };
      const Tensor x = random({4, 16, 14, 14}, 32, d);
      const PoolRun fast = run_pool(fn, x, "onednn");
      const PoolRun ref = run_pool(fn, x, "ref");
      EXPECT_TRUE(all_close(fast.y, ref.y)) << size[0];
      EXPECT_TRUE(all_close(fast.dx, ref.dx)) << size[0];
    }
  }
}

TEST(MaxPool2d, BackwardRunsWhicheverImplementationRanTheForward) {
  const PoolFn fn = [](const Tensor& x) {
    return ops::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}});
  };
  const Tensor x = with_ties({2, 3, 9, 9}, 41, DType::f32);
  Tensor leaf = x.detach().set_requires_grad(true);
  const Tensor y = fn(leaf);  // default: oneDNN where available
  const Tensor gy = random(y.shape(), 5, y.dtype());
  Tensor dx;
  {
    ops::ForceImpl force("ref");
    NoGradGuard ng;
    dx = y.grad_fn()->backward({gy})[0];
  }
  EXPECT_TRUE(all_close(dx, run_pool(fn, x, "ref").dx, {0, 0}));
}

TEST(Pool2d, ChannelsLastInputGivesChannelsLastOutputAndSameValues) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const Op& op : ops_under_test()) {
      const PoolCase c = cases()[1];
      const PoolFn fn = op.make(c);
      const Tensor x = random(c.x, 51, d);
      const PoolRun a = run_pool(fn, x, "");
      const PoolRun b = run_pool(fn, channels_last(x), "");
      EXPECT_TRUE(strides_are_nhwc(b.y)) << op.name;
      EXPECT_TRUE(strides_are_nhwc(b.dx)) << op.name;
      EXPECT_TRUE(all_close(b.y, a.y, {0, 0})) << op.name << " " << dtype_name(d);
      EXPECT_TRUE(all_close(b.dx, a.dx)) << op.name << " " << dtype_name(d);
    }
    const PoolFn gap = [](const Tensor& x) { return ops::adaptive_avg_pool2d(x, {1, 1}); };
    const Tensor x = random({4, 32, 7, 7}, 52, d);
    const PoolRun a = run_pool(gap, x, "");
    const PoolRun b = run_pool(gap, channels_last(x), "");
    EXPECT_TRUE(all_close(b.y, a.y));
    EXPECT_TRUE(all_close(b.dx, a.dx));
    EXPECT_TRUE(strides_are_nhwc(b.dx));
  }
}

TEST(MaxPool2d, ChannelsLastKernelMatchesReferenceOnEveryGeometry) {
  // nhwc_max forced on every case (padding, ceil mode, overlapping and rectangular windows; the
  // dense path for few channels and the per-window one), with ties: the same maxima, and the
  // gradient routed to the same (first) argmax.
  // Each geometry also with 16, 24 and 32 channels: the windows in registers (channels in whole
  // vectors: 8 lanes on AVX2, 16 on AVX-512, so 24 takes the per-window loop on AVX-512).
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (const PoolCase& c0 : cases()) {
      for (int64_t channels : {c0.x[1], int64_t{16}, int64_t{24}, int64_t{32}}) {
        PoolCase c = c0;
        c.x[1] = channels;
        const PoolFn fn = [o = c.o](const Tensor& x) { return ops::max_pool2d(x, o); };
        // All-negative values too: a padded row or column wrongly counted as 0 would win.
        for (const Tensor& x :
             {channels_last(random(c.x, 53, d)), channels_last(with_ties(c.x, 54, d)),
              channels_last(random(c.x, 56, d, -1.0, -0.1))}) {
          const PoolRun fast = run_pool(fn, x, "nhwc_max");
          const PoolRun ref = run_pool(fn, x, "ref");
          EXPECT_TRUE(all_close(fast.y, ref.y, {0, 0}))
              << c.name << " C=" << channels << " " << dtype_name(d);
          EXPECT_TRUE(all_close(fast.dx, ref.dx, {0, 0}))
              << c.name << " C=" << channels << " " << dtype_name(d);
          EXPECT_TRUE(strides_are_nhwc(fast.dx)) << c.name;
        }
      }
    }
  }
}

TEST(MaxPool2d, ChannelsLastKernelKeepsTheReferencesArgmaxWithInfAndNan) {
  // Windows that are all -inf, start with -inf, start with NaN or hold a NaN later, for LeNet's
  // 6 channels: the same maxima and the gradient routed to the same element as the reference.
  // And for 32 channels (the windows in registers).
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (int64_t C : {int64_t{6}, int64_t{32}}) {
      std::vector<float> v = random({2, C, 4, 6}, 55, DType::f32).to_vector<float>();
      auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w) -> float& {
        return v[static_cast<size_t>(((n * C + c) * 4 + h) * 6 + w)];
      };
      for (int64_t h : {0, 1})
        for (int64_t w : {0, 1}) at(0, 0, h, w) = -INFINITY;  // a whole window
      at(0, 1, 0, 0) = -INFINITY;                             // first of its window
      at(0, 2, 0, 2) = NAN;                                   // first of its window
      at(1, 3, 3, 5) = NAN;                                   // last of its window
      at(1, 4, 2, 2) = -INFINITY;
      at(1, 4, 2, 3) = NAN;
      const Tensor x = channels_last(Tensor::from_vector(v, {2, C, 4, 6}).astype(d));
      for (const ops::Pool2dOptions& o :
           {ops::Pool2dOptions{},
            ops::Pool2dOptions{.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}}) {
        const PoolFn fn = [o](const Tensor& t) { return ops::max_pool2d(t, o); };
        const PoolRun fast = run_pool(fn, x, "nhwc_max");
        const PoolRun ref = run_pool(fn, x, "ref");
        EXPECT_TRUE(all_close(fast.y, ref.y, {0, 0})) << dtype_name(d);
        EXPECT_TRUE(all_close(fast.dx, ref.dx, {0, 0})) << dtype_name(d);
      }
    }
}

TEST(AdaptiveAvgPool2d, GlobalIsTheMeanOverHeightAndWidth) {
  const Tensor x = random({3, 5, 7, 6}, 61, DType::f32);
  EXPECT_TRUE(all_close(ops::adaptive_avg_pool2d(x, {1, 1}), ops::mean(x, {2, 3}, true)));
  Tensor leaf = x.detach().set_requires_grad(true);
  ops::sum(ops::adaptive_avg_pool2d(leaf, {1, 1})).backward();
  EXPECT_TRUE(all_close(leaf.grad(), full(x.shape(), 1.0 / 42)));
}

TEST(AdaptiveAvgPool2d, GlobalKernelMatchesReference) {
  const PoolFn gap = [](const Tensor& x) { return ops::adaptive_avg_pool2d(x, {1, 1}); };
  const PoolFn full_avg = [](const Tensor& x) { return ops::avg_pool2d(x, {.kernel = {5, 300}}); };
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (bool nhwc : {false, true}) {
      // 5 x 300: rows longer than one conversion chunk.
      const Tensor x0 = random({3, 20, 5, 300}, 63, d);
      const Tensor x = nhwc ? channels_last(x0) : x0;
      for (const PoolFn& fn : {gap, full_avg}) {
        const PoolRun fast = run_pool(fn, x, "global_avg");
        const PoolRun ref = run_pool(fn, x, "ref");
        EXPECT_TRUE(all_close(fast.y, ref.y)) << dtype_name(d) << (nhwc ? " nhwc" : "");
        EXPECT_TRUE(all_close(fast.dx, ref.dx, {0, 0})) << dtype_name(d) << (nhwc ? " nhwc" : "");
        EXPECT_EQ(strides_are_nhwc(fast.dx), nhwc);
      }
    }
  }
}

TEST(Pool2d, NonContiguousInput) {
  const Tensor x = random({2, 3, 12, 8}, 71, DType::f32).transpose(2, 3);
  ASSERT_FALSE(x.is_contiguous());
  const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  EXPECT_TRUE(all_close(ops::max_pool2d(x, o), ops::max_pool2d(x.contiguous(), o), {0, 0}));
  EXPECT_TRUE(all_close(ops::avg_pool2d(x, o), ops::avg_pool2d(x.contiguous(), o)));
  EXPECT_TRUE(all_close(ops::adaptive_avg_pool2d(x, {3, 5}),
                        ops::adaptive_avg_pool2d(x.contiguous(), {3, 5})));
  EXPECT_TRUE(gradcheck([&](const V& in) { return ops::avg_pool2d(in[0].transpose(2, 3), o); },
                        {random({1, 2, 6, 5}, 72)}));
}

TEST(Pool2d, RunsInTheInputDtype) {
  const Tensor x = random({1, 2, 6, 6}, 81, DType::bf16);
  EXPECT_EQ(ops::max_pool2d(x).dtype(), DType::bf16);
  EXPECT_EQ(ops::avg_pool2d(x).dtype(), DType::bf16);
  EXPECT_EQ(ops::adaptive_avg_pool2d(x, {1, 1}).dtype(), DType::bf16);
  AutocastState s = amp::level_state(AmpLevel::O1);
  AutocastScope scope(s);  // policy keep: an f32 input stays f32 at O1
  EXPECT_EQ(ops::max_pool2d(x.astype(DType::f32)).dtype(), DType::f32);
  EXPECT_EQ(ops::avg_pool2d(x.astype(DType::f32)).dtype(), DType::f32);
}

TEST(Pool2d, RejectsBadShapesAndOptions) {
  const Tensor x = random({1, 2, 5, 5}, 91, DType::f32);
  EXPECT_THROW(ops::max_pool2d(x, {.kernel = {2, 2}, .padding = {2, 2}}), Error);  // > kernel / 2
  EXPECT_THROW(ops::max_pool2d(x, {.kernel = {6, 6}}), Error);
  EXPECT_THROW(ops::avg_pool2d(x, {.kernel = {0, 2}}), Error);
  EXPECT_THROW(ops::max_pool2d(random({2, 5, 5}, 1, DType::f32)), Error);
  EXPECT_THROW(ops::adaptive_avg_pool2d(x, {0, 1}), Error);
  EXPECT_THROW(ops::max_pool2d(x, {.stride = {-1, 1}}), Error);
}

}  // namespace
}  // namespace mixprec
