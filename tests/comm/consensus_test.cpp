// Every rank skips together: at O2-f16 with dynamic loss scaling, one sample of rank 1's batch at
// step 7 is scaled by 1e30 (inf in f16). Only rank 1 sees an overflow, yet every rank skips step
// 7, halves the scale, keeps the same step counters and stays bitwise identical. With the flag
// reduction switched off (amp::testing::set_overflow_consensus(false)) the same run diverges: the
// ranks take different decisions and check_ranks names what differs, which proves the test can
// fail. Also: a fixed scale that drops overflowing updates, accumulation (the overflow is in the
// reduced sum), the functional route (DynamicLossScaler + all_finite + DistributedGradReducer),
// and the overflow event every rank agrees on; and the device train step (run on CPU tensors, its
// collectives then through MPI where a GPU's go through NCCL) taking the same decisions.
#include "amp/step/testing.h"
#include "comm_test_util.h"

namespace mixprec {
namespace {

using testing::DataParallelScope;
using testing::RunSpec;

constexpr int64_t kBadStep = 7;

RunSpec overflow_on_rank1(int64_t steps = 12) {
  return {.level = "O2",
          .dtype = DType::f16,
          .manager = std::make_shared<amp::DynamicLossScaleManager>(1024.0, 2.0, 1000),
          .steps = steps,
          .edit = [](int64_t step, dataset::Batch& b) {
            if (step == kBadStep && testing::rank() == 1) b.image.data<float>()[5] *= 1e30f;
          }};
}

TEST(OverflowConsensus, EveryRankSkipsTheStepOneRankOverflowedAndHalvesTheScale) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  const testing::RunResult r = testing::run_training(overflow_on_rank1());
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const amp::StepInfo& s = r.steps[i];
    const bool bad = static_cast<int64_t>(i + 1) == kBadStep;
    EXPECT_EQ(s.skipped, bad) << "step " << i + 1;
    EXPECT_EQ(s.local_overflow, bad && testing::rank() == 1) << "step " << i + 1 << ": only rank 1 overflowed";
    EXPECT_EQ(s.loss_scale, i + 1 <= static_cast<size_t>(kBadStep) ? 1024.0 : 512.0) << "step " << i + 1;
    for (double v : testing::gather(s.skipped ? 1.0 : 0.0)) EXPECT_EQ(v, s.skipped ? 1.0 : 0.0) << "step " << i + 1;
  }
  EXPECT_EQ(r.cell->skipped_steps(), 1);
  EXPECT_EQ(r.cell->loss_scale_manager()->get_loss_scale(), 512.0);
  EXPECT_EQ(r.opt->global_step(), static_cast<int64_t>(r.steps.size()) - 1) << "a skipped step is not counted";
  // Every rank names the same overflowing op: rank 1's, found by its replay.
  const amp::StepInfo& bad = r.steps[kBadStep - 1];
  ASSERT_TRUE(bad.event.has_value()) << "rank " << testing::rank() << " got no overflow event";
  EXPECT_EQ(bad.event->phase, "forward");
  std::string cell = bad.event->cell;
  comm::broadcast(cell, 1);
  EXPECT_EQ(bad.event->cell, cell) << "every rank holds rank 1's event";
  EXPECT_NO_THROW(r.cell->check_ranks("the end")) << "the ranks must be bitwise identical";
}

TEST(OverflowConsensus, WithoutTheFlagReductionTheRanksDiverge) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  amp::testing::set_overflow_consensus(false);
  testing::RunResult r;
  try {
    r = testing::run_training(overflow_on_rank1(kBadStep));  // stop there: later steps diverge further
  } catch (...) {
    amp::testing::set_overflow_consensus(true);
    throw;
  }
  amp::testing::set_overflow_consensus(true);
  const amp::StepInfo& s = r.steps[kBadStep - 1];
  EXPECT_EQ(s.skipped, testing::rank() == 1) << "each rank decided alone";
  const std::vector<double> scales = testing::gather(r.cell->loss_scale_manager()->get_loss_scale());
  EXPECT_NE(scales[0], scales[1]) << "rank 0 kept its scale, rank 1 halved it";
  const std::string err = testing::error_text([&] { r.cell->check_ranks("step 7"); });
  EXPECT_NE(err.find("rank consistency check at step 7"), std::string::npos) << err;
  EXPECT_NE(err.find("parameter "), std::string::npos) << "the first difference is a parameter: " << err;
  EXPECT_NE(err.find("rank 1 against rank 0"), std::string::npos) << err;
}

// Fixed scaling that drops overflowing updates (MindSpore's FixedLossScaleManager with
// drop_overflow_update): every rank skips step 7 and the scale stays where it was.
TEST(OverflowConsensus, AFixedScaleThatDropsOverflowsSkipsOnEveryRank) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  RunSpec spec = overflow_on_rank1();
  spec.manager = std::make_shared<amp::FixedLossScaleManager>(1024.0, amp::FixedLossScaleOptions{.drop_overflow_update = true});
  const testing::RunResult r = testing::run_training(spec);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const bool bad = static_cast<int64_t>(i + 1) == kBadStep;
    EXPECT_EQ(r.steps[i].skipped, bad) << "step " << i + 1;
    EXPECT_EQ(r.steps[i].local_overflow, bad && testing::rank() == 1) << "step " << i + 1;
    EXPECT_EQ(r.steps[i].loss_scale, 1024.0) << "step " << i + 1;
  }
  EXPECT_EQ(r.opt->global_step(), static_cast<int64_t>(r.steps.size()) - 1);
  EXPECT_NO_THROW(r.cell->check_ranks("the end")) << "the ranks must be bitwise identical";
}

// Accumulation over 2 micro-batches: rank 1's overflow at micro-batch 7 is in the sum that is
// reduced at micro-batch 8, the boundary of that update: every rank skips that update (and only
// it), halves the scale, and drops the accumulated gradients together.
TEST(OverflowConsensus, WithAccumulationEveryRankSkipsTheUpdateHoldingTheOverflow) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  RunSpec spec = overflow_on_rank1();
  spec.step.accumulation_steps = 2;
  const testing::RunResult r = testing::run_training(spec);
  ASSERT_EQ(r.steps.size(), 12u);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    EXPECT_EQ(r.steps[i].skipped, i + 1 == kBadStep + 1) << "micro-batch " << i + 1;
    EXPECT_EQ(r.steps[i].loss_scale, i + 1 <= static_cast<size_t>(kBadStep + 1) ? 1024.0 : 512.0) << "micro-batch " << i + 1;
  }
  EXPECT_EQ(r.cell->skipped_steps(), 1);
  EXPECT_EQ(r.opt->global_step(), 5) << "6 updates, one skipped";
  EXPECT_NO_THROW(r.cell->check_ranks("the end")) << "the ranks must be bitwise identical";
}

// The seed's functional loop, data parallel: value_and_grad, the reducer, all_finite and the
// scaler's adjust. all_finite on each rank's own gradients gives every rank the same answer.
TEST(OverflowConsensus, FunctionalScalersAgreeThroughAllFinite) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  manual_seed(7);
  auto net = nn::make_model("lenet");
  amp::auto_mixed_precision(*net, "O2", DType::f16);
  optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
  nn::DistributedGradReducer reducer(opt.parameters());
  amp::DynamicLossScaler scaler(1024.0, 2.0, 1000);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  auto forward = [&](const Tensor& x, const Tensor& y) { return scaler.scale(loss_fn(net->operator()(x), y)); };
  auto grad_fn = value_and_grad(forward, std::nullopt, opt.parameters());
  const dataset::Dataset ds = dataset::SyntheticDataset({.num_samples = 512, .seed = 3})
                                  .map(dataset::transforms::rescale(1.0 / 255, -0.5))
                                  .shard(testing::ranks(), testing::rank())
                                  .batch(16, true);
  int64_t step = 0;
  for (const dataset::Batch& b : ds) {
    if (++step > 10) break;
    Tensor x = b.image.clone();
    if (step == 4 && testing::rank() == 1) x.data<float>()[0] = 1e30f;
    auto [values, grads] = grad_fn(x, b.label);
    const bool finite = scaler.unscale_(grads);  // local gradients: consensus inside
    EXPECT_EQ(finite, step != 4) << "step " << step << " on rank " << testing::rank();
    if (finite) opt(reducer(grads));
    scaler.adjust(finite);
    for (double v : testing::gather(scaler.scale_value())) EXPECT_EQ(v, scaler.scale_value()) << "step " << step;
  }
  EXPECT_EQ(scaler.scale_value(), 512.0);
  std::vector<comm::RankCheckEntry> entries;
  for (const Tensor& p : opt.parameters()) entries.push_back(comm::tensor_entry("w", p));
  EXPECT_NO_THROW(comm::check_same_on_all_ranks(entries, "the end"));
}

// The device step (src/amp/step/device.cpp) data parallel, on CPU tensors: rank 1's
// overflow at step 7 reaches every rank through the found-inf flag's all-reduce max, so every rank
// skips it and halves the scale; the weights equal the host step's bit for bit, and the loss (the
// mean over the ranks, taken in f32 on the device) is the host's within f32 rounding.
TEST(OverflowConsensus, TheDeviceStepAgreesOnTheFlagAsTheHostStepDoes) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  DataParallelScope dp;
  const testing::RunResult host = testing::run_training(overflow_on_rank1());
  amp::testing::set_device_step_on_cpu(true);
  testing::RunResult dev;
  try {
    dev = testing::run_training(overflow_on_rank1());
  } catch (...) {
    amp::testing::set_device_step_on_cpu(false);
    throw;
  }
  ASSERT_EQ(dev.steps.size(), host.steps.size());
  for (size_t i = 0; i < host.steps.size(); ++i) {
    const amp::StepInfo &d = dev.steps[i], &h = host.steps[i];
    EXPECT_EQ(d.skipped, h.skipped) << "step " << i + 1;
    EXPECT_EQ(d.overflow, h.overflow) << "step " << i + 1;
    EXPECT_EQ(d.local_overflow, h.local_overflow) << "step " << i + 1 << " on rank " << testing::rank();
    EXPECT_EQ(d.loss_scale, h.loss_scale) << "step " << i + 1;
    EXPECT_NEAR(d.loss, h.loss, 1e-6 * std::fabs(h.loss)) << "step " << i + 1;
  }
  EXPECT_TRUE(dev.steps[kBadStep - 1].skipped);
  EXPECT_EQ(dev.cell->loss_scale_manager()->get_loss_scale(), 512.0);
  EXPECT_EQ(testing::max_relative_difference(dev.weights, host.weights), 0.0);
  EXPECT_NO_THROW(dev.cell->check_ranks("the end")) << "the ranks must be bitwise identical";
  amp::testing::set_device_step_on_cpu(false);
}

}  // namespace
}  // namespace mixprec
