// The CLI's checked output files: every write, flush and close is checked and a failure throws
// mixprec::Error naming the option, the path and the system's reason (e.g. "No space left on
// device"). A replaced file goes through a temporary file in the same directory and a rename, so
// a failed write leaves the previous file intact. Checkpoints are written by the library (io/),
// not here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace mixprec::cli {

// Before a run: creates the parent directory of `path` if needed, refuses a directory, and checks
// that a file can be created next to it (a temporary file is created and removed). `flag` (e.g.
// "--report") starts the message. An empty path is a no-op.
void check_writable(const std::string& path, std::string_view flag);

// Writes `text` to `path`: to a temporary file in the same directory, then renamed over `path`.
// A path that exists and is not a regular file (a device such as /dev/stdout, a FIFO) is written
// in place. Throws naming `flag`, the path and the reason; the temporary file is removed.
void write_file_replacing(const std::string& path, std::string_view text, std::string_view flag);

// A text file written line by line (the per-step trace): each write is flushed and checked, so a
// full disk is noticed at the row it hits, not at exit.
class LineFile {
 public:
  // `append`: keep the existing content (from `keep_bytes` on, the rest is cut off first);
  // otherwise the file is created or truncated.
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
