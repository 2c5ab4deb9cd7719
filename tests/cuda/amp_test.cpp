// The AMP multi-tensor kernels on the GPU against their reference kernels (the CPU), on the same
// inputs: the fused unscale + finite check over tensors of several chunks, the device-side scale
// update over an overflow sequence, the fused momentum step with working copies, and its skip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "mixprec/ops/amp_device.h"

namespace mixprec {
namespace {

using namespace testing;

Tensor flag(float v, Device d) { return full({1}, v, {.device = d}); }

TEST(CudaAmp, ForeachUnscaleMatchesTheReferenceAndFindsTheInf) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    for (bool with_inf : {false, true}) {
      std::vector<Tensor> cpu{random({40000}, 1, d, -50, 50), random({3, 7}, 2, d),
                              random({20000}, 3, d, -50, 50)};
      if (with_inf) cpu[2].slice(0, 19999, 20000).fill_(std::numeric_limits<double>::infinity());
      std::vector<Tensor> dev;
      for (const Tensor& t : cpu) dev.push_back(gpu(t));
      const Tensor fc = flag(0, Device::cpu()), fg = flag(0, kGpu);
      ops::amp_foreach_non_finite_check_and_unscale_(cpu, fc, flag(1.0f / 4096, Device::cpu()));
      ops::amp_foreach_non_finite_check_and_unscale_(dev, fg, flag(1.0f / 4096, kGpu));
      EXPECT_EQ(fg.to(Device::cpu()).item(), fc.item()) << dtype_name(d);
      EXPECT_EQ(fc.item(), with_inf ? 1.0 : 0.0);
      for (size_t i = 0; i < cpu.size(); ++i)  // one f32 multiply, one rounding: exact
        EXPECT_TRUE(gpu_close(dev[i], cpu[i], d, 0.0)) << dtype_name(d) << " tensor " << i;
    }
  }
}

TEST(CudaAmp, UnscaleChecksTheStoredValueAsTheReferenceDoes) {
  // 1/scale > 1: finite in f32, inf once stored in f16 (65520 rounds to inf, 65519.996 does not).
  for (const auto& [d, inv] :
       std::vector<std::pair<DType, float>>{{DType::f16, 65520.0f},
                                            {DType::f16, 65519.99609375f},
                                            {DType::bf16, 0x1.ffp+127f},
                                            {DType::bf16, 0x1.fefffep+127f}}) {
    const Tensor c = Tensor::from_vector<float>({0.5f, 1.0f}, {2}, d), g = gpu(c);
    const Tensor fc = flag(0, Device::cpu()), fg = flag(0, kGpu);
    ops::amp_foreach_non_finite_check_and_unscale_({c}, fc, flag(inv, Device::cpu()));
    ops::amp_foreach_non_finite_check_and_unscale_({g}, fg, flag(inv, kGpu));
    EXPECT_EQ(fg.to(Device::cpu()).item(), fc.item()) << dtype_name(d) << " x " << inv;
    EXPECT_EQ(fc.item(), std::isinf(c.to_vector<float>()[1]) ? 1.0 : 0.0)
        << dtype_name(d) << " x " << inv;
    EXPECT_TRUE(gpu_close(g, c, d, 0.0)) << dtype_name(d) << " x " << inv;
  }
}

TEST(CudaAmp, UpdateScaleOnTheDeviceFollowsTheReference) {
  const Tensor sc = flag(65536, Device::cpu()), sg = flag(65536, kGpu);
  const Tensor tc = zeros({1}, {.dtype = DType::i32}), tg = zeros({1}, {.dtype = DType::i32, .device = kGpu});
  for (int step = 0; step < 40; ++step) {
    const float overflow = (step % 7 == 3 || (step > 20 && step < 30)) ? 1.0f : 0.0f;
    ops::amp_update_scale_(sc, tc, flag(overflow, Device::cpu()), 2.0, 0.5, 4, 1.0);
    ops::amp_update_scale_(sg, tg, flag(overflow, kGpu), 2.0, 0.5, 4, 1.0);
    EXPECT_EQ(sg.to(Device::cpu()).item(), sc.item()) << "step " << step;
    EXPECT_EQ(tg.to(Device::cpu()).item(), tc.item()) << "step " << step;
  }
}

TEST(CudaAmp, FusedMomentumMatchesTheReferenceAndSkipsWhenTheFlagIsSet) {
  for (DType low : {DType::bf16, DType::f16}) {
    const std::vector<Shape> shapes{{70000}, {5, 3}, {128, 64}};
    std::vector<Tensor> pc, gc, vc, wc, pg, gg, vg, wg;
    for (size_t i = 0; i < shapes.size(); ++i) {
      pc.push_back(random(shapes[i], 10 + i, DType::f32));
      gc.push_back(random(shapes[i], 20 + i, low));
      vc.push_back(random(shapes[i], 30 + i, DType::f32));
      wc.push_back(zeros(shapes[i], {.dtype = low}));
      pg.push_back(gpu(pc[i]));
      gg.push_back(gpu(gc[i]));
      vg.push_back(gpu(vc[i]));
      wg.push_back(zeros(shapes[i], {.dtype = low, .device = kGpu}));
    }
    const ops::FusedMomentumOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4};
    // A set flag first: nothing moves on either side.
    ops::fused_momentum_(pg, gg, vg, wg, flag(1, kGpu), flag(0.25f, kGpu), o);
    EXPECT_TRUE(gpu_close(pg[0], pc[0], DType::f32, 0.0));
    EXPECT_TRUE(gpu_close(wg[2], wc[2], low, 0.0));
    for (int step = 0; step < 3; ++step) {  // the third with the rate in a device tensor
      ops::fused_momentum_(pc, gc, vc, wc, flag(0, Device::cpu()), flag(0.25f, Device::cpu()), o);
      if (step < 2) ops::fused_momentum_(pg, gg, vg, wg, flag(0, kGpu), flag(0.25f, kGpu), o);
      else ops::fused_momentum_(pg, gg, vg, wg, flag(0, kGpu), flag(0.25f, kGpu), {.lr = 5.0, .momentum = 0.9, .weight_decay = 1e-4}, flag(0.1f, kGpu));
    }
    // amp.cu is compiled with -fmad=false (no FMA contraction), so the bits should be the
    // reference's; held to the f32 tolerance until a GPU has shown that they are.
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_TRUE(gpu_close(pg[i], pc[i], DType::f32)) << i;
      EXPECT_TRUE(gpu_close(vg[i], vc[i], DType::f32)) << i;
      EXPECT_TRUE(gpu_close(wg[i], wc[i], low)) << i;
    }
  }
}

TEST(CudaAmp, AdvanceStepFollowsTheReference) {
  // Rows picked by the device's count through applied, skipped and flagless steps, then a count
  // outside the table (NaN): the same outputs and counts as the reference kernel.
  const Tensor table = random({4, 3}, 40, DType::f32);
  const Tensor cc = full({1}, 5.0, {.dtype = DType::i32}), cg = gpu(cc);
  const Tensor oc = zeros({3}), og = zeros({3}, {.device = kGpu});
  const std::vector<std::pair<int, int64_t>> steps{{0, 5}, {1, 5}, {0, 5}, {-1, 6}, {0, 6}, {0, 0}};
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto [f, base] = steps[k];
    ops::amp_advance_step_(cc, f < 0 ? Tensor() : flag(static_cast<float>(f), Device::cpu()), table, base, oc);
    ops::amp_advance_step_(cg, f < 0 ? Tensor() : flag(static_cast<float>(f), kGpu), gpu(table), base, og);
    EXPECT_EQ(cg.to(Device::cpu()).item(), cc.item()) << "step " << k;
    const std::vector<float> a = og.to(Device::cpu()).to_vector<float>(), b = oc.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << "step " << k << " element " << i;
  }
  EXPECT_TRUE(std::isnan(oc.to_vector<float>()[0])) << "the last step is outside the table";
}

}  // namespace
}  // namespace mixprec
