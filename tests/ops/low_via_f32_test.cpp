// low_via_f32, the one adapter that runs 16-bit problems through an f32 kernel: on each family
// that registers it, its output is the f32 kernel's output on the widened problem rounded once,
// bit for bit; and it declines whatever that f32 kernel declines, so that dispatch (and its log)
// picks the next kernel, rather than running another backend's kernel behind dispatch's back.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
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
void expect_f32_output_rounded_once(const P& p, Tensor P::*out, ToF32 to_f32) {
  const P q = to_f32(p);
  const auto f32_kernel = kernel_named<P>("onednn");
  ASSERT_EQ(f32_kernel.declines(q), "");
  f32_kernel.run(q);
  const auto adapter = kernel_named<P>("low_via_f32");
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
      });
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
