// nn::DistributedGradReducer and the collectives under it: the mean over the ranks, undefined
// gradients as zeros, buckets started during backward in bucket order, the bf16 sum with f32
// arithmetic, the local finite flag, broadcast from rank 0, buffers averaged, the thread share,
// sharded evaluation equal to one process, and the rank check naming what differs.
#include <sched.h>

#include <algorithm>
#include <limits>

#include "comm_test_util.h"

namespace mixprec {
namespace {

using testing::DataParallelScope;

// Rank r's gradient for parameter i: element j holds (r + 1) * (i + 1) + j / 8.
std::vector<Tensor> rank_gradients(const std::vector<Tensor>& params) {
  std::vector<Tensor> g;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> v(static_cast<size_t>(params[i].numel()));
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>((testing::rank() + 1) * (i + 1)) + j / 8.0f;
    g.push_back(Tensor::from_vector(v, params[i].shape()));
  }
  return g;
}

TEST(GradReducer, AveragesOverTheRanksAndCountsAnUndefinedGradientAsZeros) {
  DataParallelScope dp;
  const std::vector<Tensor> params{zeros({3, 5}), zeros({7}), zeros({2, 2})};
  nn::DistributedGradReducer reducer(params);
  std::vector<Tensor> g = rank_gradients(params);
  if (testing::rank() == 0) g[1] = Tensor();  // rank 0 has no gradient for parameter 1
  const std::vector<Tensor> out = reducer(g);
  const int n = testing::ranks();
  const double mean_factor = (n + 1) / 2.0;  // mean of (r + 1) over the ranks
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(out[i].shape(), params[i].shape());
    const auto v = out[i].to_vector<double>();
    for (size_t j = 0; j < v.size(); ++j) {
      double expect = mean_factor * (i + 1) + j / 8.0;
      if (i == 1) expect = (mean_factor * n - 1) * 2 / n + (n - 1) * (j / 8.0) / n;  // rank 0 gave zeros
      EXPECT_NEAR(v[j], expect, 1e-5) << "parameter " << i << " element " << j;
    }
  }
  EXPECT_TRUE(reducer.local_finite());
}

TEST(GradReducer, StartsBucketsDuringBackwardInOrderAndReportsLocalNonFinite) {
  // Tiny caps: one bucket per parameter, so that buckets start as gradients arrive.
  DataParallelScope dp({.bucket_cap_mb = 1e-6, .first_bucket_mb = 1e-6});
  const std::vector<Tensor> params{zeros({64}), zeros({64}), zeros({64})};
  nn::DistributedGradReducer reducer(params);
  EXPECT_EQ(reducer.stats().buckets, 3);
  std::vector<Tensor> g = rank_gradients(params);
  if (testing::rank() == 1) g[0].data<float>()[3] = std::numeric_limits<float>::infinity();
  reducer.begin();
  reducer.ready(2, g[2]);  // the last parameter's gradient arrives first, as in backward
  reducer.ready(0, g[0]);  // bucket of parameter 0 is complete but waits for parameter 1's
  EXPECT_EQ(reducer.stats().buckets_started_early, 1) << "only the first bucket may start yet";
  reducer.ready(1, g[1]);
  EXPECT_EQ(reducer.stats().buckets_started_early, 3);
  const std::vector<Tensor> out = reducer.finish(g);
  EXPECT_EQ(reducer.stats().bytes_done_early, reducer.stats().buckets_done_early * 64 * 4)
      << "one 64-element f32 bucket per parameter";
  EXPECT_EQ(reducer.local_finite(), testing::rank() != 1);
  EXPECT_TRUE(std::isinf(out[0].to_vector<double>()[3])) << "the inf travels to every rank";
  EXPECT_NEAR(out[2].to_vector<double>()[0], (testing::ranks() + 1) / 2.0 * 3, 1e-5);
}

// With overlap off (--no-grad-overlap) nothing starts before finish(), so nothing is hidden.
TEST(GradReducer, WithoutOverlapNothingStartsOrCompletesDuringBackward) {
  DataParallelScope dp({.bucket_cap_mb = 1e-6, .first_bucket_mb = 1e-6, .overlap_grad_reduce = false});
  const std::vector<Tensor> params{zeros({64}), zeros({64}), zeros({64})};
  nn::DistributedGradReducer reducer(params);
  const std::vector<Tensor> g = rank_gradients(params);
  reducer.begin();
  for (size_t k = g.size(); k-- > 0;) reducer.ready(k, g[k]);
  const std::vector<Tensor> out = reducer.finish(g);
  EXPECT_EQ(reducer.stats().buckets_started_early, 0);
  EXPECT_EQ(reducer.stats().buckets_done_early, 0);
  EXPECT_EQ(reducer.stats().bytes_done_early, 0);
  EXPECT_NEAR(out[1].to_vector<double>()[0], (testing::ranks() + 1) / 2.0 * 2, 1e-5) << "and still reduces";
}

// bf16 travels, f32 adds: each combine widens both operands, adds in f32 and rounds once.
TEST(GradReducer, Bf16AllReduceAddsInF32AndRoundsOnce) {
  DataParallelScope dp({.grad_allreduce_dtype = DType::bf16});
  const std::vector<Tensor> params{zeros({4})};
  nn::DistributedGradReducer reducer(params, /*mean=*/false);
  EXPECT_EQ(reducer.stats().bytes_per_reduction, 4 * 2) << "half the bytes of f32";
  // Rank 0 sends 1 + 2^-7, the others 2^-8: with 2 ranks the sum 1 + 3 * 2^-8 is a tie between
  // two bf16 values and rounds once, to even: 1 + 2^-6. (The order of combines for more ranks is
  // MPI's choice; each is still one f32 addition and one rounding.)
  const float mine = testing::rank() == 0 ? 1.0f + 1.0f / 128 : 1.0f / 256;
  const Tensor g = Tensor::from_vector<float>({mine, testing::rank() == 0 ? 128.0f : 1.0f, 3.0f, -2.0f}, {4});
  const auto out = reducer({g})[0];
  EXPECT_EQ(out.dtype(), DType::bf16);
  const auto v = out.to_vector<double>();
  if (testing::ranks() == 2) {
    EXPECT_EQ(v[0], 1.0 + 1.0 / 64);
  }
  EXPECT_EQ(v[1], 128.0 + (testing::ranks() - 1)) << "exact in bf16 below 256";
  EXPECT_EQ(v[2], 3.0 * testing::ranks());
  EXPECT_EQ(v[3], -2.0 * testing::ranks());
}

TEST(GradReducer, ConstructionBroadcastsRankZerosParameters) {
  DataParallelScope dp;
  Tensor p = full({5}, static_cast<double>(testing::rank() + 10));
  nn::DistributedGradReducer reducer({p});
  for (double v : p.to_vector<double>()) EXPECT_EQ(v, 10.0);
}

TEST(DataParallelState, BuffersAreAveragedAndRankCheckNamesTheFirstDifference) {
  DataParallelScope dp;
  manual_seed(1);
  auto net = nn::make_model("convnet-bn");
  // Make rank r's BatchNorm statistics differ, then average them.
  for (auto& [name, b] : net->buffers_and_names())
    if (is_floating(b.dtype())) b.detach().copy_(full(b.shape(), static_cast<double>(testing::rank())));
  nn::all_reduce_buffers(*net);
  for (auto& [name, b] : net->buffers_and_names())
    if (is_floating(b.dtype())) {
      EXPECT_EQ(b.to_vector<double>()[0], (testing::ranks() - 1) / 2.0) << name;
    }
  // check_same_on_all_ranks: rank 1 (and 3) hold a different second entry.
  const bool odd = testing::rank() % 2 == 1;
  std::vector<comm::RankCheckEntry> e{comm::number_entry("loss scale", 1024.0),
                                      comm::tensor_entry("parameter fc.weight", full({3}, odd ? 1.0 : 0.0)),
                                      comm::number_entry("optimizer step", odd ? 5.0 : 4.0)};
  const std::string err = testing::error_text([&] { comm::check_same_on_all_ranks(e, "step 3"); });
  EXPECT_NE(err.find("'parameter fc.weight' differs between ranks"), std::string::npos) << err;
  EXPECT_NE(err.find(testing::ranks() >= 4 ? "ranks 1, 3 against rank 0" : "rank 1 against rank 0"), std::string::npos) << err;
  EXPECT_NE(err.find("2 of 3 checked values differ"), std::string::npos) << err;
  e.erase(e.begin() + 1);
  const std::string err2 = testing::error_text([&] { comm::check_same_on_all_ranks(e, "step 4"); });
  EXPECT_NE(err2.find("(rank 0 holds 4; rank 1 holds 5"), std::string::npos) << "numbers are printed: " << err2;
}

// Ranks that may run on the same CPUs split them: the expected share is computed here from every
// rank's affinity mask (all ranks of the test run on one machine).
TEST(DataParallelState, EachRankGetsItsShareOfTheCores) {
  ASSERT_EQ(communication::get_local_rank_size(), testing::ranks()) << "run the test on one machine";
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  uint64_t bits = 0;
  for (int c = 0; c < 64; ++c) bits |= CPU_ISSET(c, &mine) ? uint64_t{1} << c : 0;
  const std::vector<uint64_t> all = comm::all_gather({&bits, 1});
  const int sharing = static_cast<int>(std::count(all.begin(), all.end(), bits));
  EXPECT_EQ(communication::default_threads_per_rank(), std::max(1, CPU_COUNT(&mine) / sharing));
}

// Evaluation splits the batches over the ranks and adds up the metrics: the same accuracy as one
// process, exactly (the same batches are evaluated, by whichever rank).
TEST(DataParallelState, ShardedEvaluationEqualsOneProcess) {
  auto eval_with = [](bool parallel) {
    std::optional<DataParallelScope> dp;
    if (parallel) dp.emplace();
    manual_seed(5);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
    train::Model model(*net, loss_fn, opt, {.metrics = {{"Accuracy", train::Accuracy()}, {"Loss", train::Loss()}}});
    const dataset::Dataset test = dataset::SyntheticDataset({.num_samples = 1000, .seed = 9})
                                      .map(dataset::transforms::rescale(1.0 / 255, -0.5))
                                      .batch(96);  // 11 batches: uneven over the ranks
    return model.eval(test);
  };
  const auto par = eval_with(true), one = eval_with(false);
  EXPECT_EQ(par.at("Accuracy"), one.at("Accuracy"));
  EXPECT_NEAR(par.at("Loss"), one.at("Loss"), 1e-6 * one.at("Loss"));
}

}  // namespace
}  // namespace mixprec
