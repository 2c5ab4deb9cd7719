// The dataset pipeline: MnistDataset over small generated IDX files (raw and gz) and its
// errors; batching with and without drop_remainder; shuffle determinism and exact resume with
// iterator(epoch, k); maps against hand-computed values; prefetch shutdown and exception
// delivery; SyntheticDataset; and the real Fashion-MNIST when it is installed.
#include "mixprec/data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "data_test_util.h"
#include "mixprec/allocator.h"

namespace mixprec::dataset {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throws_with;
using testing::tiny_label;
using testing::tiny_pixel;
using testing::write_tiny_split;

constexpr int64_t kH = 4, kW = 3;

// Every batch of one epoch, copied out.
std::vector<Batch> all_batches(const Dataset& ds, int64_t epoch, int64_t start = 0) {
  std::vector<Batch> out;
  for (const Batch& b : ds.epoch(epoch, start)) out.push_back(b);
  return out;
}

std::vector<int32_t> labels_of(const std::vector<Batch>& batches) {
  std::vector<int32_t> out;
  for (const Batch& b : batches)
    for (int32_t v : b.label.to_vector<int32_t>()) out.push_back(v);
  return out;
}

void expect_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].epoch, b[i].epoch);
    EXPECT_EQ(a[i].image.shape(), b[i].image.shape());
    EXPECT_EQ(a[i].image.to_vector<double>(), b[i].image.to_vector<double>()) << "batch " << i;
    EXPECT_EQ(a[i].label.to_vector<int32_t>(), b[i].label.to_vector<int32_t>()) << "batch " << i;
  }
}

class TinyMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_split(dir.path(), "train", 50, kH, kW, /*gzip=*/true);
    write_tiny_split(dir.path(), "t10k", 12, kH, kW, /*gzip=*/false, /*first_index=*/1000);
  }
  TempDir dir;
};

TEST_F(TinyMnist, ReadsGzAndRawSplitsInFileOrder) {
  const MnistDataset train(dir.path(), {.usage = "train"});
  EXPECT_EQ(train.num_samples(), 50);
  EXPECT_EQ(train.source().sample_shape(), (Shape{1, kH, kW}));
  const Batch b = train.batch(7).get_batch(0, 2);  // samples 14..20
  EXPECT_EQ(b.image.shape(), (Shape{7, 1, kH, kW}));
  EXPECT_EQ(b.image.dtype(), DType::u8);
  EXPECT_EQ(b.label.dtype(), DType::i32);
  for (int64_t k = 0; k < 7; ++k) {
    EXPECT_EQ(b.label.at({k}), tiny_label(14 + k));
    for (int64_t j = 0; j < kH * kW; ++j)
      ASSERT_EQ(b.image.at({k, 0, j / kW, j % kW}), tiny_pixel(14 + k, j));
  }
  const MnistDataset test(dir.path(), {.usage = "test"});
  EXPECT_EQ(test.num_samples(), 12);
  EXPECT_EQ(test.get_batch(0, 0).label.at({0}), tiny_label(1000));
  const MnistDataset all(dir.path(), {.usage = "all"});
  EXPECT_EQ(all.num_samples(), 62);
  const Batch last = all.get_batch(0, 61);  // batch size 1 by default: the last test sample
  EXPECT_EQ(last.label.at({0}), tiny_label(1011));
  EXPECT_EQ(last.image.at({0, 0, 1, 2}), tiny_pixel(1011, 5));
}

// The source names the files it read (raw or .gz, whichever was read), through any pipeline, so
// that a caller's message about image shapes names the file without re-deriving its name.
TEST_F(TinyMnist, SourceNamesTheImageFilesItReadAndTheirSize) {
  const fs::path train_file = dir / "train-images-idx3-ubyte.gz", test_file = dir / "t10k-images-idx3-ubyte";
  const MnistDataset train(dir.path(), {.usage = "train"});
  EXPECT_EQ(train.source().image_files(), std::vector<fs::path>{train_file});
  EXPECT_EQ(train.shuffle(1).batch(5).source().image_files(), std::vector<fs::path>{train_file});
  EXPECT_EQ(train.source().describe_images(), train_file.string() + " holds 4x3 images ([1, 4, 3] per sample)");
  EXPECT_EQ(MnistDataset(dir.path(), {.usage = "test"}).source().image_files(), std::vector<fs::path>{test_file});
  const MnistDataset all(dir.path(), {.usage = "all"});
  EXPECT_EQ(all.source().image_files(), (std::vector<fs::path>{train_file, test_file}));
  EXPECT_EQ(all.source().describe_images(),
            train_file.string() + " and " + test_file.string() + " hold 4x3 images ([1, 4, 3] per sample)");
  const SyntheticDataset synthetic({.num_samples = 4, .image_shape = {1, 5, 6}});
  EXPECT_TRUE(synthetic.source().image_files().empty());
  EXPECT_EQ(synthetic.source().describe_images(), synthetic.source().describe() + " holds 5x6 images ([1, 5, 6] per sample)");
}

TEST(Mnist, UsageAllWithTwoImageSizesNamesBothFiles) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 5, 28, 28, /*gzip=*/false);
  write_tiny_split(dir.path(), "t10k", 5, 27, 29, /*gzip=*/true);
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir.path(), {.usage = "all"}); },
                          {(dir / "train-images-idx3-ubyte").string() + " holds 28x28 images but " +
                               (dir / "t10k-images-idx3-ubyte.gz").string() + " holds 27x29 images",
                           "usage \"all\""}));
}

TEST_F(TinyMnist, NumSamplesTakesTheFirstSamplesAndIsClipped) {
  const MnistDataset some(dir.path(), {.usage = "train", .num_samples = 9});
  EXPECT_EQ(some.num_samples(), 9);
  EXPECT_EQ(labels_of(all_batches(some.batch(4), 0)),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(MnistDataset(dir.path(), {.usage = "test", .num_samples = 1000}).num_samples(), 12);
  EXPECT_TRUE(
      throws_with([&] { MnistDataset(dir.path(), {.num_samples = 0}); }, {"num_samples > 0"}));
}

TEST_F(TinyMnist, BadUsage) {
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir.path(), {.usage = "validation"}); },
                          {"usage", "\"train\", \"test\" or \"all\"", "validation"}));
}

TEST(Mnist, MissingFilesListExpectedNamesAndInstallHint) {
  TempDir dir;
  write_tiny_split(dir.path(), "t10k", 5, kH, kW, false);
  EXPECT_TRUE(throws_with(
      [&] { MnistDataset(dir.path(), {.usage = "train"}); },
      {dir.path().string(), "no train images file",
       "train-images-idx3-ubyte.gz or train-images-idx3-ubyte", "t10k-images-idx3-ubyte",
       "apt-get install dataset-fashion-mnist", "MnistDataset(dir)"}));
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir / "absent"); },
                          {"absent", "expected a directory", "apt-get install"}));
}

// The library speaks in API terms; only the CLI names its flags (--data).
TEST(Mnist, MessagesNameNoCommandLineFlag) {
  TempDir dir;
  try {
    MnistDataset(dir.path(), {.usage = "train"});
    FAIL() << "an empty directory loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("--"), std::string::npos) << what;
    EXPECT_NE(what.find("MnistDataset(dir)"), std::string::npos) << what;
  }
}

TEST_F(TinyMnist, FashionMnistDatasetReadsTheSameFilesUnderItsOwnName) {
  for (const char* usage : {"train", "test", "all"}) {
    const MnistOptions o{.usage = usage};
    expect_same_batches(all_batches(FashionMnistDataset(dir.path(), o).shuffle(3).batch(7), 1),
                        all_batches(MnistDataset(dir.path(), o).shuffle(3).batch(7), 1));
  }
  EXPECT_EQ(FashionMnistDataset(dir.path(), {.usage = "test", .num_samples = 5}).source().describe(),
            "FashionMnistDataset(" + dir.path().string() + ", usage=test, 5 samples)");
  EXPECT_TRUE(throws_with([&] { FashionMnistDataset(dir / "absent"); },
                          {"FashionMnistDataset: ", "absent", "FashionMnistDataset(dir)"}));
  // The default directory is Debian's Fashion-MNIST: loaded when installed, named when not.
  try {
    EXPECT_NE(FashionMnistDataset().source().describe().find(kFashionMnistDir), std::string::npos);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(kFashionMnistDir), std::string::npos) << e.what();
  }
}

TEST(Mnist, ImageAndLabelCountsMustAgree) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 6, kH, kW, true);
  write_idx(dir / "train-labels-idx1-ubyte.gz", {5}, std::vector<uint8_t>(5, 1), true);
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir.path()); },
                          {"train-images-idx3-ubyte.gz holds 6 images",
                           "train-labels-idx1-ubyte.gz holds 5 labels", "expected equal counts"}));
}

TEST(Mnist, LabelsOutOfRangeNameFileIndexAndValue) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 10, kH, kW, false);
  std::vector<uint8_t> labels = {0, 1, 2, 3, 4, 5, 6, 12, 8, 9};
  write_idx(dir / "train-labels-idx1-ubyte", {10}, labels);
  EXPECT_TRUE(
      throws_with([&] { MnistDataset(dir.path()); },
                  {"train-labels-idx1-ubyte", "label[7] = 12", "expected < 10", "num_classes"}));
  EXPECT_EQ(MnistDataset(dir.path(), {.num_classes = 13}).num_samples(), 10);
}

TEST(Mnist, CorruptFileErrorReachesTheUser) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 10, kH, kW, false);
  auto bytes = testing::read_bytes(dir / "train-images-idx3-ubyte");
  bytes.resize(bytes.size() - 5);
  testing::write_bytes(dir / "train-images-idx3-ubyte", bytes);
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir.path()); },
                          {"train-images-idx3-ubyte", "field 'payload'", "truncated"}));
}

TEST_F(TinyMnist, BatchingWithAndWithoutDropRemainder) {
  const MnistDataset ds(dir.path());
  const auto keep = all_batches(ds.batch(16), 0);
  EXPECT_EQ(ds.batch(16).num_batches(), 4);
  ASSERT_EQ(keep.size(), 4u);
  EXPECT_EQ(keep[3].size(), 2);
  EXPECT_EQ(keep[3].image.shape(), (Shape{2, 1, kH, kW}));
  std::vector<int32_t> expected(50);
  for (int i = 0; i < 50; ++i) expected[i] = tiny_label(i);
  EXPECT_EQ(labels_of(keep), expected);  // no shuffle: file order
  const auto drop = all_batches(ds.batch(16, true), 0);
  EXPECT_EQ(ds.batch(16, true).num_batches(), 3);
  ASSERT_EQ(drop.size(), 3u);
  for (const Batch& b : drop) EXPECT_EQ(b.size(), 16);
  EXPECT_EQ(ds.batch(50, true).num_batches(), 1);
  EXPECT_EQ(ds.batch(51, true).num_batches(), 0);
  EXPECT_TRUE(all_batches(ds.batch(51, true), 0).empty());
  EXPECT_EQ(ds.batch(51).num_batches(), 1);
  EXPECT_EQ(ds.batch(16).get_dataset_size(), 4);
  EXPECT_TRUE(throws_with([&] { (void)ds.batch(0); }, {"batch_size > 0"}));
}

TEST(Shuffle, IsAPermutationPerEpochDeterministicAndSeedDependent) {
  const Dataset ds = SyntheticDataset({.num_samples = 1000}).shuffle(42);
  const auto e0 = ds.epoch_order(0), e1 = ds.epoch_order(1);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(e0, identity);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(SyntheticDataset({.num_samples = 1000}).shuffle(42).epoch_order(1), e1);
  EXPECT_NE(ds.shuffle(43).epoch_order(0), e0);
  EXPECT_EQ(SyntheticDataset({.num_samples = 1000}).epoch_order(3), identity);
  // Pinned values: the order is a function of (seed, epoch) alone, the same on every machine.
  const auto small = SyntheticDataset({.num_samples = 10}).shuffle(42).epoch_order(5);
  EXPECT_EQ(small, (std::vector<int64_t>{2, 8, 9, 7, 6, 4, 3, 5, 1, 0}));
}

TEST(Shuffle, BatchesCoverEverySampleOnce) {
  const Dataset ds =
      SyntheticDataset({.num_samples = 103, .image_shape = {2, 3}, .seed = 9}).shuffle(7).batch(10);
  const auto order = ds.epoch_order(2);
  const auto batches = all_batches(ds, 2);
  ASSERT_EQ(batches.size(), 11u);
  const Dataset plain = SyntheticDataset({.num_samples = 103, .image_shape = {2, 3}, .seed = 9});
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int64_t k = 0; k < batches[b].size(); ++k) {
      const Batch one = plain.get_batch(0, order[b * 10 + k]);
      EXPECT_EQ(batches[b].image.slice(0, k, k + 1).to_vector<int>(), one.image.to_vector<int>());
      EXPECT_EQ(batches[b].label.at({k}), one.label.at({0}));
    }
  }
}

TEST(Resume, IteratorAtBatchKEqualsSkippingKBatches) {
  for (int depth : {0, 1, 3}) {
    const Dataset ds = SyntheticDataset({.num_samples = 77, .image_shape = {1, 5, 5}, .seed = 3})
                           .map(transforms::rescale(1.0 / 255, 0))
                           .shuffle(11)
                           .batch(8)
                           .prefetch(depth);
    for (int64_t epoch : {0, 4}) {
      const auto full = all_batches(ds, epoch);
      ASSERT_EQ(full.size(), 10u);
      for (int64_t k : {0, 1, 5, 9, 10}) {
        const auto resumed = all_batches(ds, epoch, k);
        expect_same_batches(resumed, std::vector<Batch>(full.begin() + k, full.end()));
        if (k < 10) expect_same_batches({ds.get_batch(epoch, k)}, {full[k]});
      }
      // A manual loop that stops and resumes from the batch index it kept.
      auto it = ds.iterator(epoch, 0);
      for (int i = 0; i < 3; ++i) ++it;
      EXPECT_EQ(it.position(), 3);
      const int64_t resume_at = it->index;
      it = ds.iterator(epoch, resume_at);
      EXPECT_EQ(it->index, 3);
      EXPECT_EQ(it->label.to_vector<int32_t>(), full[3].label.to_vector<int32_t>());
    }
  }
}

TEST(Iterator, StartBatchAndEpochAreChecked) {
  const Dataset ds = SyntheticDataset({.num_samples = 10}).batch(3);
  EXPECT_TRUE(ds.iterator(0, 4) == std::default_sentinel);
  EXPECT_TRUE(throws_with([&] { ds.iterator(0, 5); }, {"start_batch in [0, 4]", "got 5"}));
  EXPECT_TRUE(throws_with([&] { ds.iterator(-1, 0); }, {"epoch >= 0"}));
  auto it = ds.iterator(0, 3);
  ++it;
  EXPECT_TRUE(throws_with([&] { ++it; }, {"past the last batch"}));
  EXPECT_TRUE(throws_with([&] { (void)*it; }, {"past the last batch"}));
  BatchIterator empty;
  EXPECT_TRUE(empty == std::default_sentinel);
}

TEST(Iterator, RangeForOverTheDatasetIsEpochZero) {
  const Dataset ds = SyntheticDataset({.num_samples = 20}).shuffle(1).batch(6);
  int64_t n = 0, samples = 0;
  for (const Batch& b : ds) {
    EXPECT_EQ(b.epoch, 0);
    EXPECT_EQ(b.index, n++);
    samples += b.size();
  }
  EXPECT_EQ(n, 4);
  EXPECT_EQ(samples, 20);
  static_assert(std::input_iterator<BatchIterator>);
  static_assert(std::sentinel_for<std::default_sentinel_t, BatchIterator>);
}

TEST(Maps, RescaleThenNormalizeByHand) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 5, kH, kW, false);
  const Dataset ds = MnistDataset(dir.path())
                         .map(transforms::rescale(1.0 / 255, 0))
                         .map(transforms::normalize(0.2860, 0.3530))
                         .batch(5);
  const Batch b = ds.get_batch(0, 0);
  EXPECT_EQ(b.image.dtype(), DType::f32);
  EXPECT_EQ(b.label.dtype(), DType::i32);
  const auto v = b.image.to_vector<float>();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < kH * kW; ++j) {
      const float rescaled = static_cast<float>(tiny_pixel(i, j) * (1.0 / 255));
      const double expected = (double(rescaled) - 0.2860) / 0.3530;
      ASSERT_NEAR(v[i * kH * kW + j], expected, 1e-6) << "pixel " << int(tiny_pixel(i, j));
    }
  // Pixel 255 -> 1 -> (1 - 0.286) / 0.353; pixel 0 -> -0.286 / 0.353.
  const Tensor ends =
      transforms::normalize(0.2860, 0.3530)
          .apply(
              transforms::rescale(1.0 / 255, 0).apply(Tensor::from_vector<uint8_t>({0, 255}, {2})));
  EXPECT_FLOAT_EQ(ends.at({0}), static_cast<float>(-0.2860 / 0.3530));
  EXPECT_FLOAT_EQ(ends.at({1}), static_cast<float>((1 - 0.2860) / 0.3530));
}

TEST(Maps, PerChannelNormalizeTypeCastAndLabelMaps) {
  const Dataset base = SyntheticDataset({.num_samples = 4, .image_shape = {3, 2, 2}}).batch(4);
  const Tensor raw = base.get_batch(0, 0).image;
  const std::vector<double> mean = {10, 100, 200}, stdev = {1, 2, 4};
  const Batch b = base.map(transforms::normalize(mean, stdev))
                      .map(transforms::type_cast(DType::i64), "label")
                      .get_batch(0, 0);
  EXPECT_EQ(b.label.dtype(), DType::i64);
  for (int64_t n = 0; n < 4; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 2; ++y)
        for (int64_t x = 0; x < 2; ++x)
          EXPECT_FLOAT_EQ(b.image.at({n, c, y, x}),
                          static_cast<float>((raw.at({n, c, y, x}) - mean[c]) / stdev[c]));
  const Batch f64 =
      base.map(transforms::rescale(2, 1)).map(transforms::type_cast(DType::f64)).get_batch(0, 0);
  EXPECT_EQ(f64.image.dtype(), DType::f64);
  EXPECT_EQ(f64.image.at({1, 2, 1, 0}), raw.at({1, 2, 1, 0}) * 2 + 1);
}

TEST(Maps, BadArgumentsAreRejected) {
  const Dataset ds = SyntheticDataset({.num_samples = 4}).batch(2);
  EXPECT_TRUE(throws_with([&] { transforms::normalize(0.5, 0.0); }, {"normalize", "std", "> 0"}));
  EXPECT_TRUE(throws_with([&] { transforms::normalize({1, 2}, {1}); }, {"as many means as stds"}));
  EXPECT_TRUE(throws_with([&] { (void)ds.map(transforms::rescale(1, 0), "pixels"); },
                          {"input_column", "pixels"}));
  // Channel mismatch is found when a batch is made: on the prefetch thread, rethrown here.
  const Dataset bad = ds.map(transforms::normalize({1, 2, 3}, {1, 1, 1}));
  EXPECT_TRUE(
      throws_with([&] { (void)*bad.iterator(); },
                  {"normalize([1, 2, 3], [1, 1, 1])", "expected 1 or 1 per-channel", "got 3"}));
}

// A transform that fails on the batch whose first pixel is `poison` (batch 3 below).
Transform failing_on(int poison) {
  return {"fail", [poison](const Tensor& x) {
            MIXPREC_CHECK(x.at({0, 0, 0, 0}) != poison, "fail: poisoned batch");
            return x;
          }};
}

TEST(Prefetch, ProducerExceptionIsRethrownInOrder) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 40, kH, kW, false);
  const int poison = tiny_pixel(3 * 5, 0);
  for (int depth : {0, 2}) {
    const Dataset ds = MnistDataset(dir.path()).batch(5).map(failing_on(poison)).prefetch(depth);
    auto it = ds.iterator();
    for (int i = 0; i < 3; ++i, ++it) EXPECT_EQ(it->index, i);
    EXPECT_TRUE(throws_with([&] { (void)*it; }, {"poisoned batch"}));
    EXPECT_TRUE(throws_with([&] { (void)*it; }, {"poisoned batch"}));  // and again
    EXPECT_TRUE(throws_with([&] { ++it; }, {"poisoned batch"}));
  }
}

TEST(Prefetch, EarlyDestructionIsCleanAndFreesEveryBatch) {
  const Dataset ds = SyntheticDataset({.num_samples = 4096, .image_shape = {1, 28, 28}})
                         .map(transforms::rescale(1.0 / 255, 0))
                         .shuffle(5)
                         .batch(32)
                         .prefetch(4);
  const int64_t live_before = memory_stats().live_bytes;
  for (int round = 0; round < 30; ++round) {
    auto it = ds.iterator(round, round % 7);
    for (int i = 0; i < round % 3; ++i) ++it;  // 0, 1 or 2 batches consumed, then destroyed
  }
  {
    auto moved_from = ds.iterator(1, 0);
    BatchIterator moved = std::move(moved_from);
    EXPECT_EQ(moved->index, 0);
    moved = ds.iterator(2, 5);  // move-assign destroys the first producer
    EXPECT_EQ(moved->index, 5);
  }
  EXPECT_EQ(memory_stats().live_bytes, live_before);
}

TEST(Prefetch, SameBatchesWithAndWithoutPrefetch) {
  const Dataset ds = SyntheticDataset({.num_samples = 300, .seed = 8}).shuffle(2).batch(32);
  expect_same_batches(all_batches(ds.prefetch(0), 1), all_batches(ds.prefetch(4), 1));
  EXPECT_TRUE(throws_with([&] { (void)ds.prefetch(-1); }, {"depth in [0, 64]"}));
}

TEST(Synthetic, DeterministicFromSeedWithLabelsInRange) {
  const SyntheticOptions o{
      .num_samples = 500, .image_shape = {1, 7, 9}, .num_classes = 3, .seed = 77};
  const Batch a = SyntheticDataset(o).batch(500).get_batch(0, 0);
  const Batch b = SyntheticDataset(o).batch(500).get_batch(0, 0);
  EXPECT_EQ(a.image.shape(), (Shape{500, 1, 7, 9}));
  EXPECT_EQ(a.image.to_vector<int>(), b.image.to_vector<int>());
  EXPECT_EQ(a.label.to_vector<int32_t>(), b.label.to_vector<int32_t>());
  std::vector<int> hist(3, 0);
  for (int32_t l : a.label.to_vector<int32_t>()) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 3);
    ++hist[l];
  }
  for (int h : hist) EXPECT_GT(h, 120);
  const auto px = a.image.to_vector<double>();
  const double mean = std::accumulate(px.begin(), px.end(), 0.0) / px.size();
  EXPECT_NEAR(mean, 127.5, 2.0);
  SyntheticOptions other = o;
  other.seed = 78;
  EXPECT_NE(SyntheticDataset(other).batch(500).get_batch(0, 0).image.to_vector<int>(),
            a.image.to_vector<int>());
  EXPECT_TRUE(throws_with([] { SyntheticDataset({.num_samples = 0}); }, {"num_samples > 0"}));
  EXPECT_TRUE(throws_with([] { SyntheticDataset({.image_shape = {1, 0}}); }, {"dims > 0"}));
}

// ------------------------------------------------------------------ the real Fashion-MNIST

class FashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::filesystem::path(kFashionMnistDir) /
                                 "train-labels-idx1-ubyte.gz") &&
        !std::filesystem::exists(std::filesystem::path(kFashionMnistDir) /
                                 "train-labels-idx1-ubyte"))
      GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDir
                   << " (apt-get install dataset-fashion-mnist)";
  }
  static const MnistDataset& split(const std::string& usage) {
    static const MnistDataset train(kFashionMnistDir, {.usage = "train"});
    static const MnistDataset test(kFashionMnistDir, {.usage = "test"});
    return usage == "train" ? train : test;
  }
};

TEST_F(FashionMnist, SizesLabelHistogramAndFirstLabels) {
  for (const std::string usage : {"train", "test"}) {
    const Dataset ds = split(usage).batch(10000);
    const int64_t n = usage == "train" ? 60000 : 10000;
    EXPECT_EQ(ds.num_samples(), n);
    EXPECT_EQ(ds.source().sample_shape(), (Shape{1, 28, 28}));
    std::vector<int64_t> hist(10, 0);
    for (const Batch& b : ds)
      for (int32_t l : b.label.to_vector<int32_t>()) ++hist[l];
    EXPECT_EQ(hist, std::vector<int64_t>(10, n / 10)) << usage;
    EXPECT_EQ(ds.get_batch(0, 0).label.at({0}), 9) << usage;
  }
  EXPECT_EQ(kFashionMnistClasses[9], "Ankle boot");
}

TEST_F(FashionMnist, NormalizeConstantsMatchTheTrainingSet) {
  double sum = 0, sum_sq = 0, count = 0;
  for (const Batch& b : split("train").batch(6000)) {
    const uint8_t* px = b.image.data<uint8_t>();
    const int64_t n = b.image.numel();
    int64_t s = 0, s2 = 0;  // exact integer sums per batch
    for (int64_t i = 0; i < n; ++i) {
      s += px[i];
      s2 += px[i] * px[i];
    }
    sum += static_cast<double>(s);
    sum_sq += static_cast<double>(s2);
    count += static_cast<double>(n);
  }
  const double mean = sum / count / 255;
  EXPECT_NEAR(mean, 0.2860, 5e-4);
  EXPECT_NEAR(std::sqrt(sum_sq / count / (255.0 * 255) - mean * mean), 0.3530, 5e-4);
}

TEST_F(FashionMnist, SeedPipelineOverTheTestSplit) {
  const Dataset ds = split("test")
                         .map(transforms::rescale(1.0 / 255, 0))
                         .map(transforms::normalize(0.2860, 0.3530))
                         .shuffle(1)
                         .batch(64, true);
  EXPECT_EQ(ds.num_batches(), 156);
  int64_t batches = 0;
  for (const Batch& b : ds.epoch(1)) {
    ASSERT_EQ(b.image.shape(), (Shape{64, 1, 28, 28}));
    ASSERT_EQ(b.image.dtype(), DType::f32);
    ++batches;
  }
  EXPECT_EQ(batches, 156);
}

}  // namespace
}  // namespace mixprec::dataset
