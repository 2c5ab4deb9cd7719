// main() of the NCCL tests (label cuda with one rank, mpi with two under tests/cli/nccl_test.sh):
// without a GPU for this rank it prints "no CUDA device: N CUDA tests not run" and exits 77,
// which CTest counts as not run. Otherwise it joins the group (mpirun's, or a group of one),
// runs the tests on every rank, and fails on every rank when a test failed on any.
// `nccl_test --cuda-device-count` prints the GPUs visible and exits (the script's question).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/cuda.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--cuda-device-count") == 0) {
    std::printf("%d\n", mixprec::cuda::device_count());
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int tests = ::testing::UnitTest::GetInstance()->total_test_count();
  if (mixprec::cuda::device_count() == 0) {
    std::printf("no CUDA device: %d CUDA tests not run\n", tests);
    return 77;
  }
  mixprec::communication::init();
  const int rank = mixprec::communication::get_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  std::printf("rank %d of %d on %s\n", rank, mixprec::communication::get_group_size(),
              mixprec::cuda::describe(mixprec::Device::cuda(mixprec::communication::get_local_rank())).c_str());
  double failed = RUN_ALL_TESTS() != 0 ? 1.0 : 0.0;
  mixprec::comm::all_reduce_max({&failed, 1});
  mixprec::communication::release();
  return failed != 0.0 ? 1 : 0;
}
