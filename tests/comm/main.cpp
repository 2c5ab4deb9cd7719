// main() of the data-parallel tests: joins the group mpirun started, runs the tests on every
// rank (each test makes the same collective calls on every rank), and fails on every rank when a
// test failed on any, so that mpirun's exit status says so. Only rank 0 prints gtest's progress;
// a failure is printed by the rank it happened on.
#include <gtest/gtest.h>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "ops/kernel_choice.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The fixed kernel order, as in the unit tests: the one-process runs the equivalence tests
  // compare against must run the kernels of the data-parallel runs (which always keep that order).
  const mixprec::ops::KernelChoiceScope fixed_kernels(mixprec::ops::KernelChoice::first);
  mixprec::communication::init();
  if (mixprec::communication::get_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed())
          std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", mixprec::communication::get_rank(),
                       r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
      }
    };
    listeners.Append(new FailurePrinter);
  }
  double failed = RUN_ALL_TESTS() != 0 ? 1.0 : 0.0;
  mixprec::comm::all_reduce_max({&failed, 1});
  mixprec::communication::release();
  return failed != 0.0 ? 1 : 0;
}
