// The CUDA convolutions' algorithm rule (src/ops/cuda/conv_algo.h) without a GPU: rankings as
// cuDNN's cudnnGet*Algorithm_v7 returns them, with determinism asked for and not. Built in every
// build (the rule is plain C++); conv.cpp feeds it cuDNN's perf results on a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda/conv_algo.h"

namespace mixprec::ops::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
const AlgoRules kAny{.max_workspace = 256 * kMiB};
const AlgoRules kDeterministic{.max_workspace = 256 * kMiB, .deterministic = true};

// A backward-weights ranking in cuDNN's shape: ALGO_0 and ALGO_3 (which sum partial results with
// atomics) reported non-deterministic, ALGO_1 deterministic.
std::vector<AlgoCandidate> backward_weights_ranking() {
  return {{.algo = 0, .ok = true, .workspace = 0, .deterministic = false},
          {.algo = 3, .ok = true, .workspace = 4 * kMiB, .deterministic = false},
          {.algo = 1, .ok = true, .workspace = 1 * kMiB, .deterministic = true}};
}

TEST(CudaConvAlgo, WithoutDeterminismTheFirstUsableAlgorithmIsPicked) {
  const auto ranked = backward_weights_ranking();
  const AlgoPick p = pick_algorithm(ranked, kAny);
  EXPECT_EQ(p.index, 0);
  EXPECT_EQ(p.nondeterministic, 0);
}

TEST(CudaConvAlgo, DeterminismPassesOverEveryNonDeterministicAlgorithm) {
  const auto ranked = backward_weights_ranking();
  const AlgoPick p = pick_algorithm(ranked, kDeterministic);
  ASSERT_EQ(p.index, 2);
  EXPECT_EQ(ranked[static_cast<size_t>(p.index)].algo, 1);
  EXPECT_EQ(p.nondeterministic, 2);
}

TEST(CudaConvAlgo, NoDeterministicAlgorithmPicksNoneAndSaysWhy) {
  auto ranked = backward_weights_ranking();
  ranked.pop_back();  // only ALGO_0 and ALGO_3 left
  const AlgoPick p = pick_algorithm(ranked, kDeterministic);
  EXPECT_EQ(p.index, -1);
  EXPECT_EQ(p.nondeterministic, 2);
  EXPECT_EQ(p.passed_over(), "2 offered: 2 non-deterministic");
  EXPECT_EQ(pick_algorithm(ranked, kAny).index, 0);  // the same ranking without the rule
}

TEST(CudaConvAlgo, DeterminismDoesNotOverrideTheOtherRules) {
  // Each candidate breaks one rule (counted for the first it breaks); only the last is usable.
  const std::vector<AlgoCandidate> ranked = {
      {.algo = 7, .ok = false, .deterministic = true},
      {.algo = 6, .ok = true, .workspace = 300 * kMiB, .deterministic = false},
      {.algo = 5, .ok = true, .math = AlgoMath::tensor_op_converting, .deterministic = true},
      {.algo = 4, .ok = true, .math = AlgoMath::tensor_op, .deterministic = true},
      {.algo = 2, .ok = true, .deterministic = false},
      {.algo = 1, .ok = true, .workspace = 256 * kMiB, .deterministic = true}};
  const AlgoRules exact{.max_workspace = 256 * kMiB, .exact_f32 = true, .deterministic = true};
  const AlgoPick p = pick_algorithm(ranked, exact);
  ASSERT_EQ(p.index, 5);  // a workspace exactly at the limit fits
  EXPECT_EQ(p.failed, 1);
  EXPECT_EQ(p.over_workspace, 1);  // also non-deterministic, counted once
  EXPECT_EQ(p.converting, 1);
  EXPECT_EQ(p.tensor_op, 1);
  EXPECT_EQ(p.nondeterministic, 1);
  // Without exact f32 the tensor-core algorithm is the first usable one.
  EXPECT_EQ(pick_algorithm(ranked, kDeterministic).index, 3);
}

TEST(CudaConvAlgo, AnEmptyRankingPicksNone) {
  const AlgoPick p = pick_algorithm({}, kDeterministic);
  EXPECT_EQ(p.index, -1);
  EXPECT_EQ(p.passed_over(), "0 offered");
}

TEST(CudaConvAlgo, PassedOverNamesEachReasonOnce) {
  const std::vector<AlgoCandidate> ranked = {{.algo = 0, .ok = false},
                                             {.algo = 1, .ok = true, .workspace = 512 * kMiB},
                                             {.algo = 2, .ok = true, .workspace = 512 * kMiB},
                                             {.algo = 3, .ok = true, .deterministic = false}};
  const AlgoPick p = pick_algorithm(ranked, kDeterministic);
  EXPECT_EQ(p.index, -1);
  EXPECT_EQ(p.passed_over(),
            "4 offered: 1 failed, 2 over the workspace limit, 1 non-deterministic");
}

}  // namespace
}  // namespace mixprec::ops::cuda
