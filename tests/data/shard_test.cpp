// Dataset::shard / MnistDataset {.num_shards, .shard_id}: the shards of one epoch are disjoint,
// drawn from the permutation every rank computes alike, equal in size (the last rows mod n sit
// that epoch out), so every rank has the same batches; together, batch b of the n shards holds
// exactly the rows of batch b of the unsharded data at n times the batch; and the checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data_test_util.h"
#include "mixprec/data/dataset.h"

namespace mixprec::dataset {
namespace {

using testing::rows_of;
using testing::TempDir;
using testing::throws_with;
using testing::write_tiny_split;

constexpr int64_t kRows = 103;  // not a multiple of the shard counts below

class Shard : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_split(dir.path(), "train", kRows, 2, 2, /*gzip=*/false); }
  Dataset shard(int64_t n, int64_t k) const {
    return MnistDataset(dir.path(), {.usage = "train", .num_shards = n, .shard_id = k});
  }
  TempDir dir;
};

TEST_F(Shard, ShardsAreDisjointEqualAndTogetherAreTheGlobalBatches) {
  for (int64_t n : {2, 3, 4}) {
    const Dataset whole = MnistDataset(dir.path()).shuffle(9).batch(8 * n, true);
    for (int64_t e = 0; e < 3; ++e) {
      std::vector<std::vector<int64_t>> shards;
      for (int64_t k = 0; k < n; ++k) {
        const Dataset ds = shard(n, k).shuffle(9).batch(8, true);
        EXPECT_EQ(ds.num_samples(), kRows / n) << n << " shards: floor(rows / n) each (rows, as unsharded)";
        EXPECT_EQ(ds.num_batches(), whole.num_batches()) << "every rank has the global step count";
        shards.push_back(rows_of(ds, e));
      }
      std::set<int64_t> seen;
      for (const auto& s : shards)
        for (int64_t r : s) EXPECT_TRUE(seen.insert(r).second) << "row " << r << " in two shards, epoch " << e;
      const std::vector<int64_t> global = rows_of(whole, e);
      for (int64_t b = 0; b < whole.num_batches(); ++b) {
        std::vector<int64_t> together, expect(global.begin() + b * 8 * n, global.begin() + (b + 1) * 8 * n);
        for (const auto& s : shards) together.insert(together.end(), s.begin() + b * 8, s.begin() + (b + 1) * 8);
        std::sort(together.begin(), together.end());
        std::sort(expect.begin(), expect.end());
        EXPECT_EQ(together, expect) << n << " shards, epoch " << e << ", batch " << b;
      }
    }
  }
}

TEST_F(Shard, EachEpochLeavesOutDifferentRowsAndTheResumeInvariantHolds) {
  const Dataset ds = shard(4, 1).shuffle(3).batch(5);  // 103 / 4 = 25 rows: 5 batches of 5
  EXPECT_EQ(ds.num_batches(), 5);
  EXPECT_EQ(rows_of(ds, 0).size(), 25u);
  EXPECT_NE(rows_of(ds, 0), rows_of(ds, 1)) << "the shared permutation changes each epoch";
  const std::vector<int64_t> whole = rows_of(ds, 2);
  EXPECT_EQ(rows_of(ds, 2, 3), std::vector<int64_t>(whole.begin() + 15, whole.end()));
  // Without shuffle: rows k, k + n, ... in file order.
  EXPECT_EQ(rows_of(shard(4, 1).batch(100), 0).front(), 1);
  EXPECT_EQ(rows_of(shard(4, 1).batch(100), 0)[1], 5);
}

TEST_F(Shard, BadShardsAreRefused) {
  EXPECT_TRUE(throws_with([&] { (void)shard(2, 2); }, {"Dataset::shard", "shard_id < num_shards", "shard_id 2"}));
  EXPECT_TRUE(throws_with([&] { (void)shard(0, 0); }, {"Dataset::shard", "num_shards >= 1"}));
  EXPECT_TRUE(throws_with([&] { (void)shard(2, 0).shard(2, 1); }, {"Dataset::shard", "already shard 0 of 2"}));
  EXPECT_TRUE(throws_with([&] { (void)MnistDataset(dir.path()).batch(4).take(2).shard(2, 0); },
                          {"Dataset::shard", "take(2)"}));
}

}  // namespace
}  // namespace mixprec::dataset
