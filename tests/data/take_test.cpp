// Dataset::take(n) as MindSpore defines it: rows before batch(), batches after it; before
// shuffle() the same first rows every epoch (permuted), after shuffle() the first rows of each
// epoch's permutation; -1 takes all; the counts, the rows themselves (decoded from the tiny
// split's pixel pattern) and the calls it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data_test_util.h"
#include "mixprec/data/dataset.h"

namespace mixprec::dataset {
namespace {

using testing::TempDir;
using testing::rows_of;
using testing::throws_with;
using testing::tiny_pixel;
using testing::write_tiny_split;

constexpr int64_t kRows = 50;

class Take : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_split(dir.path(), "train", kRows, 2, 2, /*gzip=*/false); }
  Dataset data() const { return MnistDataset(dir.path(), {.usage = "train"}); }
  TempDir dir;
};

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

TEST_F(Take, BeforeBatchCountsRowsAfterBatchCountsBatches) {
  const Dataset rows = data().take(10).batch(4);
  EXPECT_EQ(rows.num_samples(), 10);
  EXPECT_EQ(rows.num_batches(), 3);
  EXPECT_EQ(rows.get_dataset_size(), 3);
  EXPECT_EQ(rows_of(rows, 0), iota(10));
  EXPECT_EQ(rows.get_batch(0, 2).size(), 2) << "the last of 10 rows in batches of 4";

  const Dataset batches = data().batch(4).take(3);
  EXPECT_EQ(batches.num_batches(), 3);
  EXPECT_EQ(batches.num_samples(), 12);
  EXPECT_EQ(rows_of(batches, 0), iota(12));
  // Maps and the place of map() do not matter; drop_remainder counts full batches only.
  EXPECT_EQ(data().batch(4, true).take(100).num_batches(), 12);
  EXPECT_EQ(data().batch(4, true).take(5).map(transforms::rescale(2.0, 0)).num_batches(), 5);
}

TEST_F(Take, BeforeShuffleKeepsTheSameRowsAfterShuffleDrawsNewOnes) {
  const Dataset before = data().take(10).shuffle(7).batch(3);
  const Dataset after = data().shuffle(7).take(10).batch(3);
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<int64_t> b = rows_of(before, e);
    ASSERT_EQ(b.size(), 10u);
    EXPECT_NE(b, iota(10)) << "epoch " << e << " is shuffled";
    std::sort(b.begin(), b.end());
    EXPECT_EQ(b, iota(10)) << "take before shuffle: rows 0..9 in every epoch";

    // After shuffle: the first 10 rows of the epoch's permutation of all 50.
    const std::vector<int64_t> full = rows_of(data().shuffle(7).batch(3), e);
    EXPECT_EQ(rows_of(after, e), std::vector<int64_t>(full.begin(), full.begin() + 10)) << "epoch " << e;
  }
  std::vector<int64_t> e0 = rows_of(after, 0), e1 = rows_of(after, 1);
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_NE(e0, e1) << "each epoch draws its own 10 rows";
}

TEST_F(Take, AllOrMoreTakesEverythingAndBadCountsAreRefused) {
  EXPECT_EQ(rows_of(data().take(-1).batch(8), 0), iota(kRows));
  EXPECT_EQ(rows_of(data().take(1000).batch(8), 0), iota(kRows));
  EXPECT_EQ(data().batch(8).take(1000).num_batches(), 7);
  EXPECT_EQ(data().take(20).take(5).take(30).num_samples(), 5) << "the smallest take wins";
  for (int64_t bad : {0, -2}) {
    EXPECT_TRUE(throws_with([&] { (void)data().take(bad); }, {"Dataset::take", "count > 0", std::to_string(bad)}));
  }
  EXPECT_TRUE(throws_with([&] { (void)data().batch(4).take(2).batch(8); }, {"Dataset::batch", "take(2)"}));
  EXPECT_TRUE(throws_with([&] { (void)data().shuffle(1).take(5).shuffle(2); }, {"Dataset::shuffle", "take(5)"}));
}

TEST_F(Take, ResumeInvariantHoldsForATakenDataset) {
  const Dataset ds = data().shuffle(5).take(23).batch(4);
  ASSERT_EQ(ds.num_batches(), 6);
  const std::vector<int64_t> whole = rows_of(ds, 2);
  ASSERT_EQ(whole.size(), 23u);
  EXPECT_EQ(rows_of(ds, 2, 3), std::vector<int64_t>(whole.begin() + 12, whole.end()));
  EXPECT_EQ(rows_of(ds.prefetch(0), 2, 5), std::vector<int64_t>(whole.begin() + 20, whole.end()));
}

}  // namespace
}  // namespace mixprec::dataset
