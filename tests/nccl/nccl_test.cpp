// NCCL under the public collectives (src/comm/nccl.cpp), on this rank's GPU (cuda:local rank),
// for any number of ranks: f32 and bf16 sums, the found-inf flag's max, broadcast, a bucket sum
// that is complete for the stream at once, the gradient reducer on the GPU against the same
// reducer on the host, and the device train step data parallel against the host step (the last
// rank overflows at step 7: every rank skips it).
#include <gtest/gtest.h>

#include "comm/comm_test_util.h"
#include "mixprec/cuda.h"
#include "mixprec/half.h"

namespace mixprec {
namespace {

Device gpu() { return Device::cuda(communication::get_local_rank()); }
int rank() { return communication::get_rank(); }
double ranks() { return communication::get_group_size(); }

TEST(Nccl, AnF32SumOfGpuTensorsIsTheSumOverRanks) {
  const Tensor host = arange(0, 1000, 1, {.dtype = DType::f32});
  Tensor t = ops::mul(host, 0.5 * (rank() + 1)).to(gpu());
  comm::all_reduce_sum(t);
  const std::vector<float> got = t.to(Device::cpu()).to_vector<float>();
  const double factor = 0.5 * ranks() * (ranks() + 1) / 2;  // small multiples of 0.5: exact in f32
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i * factor)) << i;
}

TEST(Nccl, ABf16BucketSumIsCompleteForTheStreamAndRoundsToBf16) {
  // Each rank holds 1 + 2^-7 * (rank + 1) (exact in bf16); the sum is rounded to bf16 once per
  // combine. For one or two ranks that is one rounding of the exact sum: the MPI op's result.
  Tensor t = full({4096}, 1.0 + (rank() + 1) / 128.0, {.dtype = DType::bf16, .device = gpu()});
  comm::PendingReduce p = comm::start_all_reduce_sum(t);
  EXPECT_FALSE(p.pending()) << "NCCL's sum is queued on the device's stream: nothing to wait for";
  double exact = 0;
  for (int r = 0; r < static_cast<int>(ranks()); ++r) exact += 1.0 + (r + 1) / 128.0;
  const float want = bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(exact)));
  const std::vector<float> got = t.to(Device::cpu()).astype(DType::f32).to_vector<float>();
  if (ranks() <= 2)
    for (float v : got) ASSERT_EQ(v, want);
  else
    for (float v : got) ASSERT_NEAR(v, exact, exact * (ranks() - 1) / 256.0);  // a rounding per combine
}

TEST(Nccl, TheFoundInfFlagIsTheMaximumOverRanksOnTheDevice) {
  Tensor set = full({}, rank() == communication::get_group_size() - 1 ? 1.0 : 0.0, {.device = gpu()});
  Tensor clear = zeros({}, {.device = gpu()});
  comm::all_reduce_max(set);
  comm::all_reduce_max(clear);
  EXPECT_EQ(set.to(Device::cpu()).item(), 1.0) << "the last rank's overflow is every rank's";
  EXPECT_EQ(clear.to(Device::cpu()).item(), 0.0);
}

TEST(Nccl, BroadcastCopiesRankZerosBytes) {
  Tensor t = full({3, 5}, 10.0 + rank(), {.dtype = DType::f16, .device = gpu()});
  comm::broadcast(t, 0);
  for (float v : t.to(Device::cpu()).astype(DType::f32).to_vector<float>()) ASSERT_EQ(v, 10.0f);
}

// The reducer's buckets on the GPU (packing by ops, summed by NCCL) against the same reduction
// on the host (packing loops, MPI): averaged f32 gradients agree to f32 rounding.
TEST(Nccl, TheGradReducerOnTheGpuMatchesItOnTheHost) {
  manual_seed(5 + rank());
  std::vector<Tensor> host_params{randn({7, 3}), randn({300}), randn({2, 2, 2})};
  std::vector<Tensor> grads;
  for (const Tensor& p : host_params) grads.push_back(randn(p.shape()));
  std::vector<Tensor> gpu_params, gpu_grads;
  for (size_t i = 0; i < host_params.size(); ++i) {
    gpu_params.push_back(host_params[i].to(gpu()));
    gpu_grads.push_back(grads[i].to(gpu()));
  }
  nn::DistributedGradReducer on_host(host_params, true), on_gpu(gpu_params, true);
  const std::vector<Tensor> want = on_host(grads), got = on_gpu(gpu_grads);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].device(), gpu());
    EXPECT_TRUE(testing::all_close(got[i].to(Device::cpu()), want[i], {.rel = 1e-6, .abs = 1e-6})) << "gradient " << i;
  }
  EXPECT_TRUE(testing::throws_error_with([&] { (void)on_gpu.local_finite(); }, "not tracked for gradients on cuda"));
}

TEST(Nccl, TheDeviceStepDataParallelTakesTheHostStepsDecisions) {
  testing::DataParallelScope dp;
  const int last = communication::get_group_size() - 1;
  testing::RunSpec spec{.level = "O2", .dtype = DType::f16,
                        .manager = std::make_shared<amp::DynamicLossScaleManager>(1024.0, 2.0, 1000),
                        .steps = 10,
                        .edit = [last](int64_t step, dataset::Batch& b) {
                          if (step == 7 && rank() == last) b.image.data<float>()[5] *= 1e30f;
                        }};
  const testing::RunResult host = testing::run_training(spec);
  spec.manager = std::make_shared<amp::DynamicLossScaleManager>(1024.0, 2.0, 1000);
  spec.device = gpu();
  const testing::RunResult dev = testing::run_training(spec);
  ASSERT_EQ(dev.steps.size(), host.steps.size());
  for (size_t i = 0; i < host.steps.size(); ++i) {
    EXPECT_EQ(dev.steps[i].skipped, host.steps[i].skipped) << "step " << i + 1;
    EXPECT_EQ(dev.steps[i].skipped, i + 1 == 7) << "step " << i + 1;
    EXPECT_EQ(dev.steps[i].local_overflow, host.steps[i].local_overflow) << "step " << i + 1;
    EXPECT_EQ(dev.steps[i].loss_scale, host.steps[i].loss_scale) << "step " << i + 1;
  }
  EXPECT_LT(testing::max_relative_difference(dev.weights, host.weights), 2e-2)
      << "GPU kernels against the CPU's, f16 activations";
  EXPECT_NO_THROW(dev.cell->check_ranks("the end")) << "the ranks must hold the same weights";
}

}  // namespace
}  // namespace mixprec
