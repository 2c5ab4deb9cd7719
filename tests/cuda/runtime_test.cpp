// The CUDA runtime on a GPU: round trips between host and device in every dtype and layout, the
// device allocator's counters and cache, copy-convert on the device, pinned staging.
#include <gtest/gtest.h>

#include <string>

#include "mixprec/allocator.h"
#include "mixprec/cuda.h"
#include "mixprec/cuda_readback.h"
#include "mixprec/mixprec.h"
#include "op_test_util.h"

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
