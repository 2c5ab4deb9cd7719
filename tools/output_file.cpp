// Checked output files for the CLI (see output_file.h). Replacing a file is io::write_file_atomic's
// job; this file adds what only the CLI needs: streams (devices, FIFOs) written in place, checks
// that create nothing, late creation of directories, the option's name in every message, and the
// check of stdout.
#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli_error.h"
#include "mixprec/error.h"
#include "mixprec/io/file.h"

namespace mixprec::cli {
namespace {

namespace fs = std::filesystem;

std::string prefix(std::string_view flag) { return std::string(flag) + " "; }

// A character device or a FIFO (following links): written in place, never replaced.
bool is_stream(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

// Writes all of `text` to `fd`; returns 0 or the errno of the failure.
int write_all(int fd, std::string_view text) {
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// `dir` does not exist: its nearest existing ancestor must be a directory in which this process
// may create entries.
void check_creatable(const std::string& path, const fs::path& dir, std::string_view flag) {
  fs::path p = dir;
  struct stat st {};
  while (!p.empty() && p != p.parent_path() && ::stat(p.c_str(), &st) != 0) p = p.parent_path();
  if (p.empty()) p = fs::path(".");
  if (::stat(p.c_str(), &st) != 0) return;  // vanished meanwhile: the write will say why
  MIXPREC_CHECK(S_ISDIR(st.st_mode), flag, " ", path, ": cannot create the directory '",
                dir.string(), "': '", p.string(), "' is not a directory");
  MIXPREC_CHECK(::access(p.c_str(), W_OK | X_OK) == 0, flag, " ", path,
                ": cannot create the directory '", dir.string(), "' in '", p.string(),
                "': ", std::strerror(errno));
}

}  // namespace

void check_writable(const std::string& path, std::string_view flag, bool allow_stream) {
  if (path.empty()) return;
  if (allow_stream &&
      is_stream(path)) {  // it must open for writing (a FIFO without a reader: ENXIO)
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    MIXPREC_CHECK(fd >= 0, flag, " ", path, ": cannot open for writing: ", std::strerror(errno));
    ::close(fd);
    return;
  }
  with_prefix(prefix(flag), [&] {
    const fs::path target = io::replace_target(path);  // refuses a directory, socket, block device
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::error_code ec;
    if (fs::is_directory(dir, ec))
      io::check_replaceable(target);
    else
      check_creatable(path, dir, flag);
  });
}

void create_parent_dirs(const std::string& path, std::string_view flag) {
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (path.empty() || parent.empty() || fs::is_directory(parent, ec)) return;
  fs::create_directories(parent, ec);
  MIXPREC_CHECK(!ec, flag, " ", path, ": cannot create the directory '", parent.string(),
                "': ", ec.message());
}

void write_file_replacing(const std::string& path, std::string_view text, std::string_view flag) {
  if (is_stream(path)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    MIXPREC_CHECK(fd >= 0, flag, " ", path, ": cannot open for writing: ", std::strerror(errno));
    const int err = write_all(fd, text);
    const int close_err = ::close(fd) != 0 ? errno : 0;
    MIXPREC_CHECK(err == 0 && close_err == 0, flag, " ", path,
                  ": write failed: ", std::strerror(err ? err : close_err));
    return;
  }
  create_parent_dirs(path, flag);
  with_prefix(prefix(flag), [&] { io::write_file_atomic(path, text); });
}

void flush_stdout() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  MIXPREC_CHECK(
      flushed && !std::ferror(stdout),
      "stdout: write failed: ", err ? std::strerror(err) : "an earlier write was refused",
      Hint{"the output is incomplete; free space where stdout goes, or redirect it elsewhere"});
}

LineFile::LineFile(std::string path, std::string flag, bool append, int64_t keep_bytes)
    : path_(std::move(path)), flag_(std::move(flag)) {
  create_parent_dirs(path_, flag_);
  if (append && keep_bytes >= 0 && !is_stream(path_) && ::truncate(path_.c_str(), keep_bytes) != 0)
    fail("cannot cut the file", errno);
  f_ = std::fopen(path_.c_str(), append ? "a" : "w");
  if (!f_) fail("cannot open for writing", errno);
}

LineFile::~LineFile() {
  if (f_) std::fclose(f_);
}

void LineFile::fail(const char* what, int err) {
  MIXPREC_CHECK(false, flag_, " ", path_, ": ", what, ": ", std::strerror(err ? err : EIO));
  __builtin_unreachable();
}

void LineFile::write(std::string_view text) {
  MIXPREC_CHECK(f_, flag_, " ", path_, ": the file is closed");
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0)
    fail("write failed", errno);
}

void LineFile::close() {
  if (!f_) return;
  errno = 0;
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) fail("close failed", errno);
}

}  // namespace mixprec::cli
