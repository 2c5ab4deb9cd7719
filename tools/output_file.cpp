// Checked output files for the CLI (see output_file.h). Plain POSIX calls, so every failure has
// an errno whose text goes into the message.
#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "mixprec/error.h"

namespace mixprec::cli {
namespace {

namespace fs = std::filesystem;

fs::path parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

void create_parent(const std::string& path, std::string_view flag) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  MIXPREC_CHECK(!ec, flag, " ", path, ": cannot create the directory '", parent.string(), "': ", ec.message());
}

// A new file next to `path` (".NAME.<kind>XXXXXX"); returns its descriptor and sets `tmp`.
int make_temp(const std::string& path, const char* kind, std::string& tmp, std::string_view flag) {
  std::string name_pattern = ".";
  name_pattern.append(fs::path(path).filename().string()).append(".").append(kind).append("XXXXXX");
  tmp = (parent_dir(path) / name_pattern).string();
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  MIXPREC_CHECK(fd >= 0, flag, " ", path, ": cannot create a file in '", parent_dir(path).string(), "': ",
                std::strerror(errno));
  tmp = name.data();
  return fd;
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

bool is_special_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

}  // namespace

void check_writable(const std::string& path, std::string_view flag) {
  if (path.empty()) return;
  create_parent(path, flag);
  std::error_code ec;
  MIXPREC_CHECK(!fs::is_directory(path, ec), flag, " ", path, ": is a directory; expected a file name");
  if (is_special_file(path)) {  // a device or FIFO: it must open for writing
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    MIXPREC_CHECK(fd >= 0, flag, " ", path, ": cannot open for writing: ", std::strerror(errno));
    ::close(fd);
    return;
  }
  std::string tmp;
  ::close(make_temp(path, "probe", tmp, flag));
  ::unlink(tmp.c_str());
}

void write_file_replacing(const std::string& path, std::string_view text, std::string_view flag) {
  create_parent(path, flag);
  if (is_special_file(path)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    MIXPREC_CHECK(fd >= 0, flag, " ", path, ": cannot open for writing: ", std::strerror(errno));
    const int err = write_all(fd, text);
    const int close_err = ::close(fd) != 0 ? errno : 0;
    MIXPREC_CHECK(err == 0 && close_err == 0, flag, " ", path, ": write failed: ", std::strerror(err ? err : close_err));
    return;
  }
  std::string tmp;
  const int fd = make_temp(path, "tmp", tmp, flag);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  int err = ::fchmod(fd, 0666 & ~mask) != 0 ? errno : 0;
  if (!err) err = write_all(fd, text);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    MIXPREC_CHECK(false, flag, " ", path, ": write failed: ", std::strerror(err),
                  Hint{"the previous content of the file, if any, is unchanged"});
  }
}

LineFile::LineFile(std::string path, std::string flag, bool append, int64_t keep_bytes)
    : path_(std::move(path)), flag_(std::move(flag)) {
  create_parent(path_, flag_);
  if (append && keep_bytes >= 0 && !is_special_file(path_) && ::truncate(path_.c_str(), keep_bytes) != 0)
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
