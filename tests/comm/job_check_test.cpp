// The same-job check (comm::check_same_job) and the gradient reducer's use of it: the wording of
// the first difference (a pure function, checked on every rank alike), and, across the ranks, that
// a rank with another setting, environment switch, model or bucket size makes every rank throw
// RankMismatchError with the same message, before any collective of unequal sizes.
#include "comm_test_util.h"

namespace mixprec {
namespace {

using comm::JobSetting;

std::string describe(const std::vector<JobSetting>& a, const std::vector<JobSetting>& b) {
  return comm::describe_job_difference(0, a, 1, b).value_or("(the same)");
}

TEST(JobCheck, NamesTheFirstDifferenceWithBothRanksValuesAndListsTheOthers) {
  const std::vector<JobSetting> zero{
      {"--batch-size", "64"}, {"--lr", "0.01"}, {"--seed", "1"}, {"--model", "lenet"}};
  std::vector<JobSetting> one = zero;
  one[0].value = "32";
  EXPECT_EQ(describe(zero, one),
            "rank 1's --batch-size is 32, rank 0's is 64: every rank must run the same job");
  one[2].value = "2";
  one[3].value = "simplenet";
  EXPECT_EQ(describe(zero, one),
            "rank 1's --batch-size is 32, rank 0's is 64: every rank must run the same job "
            "(also different: --seed, --model)");
  EXPECT_EQ(comm::describe_job_difference(3, one, 0, zero).value_or(""),
            "rank 0's --batch-size is 64, rank 3's is 32: every rank must run the same job (also "
            "different: --seed, "
            "--model)");
}

TEST(JobCheck, TheSameSettingsInAnotherOrderAreTheSameJob) {
  const std::vector<JobSetting> zero{{"--lr", "0.01"}, {"--seed", "1"}};
  EXPECT_FALSE(
      comm::describe_job_difference(0, zero, 1, {{"--seed", "1"}, {"--lr", "0.01"}}).has_value());
  EXPECT_FALSE(comm::describe_job_difference(0, {}, 1, {}).has_value());
}

TEST(JobCheck, ASettingOnlyOneRankHasAndAnEmptyValueAreNamed) {
  EXPECT_EQ(describe({{"--lr", "0.01"}, {"--seed", "1"}}, {{"--lr", "0.01"}}),
            "rank 1 has no --seed, rank 0's is 1: every rank must run the same job");
  EXPECT_EQ(describe({{"--lr", "0.01"}}, {{"--lr", "0.01"}, {"--seed", "1"}}),
            "rank 1's --seed is 1, rank 0 has none: every rank must run the same job");
  EXPECT_EQ(describe({{"--white-list", ""}}, {{"--white-list", "Dense"}}),
            "rank 1's --white-list is Dense, rank 0's is '': every rank must run the same job");
}

TEST(JobCheck, ALongListOfDifferencesIsCut) {
  std::vector<JobSetting> zero, one;
  for (int i = 0; i < 12; ++i) {
    const std::string name(1, static_cast<char>('a' + i));
    zero.push_back({name, "0"});
    one.push_back({name, "1"});
  }
  EXPECT_EQ(describe(zero, one),
            "rank 1's a is 1, rank 0's is 0: every rank must run the same job (also "
            "different: b, c, d, e, f, g, h, i and 3 more)");
}

// The message every rank threw (empty: none), and whether all ranks hold the same text.
std::string thrown(const std::function<void()>& fn, bool& same_everywhere) {
  std::string text;
  try {
    fn();
  } catch (const comm::RankMismatchError& e) {
    text = e.what();
  }
  std::string zero = text;
  comm::broadcast(zero, 0);
  double differs = zero == text ? 0.0 : 1.0;
  comm::all_reduce_max({&differs, 1});
  same_everywhere = differs == 0.0;
  return text;
}

TEST(JobCheck, EveryRankThrowsTheSameMessageWhenOneRankDiffers) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  bool same = false;
  // Names and values with the serialization's own characters travel intact.
  const std::vector<JobSetting> common{{"a:1:b", "x:9:y"}, {"--seed", "1"}};
  EXPECT_EQ(thrown([&] { comm::check_same_job(common, "h"); }, same), "");
  std::vector<JobSetting> mine = common;
  if (testing::rank() == 1) mine[0].value = "x:9:z";
  const std::string text = thrown([&] { comm::check_same_job(mine, "use the same job"); }, same);
  EXPECT_TRUE(same) << "rank " << testing::rank() << ": " << text;
  EXPECT_NE(
      text.find("rank 1's a:1:b is x:9:z, rank 0's is x:9:y: every rank must run the same job"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("hint: use the same job"), std::string::npos) << text;
  if (testing::ranks() < 3) return;
  // Every rank but 0 differs; the message names the first and lists them all.
  mine = common;
  if (testing::rank() > 0) mine[1].value = std::to_string(testing::rank() + 1);
  const std::string all = thrown([&] { comm::check_same_job(mine, "h"); }, same);
  EXPECT_TRUE(same) << all;
  std::string ranks = "ranks 1";
  for (int r = 2; r < testing::ranks(); ++r) ranks += ", " + std::to_string(r);
  EXPECT_NE(all.find("rank 1's --seed is 2, rank 0's is 1: every rank must run the same job; " +
                     ranks + " differ from rank 0"),
            std::string::npos)
      << all;
}

TEST(JobCheck, AnEnvironmentSwitchThatChangesNumericsIsPartOfTheJob) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  if (testing::rank() == 1) setenv("MIXPREC_KERNEL_CHOICE", "first", 1);
  bool same = false;
  const std::string text = thrown([] { comm::check_same_job({}, "h"); }, same);
  if (testing::rank() == 1) unsetenv("MIXPREC_KERNEL_CHOICE");
  EXPECT_TRUE(same) << text;
  EXPECT_NE(text.find("rank 1's MIXPREC_KERNEL_CHOICE is first, rank 0's is "), std::string::npos)
      << text;
}

// The reducer checks its layout before its first collective: another model, or other bucket
// sizes, on one rank is an error on every rank (it was a segfault or MPI_ERR_TRUNCATE).
TEST(JobCheck, TheGradReducerRefusesAnotherModelOrBucketSizeBeforeAnyCollective) {
  ASSERT_GE(testing::ranks(), 2) << "run under mpirun -np 2 or more";
  bool same = false;
  {
    testing::DataParallelScope dp;
    manual_seed(7);
    auto net = nn::make_model(testing::rank() == 1 ? "simplenet" : "lenet");
    const std::string text =
        thrown([&] { nn::DistributedGradReducer r(net->trainable_params()); }, same);
    EXPECT_TRUE(same) << text;
    EXPECT_NE(text.find("rank 1's parameters is "), std::string::npos) << text;
  }
  {
    const bool small = testing::rank() == 1;
    testing::DataParallelScope dp(
        {.bucket_cap_mb = small ? 0.01 : 25.0, .first_bucket_mb = small ? 0.01 : 1.0});
    auto net = nn::make_model("lenet");
    const std::string text =
        thrown([&] { nn::DistributedGradReducer r(net->trainable_params()); }, same);
    EXPECT_TRUE(same) << text;
    EXPECT_NE(text.find("rank 1's bucket_cap_mb is 0.01, rank 0's is 25: every rank must run the "
                        "same job (also "
                        "different: first_bucket_mb, gradient buckets)"),
              std::string::npos)
        << text;
  }
  {
    testing::DataParallelScope dp;  // the same everywhere: it builds, and reduces
    manual_seed(7);
    auto net = nn::make_model("lenet");
    nn::DistributedGradReducer r(net->trainable_params());
    std::vector<Tensor> grads;
    for (const Tensor& p : net->trainable_params()) grads.push_back(ones(p.shape()));
    EXPECT_EQ(r(grads).front().to_vector<float>().front(), 1.0f) << "the mean of ones";
  }
}

}  // namespace
}  // namespace mixprec
