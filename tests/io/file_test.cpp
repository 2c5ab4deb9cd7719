// io::write_file_atomic and the cleanup of temporaries: every failure (no directory, a parent
// that is a file, a file-size limit, a full tmpfs) throws naming the path and the OS reason,
// keeps the previous file and leaves no temporary; a destination that is not a regular file (a
// directory, FIFO, socket) is refused untouched, and a symbolic link stays a link while its
// target is replaced. A writer killed mid-save (kill -9 at the failpoint) leaves the previous
// file intact and a temporary that the next save removes; a live writer's stays, and so does a
// recent one that another machine may be writing; a read removes nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

TEST(WriteFileAtomic, DirectoryInTheWayIsRefusedAndKept) {
  const fs::path dir = fresh_dir("isdir");
  fs::create_directories(dir / "out.json" / "inside");
  const std::string err = write_error(dir / "out.json", "x");
  EXPECT_NE(err.find((dir / "out.json").string() + ": is a directory, not a regular file"), std::string::npos) << err;
  EXPECT_EQ(listing(dir), std::set<std::string>{"out.json"});
  EXPECT_TRUE(fs::is_directory(dir / "out.json" / "inside"));
}

// A FIFO, a socket and a link to a FIFO are refused before anything is written: a rename would
// replace them with a regular file (as root, `--checkpoint /dev/null` replaced /dev/null).
TEST(WriteFileAtomic, FifoSocketAndLinkToFifoAreRefusedAndKept) {
  const fs::path dir = fresh_dir("notregular");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0) << std::strerror(errno);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = (dir / "sock").string();
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  fs::create_symlink("fifo", dir / "link");
  const std::string fifo = write_error(dir / "fifo", "x");
  EXPECT_NE(fifo.find((dir / "fifo").string() + ": is a FIFO (named pipe), not a regular file; refusing to replace it"),
            std::string::npos) << fifo;
  const std::string socket = write_error(dir / "sock", "x");
  EXPECT_NE(socket.find((dir / "sock").string() + ": is a socket, not a regular file"), std::string::npos) << socket;
  const std::string link = write_error(dir / "link", "x");
  EXPECT_NE(link.find((dir / "link").string() + ": links to " + (dir / "fifo").string() + ", a FIFO (named pipe)"),
            std::string::npos) << link;
  ::close(sock);
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  EXPECT_TRUE(fs::is_socket(dir / "sock"));
  EXPECT_TRUE(fs::is_symlink(dir / "link"));
  EXPECT_EQ(listing(dir), (std::set<std::string>{"fifo", "sock", "link"}));
  // check_replaceable refuses the same way, and accepts a new file in an existing directory.
  EXPECT_NE(testing::error_text([&] { io::check_replaceable(dir / "fifo"); }).find("is a FIFO"), std::string::npos);
  EXPECT_NO_THROW(io::check_replaceable(dir / "new.json"));
  EXPECT_EQ(listing(dir), (std::set<std::string>{"fifo", "sock", "link"}));
}

// A link (absolute, relative, a chain, dangling) stays a link: the file it points to is replaced
// (or created), through a temporary in that file's directory.
TEST(WriteFileAtomic, SymbolicLinkStaysALinkAndItsTargetIsReplaced) {
  const fs::path dir = fresh_dir("symlink");
  fs::create_directories(dir / "real");
  touch(dir / "real" / "r.json", "old");
  fs::create_symlink(dir / "real" / "r.json", dir / "abs");
  fs::create_symlink("real/r.json", dir / "rel");
  fs::create_symlink("rel", dir / "chain");
  fs::create_symlink("real/new.json", dir / "dangling");
  io::write_file_atomic(dir / "abs", "one");
  EXPECT_EQ(slurp(dir / "real" / "r.json"), "one");
  io::write_file_atomic(dir / "rel", "two");
  EXPECT_EQ(slurp(dir / "real" / "r.json"), "two");
  io::write_file_atomic(dir / "chain", "three");
  EXPECT_EQ(slurp(dir / "real" / "r.json"), "three");
  io::write_file_atomic(dir / "dangling", "four");
  EXPECT_EQ(slurp(dir / "real" / "new.json"), "four");
  for (const char* link : {"abs", "rel", "chain", "dangling"}) EXPECT_TRUE(fs::is_symlink(dir / link)) << link;
  EXPECT_EQ(io::replace_target(dir / "chain"), dir / "real" / "r.json");
  EXPECT_EQ(listing(dir), (std::set<std::string>{"real", "abs", "rel", "chain", "dangling"}));
  EXPECT_EQ(listing(dir / "real"), (std::set<std::string>{"r.json", "new.json"}));
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

// Sets `p`'s modification time `age` before now.
void age(const fs::path& p, std::chrono::seconds age) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - age);
}

TEST(StaleTemporaries, NextSaveRemovesThoseOfDeadWritersOnThisMachineOnly) {
  const fs::path dir = fresh_dir("stale");
  const std::string tag = io::temporary_host_tag();
  const std::string dead = std::to_string(dead_pid());
  const std::string me = std::to_string(::getpid());
  const std::string t = ".w.safetensors.tmp.";
  touch(dir / (t + tag + "." + dead + ".0"));                          // killed writer, this machine
  touch(dir / (t + tag + "." + std::to_string(::getppid()) + ".3"));  // a live writer
  touch(dir / (t + tag + ".1.0"));                                     // pid 1, live
  touch(dir / (t + tag + "." + me + ".9"));
  // The same pid as ours, but written a day before this process started: the pid was reused.
  age(dir / (t + tag + "." + me + ".9"), std::chrono::hours(24));
  // Another node of a shared file system, or a container with our host name but its own pid
  // namespace: their pids mean nothing here. Kept while recent, removed once an hour old.
  touch(dir / (t + "othernode~4026531836." + dead + ".0"));
  touch(dir / (t + tag.substr(0, tag.find('~')) + "~1." + dead + ".0"));
  touch(dir / (t + "oldnode." + dead + ".0"));
  age(dir / (t + "oldnode." + dead + ".0"), std::chrono::hours(2));
  // Earlier versions' names carry no host: kept while recent (a random suffix may be all
  // digits), removed once an hour old.
  const std::vector<std::string> legacy_recent{".w.safetensors.tmp1234567890", t + dead + ".0",
                                               ".w.safetensors.tmpAb3xYz", ".w.safetensors.probeQ1w2E3"};
  const std::vector<std::string> legacy_old{".w.safetensors.tmp9876543210", t + dead + ".1",
                                            ".w.safetensors.tmpZz9yY8", ".w.safetensors.probeR4t5Y6"};
  for (const std::string& name : legacy_recent) touch(dir / name);
  for (const std::string& name : legacy_old) {
    touch(dir / name);
    age(dir / name, std::chrono::hours(2));
  }
  touch(dir / ".other.safetensors.tmp5555");  // another file's, old
  age(dir / ".other.safetensors.tmp5555", std::chrono::hours(2));
  touch(dir / (".other.safetensors.tmp." + tag + "." + dead + ".0"));  // another file's
  touch(dir / ".w.safetensors.tmp.notapid");                           // not a temporary's name
  age(dir / ".w.safetensors.tmp.notapid", std::chrono::hours(2));
  const std::set<std::string> before = listing(dir);
  nn::Dense d(2, 2);
  io::save_checkpoint(d, dir / "w.safetensors");
  std::set<std::string> expected = before;
  expected.insert("w.safetensors");
  for (const std::string& gone : legacy_old) expected.erase(gone);
  for (const std::string& gone : {t + tag + "." + dead + ".0", t + tag + "." + me + ".9", t + "oldnode." + dead + ".0"})
    expected.erase(gone);
  EXPECT_EQ(listing(dir), expected);
}

// Reading never judges temporaries: `mixprec eval` on a login node must not delete a running
// job's temporary, whatever its name says.
TEST(StaleTemporaries, ReadRemovesNothing) {
  const fs::path dir = fresh_dir("read");
  nn::Dense d(2, 2);
  io::save_checkpoint(d, dir / "w.safetensors");
  const std::string dead = std::to_string(dead_pid());
  const std::set<std::string> temporaries{".w.safetensors.tmp." + io::temporary_host_tag() + "." + dead + ".0",
                                          ".w.safetensors.tmp." + dead + ".0", ".w.safetensors.tmp123456"};
  for (const std::string& name : temporaries) {
    touch(dir / name);
    age(dir / name, std::chrono::hours(2));
  }
  (void)io::load_checkpoint(dir / "w.safetensors");
  (void)io::read_safetensors_metadata(dir / "w.safetensors");
  std::set<std::string> expected = temporaries;
  expected.insert("w.safetensors");
  EXPECT_EQ(listing(dir), expected);
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
  EXPECT_EQ(left.rfind(".ckpt.safetensors.tmp." + io::temporary_host_tag() + "." + std::to_string(pid) + ".", 0), 0u)
      << left;
  EXPECT_EQ(fs::file_size(dir / left), fs::file_size(p)) << "the whole new checkpoint, written before the kill";
  EXPECT_EQ(slurp(p), before) << "the previous checkpoint is intact";
  io::save_checkpoint(d, p);
  EXPECT_EQ(listing(dir), std::set<std::string>{"ckpt.safetensors"});
}

}  // namespace
}  // namespace mixprec
