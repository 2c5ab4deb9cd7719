// Dataset paths that exist but cannot be used are reported as what they are: a dangling symbolic
// link (named with its target), a directory the process may not read or search (the OS error),
// a path under a regular file. Permission cases run in a child process that drops root (root
// ignores permission bits), so they run as root (CI) and as a normal user alike.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "data_test_util.h"
#include "mixprec/data/dataset.h"

namespace mixprec::dataset {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::throws_with;
using testing::write_tiny_split;
using testing::expect_error_without_root;

TEST(DatasetPaths, DanglingFileLinkIsNamedWithItsTarget) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 5, 2, 2, /*gzip=*/false);
  const fs::path link = dir / "train-images-idx3-ubyte";
  fs::remove(link);
  fs::create_symlink("/nonexistent/fashion/train-images-idx3-ubyte", link);
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir.path()); },
                          {"MnistDataset: train images file " + link.string(),
                           "is a symbolic link to /nonexistent/fashion/train-images-idx3-ubyte",
                           "which does not exist"}));
  try {
    MnistDataset(dir.path());
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("no train images file"), std::string::npos) << e.what();
  }
  // read_idx on the link itself says the same.
  EXPECT_TRUE(throws_with([&] { read_idx(link, 3); }, {link.string(), "is a symbolic link to", "does not exist"}));
}

TEST(DatasetPaths, DanglingDirectoryLinkAndPathUnderAFile) {
  TempDir dir;
  fs::create_symlink(dir / "gone", dir / "data");
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir / "data"); },
                          {(dir / "data").string(), "expected a directory",
                           "a path that is a symbolic link to " + (dir / "gone").string(), "does not exist"}));
  std::ofstream(dir / "plain") << "x";
  EXPECT_TRUE(throws_with([&] { MnistDataset(dir / "plain" / "sub"); },
                          {"expected a directory", "cannot exist: " + (dir / "plain").string() +
                                                       " is a file, not a directory"}));
}

TEST(DatasetPaths, UnreadableDirectoryGivesTheOsErrorNotEmpty) {
  TempDir dir;
  const fs::path data = dir / "data";
  fs::create_directory(data);
  write_tiny_split(data, "train", 5, 2, 2, /*gzip=*/false);
  // No permissions at all: the files cannot even be looked up.
  ::chmod(data.c_str(), 0);
  expect_error_without_root([&] { MnistDataset(data, {.usage = "train"}); },
                            {"train images file " + (data / "train-images-idx3-ubyte").string(),
                             "cannot be examined: Permission denied"},
                            {"the directory is empty", "no train images file"});
  // Searchable but not readable, and the files are absent: the listing fails, and says why.
  fs::remove(data / "train-images-idx3-ubyte");
  fs::remove(data / "train-labels-idx1-ubyte");
  ::chmod(data.c_str(), 0311);
  expect_error_without_root([&] { MnistDataset(data, {.usage = "train"}); },
                            {"no train images file", "the directory cannot be listed: Permission denied"},
                            {"the directory is empty"});
  ::chmod(data.c_str(), 0755);
}

TEST(DatasetPaths, UnreadableFileGivesTheOsError) {
  TempDir dir;
  write_tiny_split(dir.path(), "train", 5, 2, 2, /*gzip=*/false);
  ::chmod((dir / "train-labels-idx1-ubyte").c_str(), 0);
  expect_error_without_root([&] { MnistDataset(dir.path(), {.usage = "train"}); },
                            {"train-labels-idx1-ubyte", "cannot open: Permission denied"}, {"not found"});
}

}  // namespace
}  // namespace mixprec::dataset
