// Data parallel equals one process with the global batch: N ranks x batch 64/N against 1 process x
// batch 64 on the same sample order, after 50 steps, at O0 and at O2-bf16; with accumulation and
// clipping; and every rank bitwise identical to the others (checked by check_ranks, which is
// also what --check-ranks runs).
//
// Tolerances, from the summation order. One process sums the 64 per-sample gradient terms in one
// pass and scales by 1/64; N ranks each sum 64/N terms, scale by 1/(64/N) and 1/N, and MPI adds
// the N partial means: the same terms in another order, so each gradient element differs by a few
// f32 ulps. Momentum SGD carries such differences forward and lets them grow slowly: at O0 the
// weights end within ~2e-7 (2 ranks) and ~2e-6 (4 ranks) of each other, relative to the largest
// weight (measured), and the test allows 1e-5. At O2-bf16 a partial sum is rounded to bf16 where the low-precision computation
// ends (8 bits: 2^-8 = 0.4% per rounding), and which samples share a partial sum decides how it
// rounds; 50 steps of that give ~1e-2 (measured: 0.96%), and the test allows 2e-2, while a wrong
// reduction (a missing 1/N, a dropped rank) is off by tens of percent. To show that the whole
// bf16 difference is that rounding and nothing else, the same run is also compared with ONE
// process that accumulates the ranks' micro-batches shard after shard (the same partial sums):
// there only the f32 order of adding the N partial means differs: none with 2 ranks (the weights
// are bitwise equal), f32 rounding with more.
#include "comm_test_util.h"

namespace mixprec {
namespace {

using testing::DataParallelScope;
using testing::RunSpec;

void expect_ranks_identical(amp::TrainOneStepCell& cell) {
  EXPECT_NO_THROW(cell.check_ranks("the end of the test")) << "ranks hold different state";
}

void equivalence(const RunSpec& spec, double tolerance) {
  testing::RunResult parallel;
  {
    DataParallelScope dp;
    parallel = testing::run_training(spec);
    expect_ranks_identical(*parallel.cell);
  }
  const testing::RunResult single = testing::run_training(spec);
  const double diff = testing::max_relative_difference(parallel.weights, single.weights);
  RunSpec like = spec;
  like.ranks_like = testing::ranks();
  const double same_partial_sums = testing::max_relative_difference(parallel.weights, testing::run_training(like).weights);
  std::printf("[rank %d] %s %s after %lld steps: max relative weight difference %.3g against 1 x %lld, %.3g against "
              "one process accumulating the ranks' micro-batches\n", testing::rank(), spec.level.c_str(),
              spec.model.c_str(), static_cast<long long>(spec.steps), diff, static_cast<long long>(spec.global_batch),
              same_partial_sums);
  EXPECT_LT(diff, tolerance);
  // Two partial means add in one order either way (exactly, halving is exact); with more, MPI adds
  // them pairwise where the process adds them one after another: f32 order again.
  EXPECT_LT(same_partial_sums, testing::ranks() <= 2 ? 1e-9 : 1e-5);
  // The test can tell a wrong run: five steps fewer is far outside the tolerance.
  RunSpec fewer = spec;
  fewer.steps -= 5;
  EXPECT_GT(testing::max_relative_difference(testing::run_training(fewer).weights, single.weights), 5 * tolerance);
  for (size_t i = 0; i < parallel.steps.size(); ++i) {
    EXPECT_FALSE(parallel.steps[i].skipped) << "step " << i + 1;
    EXPECT_NEAR(parallel.steps[i].loss, single.steps[i].loss, 1e-2 * std::fabs(single.steps[i].loss))
        << "the reported loss is the mean over the ranks, step " << i + 1;
  }
}

TEST(DataParallelEquivalence, RanksMatchOneProcessWithTheGlobalBatchAtO0) {
  equivalence({.level = "O0"}, 1e-5);
}

TEST(DataParallelEquivalence, RanksMatchOneProcessWithTheGlobalBatchAtO2Bf16) {
  equivalence({.level = "O2", .dtype = DType::bf16}, 2e-2);
}

// Accumulation and clipping compose with the reduction: ranks accumulate 2 micro-batches of
// 64/(2N) each, reduce once at the boundary, and clip by the norm of the reduced gradient: the
// same update as one process clipping the mean gradient of 64 samples.
TEST(DataParallelEquivalence, AccumulationAndClippingMatchOneProcess) {
  RunSpec parallel_spec{.global_batch = 32, .steps = 40, .step = {.max_grad_norm = 0.05, .accumulation_steps = 2}};
  testing::RunResult parallel;
  {
    DataParallelScope dp;
    parallel = testing::run_training(parallel_spec);
    expect_ranks_identical(*parallel.cell);
  }
  const testing::RunResult single = testing::run_training({.global_batch = 64, .steps = 20, .step = {.max_grad_norm = 0.05}});
  EXPECT_LT(testing::max_relative_difference(parallel.weights, single.weights), 1e-4);
  int clipped = 0;
  for (size_t i = 0; i < single.steps.size(); ++i) {
    const amp::StepInfo& p = parallel.steps[2 * i + 1];  // the boundary micro-batch
    EXPECT_NEAR(p.grad_norm, single.steps[i].grad_norm, 1e-4 * single.steps[i].grad_norm) << "update " << i + 1;
    clipped += single.steps[i].grad_norm > 0.05;
    const std::vector<double> norms = testing::gather(p.grad_norm);
    for (double v : norms) EXPECT_EQ(v, norms[0]) << "every rank clips by the same norm, update " << i + 1;
  }
  EXPECT_GT(clipped, 0) << "the test must exercise clipping; first norm " << single.steps[0].grad_norm;
}

}  // namespace
}  // namespace mixprec
