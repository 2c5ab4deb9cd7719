// The CUDA runtime on a GPU: round trips between host and device in every dtype and layout, the
// device allocator's counters and cache, copy-convert on the device, pinned staging.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "mixprec/allocator.h"
#include "mixprec/cuda.h"
#include "mixprec/cuda_readback.h"
#include "mixprec/mixprec.h"
#include "op_test_util.h"
#include "ops/gemm_test_util.h"

namespace mixprec {
namespace {

const Device kGpu = Device::cuda(0);

TEST(CudaRuntime, RoundTripKeepsEveryDtypeBitExact) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const Tensor h = testing::random({3, 5, 7}, 11, DType::f64, -100, 100).astype(d);
    const Tensor g = h.to(kGpu);
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_TRUE(testing::all_close(g.to(Device::cpu()), h, {0.0, 0.0})) << dtype_name(d);
  }
}

TEST(CudaRuntime, AHostReadOfAGpuTensorIsAnErrorNamingItsDevice) {
  const Tensor g = zeros({3}, {.device = kGpu});
  try {
    (void)g.data<float>();
    FAIL() << "data<float>() on a GPU tensor did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_NE(g.data_ptr(), nullptr);  // the device pointer, for kernels
}

TEST(CudaRuntime, StridedCopyAndConvertOnTheDeviceMatchTheCpu) {
  const Tensor h = testing::random({4, 6, 5}, 12, DType::f32);
  const Tensor g = h.to(kGpu);
  // A permuted view made contiguous on the device, then converted to bf16 there.
  const Tensor gp = g.permute({2, 0, 1}).contiguous().astype(DType::bf16);
  const Tensor hp = h.permute({2, 0, 1}).contiguous().astype(DType::bf16);
  EXPECT_EQ(gp.device(), kGpu);
  EXPECT_TRUE(testing::all_close(gp.to(Device::cpu()), hp, {0.0, 0.0}));
  Tensor z = zeros({4, 6, 5}, {.dtype = DType::f16, .device = kGpu});
  z.fill_(2.5);
  EXPECT_EQ(z.to(Device::cpu()).to_vector<float>(), std::vector<float>(120, 2.5f));
}

TEST(CudaRuntime, AllocatorCountsPeakAndReusesFreedBlocks) {
  reset_peak_memory(kGpu);
  const int64_t live0 = memory_stats(kGpu).live_bytes;
  {
    Tensor a = Tensor::empty({1 << 20}, {.device = kGpu});
    EXPECT_EQ(memory_stats(kGpu).live_bytes, live0 + (4 << 20));
  }
  EXPECT_EQ(memory_stats(kGpu).live_bytes, live0);
  EXPECT_GE(memory_stats(kGpu).peak_bytes, live0 + (4 << 20));
  const int64_t sys0 = memory_stats(kGpu).system_allocations;
  Tensor b = Tensor::empty({1 << 20}, {.device = kGpu});
  EXPECT_EQ(memory_stats(kGpu).system_allocations, sys0);  // served from the cache
}

TEST(CudaRuntime, StagingUploadsEqualTheHostBatches) {
  cuda::Staging staging(kGpu);
  for (int k = 0; k < 4; ++k) {
    const Tensor h = testing::random({64, 28, 28}, 100 + k, DType::f32);
    const Tensor g = staging.upload(h);
    EXPECT_TRUE(testing::all_close(g.to(Device::cpu()), h, {0.0, 0.0})) << "batch " << k;
  }
}

// A slot's device buffer is reused only once every tensor of its batch is gone (then with a new
// storage version, for the cast cache); a batch still held keeps its values.
TEST(CudaRuntime, StagingReusesABufferOnlyAfterItsBatchIsGone) {
  cuda::Staging staging(kGpu);
  std::vector<Tensor> h;
  for (int k = 0; k < 4; ++k) h.push_back(testing::random({1000}, 110 + k, DType::f32));
  const Tensor g0 = staging.upload(h[0]);  // slot 0
  Tensor g1 = staging.upload(h[1]);        // slot 1
  const Tensor g2 = staging.upload(h[2]);  // slot 0 again: g0 still held, a fresh buffer
  EXPECT_NE(g2.data_ptr(), g0.data_ptr());
  const void* p1 = g1.data_ptr();
  const uint64_t id1 = g1.storage()->id(), version1 = g1.storage()->version();
  g1 = Tensor();                           // batch 1 gone
  const Tensor g3 = staging.upload(h[3]);  // slot 1: its buffer again
  EXPECT_EQ(g3.data_ptr(), p1);
  EXPECT_EQ(g3.storage()->id(), id1);
  EXPECT_GT(g3.storage()->version(), version1);
  const std::vector<std::pair<Tensor, size_t>> batches = {{g0, 0}, {g2, 2}, {g3, 3}};
  for (const auto& [g, k] : batches)
    EXPECT_TRUE(testing::all_close(g.to(Device::cpu()), h[k], {0.0, 0.0})) << "batch " << k;
}

// The overlap's hazard: batch k+2's copy reuses batch k's buffer while the GPU may still run the
// kernels that read batch k (16 chained products, ~70 GFLOP, queued without waiting; the batch's
// tensor dropped at once). Each result equals the same chain on the same batch uploaded and
// synchronised alone, bit for bit (the same cuBLASLt algorithm on the same operands).
TEST(CudaRuntime, StagingNeverOverwritesABatchAKernelStillReads) {
  // w's entries have variance 1/1024: the chain keeps the values' scale.
  const Tensor w = testing::random({1024, 1024}, 120, DType::f32, -0.054, 0.054).to(kGpu);
  auto chain = [&](Tensor y) {
    for (int i = 0; i < 16; ++i) y = ops::matmul(y, w);
    return y;
  };
  std::vector<Tensor> h, staged;
  for (int k = 0; k < 6; ++k) h.push_back(testing::random({2048, 1024}, 121 + k, DType::f32));
  {
    cuda::Staging staging(kGpu);
    for (const Tensor& hk : h) staged.push_back(chain(staging.upload(hk)));
  }
  for (size_t k = 0; k < h.size(); ++k) {
    const Tensor alone = chain(h[k].to(kGpu));
    cuda::synchronize(kGpu);
    const Tensor got = staged[k].to(Device::cpu());
    EXPECT_TRUE(testing::all_close(got, alone.to(Device::cpu()), {0.0, 0.0})) << "batch " << k;
    EXPECT_GT(testing::max_abs(got), 1e-3) << "batch " << k << ": the chain lost the values";
  }
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

TEST(CudaRuntime, ReadbackAnswersTheFlagOnceItsCopyRanWithoutBlocking) {
  cuda::Readback rb(Device::cuda(0));
  EXPECT_FALSE(rb.poll().has_value());  // nothing requested yet
  const Tensor flag = full({1}, 1.0, {.device = Device::cuda(0)});
  rb.request(flag);
  cuda::synchronize(Device::cuda(0));  // the test waits; a training loop would poll later
  ASSERT_TRUE(rb.poll().has_value());
  EXPECT_EQ(*rb.poll(), 1.0);
  const Tensor scale = full({1}, 65536.0, {.device = Device::cuda(0)});
  rb.request(scale);
  cuda::synchronize(Device::cuda(0));
  EXPECT_EQ(rb.poll().value_or(-1), 65536.0);
}

}  // namespace
}  // namespace mixprec
