// ArraySource / array_dataset: samples held in memory in any dtype and shape (the C++ side of
// NumpySlicesDataset and GeneratorDataset): rows come out as stored, in batches with an odd last
// one, shuffled and sharded like every source; maps address the source's column names; the
// constructor refuses columns of different lengths, scalars and duplicate names.
#include <gtest/gtest.h>

#include <set>

#include "mixprec/data/dataset.h"
#include "mixprec/error.h"

namespace mixprec::dataset {
namespace {

Tensor features(int64_t n) {  // row i: {i, i + 0.5, i + 0.25}
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i)
    for (float d : {0.0f, 0.5f, 0.25f}) v.push_back(static_cast<float>(i) + d);
  return Tensor::from_vector(v, {n, 3});
}

Tensor targets(int64_t n) {  // i64 labels 10 * i
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(10 * i);
  return Tensor::from_vector(v, {n});
}

TEST(ArraySource, BatchesKeepDtypesShapesAndValuesWithAnOddLastBatch) {
  const Dataset ds = array_dataset(features(7), targets(7)).batch(3);
  EXPECT_EQ(ds.num_batches(), 3);
  std::vector<int64_t> sizes;
  int64_t row = 0;
  for (const Batch& b : ds) {
    sizes.push_back(b.size());
    EXPECT_EQ(b.image.dtype(), DType::f32);
    EXPECT_EQ(b.label.dtype(), DType::i64);
    ASSERT_EQ(b.image.shape(), (Shape{b.size(), 3}));
    const auto x = b.image.to_vector<double>();
    const auto y = b.label.to_vector<double>();
    for (int64_t i = 0; i < b.size(); ++i, ++row) {
      EXPECT_EQ(x[static_cast<size_t>(i * 3 + 1)], static_cast<double>(row) + 0.5);
      EXPECT_EQ(y[static_cast<size_t>(i)], 10.0 * static_cast<double>(row));
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(array_dataset(features(7), targets(7)).batch(3, true).num_batches(), 2);
}

TEST(ArraySource, ShuffledAndShardedLikeEverySource) {
  const Dataset ds = array_dataset(features(11), targets(11)).shuffle(3);
  std::multiset<double> seen;
  for (const Batch& b : ds.batch(4))
    for (double y : b.label.to_vector<double>()) seen.insert(y);
  EXPECT_EQ(seen.size(), 11u);
  EXPECT_NE(ds.epoch_order(0), ds.epoch_order(1));
  std::set<double> shards;
  for (int64_t k = 0; k < 3; ++k) {
    int64_t n = 0;
    for (const Batch& b : ds.shard(3, k).batch(2))
      for (double y : b.label.to_vector<double>()) {
        shards.insert(y);
        ++n;
      }
    EXPECT_EQ(n, 3);  // floor(11 / 3)
  }
  EXPECT_EQ(shards.size(), 9u);  // disjoint
}

TEST(ArraySource, MapsAddressTheSourcesColumnNames) {
  const Dataset ds = array_dataset(features(4), targets(4), {"x", "y"})
                         .map(transforms::type_cast(DType::f16), "x")
                         .map(transforms::type_cast(DType::i32), "y")
                         .batch(4);
  const Batch b = ds.get_batch(0, 0);
  EXPECT_EQ(b.image.dtype(), DType::f16);
  EXPECT_EQ(b.label.dtype(), DType::i32);
  EXPECT_EQ(ds.source().column_names()[0], "x");
  EXPECT_THROW(ds.map(transforms::type_cast(DType::f16), "z"), Error);
  EXPECT_NE(ds.source().describe().find("4 samples"), std::string::npos) << ds.source().describe();
}

TEST(ArraySource, RefusesMismatchedColumns) {
  try {
    array_dataset(features(6), targets(5));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("column 'data' has 6 samples and column 'label' has 5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(array_dataset(Tensor::from_vector<float>({1.0f}, {}), targets(1)), Error);
  EXPECT_THROW(array_dataset(features(2), targets(2), {"a", "a"}), Error);
}

TEST(ArraySource, TheSourceOwnsACopy) {
  Tensor x = features(2);
  const Dataset ds = array_dataset(x, targets(2)).batch(2);
  x.fill_(-1.0);
  EXPECT_EQ(ds.get_batch(0, 0).image.to_vector<double>()[1], 0.5);
}

}  // namespace
}  // namespace mixprec::dataset
