// Atomic whole-file writes, the destination check (regular files only, links followed) and the
// cleanup of temporaries left by killed writers (see include/mixprec/io/file.h). POSIX calls, so
// every failure has an errno to report; the temporary is owned by a guard that unlinks it on
// every path except a successful rename. Only this machine's writers are judged by pid: a pid
// means nothing on another host or in another pid namespace.
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
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mixprec/error.h"

namespace mixprec::io {
namespace {

namespace fs = std::filesystem;

void (*g_failpoint)(const fs::path&) = nullptr;
std::atomic<uint64_t> g_temp_counter{0};

fs::path dir_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

// ".NAME.tmp." with NAME cut to 160 bytes, so that the rest of the name fits in NAME_MAX (255).
std::string temp_prefix(const fs::path& path) {
  const std::string name = path.filename().string();
  std::string prefix(1, '.');  // built by appends: "." + std::string trips a GCC 12 -Wrestrict false positive
  prefix.append(name, 0, 160).append(".tmp.");
  return prefix;
}

// Whether `s` is non-empty and every character passes `pred` (ASCII only: locale-independent).
template <class Pred>
bool all_of(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (char c : s)
    if (!pred(c)) return false;
  return true;
}
bool digits(std::string_view s) { return all_of(s, [](char c) { return c >= '0' && c <= '9'; }); }
bool alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool alnums(std::string_view s) { return all_of(s, alnum); }

// Splits `s` at '.' (no empty-field special cases: "a..b" gives an empty field).
std::vector<std::string_view> fields(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// Whose temporary of `path` the file `file` is: this machine's (then `pid` is its writer), a
// temporary that is not provably ours (another host or pid namespace, or a name an earlier
// version used), or no temporary of `path` at all.
enum class Owner { none, this_machine, elsewhere };
struct TempOwner {
  Owner owner = Owner::none;
  long long pid = 0;
};

TempOwner temp_owner(std::string_view file, const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string prefix = temp_prefix(path);
  if (file.size() > prefix.size() && file.compare(0, prefix.size(), prefix) == 0) {
    const std::vector<std::string_view> f = fields(file.substr(prefix.size()));
    if (f.size() == 3 && !f[0].empty() && digits(f[1]) && digits(f[2])) {  // <host>.<pid>.<n>
      if (f[0] != temporary_host_tag()) return {Owner::elsewhere, 0};
      long long pid = 0;
      const auto [end, ec] = std::from_chars(f[1].data(), f[1].data() + f[1].size(), pid);
      if (ec != std::errc() || pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return {};
      return {Owner::this_machine, pid};
    }
  }
  // Earlier versions' names: ".NAME.tmp.<pid>[.<n>]" (NAME cut to 200), ".NAME.tmp<digits>",
  // and the CLI's mkstemp names ".NAME.tmpXXXXXX" and ".NAME.probeXXXXXX".
  std::string pid_prefix(1, '.');
  pid_prefix.append(name, 0, 200).append(".tmp.");
  if (file.size() > pid_prefix.size() && file.compare(0, pid_prefix.size(), pid_prefix) == 0) {
    const std::vector<std::string_view> f = fields(file.substr(pid_prefix.size()));
    if ((f.size() == 1 || f.size() == 2) && digits(f[0]) && digits(f.back())) return {Owner::elsewhere, 0};
  }
  for (const char* kind : {".tmp", ".probe"}) {
    std::string legacy(1, '.');
    legacy.append(name).append(kind);
    if (file.size() <= legacy.size() || file.compare(0, legacy.size(), legacy) != 0) continue;
    const std::string_view rest = file.substr(legacy.size());
    if ((kind[1] == 't' && digits(rest)) || (rest.size() == 6 && alnums(rest))) return {Owner::elsewhere, 0};
  }
  return {};
}

// When process `pid` started, in seconds since the epoch (Linux /proc); -1 if unknown.
double process_start_time(long long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream tokens(line.substr(paren + 1));
  std::string tok;
  unsigned long long ticks = 0;
  for (int i = 3; i <= 22 && tokens >> tok; ++i)  // field 22 is starttime, in ticks after boot
    if (i == 22) ticks = std::strtoull(tok.c_str(), nullptr, 10);
  std::ifstream sys("/proc/stat");
  long long btime = -1;
  while (std::getline(sys, line))
    if (line.rfind("btime ", 0) == 0) btime = std::atoll(line.c_str() + 6);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (btime < 0 || ticks == 0 || hz <= 0) return -1;
  return static_cast<double>(btime) + static_cast<double>(ticks) / static_cast<double>(hz);
}

// Whether `tmp`, a temporary of this machine, may still be written by process `pid`: the process
// exists and did not start after the file was last modified (then the pid was reused).
bool writer_alive(long long pid, const struct stat& st) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  const double started = process_start_time(pid);
  if (started < 0) return true;
  return started <= static_cast<double>(st.st_mtime) + 2.0;  // btime has 1 s resolution
}

// Whether the temporary `tmp` (whose owner is `o`) is abandoned.
bool is_stale(const fs::path& tmp, const TempOwner& o) {
  struct stat st {};
  if (::lstat(tmp.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (o.owner == Owner::this_machine) return !writer_alive(o.pid, st);
  return std::difftime(std::time(nullptr), st.st_mtime) > static_cast<double>(kStaleTemporaryAgeSeconds);
}

[[noreturn]] void fail(const fs::path& path, const std::string& what, int err) {
  MIXPREC_CHECK(false, path.string(), ": ", what, ": ", std::strerror(err),
                err == ENOSPC || err == EDQUOT || err == EFBIG
                    ? Hint{"free some space on that file system, or write elsewhere"}
                    : Hint{});
  __builtin_unreachable();
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string non_regular_kind(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) ? "" : file_kind(st.st_mode);
}

namespace {

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

// Creates `.NAME.tmp.<host>.<pid>.<n>` beside `target` (another name on EEXIST: a namesake
// another process left); throws naming `shown` (the path the caller was asked to write).
void open_temporary(const fs::path& shown, const fs::path& target, TempFile& tmp) {
  const fs::path dir = dir_of(target);
  for (int attempt = 0; attempt < 100 && tmp.fd < 0; ++attempt) {
    tmp.path = dir / (temp_prefix(target) + temporary_host_tag() + "." + std::to_string(::getpid()) + "." +
                      std::to_string(g_temp_counter++));
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (tmp.fd < 0 && errno != EEXIST) break;
  }
  if (tmp.fd < 0) {
    const int err = errno;
    tmp.renamed = true;  // nothing was created: there is nothing to unlink
    fail(shown, "cannot create a temporary file in " + dir.string(), err);
  }
}

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

std::string make_host_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "unknown-host");
  std::string tag;
  for (const char* c = host; *c && tag.size() < 32; ++c)
    tag.push_back(alnum(*c) || *c == '-' || *c == '_' ? *c : '_');
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) == 0) tag.append("~").append(std::to_string(ns.st_ino));
  return tag;
}

}  // namespace

void set_write_failpoint(void (*hook)(const fs::path&)) { g_failpoint = hook; }

const std::string& temporary_host_tag() {
  static const std::string tag = make_host_tag();
  return tag;
}

fs::path replace_target(const fs::path& path) {
  fs::path p = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return p;  // new, or regular
    if (!S_ISLNK(st.st_mode)) {
      MIXPREC_CHECK(false, path.string(), ": ", p == path ? "is " : "links to " + p.string() + ", ", file_kind(st.st_mode),
                    ", not a regular file; refusing to replace it",
                    Hint{"give the path of a regular file (or of a new one)"});
    }
    std::error_code ec;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return p;
    p = link.is_absolute() ? link : dir_of(p) / link;
  }
  fail(path, "cannot follow the symbolic link", ELOOP);
}

void check_replaceable(const fs::path& path) {
  TempFile probe;
  open_temporary(path, replace_target(path), probe);
}

std::vector<fs::path> remove_stale_temporaries(const fs::path& path) {
  std::vector<fs::path> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir_of(path), ec), end; !ec && it != end; it.increment(ec)) {
    const TempOwner o = temp_owner(it->path().filename().string(), path);
    if (o.owner == Owner::none || !is_stale(it->path(), o)) continue;
    std::error_code sec;
    const auto bytes = fs::file_size(it->path(), sec);
    if (::unlink(it->path().c_str()) != 0) continue;
    std::fprintf(stderr, "mixprec: note: removed %s (%llu bytes), left by an interrupted save%s\n",
                 it->path().c_str(), sec ? 0ull : static_cast<unsigned long long>(bytes),
                 o.owner == Owner::this_machine ? (" of process " + std::to_string(o.pid)).c_str()
                                                : " (unchanged for over an hour)");
    removed.push_back(it->path());
  }
  return removed;
}

void write_file_atomic(const fs::path& path, std::span<const std::string_view> pieces) {
  const fs::path target = replace_target(path);
  remove_stale_temporaries(target);
  TempFile tmp;
  open_temporary(path, target, tmp);
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
  if (::rename(tmp.path.c_str(), target.c_str()) != 0) {
    const int err = errno;
    fail(path, "cannot replace it with the written temporary", err);
  }
  tmp.renamed = true;
  const int dfd = ::open(dir_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // durability of the rename; EINVAL on file systems without directory fsync
    ::close(dfd);
  }
}

}  // namespace mixprec::io
