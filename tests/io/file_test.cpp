// io::write_file_atomic and the cleanup of temporaries: every failure (no directory, a parent
// that is a file, a file-size limit, a full tmpfs, a directory in the way) throws naming the
// path and the OS reason, keeps the previous file and leaves no temporary; a writer killed
// mid-save (kill -9 at the failpoint) leaves the previous file intact and a temporary that the
// next save or read removes, while a live writer's stays.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "mixprec/mixprec.h"
#include "test_util.h"

namespace mixprec {
namespace {

namespace fs = std::filesystem;

// A fresh, empty directory per test.
fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mixprec_file_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

void touch(const fs::path& p, const std::string& text = "partial") { std::ofstream(p) << text; }

// Runs write_file_atomic and returns the error's text.
std::string write_error(const fs::path& p, std::string_view contents) {
  return testing::error_text([&] { io::write_file_atomic(p, contents); });
}

TEST(WriteFileAtomic, ReplacesTheWholeFileFromPiecesAndLeavesOnlyIt) {
  const fs::path dir = fresh_dir("replace");
  const fs::path p = dir / "report.json";
  io::write_file_atomic(p, "old contents, longer than the new");
  const std::string_view pieces[] = {"{\"a\": ", std::string_view("\0\x01", 2), "}"};
  io::write_file_atomic(p, pieces);
  EXPECT_EQ(slurp(p), std::string("{\"a\": \0\x01}", 9));
  EXPECT_EQ(listing(dir), std::set<std::string>{"report.json"});
}

TEST(WriteFileAtomic, MissingDirectoryOrFileAsParentNamesThePathAndReason) {
  const fs::path dir = fresh_dir("noparent");
  const std::string missing = write_error(dir / "no" / "such" / "dir" / "x.json", "x");
  EXPECT_NE(missing.find((dir / "no" / "such" / "dir" / "x.json").string()), std::string::npos) << missing;
  EXPECT_NE(missing.find(std::strerror(ENOENT)), std::string::npos) << missing;
  touch(dir / "plainfile");  // root ignores permissions, but not a file used as a directory
  const std::string notdir = write_error(dir / "plainfile" / "x.json", "x");
  EXPECT_NE(notdir.find((dir / "plainfile" / "x.json").string()), std::string::npos) << notdir;
  EXPECT_NE(notdir.find(std::strerror(ENOTDIR)), std::string::npos) << notdir;
  EXPECT_EQ(listing(dir), std::set<std::string>{"plainfile"});
}

TEST(WriteFileAtomic, DirectoryInTheWayKeepsItAndRemovesTheTemporary) {
  const fs::path dir = fresh_dir("isdir");
  fs::create_directories(dir / "out.json" / "inside");
  const std::string err = write_error(dir / "out.json", "x");
  EXPECT_NE(err.find((dir / "out.json").string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(EISDIR)), std::string::npos) << err;
  EXPECT_EQ(listing(dir), std::set<std::string>{"out.json"});
  EXPECT_TRUE(fs::is_directory(dir / "out.json" / "inside"));
}

// A write that fails part-way (here: the file-size limit, EFBIG; no mount needed).
TEST(WriteFileAtomic, FailedWriteKeepsThePreviousFileAndRemovesTheTemporary) {
  const fs::path dir = fresh_dir("efbig");
  const fs::path p = dir / "model.safetensors";
  io::write_file_atomic(p, "previous");
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct sigaction ignore {}, saved {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &saved), 0);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string err = write_error(p, std::string(64 << 10, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::sigaction(SIGXFSZ, &saved, nullptr);
  EXPECT_NE(err.find(p.string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(EFBIG)), std::string::npos) << err;
  EXPECT_EQ(slurp(p), "previous");
  EXPECT_EQ(listing(dir), std::set<std::string>{"model.safetensors"});
}

// A full file system: a 64 KiB tmpfs (needs CAP_SYS_ADMIN, which root has here and in CI).
TEST(WriteFileAtomic, FullFileSystemKeepsThePreviousFileAndRemovesTheTemporary) {
  const fs::path dir = fresh_dir("tmpfs");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
    const int err = errno;
    ASSERT_TRUE(err == EPERM || err == EACCES) << "mount tmpfs: " << std::strerror(err);
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(err)
                 << ": needs root / CAP_SYS_ADMIN); the EFBIG test covers a failing write";
  }
  struct Unmount {
    fs::path d;
    ~Unmount() { ::umount2(d.c_str(), MNT_DETACH); }
  } unmount{dir};
  const fs::path p = dir / "ckpt.safetensors";
  const std::string previous(16 << 10, 'p');
  io::write_file_atomic(p, previous);
  const std::string err = write_error(p, std::string(128 << 10, 'n'));
  EXPECT_NE(err.find(p.string()), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOSPC)), std::string::npos) << err;
  EXPECT_NE(err.find("hint:"), std::string::npos) << err;
  EXPECT_EQ(slurp(p), previous);
  EXPECT_EQ(listing(dir), std::set<std::string>{"ckpt.safetensors"});
  // The checkpoint writer goes through the same path.
  nn::Dense big(256, 256);
  EXPECT_THROW(io::save_checkpoint(big, p), Error);
  EXPECT_EQ(slurp(p), previous);
  EXPECT_EQ(listing(dir), std::set<std::string>{"ckpt.safetensors"});
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(StaleTemporaries, NextSaveRemovesThoseOfDeadWritersOnly) {
  const fs::path dir = fresh_dir("stale");
  const std::string dead = std::to_string(dead_pid());
  const std::string me = std::to_string(::getpid());
  touch(dir / (".w.safetensors.tmp." + dead + ".0"));   // killed writer
  touch(dir / ".w.safetensors.tmp1234567890");          // an earlier version's random name
  touch(dir / (".w.safetensors.tmp." + std::to_string(::getppid()) + ".3"));  // a live writer
  touch(dir / ".w.safetensors.tmp.1.0");                                     // pid 1, live
  touch(dir / (".w.safetensors.tmp." + me + ".9"));
  // The same pid as ours, but written a day before this process started: the pid was reused.
  fs::last_write_time(dir / (".w.safetensors.tmp." + me + ".9"),
                      fs::file_time_type::clock::now() - std::chrono::hours(24));
  touch(dir / (".other.safetensors.tmp." + dead + ".0"));  // another file's
  touch(dir / ".w.safetensors.tmp.notapid");              // not ours to judge
  nn::Dense d(2, 2);
  io::save_checkpoint(d, dir / "w.safetensors");
  EXPECT_EQ(listing(dir), (std::set<std::string>{"w.safetensors",
                                                 ".w.safetensors.tmp." + std::to_string(::getppid()) + ".3",
                                                 ".w.safetensors.tmp.1.0", ".other.safetensors.tmp." + dead + ".0",
                                                 ".w.safetensors.tmp.notapid"}));
  // A read of NAME cleans up too.
  touch(dir / (".w.safetensors.tmp." + dead + ".1"));
  (void)io::load_checkpoint(dir / "w.safetensors");
  EXPECT_FALSE(fs::exists(dir / (".w.safetensors.tmp." + dead + ".1")));
}

void kill_myself(const fs::path&) { ::raise(SIGKILL); }

TEST(StaleTemporaries, KillNineMidSaveLeavesATemporaryTheNextSaveRemoves) {
  const fs::path dir = fresh_dir("kill9");
  const fs::path p = dir / "ckpt.safetensors";
  manual_seed(0);
  nn::Dense d(64, 64);
  io::save_checkpoint(d, p);
  const std::string before = slurp(p);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    io::set_write_failpoint(kill_myself);
    NoGradGuard ng;
    d.weight.detach().fill_(9.0);
    io::save_checkpoint(d, p);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const std::set<std::string> after_kill = listing(dir);
  ASSERT_EQ(after_kill.size(), 2u);
  ASSERT_TRUE(after_kill.count("ckpt.safetensors"));
  const std::string left = *after_kill.begin();  // '.' sorts before 'c'
  EXPECT_EQ(left.rfind(".ckpt.safetensors.tmp." + std::to_string(pid) + ".", 0), 0u) << left;
  EXPECT_EQ(fs::file_size(dir / left), fs::file_size(p)) << "the whole new checkpoint, written before the kill";
  EXPECT_EQ(slurp(p), before) << "the previous checkpoint is intact";
  io::save_checkpoint(d, p);
  EXPECT_EQ(listing(dir), std::set<std::string>{"ckpt.safetensors"});
}

}  // namespace
}  // namespace mixprec
