// dispatch's error when no kernel accepts a problem (a test-only problem type whose two kernels
// both decline): it names the op, the problem and each kernel's reason even without
// MIXPREC_VERBOSE (a CUDA problem no CUDA kernel takes, e.g. attention with a 16-bit softmax,
// reports why that way).
#include <gtest/gtest.h>

#include "ops/dispatch.h"
#include "test_util.h"

namespace mixprec {
namespace {

struct DeclinedProblem {
  Device device() const { return Device::cpu(); }
  std::string describe() const { return "a test problem"; }
};
std::string declines_a(const DeclinedProblem&) { return "reason a"; }
std::string declines_b(const DeclinedProblem&) { return "reason b"; }
void run_nothing(const DeclinedProblem&) {}

TEST(Dispatch, WhenNoKernelAcceptsTheErrorNamesEachKernelsReason) {
  ASSERT_EQ(ops::verbose_level(), 0) << "the point is the quiet path";
  ops::register_kernel<DeclinedProblem>({"a", Device::Type::cpu, declines_a, run_nothing});
  ops::register_kernel<DeclinedProblem>({"b", Device::Type::cpu, declines_b, run_nothing});
  const auto run = [] { ops::dispatch(OpId::add, "forward", DeclinedProblem{}); };
  EXPECT_TRUE(testing::throws_error_with(
      run, "add forward: no implementation accepts a test problem (a: reason a; b: reason b)"));
}

}  // namespace
}  // namespace mixprec
