// The CUDA image kernels against the reference kernels on the same inputs: cuDNN convolutions
// (forward with bias and ReLU, backward-data, backward-weights; the GEMM error model of
// ops/gemm_test_util.h with K the reduction length), BatchNorm (training and eval, forward and
// backward) and pooling (max, average, adaptive, global), in every dtype, NCHW and channels-last;
// then a small CNN through the ops and autograd on the device against the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "mixprec/cuda.h"
#include "ops/conv_problem.h"
#include "ops/gemm_test_util.h"
#include "ops/layout.h"
#include "ops/norm_problem.h"
#include "ops/pool_problem.h"

namespace mixprec {
namespace {

using namespace testing;
using ops::Conv2dOptions;
using ops::PadMode;
using ops::Pool2dOptions;
using ops::detail::ImageLayout;
constexpr DType kFloats[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
constexpr ImageLayout kLayouts[] = {ImageLayout::nchw, ImageLayout::nhwc};

const char* layout_name(ImageLayout l) { return l == ImageLayout::nhwc ? "nhwc" : "nchw"; }

// t (NCHW values) in layout l and dtype d on `dev`.
Tensor image_on(const Tensor& t, ImageLayout l, DType d, Device dev) {
  return ops::detail::to_image(t.astype(d), l).to(dev);
}
Tensor empty_on(const Shape& s, DType d, ImageLayout l, Device dev) {
  Tensor t = ops::detail::empty_image(s, d, l, dev);
  t.fill_(0.0);
  return t;
}

// ---------------------------------------------------------------- convolution

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
  bool bias, relu;
};

std::vector<ConvCase> conv_cases() {
  Conv2dOptions pad1{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
  Conv2dOptions strided{
      .stride = {2, 2}, .pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}, .groups = 2};
  Conv2dOptions dilated{.pad_mode = PadMode::pad, .padding = {2, 2, 1, 1}, .dilation = {2, 1}};
  return {{{3, 8, 9, 10}, {16, 8, 3, 3}, pad1, true, true},
          {{2, 6, 11, 7}, {4, 3, 3, 3}, strided, true, false},
          {{2, 5, 8, 9}, {7, 5, 3, 2}, dilated, false, true},
          {{4, 16, 6, 6}, {8, 16, 1, 1}, {}, false, false}};
}

TEST(CudaConv, CudnnForwardBackwardDataAndWeightsMatchTheReference) {
  for (const ConvCase& cc : conv_cases())
    for (DType d : kFloats)
      for (ImageLayout l : kLayouts) {
        const ops::ConvGeometry g = ops::conv_geometry(cc.x, cc.w, cc.o);
        const std::string what = g.str() + " " + std::string(dtype_name(d)) + " " + layout_name(l);
        const Tensor x = random(cc.x, 40, DType::f64, -1, 1),
                     w = random(cc.w, 41, DType::f64, -1, 1);
        const Tensor b = cc.bias ? random({g.cout}, 42, DType::f64, -1, 1) : Tensor();
        const Tensor dy = random(g.out_shape(), 43, DType::f64, -1, 1);
        auto fwd = [&](Device dev) {
          return ops::ConvFwdProblem{image_on(x, l, d, dev),
                                     w.astype(d).to(dev),
                                     b.defined() ? b.astype(d).to(dev) : Tensor(),
                                     empty_on(g.out_shape(), d, l, dev),
                                     g,
                                     cc.relu};
        };
        ops::ConvFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
        run_ref(fc);
        run_cuda(fg);
        const int64_t k = g.cin_g() * g.kh * g.kw;
        EXPECT_TRUE(all_close(fg.y.to(Device::cpu()), fc.y, gemm_tolerance(d, k, max_abs(fc.y))))
            << "forward " << what;
        EXPECT_EQ(ops::detail::layout_of(fg.y), l) << what;

        auto bwd_data = [&](Device dev) {
          return ops::ConvBwdDataProblem{image_on(dy, l, d, dev), w.astype(d).to(dev),
                                         empty_on(cc.x, d, l, dev), g};
        };
        ops::ConvBwdDataProblem dc = bwd_data(Device::cpu()), dg = bwd_data(kGpu);
        run_ref(dc);
        run_cuda(dg);
        const int64_t kd = g.cout_g() * g.kh * g.kw;
        EXPECT_TRUE(
            all_close(dg.dx.to(Device::cpu()), dc.dx, gemm_tolerance(d, kd, max_abs(dc.dx))))
            << "backward data " << what;

        const DType acc = acc_dtype(d);
        auto bwd_w = [&](Device dev) {
          const TensorOptions o{.dtype = acc, .device = dev};
          return ops::ConvBwdWeightsProblem{image_on(x, l, d, dev), image_on(dy, l, d, dev),
                                            zeros({g.cout, g.cin_g(), g.kh, g.kw}, o),
                                            zeros({g.cout}, o), g};
        };
        ops::ConvBwdWeightsProblem wc = bwd_w(Device::cpu()), wg = bwd_w(kGpu);
        run_ref(wc);
        run_cuda(wg);
        // dw and db are acc-dtype sums of exact products of the operands: f32 accumulation.
        const int64_t kw = g.n * g.oh * g.ow;
        EXPECT_TRUE(
            all_close(wg.dw.to(Device::cpu()), wc.dw, gemm_tolerance(acc, kw, max_abs(wc.dw))))
            << "backward weights " << what;
        EXPECT_TRUE(
            all_close(wg.db.to(Device::cpu()), wc.db, gemm_tolerance(acc, kw, max_abs(wc.db))))
            << "bias gradient " << what;
      }
}

TEST(CudaConv, F32IsNotRoundedToTf32UnlessAsked) {
  // Values with 23 significant bits: TF32 (10 bits) would be off by ~1e-3 relative.
  const ConvCase cc = conv_cases()[0];
  const ops::ConvGeometry g = ops::conv_geometry(cc.x, cc.w, cc.o);
  const Tensor x = random(cc.x, 44, DType::f64, 1, 2), w = random(cc.w, 45, DType::f64, 1, 2);
  auto fwd = [&](Device dev) {
    return ops::ConvFwdProblem{image_on(x, ImageLayout::nhwc, DType::f32, dev),
                               w.astype(DType::f32).to(dev),
                               Tensor(),
                               empty_on(g.out_shape(), DType::f32, ImageLayout::nhwc, dev),
                               g,
                               false};
  };
  ops::ConvFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
  run_ref(fc);
  run_cuda(fg);
  EXPECT_TRUE(all_close(fg.y.to(Device::cpu()), fc.y, tolerance_for(DType::f32)));
  // Asked: a TF32 algorithm may run (another cache entry); within an f16-like tolerance.
  cuda::set_allow_tf32(true);
  ops::ConvFwdProblem ft = fwd(kGpu);
  run_cuda(ft);
  cuda::set_allow_tf32(false);
  EXPECT_TRUE(all_close(ft.y.to(Device::cpu()), fc.y,
                        gemm_tolerance(DType::f16, g.cin_g() * g.kh * g.kw, max_abs(fc.y))));
}

// With determinism asked for, only algorithms cuDNN reports as deterministic run (the rule:
// tests/ops/cuda_conv_algo_test.cpp): three runs of each direction give the same bits, within the
// reference's tolerance. A problem large enough (N*OH*OW = 6272 per dw element) for a split
// reduction with atomics to be among cuDNN's choices otherwise.
TEST(CudaConv, DeterministicAlgorithmsGiveTheSameBitsEveryRun) {
  struct Restore {
    ~Restore() { cuda::set_deterministic(false); }
  } restore;
  cuda::set_deterministic(true);
  ASSERT_TRUE(cuda::deterministic());
  const Conv2dOptions o{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
  const ops::ConvGeometry g = ops::conv_geometry({8, 32, 28, 28}, {32, 32, 3, 3}, o);
  const Tensor x = random({8, 32, 28, 28}, 48, DType::f64, -1, 1);
  const Tensor w = random({32, 32, 3, 3}, 49, DType::f64, -1, 1);
  const Tensor dy = random(g.out_shape(), 50, DType::f64, -1, 1);
  for (DType d : {DType::f32, DType::f16}) {
    const ImageLayout l = ImageLayout::nhwc;
    auto bwd_w = [&](Device dev) {
      const TensorOptions opt{.dtype = acc_dtype(d), .device = dev};
      return ops::ConvBwdWeightsProblem{image_on(x, l, d, dev), image_on(dy, l, d, dev),
                                        zeros({g.cout, g.cin_g(), g.kh, g.kw}, opt), Tensor(), g};
    };
    auto bwd_data = [&](Device dev) {
      return ops::ConvBwdDataProblem{image_on(dy, l, d, dev), w.astype(d).to(dev),
                                     empty_on({8, 32, 28, 28}, d, l, dev), g};
    };
    ops::ConvBwdWeightsProblem wc = bwd_w(Device::cpu());
    ops::ConvBwdDataProblem dc = bwd_data(Device::cpu());
    run_ref(wc);
    run_ref(dc);
    Tensor first_dw, first_dx;
    for (int run = 0; run < 3; ++run) {
      ops::ConvBwdWeightsProblem wg = bwd_w(kGpu);
      ops::ConvBwdDataProblem dg = bwd_data(kGpu);
      run_cuda(wg);
      run_cuda(dg);
      const Tensor dw = wg.dw.to(Device::cpu()), dx = dg.dx.to(Device::cpu());
      if (run == 0) {
        const int64_t kw = g.n * g.oh * g.ow, kd = g.cout_g() * g.kh * g.kw;
        EXPECT_TRUE(all_close(dw, wc.dw, gemm_tolerance(acc_dtype(d), kw, max_abs(wc.dw))))
            << dtype_name(d);
        EXPECT_TRUE(all_close(dx, dc.dx, gemm_tolerance(d, kd, max_abs(dc.dx)))) << dtype_name(d);
        first_dw = dw;
        first_dx = dx;
      } else {
        EXPECT_TRUE(all_close(dw, first_dw, {0.0, 0.0})) << dtype_name(d) << " run " << run;
        EXPECT_TRUE(all_close(dx, first_dx, {0.0, 0.0})) << dtype_name(d) << " run " << run;
      }
    }
  }
}

TEST(CudaConv, AnOperandAtAnUnalignedAddressMatchesTheReference) {
  // x: images 1..2 of a [4, 3, 5, 7] tensor, 105 elements (420 bytes) past its start.
  const Conv2dOptions o{.pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}};
  const ops::ConvGeometry g = ops::conv_geometry({2, 3, 5, 7}, {4, 3, 3, 3}, o);
  const Tensor big = random({4, 3, 5, 7}, 46, DType::f64, -1, 1).astype(DType::f32);
  const Tensor w = random({4, 3, 3, 3}, 47, DType::f64, -1, 1).astype(DType::f32);
  for (ImageLayout l : kLayouts) {
    const Tensor xg = ops::detail::to_image(big, l).to(kGpu).slice(0, 1, 3);
    ASSERT_NE(reinterpret_cast<uintptr_t>(xg.data_ptr()) % 16, 0u);
    ops::ConvFwdProblem fc{ops::detail::to_image(big, l).slice(0, 1, 3).contiguous(), w, Tensor(),
                           empty_on(g.out_shape(), DType::f32, l, Device::cpu()),     g, false};
    ops::ConvFwdProblem fg{xg, w.to(kGpu), Tensor(), empty_on(g.out_shape(), DType::f32, l, kGpu),
                           g,  false};
    run_ref(fc);
    run_cuda(fg);
    EXPECT_TRUE(
        all_close(fg.y.to(Device::cpu()), fc.y, gemm_tolerance(DType::f32, 27, max_abs(fc.y))))
        << layout_name(l);
  }
}

TEST(CudaConv, AsymmetricPaddingIsDeclinedWithAReason) {
  const Conv2dOptions same{.pad_mode = PadMode::same};
  const ops::ConvGeometry g = ops::conv_geometry({1, 2, 6, 6}, {2, 2, 2, 2}, same);
  ASSERT_NE(g.pad_t, g.pad_b);
  const TensorOptions o{.device = kGpu};
  ops::ConvFwdProblem p{
      zeros({1, 2, 6, 6}, o), zeros({2, 2, 2, 2}, o), Tensor(), zeros(g.out_shape(), o), g, false};
  EXPECT_NE(cuda_declines(p).find("asymmetric padding"), std::string::npos) << cuda_declines(p);
}

// ---------------------------------------------------------------- batch norm

TEST(CudaBatchNorm, TrainingAndEvalForwardAndBackwardMatchTheReference) {
  // The second shape has 12800 values a channel: the statistics are split into two slices.
  for (const Shape& s : {Shape{6, 5, 7, 9}, Shape{8, 3, 40, 40}})
    for (DType d : kFloats)
      for (ImageLayout l : kLayouts)
        for (bool training : {true, false}) {
          const std::string what = shape_str(s) + " " + std::string(dtype_name(d)) + " " +
                                   layout_name(l) + (training ? " training" : " eval");
          const DType c = acc_dtype(d);
          const int64_t ch = s[1];
          const Tensor x = random(s, 50, DType::f64, -2, 3), dy = random(s, 51, DType::f64, -1, 1);
          const Tensor gamma = random({ch}, 52, c, 0.5, 1.5), beta = random({ch}, 53, c);
          const Tensor rmean = random({ch}, 54, c), rvar = random({ch}, 55, c, 0.5, 2);
          auto fwd = [&](Device dev) {
            const TensorOptions o{.dtype = c, .device = dev};
            ops::BatchNormFwdProblem p{image_on(x, l, d, dev),
                                       gamma.to(dev),
                                       beta.to(dev),
                                       training ? zeros({ch}, o) : rmean.to(dev),
                                       training ? zeros({ch}, o) : rvar.to(dev),
                                       empty_on(s, d, l, dev),
                                       training,
                                       1e-5};
            return p;
          };
          ops::BatchNormFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
          run_ref(fc);
          run_cuda(fg);
          EXPECT_TRUE(gpu_close(fg.y, fc.y, d, 2.0)) << what;
          EXPECT_TRUE(gpu_close(fg.mean, fc.mean, c, 2.0)) << what;
          EXPECT_TRUE(gpu_close(fg.var, fc.var, c, 2.0)) << what;
          auto bwd = [&](Device dev) {
            const TensorOptions o{.dtype = c, .device = dev};
            return ops::BatchNormBwdProblem{image_on(x, l, d, dev),
                                            image_on(dy, l, d, dev),
                                            gamma.to(dev),
                                            fc.mean.to(dev),
                                            fc.var.to(dev),
                                            empty_on(s, d, l, dev),
                                            zeros({ch}, o),
                                            zeros({ch}, o),
                                            training,
                                            1e-5};
          };
          ops::BatchNormBwdProblem bc = bwd(Device::cpu()), bg = bwd(kGpu);
          run_ref(bc);
          run_cuda(bg);
          const int64_t m = x.numel() / ch;
          EXPECT_TRUE(gpu_close(bg.dx, bc.dx, d, 4.0)) << what;
          EXPECT_TRUE(all_close(bg.dgamma.to(Device::cpu()), bc.dgamma,
                                gemm_tolerance(c, m, max_abs(bc.dgamma))))
              << what;
          EXPECT_TRUE(all_close(bg.dbeta.to(Device::cpu()), bc.dbeta,
                                gemm_tolerance(c, m, max_abs(bc.dbeta))))
              << what;
        }
}

TEST(CudaBatchNorm, AConstantChannelHasItsValueAsMeanAndZeroVariance) {
  for (ImageLayout l : kLayouts) {
    Tensor x = random({4, 3, 5, 5}, 56, DType::f64, -1, 1);
    x.slice(1, 1, 2).fill_(0.3);  // channel 1 constant
    const TensorOptions o{.device = kGpu};
    ops::BatchNormFwdProblem p{image_on(x, l, DType::f32, kGpu),
                               ones({3}, o),
                               zeros({3}, o),
                               zeros({3}, o),
                               zeros({3}, o),
                               empty_on({4, 3, 5, 5}, DType::f32, l, kGpu),
                               true,
                               1e-5};
    run_cuda(p);
    EXPECT_EQ(p.mean.to(Device::cpu()).to_vector<float>()[1], 0.3f) << layout_name(l);
    EXPECT_EQ(p.var.to(Device::cpu()).to_vector<float>()[1], 0.0f) << layout_name(l);
  }
}

TEST(CudaBatchNorm, TheOpUpdatesRunningStatisticsOnTheDeviceAsOnTheCpu) {
  const Tensor x = random({6, 4, 5, 5}, 57, DType::f64, -1, 3).astype(DType::f32);
  const Tensor rm = random({4}, 58, DType::f32), rv = random({4}, 59, DType::f32, 0.5, 2);
  auto run = [&](Device dev) {
    Tensor mean = rm.to(dev), var = rv.to(dev);  // copies: updated in place
    const Tensor xd = ops::detail::to_image(x, ImageLayout::nhwc).to(dev);
    const Tensor y = ops::batch_norm(xd, Tensor(), Tensor(), mean, var, {.training = true});
    const Tensor e = ops::batch_norm(xd, Tensor(), Tensor(), mean, var, {.training = false});
    return std::vector<Tensor>{y.to(Device::cpu()), e.to(Device::cpu()), mean.to(Device::cpu()),
                               var.to(Device::cpu())};
  };
  const std::vector<Tensor> c = run(Device::cpu()), g = run(kGpu);
  const char* names[] = {"training y", "eval y", "running_mean", "running_var"};
  for (size_t i = 0; i < c.size(); ++i)
    EXPECT_TRUE(all_close(g[i], c[i], Tolerance{2e-5, 2e-6})) << names[i];
}

// ---------------------------------------------------------------- pooling

// Values on a coarse grid (many ties: the first maximum must win) with one NaN.
Tensor pool_input(const Shape& s) {
  Tensor x = random(s, 60, DType::f64, -4, 4);
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = std::round(e);
  v[7] = std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_vector<double>(v, s);
}

void check_pool(const ops::PoolGeometry& g, const Tensor& x, DType d, ImageLayout l,
                const std::string& what) {
  const Tensor dy = random(g.out_shape(), 61, DType::f64, -1, 1);
  auto fwd = [&](Device dev) {
    return ops::PoolFwdProblem{image_on(x, l, d, dev), empty_on(g.out_shape(), d, l, dev), nullptr,
                               g};
  };
  ops::PoolFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
  run_ref(fc);
  run_cuda(fg);
  EXPECT_TRUE(gpu_close(fg.y, fc.y, d)) << "forward " << what;
  auto bwd = [&](Device dev) {
    return ops::PoolBwdProblem{image_on(dy, l, d, dev), image_on(x, l, d, dev), Tensor(),
                               empty_on({8, 32, 28, 28}, d, l, dev), g};
  };
  ops::PoolBwdProblem bc = bwd(Device::cpu()), bg = bwd(kGpu);
  run_ref(bc);
  run_cuda(bg);
  EXPECT_TRUE(gpu_close(bg.dx, bc.dx, d)) << "backward " << what;
}

TEST(CudaPool, MaxPoolingForwardAndBackwardMatchTheReferenceWithTiesAndNan) {
  const Shape s{2, 3, 9, 11};
  const Tensor x = pool_input(s);
  const Pool2dOptions k3s2{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const Pool2dOptions ceil{.kernel = {2, 3}, .stride = {2, 2}, .ceil_mode = true};
  for (const Pool2dOptions& o : {k3s2, ceil, Pool2dOptions{}})
    for (DType d : kFloats)
      for (ImageLayout l : kLayouts) {
        const ops::PoolGeometry g = ops::pool_geometry(ops::PoolKind::max, s, o, "max_pool2d");
        check_pool(g, x, d, l, g.str() + " " + std::string(dtype_name(d)) + " " + layout_name(l));
      }
}

TEST(CudaPool, GlobalAveragePoolingForwardAndBackwardMatchTheReference) {
  const Shape s{3, 5, 7, 6};
  const Tensor x = random(s, 62, DType::f64, -2, 2);
  const ops::PoolGeometry g = ops::adaptive_geometry(s, 1, 1);
  ASSERT_TRUE(g.is_global_avg());
  for (DType d : kFloats)
    for (ImageLayout l : kLayouts)
      check_pool(g, x, d, l,
                 std::string("global avg ") + std::string(dtype_name(d)) + " " + layout_name(l));
}

TEST(CudaPool, AverageAndAdaptiveAveragePoolingMatchTheReference) {
  const Shape s{2, 3, 9, 11};
  const Tensor x = random(s, 63, DType::f64, -2, 2);
  const Pool2dOptions with_pad{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  Pool2dOptions without_pad = with_pad;
  without_pad.count_include_pad = false;
  const Pool2dOptions ceil{
      .kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  std::vector<ops::PoolGeometry> gs;
  for (const Pool2dOptions& o : {with_pad, without_pad, ceil})
    gs.push_back(ops::pool_geometry(ops::PoolKind::avg, s, o, "avg_pool2d"));
  gs.push_back(ops::adaptive_geometry(s, 4, 5));  // overlapping bins of two sizes
  ASSERT_TRUE(gs.back().adaptive);
  for (const ops::PoolGeometry& g : gs)
    for (DType d : kFloats)
      for (ImageLayout l : kLayouts)
        check_pool(g, x, d, l, g.str() + " " + std::string(dtype_name(d)) + " " + layout_name(l));
}

// ---------------------------------------------------------------- the ops, through autograd

// conv2d (bias, fused ReLU) -> batch_norm (training) -> max_pool2d -> conv2d 1x1 ->
// adaptive_avg_pool2d(1, 1), forward and backward through the ops on `dev`: the output and the
// gradients of x, the weights and gamma, on the CPU.
std::vector<Tensor> small_cnn(Device dev, DType d) {
  auto leaf = [&](const Tensor& t) {
    Tensor g = t.astype(d).to(dev);
    g.set_requires_grad(true);
    return g;
  };
  Tensor x = leaf(random({4, 3, 12, 12}, 70)), w1 = leaf(random({8, 3, 3, 3}, 71));
  Tensor b1 = leaf(random({8}, 72)), gamma = leaf(random({8}, 73, DType::f64, 0.5, 1.5));
  Tensor beta = leaf(random({8}, 74)), w2 = leaf(random({5, 8, 1, 1}, 75));
  Tensor no_mean, no_var;  // no running statistics
  const Conv2dOptions c1{
      .pad_mode = PadMode::pad, .padding = {1, 1, 1, 1}, .activation = ops::Activation::relu};
  Tensor y = ops::conv2d(x, w1, b1, c1);
  y = ops::batch_norm(y, gamma, beta, no_mean, no_var, {.training = true});
  y = ops::max_pool2d(y, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  y = ops::adaptive_avg_pool2d(ops::conv2d(y, w2), {1, 1});
  const Tensor gy = random(y.shape(), 76).astype(d).to(dev);
  ops::sum(ops::mul(y, gy)).backward();
  std::vector<Tensor> out{y.detach()};
  for (const Tensor* t : {&x, &w1, &b1, &gamma, &beta, &w2}) out.push_back(t->grad());
  for (Tensor& t : out) t = t.to(Device::cpu());
  return out;
}

TEST(CudaImageOps, ASmallCnnTrainsTheSameOnTheDeviceAsOnTheCpu) {
  // (Not f16/bf16: a ReLU output within rounding of 0 on one device and not on the other would
  // move a max-pooling argmax, a legitimate difference this chain cannot tell from a bug.)
  for (DType d : {DType::f32, DType::f64}) {
    const std::vector<Tensor> cpu = small_cnn(Device::cpu(), d), dev = small_cnn(kGpu, d);
    const char* names[] = {"y", "dx", "dw1", "db1", "dgamma", "dbeta", "dw2"};
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_TRUE(dev[i].defined()) << names[i];
      // Errors of several chained ops: the table's relative tolerance times 20, and an absolute
      // part relative to the largest value.
      Tolerance tol = tolerance_for(cpu[i].dtype());
      tol.rel *= 20;
      tol.abs = tol.rel * max_abs(cpu[i]);
      EXPECT_TRUE(all_close(dev[i], cpu[i], tol)) << names[i] << " " << dtype_name(d);
    }
  }
}

}  // namespace
}  // namespace mixprec
