// IDX reader: raw and gzip round trips (our zlib writer and an independent stored-block gzip
// encoder, multi-member streams), every malformed case giving an Error that names the file and
// the field, and a mutation/truncation sweep that must only ever produce mixprec::Error.
#include "mixprec/data/idx.h"

#include <gtest/gtest.h>

#include <random>

#include "data_test_util.h"

namespace mixprec::dataset {
namespace {

using testing::gzip_stored;
using testing::idx_bytes;
using testing::TempDir;
using testing::throws_with;
using testing::write_bytes;

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) v[i] = i % 3 == 0 ? static_cast<uint8_t>(rng()) : uint8_t(i / 7);
  return v;
}

TEST(Idx, RoundTripRawAndGzip) {
  TempDir dir;
  const auto data = pattern(5 * 6 * 7, 1);
  for (bool gz : {false, true}) {
    const auto path = dir / (gz ? "a-idx3-ubyte.gz" : "a-idx3-ubyte");
    write_idx(path, {5, 6, 7}, data, gz);
    const auto bytes = testing::read_bytes(path);
    ASSERT_GE(bytes.size(), 2u);
    EXPECT_EQ(bytes[0] == 0x1f && bytes[1] == 0x8b, gz);
    const IdxArray a = read_idx(path, 3);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 6, 7}));
    EXPECT_EQ(a.data, data);
  }
}

TEST(Idx, LargeGzipWithRealCompressionRoundTrips) {
  TempDir dir;
  const auto data = pattern(3'000'017, 2);  // several inflate chunks and buffer growth steps
  write_idx(dir / "big.gz", {int64_t(data.size())}, data, true);
  const IdxArray a = read_idx(dir / "big.gz", 1);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{int64_t(data.size())}));
  EXPECT_EQ(a.data, data);
}

TEST(Idx, IndependentGzipEncodingAndMultipleMembers) {
  const auto payload = pattern(2 * 40 * 30, 3);
  const auto file = idx_bytes(0x00000803, {2, 40, 30}, payload);
  IdxArray one = parse_idx(gzip_stored(file), "one.gz", 3);
  EXPECT_EQ(one.dims, (std::vector<int64_t>{2, 40, 30}));
  EXPECT_EQ(one.data, payload);
  // The same bytes split over two concatenated gzip members (what `cat a.gz b.gz` makes).
  const size_t cut = 1001;
  auto two = gzip_stored(std::span(file).first(cut));
  const auto rest = gzip_stored(std::span(file).subspan(cut));
  two.insert(two.end(), rest.begin(), rest.end());
  EXPECT_EQ(parse_idx(two, "two.gz", 3).data, payload);
}

TEST(Idx, GzipIsRecognisedByContentNotName) {
  TempDir dir;
  const std::vector<uint8_t> labels = {3, 1, 4, 1, 5};
  write_idx(dir / "raw-but-named.gz", {5}, labels, false);
  write_idx(dir / "gzip-but-named-raw", {5}, labels, true);
  EXPECT_EQ(read_idx(dir / "raw-but-named.gz", 1).data, labels);
  EXPECT_EQ(read_idx(dir / "gzip-but-named-raw", 1).data, labels);
}

TEST(Idx, MissingFileAndDirectory) {
  TempDir dir;
  const auto missing = (dir / "nope-idx1-ubyte").string();
  EXPECT_TRUE(throws_with([&] { read_idx(missing, 1); }, {missing, "file not found"}));
  EXPECT_TRUE(throws_with([&] { read_idx(dir.path(), 1); },
                          {dir.path().string(), "expected a regular file"}));
}

// Writes `bytes` raw to a file and checks that read_idx's error names it and holds `parts`.
::testing::AssertionResult file_fails(const std::vector<uint8_t>& bytes, int ndim,
                                      std::vector<std::string> parts, bool gzip = false,
                                      uint64_t max_payload = kIdxMaxPayloadBytes) {
  TempDir dir;
  const auto path = dir / (gzip ? "case-ubyte.gz" : "case-ubyte");
  write_bytes(path, gzip ? gzip_stored(bytes) : bytes);
  parts.push_back(path.string());
  return throws_with([&] { read_idx(path, ndim, max_payload); }, parts);
}

TEST(Idx, WrongMagicNamesFileFieldExpectedAndFound) {
  for (bool gz : {false, true}) {
    EXPECT_TRUE(file_fails({'P', 'K', 3, 4, 0, 0, 0, 1, 9}, 3,
                           {"field 'magic'", "expected 0x00000803", "found 0x504B0304"}, gz));
    EXPECT_TRUE(file_fails({'P', 'K', 3, 4, 0, 0, 0, 1, 9}, 1,
                           {"field 'magic'", "expected 0x00000801"}, gz));
  }
  const std::string html = "<!DOCTYPE html><html>404</html>";
  EXPECT_TRUE(file_fails({html.begin(), html.end()}, 3, {"field 'magic'", "HTML page"}));
}

TEST(Idx, UnsupportedElementType) {
  const auto f32_file = idx_bytes(0x00000D03, {1, 2, 2}, std::vector<uint8_t>(16, 0));
  EXPECT_TRUE(file_fails(
      f32_file, 3,
      {"field 'element type'", "expected 0x08 (unsigned byte)", "found 0x0D", "float32"}));
  EXPECT_TRUE(file_fails(idx_bytes(0x00004201, {1}, {0}), 1, {"element type", "found 0x42"}));
}

TEST(Idx, WrongNumberOfDims) {
  const auto labels = idx_bytes(0x00000801, {4}, {1, 2, 3, 4});
  EXPECT_TRUE(file_fails(labels, 3,
                         {"field 'number of dims'", "expected 3, found 1",
                          "0x00000801 vs expected 0x00000803", "labels file"}));
  const auto images = idx_bytes(0x00000803, {1, 1, 1}, {7});
  EXPECT_TRUE(file_fails(images, 1,
                         {"field 'number of dims'", "expected 1, found 3", "images file"}, true));
  EXPECT_TRUE(file_fails(idx_bytes(0x000008FF, {}, {}), 3, {"expected 3, found 255"}));
}

TEST(Idx, ZeroAndHugeDims) {
  EXPECT_TRUE(file_fails(idx_bytes(0x00000803, {0, 28, 28}, {}), 3,
                         {"field 'dim[0]'", "expected > 0, found 0"}));
  EXPECT_TRUE(file_fails(idx_bytes(0x00000803, {10, 28, 0}, {}), 3, {"field 'dim[2]'"}, true));
  EXPECT_TRUE(
      file_fails(idx_bytes(0x00000803, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}), 3,
                 {"field 'dims'", "4294967295 x 4294967295 x 4294967295", "more than 2^64"}));
  EXPECT_TRUE(file_fails(
      idx_bytes(0x00000803, {100000, 1000, 1000}, {}), 3,
      {"field 'dims'", "at most 2147483648 bytes", "100000 x 1000 x 1000 = 100000000000 bytes"},
      true));
  // The limit is a parameter; a small one turns down a small file.
  EXPECT_TRUE(file_fails(idx_bytes(0x00000801, {100}, std::vector<uint8_t>(100)), 1,
                         {"field 'dims'", "at most 99 bytes"}, false, 99));
}

TEST(Idx, TruncatedHeader) {
  EXPECT_TRUE(file_fails({}, 3, {"field 'header'", "found 0"}));
  EXPECT_TRUE(file_fails({0, 0, 8}, 3, {"field 'header'", "found 3"}, true));
  const auto cut = idx_bytes(0x00000803, {60000, 28, 28}, {});
  EXPECT_TRUE(file_fails({cut.begin(), cut.begin() + 10}, 3,
                         {"field 'header'", "expected 16 header bytes", "found only 10"}));
}

TEST(Idx, DeclaredSizeLargerThanData) {
  const auto file = idx_bytes(0x00000803, {2, 3, 3}, std::vector<uint8_t>(10, 1));
  for (bool gz : {false, true})
    EXPECT_TRUE(file_fails(
        file, 3, {"field 'payload'", "declares 18 bytes (2 x 3 x 3)", "found only 10", "truncated"},
        gz));
  // A tiny gzip that declares 60000 images must fail without allocating 47 MB up front.
  EXPECT_TRUE(file_fails(idx_bytes(0x00000803, {60000, 28, 28}, {1, 2, 3}), 3,
                         {"declares 47040000 bytes", "found only 3"}, true));
}

TEST(Idx, TrailingDataIsAnError) {
  const auto file = idx_bytes(0x00000801, {4}, {1, 2, 3, 4, 5, 6, 7});
  EXPECT_TRUE(file_fails(
      file, 1, {"field 'payload'", "declares 4 bytes", "found 7", "3 bytes of trailing data"}));
  EXPECT_TRUE(file_fails(
      file, 1, {"field 'payload'", "found 3 more", "trailing data after decompression"}, true));
}

TEST(Idx, TrailingGarbageAfterGzipStream) {
  auto gz = gzip_stored(idx_bytes(0x00000801, {3}, {1, 2, 3}));
  gz.insert(gz.end(), {'j', 'u', 'n', 'k'});
  EXPECT_TRUE(throws_with([&] { parse_idx(gz, "g.gz", 1); },
                          {"g.gz", "gzip stream", "4 bytes of trailing garbage"}));
}

TEST(Idx, TruncatedGzipStream) {
  TempDir dir;
  const auto data = pattern(20000, 4);
  write_idx(dir / "full.gz", {20000}, data, true);
  const auto bytes = testing::read_bytes(dir / "full.gz");
  for (size_t keep : {size_t{12}, bytes.size() / 2, bytes.size() - 4}) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + keep);
    EXPECT_TRUE(
        throws_with([&] { parse_idx(cut, "cut.gz", 1); }, {"cut.gz", "gzip stream: truncated"}))
        << "kept " << keep << " of " << bytes.size();
  }
}

TEST(Idx, CorruptGzipStream) {
  TempDir dir;
  write_idx(dir / "ok.gz", {20000}, pattern(20000, 5), true);
  const auto bytes = testing::read_bytes(dir / "ok.gz");
  auto bad_crc = bytes;
  bad_crc[bytes.size() - 6] ^= 0x55;  // inside the CRC-32 of the trailer
  EXPECT_TRUE(throws_with([&] { parse_idx(bad_crc, "crc.gz", 1); },
                          {"crc.gz", "gzip stream: corrupt", "incorrect data check"}));
  auto bad_block = bytes;
  bad_block[10] = 0xFF;  // the first deflate block header: BTYPE = 11 (reserved)
  EXPECT_TRUE(throws_with([&] { parse_idx(bad_block, "blk.gz", 1); },
                          {"blk.gz", "gzip stream: corrupt", "invalid block type"}));
  auto bad_header = bytes;
  bad_header[2] = 7;  // compression method other than deflate
  EXPECT_TRUE(
      throws_with([&] { parse_idx(bad_header, "hdr.gz", 1); }, {"hdr.gz", "gzip stream: corrupt"}));
}

// Hostile input sweep: every truncation and many random byte mutations of valid raw and gzip
// files must either parse or throw mixprec::Error (AddressSanitizer checks the bounds).
TEST(Idx, MutationsAndTruncationsOnlyEverThrowMixprecErrors) {
  TempDir dir;
  const auto payload = pattern(3 * 5 * 4, 6);
  const auto raw = idx_bytes(0x00000803, {3, 5, 4}, payload);
  write_idx(dir / "m.gz", {3, 5, 4}, payload, true);
  const auto gz = testing::read_bytes(dir / "m.gz");
  std::mt19937 rng(7);
  int parsed = 0, rejected = 0;
  auto attempt = [&](const std::vector<uint8_t>& bytes) {
    try {
      const IdxArray a = parse_idx(bytes, "fuzz", 3);
      ASSERT_EQ(a.data.size(), size_t(a.dims[0] * a.dims[1] * a.dims[2]));
      ++parsed;
    } catch (const mixprec::Error& e) {
      ASSERT_NE(std::string(e.what()).find("fuzz"), std::string::npos) << e.what();
      ++rejected;
    }
  };
  for (const auto* base : {&raw, &gz}) {
    for (size_t n = 0; n < base->size(); ++n) attempt({base->begin(), base->begin() + n});
    for (int trial = 0; trial < 1500; ++trial) {
      auto m = *base;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<uint8_t>(rng());
      attempt(m);
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(parsed, 0);  // mutations inside the raw payload still parse
}

TEST(Idx, WriteIdxRejectsInconsistentDims) {
  TempDir dir;
  const std::vector<uint8_t> six(6, 1);
  EXPECT_TRUE(throws_with([&] { write_idx(dir / "x", {2, 4}, six); }, {"need 8 bytes, got 6"}));
  EXPECT_TRUE(throws_with([&] { write_idx(dir / "x", {2, 0}, six); }, {"expected dims in"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
}

}  // namespace
}  // namespace mixprec::dataset
