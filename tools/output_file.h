// The CLI's output files (--report, --trace, --checkpoint, -o) and stdout. Checks before a run
// change nothing on disk; missing parent directories are created only once every check of the run
// has passed (create_parent_dirs), so a refused run leaves nothing behind. A regular file (or a
// symbolic link to one, which stays a link) is replaced through io::write_file_atomic: a
// temporary beside it, every write checked, a rename, the previous content kept on failure. A
// character device or FIFO (/dev/stdout, a pipe) is written in place, as a stream; a directory,
// socket or block device is refused. Errors name the option, the path and the system's reason.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace mixprec::cli {

// Before a run: checks that `path` can be written, creating nothing. A character device or FIFO
// must open for writing (unless `allow_stream` is false: a checkpoint is a file, never a
// stream); any other existing path must be a regular file or a link to one, and its directory
// must accept a new file (io::check_replaceable); a directory that does not exist yet must be
// creatable under its nearest existing ancestor. `flag` (e.g. "--report") starts the message.
// An empty path is a no-op.
void check_writable(const std::string& path, std::string_view flag, bool allow_stream = true);

// Creates the missing parent directories of `path` (call after every check of the run passed).
// An empty path, or one whose directory exists, is a no-op.
void create_parent_dirs(const std::string& path, std::string_view flag);

// Writes `text` to `path`: a character device or FIFO in place, anything else through
// io::write_file_atomic (after create_parent_dirs). Throws naming `flag`, the path and the reason.
void write_file_replacing(const std::string& path, std::string_view text, std::string_view flag);

// Flushes stdout; throws "stdout: write failed: REASON" when a write to it failed (now or
// earlier): output that never arrived (a full disk, /dev/full) fails the command.
void flush_stdout();

// A text file written line by line (the per-step trace): each write is flushed and checked, so a
// full disk is noticed at the row it hits, not at exit. It is written in place (it grows during
// the run; a crash leaves the rows written so far).
class LineFile {
 public:
  // `append`: keep the existing content (from `keep_bytes` on, the rest is cut off first);
  // otherwise the file is created or truncated. Creates missing parent directories.
  LineFile(std::string path, std::string flag, bool append, int64_t keep_bytes = -1);
  ~LineFile();
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;
  void write(std::string_view text);  // writes and flushes; throws on failure
  void close();                       // checked; the destructor closes unchecked
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* what, int err);
  std::string path_, flag_;
  std::FILE* f_ = nullptr;
};

}  // namespace mixprec::cli
