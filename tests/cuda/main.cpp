// The CUDA test binary's main: with a GPU visible it runs every test; without one it prints one
// line, "no CUDA device: N CUDA tests not run", and exits 77, which CTest counts as not run
// (SKIP_RETURN_CODE), never as passed.
#include <gtest/gtest.h>

#include <cstdio>

#include "mixprec/cuda.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (mixprec::cuda::device_count() == 0) {
    std::printf("no CUDA device: %d CUDA tests not run\n",
                ::testing::UnitTest::GetInstance()->total_test_count());
    return 77;
  }
  std::printf("CUDA device 0: %s\n", mixprec::cuda::describe(mixprec::Device::cuda(0)).c_str());
  return RUN_ALL_TESTS();
}
