// TextDataset: hand-checkable consecutive windows and the train/validation split, what a folder
// skips (binary files, symbolic links, subfolders, files too short) and why, random windows
// (inside one file, shifted targets, every start reachable, deterministic per seed and epoch,
// exact resume), clear errors, and the real fortunes folder (installed by scripts/setup.sh: the
// test fails, never skips, without it).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <set>

#include "data_test_util.h"
#include "mixprec/data/text.h"

namespace mixprec::dataset {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throws_with;

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// Batch rows as strings: the input bytes, and the target bytes (i32 values back to chars).
std::vector<std::string> inputs(const Batch& b) {
  std::vector<std::string> out;
  const auto v = b.image.to_vector<uint8_t>();
  const int64_t c = b.image.size(1);
  for (int64_t r = 0; r < b.size(); ++r)
    out.emplace_back(v.begin() + r * c, v.begin() + (r + 1) * c);
  return out;
}
std::vector<std::string> targets(const Batch& b) {
  std::vector<std::string> out;
  const auto v = b.label.to_vector<int32_t>();
  const int64_t c = b.label.size(1);
  for (int64_t r = 0; r < b.size(); ++r) {
    std::string s;
    for (int64_t j = 0; j < c; ++j) s += static_cast<char>(v[static_cast<size_t>(r * c + j)]);
    out.push_back(s);
  }
  return out;
}
using Rows = std::vector<std::string>;

TEST(TextDataset, ConsecutiveWindowsAreHandCheckable) {
  TempDir dir;
  write(dir / "a.txt", "abcdefghij");  // train "abcdefghi" (10 - 10 / 10 = 9 bytes), validation "j"
  write(dir / "b.txt", "0123456789012345678");  // train "012345678901234567", validation "8"
  const TextDataset ds(dir.path(), {.context = 4, .random_windows = false});
  // Windows of 5 bytes, stride 4, never across files: a: abcde efghi; b: 01234 45678 89012 23456.
  ASSERT_EQ(ds.num_samples(), 6);
  const Batch b0 = ds.batch(4).get_batch(0, 0), b1 = ds.batch(4).get_batch(0, 1);
  EXPECT_EQ(b0.image.dtype(), DType::u8);
  EXPECT_EQ(b0.label.dtype(), DType::i32);
  EXPECT_EQ(b0.image.shape(), Shape({4, 4}));
  EXPECT_EQ(b0.label.shape(), Shape({4, 4}));
  EXPECT_EQ(inputs(b0), Rows({"abcd", "efgh", "0123", "4567"}));
  EXPECT_EQ(targets(b0), Rows({"bcde", "fghi", "1234", "5678"}));
  EXPECT_EQ(inputs(b1), Rows({"8901", "2345"}));
  EXPECT_EQ(targets(b1), Rows({"9012", "3456"}));
  ASSERT_EQ(ds.files().size(), 2u);
  EXPECT_EQ(ds.files()[1].bytes, 19);
  EXPECT_EQ(ds.files()[1].part_bytes, 18);
}

TEST(TextDataset, ValidationIsTheLastTenthOfEachFileInConsecutiveWindows) {
  TempDir dir;
  write(dir / "a.txt", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn");  // 40 bytes: validation "klmn"
  write(dir / "b.txt", std::string(45, '.') + "vwxyz");              // 50 bytes: validation "vwxyz"
  const TextDataset val(dir.path(), {.usage = "validation", .context = 3});
  EXPECT_FALSE(val.random_windows());
  const Batch b = val.batch(8).get_batch(0, 0);
  EXPECT_EQ(inputs(b), Rows({"klm", "vwx"}));
  EXPECT_EQ(targets(b), Rows({"lmn", "wxy"}));
  // No train window reaches into the validation part.
  const TextDataset train(dir.path(), {.context = 3, .random_windows = false});
  for (const std::string& s : targets(train.batch(100).get_batch(0, 0))) {
    EXPECT_EQ(s.find_first_of("klmnvwxyz"), std::string::npos) << s;
  }
}

TEST(TextDataset, AFolderSkipsBinaryFilesLinksAndSubfoldersAndSaysWhy) {
  TempDir dir;
  write(dir / "a.txt", "Hello, world! This is text.\n");
  write(dir / "a.dat",
        std::string("\x00\x00\x00\x02%\x00", 6));  // a strfile index starts with NULs
  write(dir / "latin1.txt", "caf\xe9 au lait\n");  // é in ISO-8859-1: not UTF-8
  write(dir / "utf8.txt", "caf\xc3\xa9 au lait, na\xc3\xafve\n");  // the same in UTF-8: text
  fs::create_symlink("a.txt", dir / "a.u8");
  fs::create_directory(dir / "off");
  write(dir / "off" / "b.txt", "in a subfolder, not read\n");
  const TextDataset ds(dir.path(), {.context = 8});
  ASSERT_EQ(ds.files().size(), 2u);
  EXPECT_EQ(ds.files()[0].path.filename(), "a.txt");
  EXPECT_EQ(ds.files()[1].path.filename(), "utf8.txt");
  std::map<std::string, std::string> why;
  for (const SkippedFile& s : ds.skipped()) why[s.path.filename().string()] = s.reason;
  EXPECT_EQ(why.size(), 4u);
  EXPECT_EQ(why["a.dat"], "binary: NUL byte at offset 0");
  EXPECT_EQ(why["latin1.txt"], "binary: not UTF-8 at offset 3");
  EXPECT_EQ(why["a.u8"], "symbolic link (links are not followed in a folder)");
  EXPECT_EQ(why["off"], "a folder (subfolders are not read)");
  EXPECT_NE(ds.source().describe().find("2 files"), std::string::npos) << ds.source().describe();
  // A file named directly is read whatever it is called, through a link too.
  EXPECT_EQ(TextDataset(dir / "a.u8", {.context = 8}).files().size(), 1u);
}

TEST(TextDataset, ShortFilesAreSkippedInAFolderAndRefusedAlone) {
  TempDir dir;
  write(dir / "long.txt", std::string(100, 'x'));
  write(dir / "short.txt", "hi\n");
  const TextDataset ds(dir.path(), {.context = 4});
  ASSERT_EQ(ds.files().size(), 1u);
  ASSERT_EQ(ds.skipped().size(), 1u);
  EXPECT_EQ(ds.skipped()[0].reason,
            "too short: its train part holds 3 bytes, a window needs context + 1 = 5");
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "short.txt", {.context = 4}); },
                          {"TextDataset: " + (dir / "short.txt").string(),
                           "too short: its train part holds 3 bytes", "use a smaller context"}));
  // 100 bytes have a validation part of 10: long enough for context 9, not 10.
  EXPECT_NO_THROW(TextDataset(dir / "long.txt", {.usage = "validation", .context = 9}));
  EXPECT_TRUE(
      throws_with([&] { TextDataset(dir / "long.txt", {.usage = "validation", .context = 10}); },
                  {"its validation part holds 10 bytes"}));
}

// content[i] = ' ' + i % 95: a window's bytes tell where it starts.
std::string ramp(int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += static_cast<char>(' ' + i % 95);
  return s;
}

TEST(TextDataset, RandomWindowsStayInOneFileShiftTheTargetsAndReachEveryStart) {
  TempDir dir;
  write(dir / "a.txt", std::string(100, 'a'));  // train part 90 bytes: 90 - 8 = 82 starts
  write(dir / "b.txt", std::string(200, 'b'));  // 180 - 8 = 172 starts
  const TextDataset ds(dir.path(), {.context = 8, .seed = 7, .num_windows = 4000});
  EXPECT_TRUE(ds.random_windows());
  int64_t a = 0;
  for (const Batch& b : ds.batch(500)) {
    const Rows in = inputs(b), out = targets(b);
    for (size_t r = 0; r < in.size(); ++r) {
      ASSERT_TRUE(in[r] == std::string(8, 'a') || in[r] == std::string(8, 'b')) << in[r];
      ASSERT_EQ(out[r], in[r]);
      a += in[r][0] == 'a';
    }
  }
  // Starts are uniform over both files: 82 / 254 of the windows come from a.txt.
  EXPECT_NEAR(static_cast<double>(a) / 4000, 82.0 / 254, 0.03);

  TempDir one;
  write(one / "r.txt", ramp(20));  // train part 18 bytes, context 4: starts 0..13
  const TextDataset r(one.path(), {.context = 4, .seed = 3, .num_windows = 2000});
  std::map<int, int> starts;
  for (const Batch& b : r.batch(1000)) {
    const Rows in = inputs(b), out = targets(b);
    for (size_t k = 0; k < in.size(); ++k) {
      const int s = in[k][0] - ' ';
      ++starts[s];
      for (int j = 0; j < 4; ++j) {
        ASSERT_EQ(in[k][static_cast<size_t>(j)], ' ' + (s + j)) << in[k];
        ASSERT_EQ(out[k][static_cast<size_t>(j)], ' ' + (s + j + 1)) << "target = the next byte";
      }
    }
  }
  ASSERT_EQ(starts.size(), 14u);
  EXPECT_EQ(starts.begin()->first, 0);
  EXPECT_EQ(starts.rbegin()->first, 13);
  for (auto [s, n] : starts) EXPECT_NEAR(n, 2000.0 / 14, 50) << "start " << s;
}

TEST(TextDataset, RandomWindowsAreDeterministicPerSeedAndEpochAndResumeExactly) {
  TempDir dir;
  write(dir / "r.txt", ramp(5000));
  auto first_rows = [&](uint64_t seed, int64_t epoch) {
    return inputs(
        TextDataset(dir.path(), {.context = 16, .seed = seed}).batch(8).get_batch(epoch, 3));
  };
  EXPECT_EQ(first_rows(1, 0), first_rows(1, 0));
  EXPECT_NE(first_rows(1, 0), first_rows(1, 1)) << "each epoch draws new windows";
  EXPECT_NE(first_rows(1, 0), first_rows(2, 0));
  // iterator(e, k) gives batch k of the epoch's sequence, shuffled or not.
  for (bool shuffle : {false, true}) {
    Dataset ds = TextDataset(dir.path(), {.context = 16, .seed = 1}).batch(8);
    if (shuffle) ds = TextDataset(dir.path(), {.context = 16, .seed = 1}).shuffle(5).batch(8);
    std::vector<Rows> all;
    for (const Batch& b : ds.epoch(2)) all.push_back(inputs(b));
    auto it = ds.iterator(2, 5);
    EXPECT_EQ(inputs(*it), all[5]);
    EXPECT_EQ(inputs(ds.get_batch(2, 7)), all[7]);
  }
}

TEST(TextDataset, ClearErrors) {
  TempDir dir;
  EXPECT_TRUE(throws_with(
      [&] { TextDataset(dir / "nope"); },
      {(dir / "nope").string(), "expected a text file or a folder of text files, found nothing",
       "apt-get install fortunes"}));
  EXPECT_TRUE(throws_with([&] { TextDataset(dir.path()); }, {"the folder is empty"}));
  write(dir / "x.dat", std::string("\x00\x01", 2));
  EXPECT_TRUE(throws_with(
      [&] { TextDataset(dir.path()); },
      {"no usable text file (x.dat: binary: NUL byte at offset 0)", "apt-get install fortunes"}));
  EXPECT_TRUE(
      throws_with([&] { TextDataset(dir / "x.dat"); }, {"is not a text file (binary: NUL byte"}));
  fs::create_symlink(dir / "gone.txt", dir / "link.txt");
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "link.txt"); },
                          {"is a symbolic link to", "which does not exist"}));
  write(dir / "t.txt", std::string(50, 't'));
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "t.txt", {.usage = "test"}); },
                          {"expected usage \"train\" or \"validation\""}));
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "t.txt", {.context = 0}); },
                          {"expected a context in [1, 2^24]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        TextDataset(dir / "t.txt", {.context = 4, .random_windows = false, .num_windows = 5});
      },
      {"num_windows applies to random windows"}));
  // Unreadable (no permission; checked without root, which ignores permission bits).
  ::chmod((dir / "t.txt").c_str(), 0);
  testing::expect_error_without_root([&] { TextDataset(dir.path(), {.context = 4}); },
                                     {(dir / "t.txt").string(), "cannot open: Permission denied"},
                                     {});
  ::chmod((dir / "t.txt").c_str(), 0644);
}

// Only regular files are read (a device or FIFO never ends or blocks), up to max_bytes in all,
// each checked as text while it is read, 64 KiB at a time.
TEST(TextDataset, OnlyRegularFilesUpToMaxBytesCheckedAsRead) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { TextDataset("/dev/zero"); },
                          {"/dev/zero: expected a regular text file or a folder of them, found a "
                           "character device"}));
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "fifo"); }, {"found a FIFO (named pipe)"}));
  write(dir / "a.txt", std::string(100, 'a'));
  EXPECT_NO_THROW(TextDataset(dir / "a.txt", {.context = 4, .max_bytes = 100}));
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "a.txt", {.context = 4, .max_bytes = 99}); },
                          {"a.txt: 100 bytes would exceed the limit", "TextOptions::max_bytes"}));
  write(dir / "b.txt", std::string(60, 'b'));  // the folder: 160 bytes in all
  EXPECT_TRUE(throws_with([&] { TextDataset(dir.path(), {.context = 4, .max_bytes = 150}); },
                          {"b.txt: 60 bytes would exceed the limit of the text read in all (50 "
                           "bytes left)"}));
  EXPECT_EQ(TextDataset(dir.path(), {.context = 4, .max_bytes = 160}).files().size(), 2u);
  // A character cut by the 64 KiB read is whole in the next; a bad byte past it is found.
  std::string text(65535, 'x');
  text += "\xc3\xa9 and more";
  write(dir / "straddle.txt", text);
  EXPECT_NO_THROW(TextDataset(dir / "straddle.txt", {.context = 4}));
  write(dir / "late.txt", std::string(70000, 'y') + "\xff" + std::string(10, 'y'));
  EXPECT_TRUE(throws_with([&] { TextDataset(dir / "late.txt", {.context = 4}); },
                          {"is not a text file (binary: not UTF-8 at offset 70000)"}));
}

// The real data, from Debian's fortunes package (scripts/setup.sh installs it).
TEST(TextDataset, FortunesFolder) {
  ASSERT_TRUE(fs::is_directory(kFortunesDir))
      << kFortunesDir << " is missing: run scripts/setup.sh (apt-get install fortunes)";
  const TextDataset train(kFortunesDir);
  const TextDataset val(kFortunesDir, {.usage = "validation"});
  EXPECT_GE(train.files().size(), 40u);
  int64_t total = 0, train_bytes = 0, val_bytes = 0;
  for (const TextFile& f : train.files()) {
    EXPECT_NE(f.path.extension(), ".dat");
    EXPECT_FALSE(fs::is_symlink(f.path));
    EXPECT_EQ(f.part_bytes, f.bytes - f.bytes / 10) << f.path;
    total += f.bytes;
    train_bytes += f.part_bytes;
  }
  int64_t val_total = 0;
  for (const TextFile& f : val.files()) {
    val_bytes += f.part_bytes;
    val_total += f.bytes;
  }
  EXPECT_GT(total, 2'000'000);
  EXPECT_NEAR(static_cast<double>(val_bytes) / static_cast<double>(val_total), 0.1, 1e-4);
  // A file of fewer than 1290 bytes (pratchett: 401) has a validation part too short for a
  // window of 129 bytes: it is skipped there, with the reason, and used for training.
  int64_t short_val = 0;
  for (const SkippedFile& f : val.skipped())
    if (f.reason.rfind("too short: its validation part holds", 0) == 0)
      short_val += fs::file_size(f.path);
  EXPECT_EQ(val_total + short_val, total);
  // Every .dat index is skipped as binary, every .u8 alias as a link.
  int dat = 0, u8 = 0;
  for (const SkippedFile& s : train.skipped()) {
    if (s.path.extension() == ".dat") {
      ++dat;
      EXPECT_EQ(s.reason.rfind("binary: NUL byte", 0), 0u) << s.path;
    }
    if (s.path.extension() == ".u8") {
      ++u8;
      EXPECT_EQ(s.reason.rfind("symbolic link", 0), 0u) << s.path;
    }
  }
  EXPECT_EQ(dat, static_cast<int>(train.files().size()));
  EXPECT_EQ(u8, static_cast<int>(train.files().size()));
  // gpt-tiny's batches: 32 windows of 128 + 1 bytes; an epoch has about train bytes / 128.
  const Batch b = train.batch(32, true).get_batch(0, 0);
  EXPECT_EQ(b.image.shape(), Shape({32, 128}));
  EXPECT_EQ(b.label.shape(), Shape({32, 128}));
  EXPECT_NEAR(static_cast<double>(train.num_samples()), static_cast<double>(train_bytes) / 128, 50);
  EXPECT_FALSE(val.random_windows());
}

}  // namespace
}  // namespace mixprec::dataset
