// The AMP multi-tensor ops of ops/amp_device.h on the CPU (their reference kernels, the oracle
// of the CUDA ones): they must agree with the host-side AMP they replace on a GPU — the fused
// unscale with unscale_and_check, the scale update with DynamicLossScaleManager, the fused
// momentum step with optim::Momentum, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "mixprec/amp/loss_scale.h"
#include "mixprec/ops/amp_device.h"
#include "mixprec/optim/optimizer.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

using testing::random;

Tensor scalar_f32(float v) { return full({1}, v); }

TEST(AmpDevice, ForeachUnscaleEqualsUnscaleAndCheckAndSetsTheFlag) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const std::vector<Tensor> a{random({300}, 1, d, -100, 100), random({7, 9}, 2, d, -100, 100)};
    std::vector<Tensor> b{a[0].clone(), a[1].clone()}, c{a[0].clone(), a[1].clone()};
    const Tensor found = zeros({1});
    ops::amp_foreach_non_finite_check_and_unscale_(b, found, scalar_f32(1.0f / 1024));
    EXPECT_TRUE(amp::unscale_and_check(c, 1024.0));
    EXPECT_EQ(found.item(), 0.0);
    for (size_t i = 0; i < b.size(); ++i)
      EXPECT_EQ(b[i].to_vector<float>(), c[i].to_vector<float>()) << dtype_name(d);
    // An inf in the second tensor sets the flag; a later clean call does not clear it.
    Tensor bad = a[1].clone();
    bad.view({63}).slice(0, 5, 6).fill_(std::numeric_limits<double>::infinity());
    ops::amp_foreach_non_finite_check_and_unscale_({a[0].clone(), bad}, found, scalar_f32(0.5f));
    EXPECT_EQ(found.item(), 1.0);
    ops::amp_foreach_non_finite_check_and_unscale_({a[0].clone()}, found, scalar_f32(0.5f));
    EXPECT_EQ(found.item(), 1.0);
  }
}

TEST(AmpDevice, TheCheckIsOnTheStoredValueWhenAScaleBelowOneOverflowsTheDtype) {
  // 1/scale > 1 (a fixed scale below 1): the product can be finite in f32 and inf in the
  // gradient's dtype. 65520 is the first f32 value that rounds to inf in f16, 0x1.ffp+127 in bf16.
  struct Case {
    DType d;
    float g, inv;
    bool stored_inf;
  };
  for (const Case& k :
       {Case{DType::f16, 40000, 2, true}, Case{DType::f16, 32752, 2, false},
        Case{DType::f16, 1, 65520.0f, true}, Case{DType::f16, 1, 65519.99609375f, false},
        Case{DType::bf16, 1, 0x1.ffp+127f, true}, Case{DType::bf16, 1, 0x1.fefffep+127f, false},
        Case{DType::bf16, 60000, 2, false}, Case{DType::f32, 40000, 2, false}}) {
    const std::string what =
        std::string(dtype_name(k.d)) + " " + std::to_string(k.g) + " x " + std::to_string(k.inv);
    const Tensor g = Tensor::from_vector<float>({0.5f, k.g}, {2}, k.d);
    const Tensor found = zeros({1}), b = g.clone(), c = g.clone();
    ops::amp_foreach_non_finite_check_and_unscale_({b}, found, scalar_f32(k.inv));
    EXPECT_EQ(std::isinf(b.to_vector<float>()[1]), k.stored_inf) << what;
    EXPECT_EQ(found.item(), k.stored_inf ? 1.0 : 0.0) << what;
    EXPECT_EQ(amp::unscale_and_check({c}, 1.0 / static_cast<double>(k.inv)), !k.stored_inf) << what;
    EXPECT_EQ(b.to_vector<float>(), c.to_vector<float>()) << what;
  }
}

TEST(AmpDevice, UpdateScaleFollowsTheDynamicLossScaleManager) {
  amp::DynamicLossScaleManager manager(1024.0, 2.0, 3);
  const Tensor scale = scalar_f32(1024.0f), tracker = zeros({1}, {.dtype = DType::i32});
  const bool overflow[] = {false, false, false, true, false, true, true, true, true, true, true,
                           true, true, true, true, false, false, false, false};
  for (bool o : overflow) {
    manager.update_loss_scale(o);
    ops::amp_update_scale_(scale, tracker, scalar_f32(o ? 1.0f : 0.0f), 2.0, 0.5, 3, 1.0);
    EXPECT_EQ(scale.item(), manager.get_loss_scale()) << "after overflow=" << o;
  }
  EXPECT_EQ(scale.item(), 2.0);  // floored at 1 by the overflow run, then grown once
  // Growth that would overflow f32 keeps the scale.
  const Tensor big = scalar_f32(3e38f), t2 = full({1}, 2.0, {.dtype = DType::i32});
  ops::amp_update_scale_(big, t2, scalar_f32(0.0f), 2.0, 0.5, 3, 1.0);
  EXPECT_EQ(big.item(), static_cast<double>(3e38f));
  EXPECT_EQ(t2.item(), 0.0);
}

TEST(AmpDevice, FusedMomentumEqualsTheMomentumOptimizerAndSkipsOnTheFlag) {
  for (bool nesterov : {false, true}) {
    const Tensor w0 = random({40, 3}, 3, DType::f32), g = random({40, 3}, 4, DType::bf16);
    Tensor w1 = w0.clone(), w2 = w0.clone();
    optim::Momentum opt({w1}, 0.05, 0.9, 1e-3, nesterov);
    opt.attach_working_copies(nullptr, DType::bf16);
    const Tensor v = zeros({40, 3}), low = zeros({40, 3}, {.dtype = DType::bf16});
    const ops::FusedMomentumOptions o{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3,
                                      .nesterov = nesterov};
    for (int step = 0; step < 3; ++step) {
      opt.step({g}, 1.0 / 256);
      ops::fused_momentum_({w2}, {g}, {v}, {low}, scalar_f32(0.0f), scalar_f32(1.0f / 256), o);
    }
    EXPECT_EQ(w2.to_vector<float>(), w1.to_vector<float>());
    EXPECT_EQ(low.to_vector<float>(), w1.astype(DType::bf16).to_vector<float>());
    const auto before = w2.to_vector<float>();
    ops::fused_momentum_({w2}, {g}, {v}, {low}, scalar_f32(1.0f), scalar_f32(1.0f / 256), o);
    EXPECT_EQ(w2.to_vector<float>(), before);  // found_inf set: nothing written
  }
}

TEST(AmpDevice, MismatchedListsAndFlagsAreClearErrors) {
  const Tensor w = zeros({3});
  EXPECT_NE(testing::error_text([&] {
              ops::fused_momentum_({w}, {zeros({4})}, {zeros({3})}, {}, {}, {}, {});
            }).find("gradients 0 has shape [4], expected [3]"),
            std::string::npos);
  EXPECT_NE(testing::error_text([&] {
              ops::amp_foreach_non_finite_check_and_unscale_({w}, zeros({2}), scalar_f32(1));
            }).find("found_inf must be a one-element f32 tensor"),
            std::string::npos);
}

// The device-side step count: row count - base of the table, then count + 1 unless the flag is
// set; a count outside the table gives NaN (hand-computed).
TEST(AmpDevice, AdvanceStepPicksTheCountsRowAndCountsAppliedUpdates) {
  const Tensor table = Tensor::from_vector(std::vector<float>{0.5f, 10.f, 0.25f, 20.f, 0.125f, 30.f}, {3, 2});
  const Tensor count = full({1}, 7.0, {.dtype = DType::i32}), out = zeros({2});
  ops::amp_advance_step_(count, scalar_f32(0.0f), table, 6, out);  // row 1, applied
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0.25f, 20.f}));
  EXPECT_EQ(count.item(), 8.0);
  ops::amp_advance_step_(count, scalar_f32(1.0f), table, 6, out);  // row 2, skipped
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0.125f, 30.f}));
  EXPECT_EQ(count.item(), 8.0);
  ops::amp_advance_step_(count, Tensor(), table, 8, out);  // row 0, no flag: always applied
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0.5f, 10.f}));
  EXPECT_EQ(count.item(), 9.0);
  ops::amp_advance_step_(count, Tensor(), table, 5, out);  // row 4 of 3: the bookkeeping is wrong
  EXPECT_TRUE(std::isnan(out.to_vector<float>()[0]) && std::isnan(out.to_vector<float>()[1]));
  ops::amp_advance_step_(count, Tensor(), table, 11, out);  // row -1
  EXPECT_TRUE(std::isnan(out.to_vector<float>()[0]));
  EXPECT_THROW(ops::amp_advance_step_(count, Tensor(), table, 0, zeros({3})), Error) << "out of the wrong width";
  EXPECT_THROW(ops::amp_advance_step_(zeros({1}), Tensor(), table, 0, out), Error) << "an f32 count";
  EXPECT_THROW(ops::amp_advance_step_(count, Tensor(), table.reshape({6}), 0, out), Error) << "a 1-D table";
}

// fused_momentum_ with the learning rate in a tensor (what amp_advance_step_ writes) equals the
// same rate given on the host, bit for bit; the rate comes from the tensor, not options.lr.
TEST(AmpDevice, FusedMomentumReadsTheLearningRateFromTheTensor) {
  const Tensor w = testing::random({1000}, 4, DType::f32), g = testing::random({1000}, 5, DType::f16);
  const Tensor w1 = w.clone(), v1 = zeros({1000}), w2 = w.clone(), v2 = zeros({1000});
  ops::fused_momentum_({w1}, {g}, {v1}, {}, {}, {}, {.lr = 0.03, .momentum = 0.9, .weight_decay = 1e-4});
  ops::fused_momentum_({w2}, {g}, {v2}, {}, {}, {}, {.lr = 7.0, .momentum = 0.9, .weight_decay = 1e-4},
                       full({1}, 0.03));
  EXPECT_EQ(w2.to_vector<float>(), w1.to_vector<float>());
  EXPECT_EQ(v2.to_vector<float>(), v1.to_vector<float>());
  EXPECT_NE(w2.to_vector<float>(), w.to_vector<float>());
}

}  // namespace
}  // namespace mixprec
