// Atomic whole-file writes and the cleanup of temporaries left by killed writers (see
// include/mixprec/io/file.h). POSIX calls, so every failure has an errno to report; the
// temporary is owned by a guard that unlinks it on every path except a successful rename.
#include "mixprec/io/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "mixprec/error.h"

namespace mixprec::io {
namespace {

namespace fs = std::filesystem;

void (*g_failpoint)(const fs::path&) = nullptr;
std::atomic<uint64_t> g_temp_counter{0};

fs::path dir_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

// ".NAME.tmp" with NAME cut to 200 bytes, so that the suffix fits in NAME_MAX (255).
std::string temp_stem(const fs::path& path) {
  const std::string name = path.filename().string();
  std::string stem(1, '.');  // built by appends: "." + std::string trips a GCC 12 -Wrestrict false positive
  stem.append(name, 0, 200).append(".tmp");
  return stem;
}

// The writer's pid if `file` is a temporary of `stem` in this version's form (stem + ".<pid>"
// or stem + ".<pid>.<n>"), 0 for the legacy form (stem + digits), -1 if it is neither.
long long temp_owner(const std::string& file, const std::string& stem) {
  if (file.size() <= stem.size() || file.compare(0, stem.size(), stem) != 0) return -1;
  const char* p = file.data() + stem.size();
  const char* end = file.data() + file.size();
  auto all_digits = [](const char* b, const char* e) {
    if (b == e) return false;
    for (; b != e; ++b)
      if (*b < '0' || *b > '9') return false;
    return true;
  };
  if (*p != '.') return all_digits(p, end) ? 0 : -1;
  ++p;
  long long pid = 0;
  const auto [q, ec] = std::from_chars(p, end, pid);
  if (ec != std::errc() || q == p || pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return -1;
  if (q == end) return pid;
  return (*q == '.' && all_digits(q + 1, end)) ? pid : -1;
}

// When process `pid` started, in seconds since the epoch (Linux /proc); -1 if unknown.
double process_start_time(long long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream fields(line.substr(paren + 1));
  std::string tok;
  unsigned long long ticks = 0;
  for (int i = 3; i <= 22 && fields >> tok; ++i)  // field 22 is starttime, in ticks after boot
    if (i == 22) ticks = std::strtoull(tok.c_str(), nullptr, 10);
  std::ifstream sys("/proc/stat");
  long long btime = -1;
  while (std::getline(sys, line))
    if (line.rfind("btime ", 0) == 0) btime = std::atoll(line.c_str() + 6);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (btime < 0 || ticks == 0 || hz <= 0) return -1;
  return static_cast<double>(btime) + static_cast<double>(ticks) / static_cast<double>(hz);
}

// Whether `tmp` may still be written by process `pid`: the process exists and did not start
// after the file was last modified (then the pid was reused, e.g. pid 1 in a new container).
bool writer_alive(long long pid, const fs::path& tmp) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  struct stat st {};
  const double started = process_start_time(pid);
  if (started < 0 || ::stat(tmp.c_str(), &st) != 0) return true;
  return started <= static_cast<double>(st.st_mtime) + 2.0;  // btime has 1 s resolution
}

[[noreturn]] void fail(const fs::path& path, const std::string& what, int err) {
  MIXPREC_CHECK(false, path.string(), ": ", what, ": ", std::strerror(err),
                err == ENOSPC || err == EDQUOT || err == EFBIG
                    ? Hint{"free some space on that file system, or write elsewhere"}
                    : Hint{});
  __builtin_unreachable();
}

// Owns the temporary: closes its descriptor and unlinks it unless released after the rename.
struct TempFile {
  fs::path path;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed) ::unlink(path.c_str());
  }
};

void write_all(const fs::path& dest, TempFile& tmp, std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::write(tmp.fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;  // read before building the message, which may allocate
      fail(dest, "cannot write (temporary " + tmp.path.filename().string() + ")", err);
    }
    if (w == 0) fail(dest, "cannot write (temporary " + tmp.path.filename().string() + ", no progress)", EIO);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void set_write_failpoint(void (*hook)(const fs::path&)) { g_failpoint = hook; }

std::vector<fs::path> remove_stale_temporaries(const fs::path& path) {
  std::vector<fs::path> removed;
  const std::string stem = temp_stem(path);
  std::error_code ec;
  for (fs::directory_iterator it(dir_of(path), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    const long long pid = temp_owner(file, stem);
    if (pid < 0 || (pid > 0 && writer_alive(pid, it->path()))) continue;
    std::error_code sec;
    const auto bytes = fs::file_size(it->path(), sec);
    if (::unlink(it->path().c_str()) != 0) continue;
    std::fprintf(stderr, "mixprec: note: removed %s (%llu bytes), left by an interrupted save%s\n",
                 it->path().c_str(), sec ? 0ull : static_cast<unsigned long long>(bytes),
                 pid > 0 ? (" of process " + std::to_string(pid)).c_str() : "");
    removed.push_back(it->path());
  }
  return removed;
}

void write_file_atomic(const fs::path& path, std::span<const std::string_view> pieces) {
  remove_stale_temporaries(path);
  const fs::path dir = dir_of(path);
  TempFile tmp;
  for (int attempt = 0; attempt < 100 && tmp.fd < 0; ++attempt) {  // EEXIST: a namesake another process left
    tmp.path = dir / (temp_stem(path) + "." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter++));
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (tmp.fd < 0 && errno != EEXIST) break;
  }
  if (tmp.fd < 0) {
    const int err = errno;
    tmp.renamed = true;  // nothing was created: there is nothing to unlink
    fail(path, "cannot create a temporary file in " + dir.string(), err);
  }
  for (std::string_view piece : pieces) write_all(path, tmp, piece);
  if (::fsync(tmp.fd) != 0) {
    const int err = errno;
    fail(path, "fsync failed", err);
  }
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    fail(path, "close failed", err);
  }
  if (g_failpoint) g_failpoint(tmp.path);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fail(path, "cannot replace it with the written temporary", err);
  }
  tmp.renamed = true;
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // durability of the rename; EINVAL on file systems without directory fsync
    ::close(dfd);
  }
}

}  // namespace mixprec::io
