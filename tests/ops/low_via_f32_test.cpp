// low_via_f32, the one adapter that runs 16-bit problems through an f32 kernel: on each family
// that registers it, its output is the f32 kernel's output on the widened problem rounded once,
// bit for bit; and it declines whatever that f32 kernel declines, so that dispatch (and its log)
// picks the next kernel, rather than running another backend's kernel behind dispatch's back.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "mixprec/graph/plan.h"
#include "mixprec/version.h"
#include "op_test_util.h"
#include "ops/conv_problem.h"
#include "ops/layout.h"
#include "ops/matmul_problem.h"
#include "ops/low_via_f32.h"
#include "ops/norm_problem.h"
#include "ops/softmax_problem.h"
#if MIXPREC_WITH_ONEDNN
#include "ops/onednn/context.h"
#endif

namespace mixprec {
namespace {
using testing::kernel_named;
using testing::random;

#if MIXPREC_WITH_ONEDNN

// Runs the f32 kernel "onednn" on a widened copy of p (made by `to_f32`) and low_via_f32 on p,
// and checks that low_via_f32's output (member `out`) is the f32 output rounded once.
template <class P, class ToF32>
void expect_f32_output_rounded_once(const P& p, Tensor P::*out, ToF32 to_f32,
                                    std::string_view adapter_name = "low_via_f32") {
  const P q = to_f32(p);
  const auto f32_kernel = kernel_named<P>("onednn");
  ASSERT_EQ(f32_kernel.declines(q), "");
  f32_kernel.run(q);
  const auto adapter = kernel_named<P>(adapter_name);
  ASSERT_EQ(adapter.declines(p), "");
  adapter.run(p);
  const std::vector<double> got = (p.*out).template to_vector<double>();
  const std::vector<double> want = (q.*out).astype((p.*out).dtype()).template to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << dtype_name((p.*out).dtype()) << " element " << i;
}

Tensor f32_like(const Tensor& t) { return t.defined() ? ops::detail::widen_to_f32(t) : t; }
Tensor f32_empty(const Tensor& t) { return ops::detail::empty_f32_like(t); }

TEST(LowViaF32, OutputIsTheF32KernelsOutputRoundedOnceInEveryFamily) {
  for (DType d : {DType::f16, DType::bf16}) {
    if (ops::onednn::why_not_via_f32(d) != "") continue;  // bf16 where oneDNN computes in it
    {  // matmul, with a transposed operand, a bias and the fused relu
      const Tensor a = random({5, 7}, 1, d), w = random({3, 7}, 2, d), b = random({3}, 3, d);
      const ops::MatmulProblem p{a, w.transpose(0, 1), b, Tensor::empty({5, 3}, {.dtype = d}), true};
      expect_f32_output_rounded_once(p, &ops::MatmulProblem::out, [](ops::MatmulProblem q) {
        q.a = f32_like(q.a), q.b = f32_like(q.b), q.bias = f32_like(q.bias), q.out = f32_empty(q.out);
        return q;
      });
    }
    {  // conv2d forward, channels-last
      const Tensor x = ops::detail::to_image(random({2, 3, 6, 6}, 4, d), ops::detail::ImageLayout::nhwc);
      const Tensor w = random({4, 3, 3, 3}, 5, d), b = random({4}, 6, d);
      const ops::ConvGeometry g = ops::conv_geometry(x.shape(), w.shape(), {});
      const ops::ConvFwdProblem p{x, w, b,
                                  ops::detail::empty_image(g.out_shape(), d, ops::detail::ImageLayout::nhwc),
                                  g, false};
      expect_f32_output_rounded_once(p, &ops::ConvFwdProblem::y, [](ops::ConvFwdProblem q) {
        q.x = f32_like(q.x), q.w = f32_like(q.w), q.b = f32_like(q.b), q.y = f32_empty(q.y);
        return q;
      }, "low_via_f32_batched");
    }
    {  // batch norm forward (training: the statistics are outputs, f32 already)
      const Tensor x = random({4, 3, 5, 5}, 7, d);
      const ops::BatchNormFwdProblem p{.x = x, .gamma = random({3}, 8, DType::f32),
                                       .beta = random({3}, 9, DType::f32),
                                       .mean = Tensor::empty({3}), .var = Tensor::empty({3}),
                                       .y = Tensor::empty(x.shape(), {.dtype = d})};
      expect_f32_output_rounded_once(p, &ops::BatchNormFwdProblem::y, [](ops::BatchNormFwdProblem q) {
        q.x = f32_like(q.x), q.y = f32_empty(q.y), q.mean = Tensor::empty({3}), q.var = Tensor::empty({3});
        return q;
      });
    }
    {  // softmax backward (two 16-bit inputs)
      const Tensor y = ops::softmax(random({4, 9}, 10, d), 1), dy = random({4, 9}, 11, d);
      const ops::SoftmaxBwdProblem p{.y = y, .dy = dy, .dx = Tensor::empty({4, 9}, {.dtype = d}), .axis = 1};
      expect_f32_output_rounded_once(p, &ops::SoftmaxBwdProblem::dx, [](ops::SoftmaxBwdProblem q) {
        q.y = f32_like(q.y), q.dy = f32_like(q.dy), q.dx = f32_empty(q.dx);
        return q;
      });
    }
  }
}

// Conv problems of [64, 16, 32, 32] f16/bf16 channels-last images: 128 KiB of f32 per image, so
// low_via_f32_batched runs them in chunks of 15 images (a short one last).
struct ChunkedConv {
  Tensor x, w, dy;
  ops::ConvGeometry g;
};
ChunkedConv chunked_conv(DType d) {
  const auto nhwc = ops::detail::ImageLayout::nhwc;
  ChunkedConv c;
  c.x = ops::detail::to_image(random({64, 16, 32, 32}, 21, d), nhwc);
  c.w = random({16, 16, 3, 3}, 22, d);
  c.g = ops::conv_geometry(c.x.shape(), c.w.shape(), {.pad_mode = ops::PadMode::same});
  c.dy = ops::detail::to_image(random(c.g.out_shape(), 23, d), nhwc);
  return c;
}

TEST(LowViaF32, BatchedRunsInChunksWithTheWholeProblemsResultAndNoWholeF32Copy) {
  // Forward and backward-data: each image's output is the f32 kernel's on that image, rounded
  // once, so chunking changes no bit. Backward-weights: the f32 sums of the chunks added in
  // order, within f32 rounding of the whole batch's sum. Memory: low_via_f32 made f32 copies of
  // whole tensors (x: 8 MiB here); the batched adapter's copies are one chunk's.
  const auto nhwc = ops::detail::ImageLayout::nhwc;
  for (DType d : {DType::f16, DType::bf16}) {
    if (ops::onednn::why_not_via_f32(d) != "") continue;
    const ChunkedConv c = chunked_conv(d);
    ops::ConvFwdProblem f{c.x, c.w, Tensor(), ops::detail::empty_image(c.g.out_shape(), d, nhwc), c.g, false};
    const int64_t step = ops::detail::images_per_chunk(f);  // 15 (the weights count too): 5 chunks, the last short
    ASSERT_GT(step, 1);
    ASSERT_LT(step, 64);
    expect_f32_output_rounded_once(f, &ops::ConvFwdProblem::y, [](ops::ConvFwdProblem q) {
      q.x = f32_like(q.x), q.w = f32_like(q.w), q.y = f32_empty(q.y);
      return q;
    }, "low_via_f32_batched");
    ops::ConvBwdDataProblem bd{c.dy, c.w, ops::detail::empty_image(c.x.shape(), d, nhwc), c.g};
    expect_f32_output_rounded_once(bd, &ops::ConvBwdDataProblem::dx, [](ops::ConvBwdDataProblem q) {
      q.dy = f32_like(q.dy), q.w = f32_like(q.w), q.dx = f32_empty(q.dx);
      return q;
    }, "low_via_f32_batched");
    ops::ConvBwdWeightsProblem bw{c.x, c.dy, Tensor::empty(c.w.shape()), Tensor::empty({16}), c.g};
    ops::ConvBwdWeightsProblem whole{f32_like(c.x), f32_like(c.dy), Tensor::empty(c.w.shape()), Tensor::empty({16}), c.g};
    kernel_named<ops::ConvBwdWeightsProblem>("onednn").run(whole);
    const int64_t added = graph::measure_peak([&] { kernel_named<ops::ConvBwdWeightsProblem>("low_via_f32_batched").run(bw); });
    // One chunk's f32 x and dy (about kChunkBytes), where low_via_f32 allocated 16 MiB.
    EXPECT_LT(added, ops::detail::kChunkBytes + (int64_t{256} << 10)) << dtype_name(d);
    // 65536 products a weight (|dw| up to ~100), summed in f32 in two orders: 1e-4 apart.
    EXPECT_TRUE(testing::all_close(bw.dw, whole.dw, {1e-4, 1e-3})) << dtype_name(d);
    EXPECT_TRUE(testing::all_close(bw.db, whole.db, {1e-4, 1e-3})) << dtype_name(d);
    EXPECT_GT(ops::sum(ops::abs(bw.dw)).item(), 1.0);
  }
}

TEST(LowViaF32, DeclinesWhatTheF32KernelDeclinesSoDispatchPicksTheNextKernel) {
  // oneDNN declines an empty GEMM (K = 0). The f16 emulation used to accept it and then call the
  // reference matmul itself; now it declines too and dispatch hands the problem to ref.
  const ops::MatmulProblem p{Tensor::empty({2, 0}, {.dtype = DType::f16}),
                             Tensor::empty({0, 3}, {.dtype = DType::f16}), {},
                             Tensor::empty({2, 3}, {.dtype = DType::f16}), false};
  EXPECT_EQ(kernel_named<ops::MatmulProblem>("low_via_f32").declines(p), "empty problem");
  EXPECT_EQ(testing::chosen_kernel(p), "ref");
  const Tensor out = ops::matmul(p.a, p.b);
  EXPECT_EQ(out.dtype(), DType::f16);
  for (double v : out.to_vector<double>()) EXPECT_EQ(v, 0.0);
}

#endif  // MIXPREC_WITH_ONEDNN

}  // namespace
}  // namespace mixprec
