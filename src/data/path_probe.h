// What is at a dataset path, and when it cannot be used, why, in words: a dangling symbolic link
// (named with its target), a permission or other OS error, a path component that is a file. The
// readers (mnist.cpp, idx.cpp) call this before they open a file or list a directory, so that
// such cases are reported as what they are, never as "not found" or "the directory is empty".
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace mixprec::dataset::detail {

struct PathProbe {
  // The type at the path, following links; not_found when nothing usable is there, none when the
  // OS refused to say (then `problem` holds its error).
  std::filesystem::file_type type = std::filesystem::file_type::not_found;
  // Empty when the path is usable or plainly absent; otherwise a phrase completing "PATH ...":
  // "is a symbolic link to T, which does not exist", "cannot be examined: Permission denied",
  // "cannot exist: /a/b is a file, not a directory".
  std::string problem;
  bool exists() const {
    return type != std::filesystem::file_type::not_found && type != std::filesystem::file_type::none;
  }
};

// What a file type is, in words, for "expected a regular file, found ...".
inline const char* file_type_name(std::filesystem::file_type t) {
  namespace fs = std::filesystem;
  switch (t) {
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    default: return "a special file";
  }
}

// Stats through links; on failure tells a dangling link, an OS error (EACCES, ELOOP) and a file
// standing where a directory should be from plain absence. Header-only: the parser fuzz build
// compiles idx.cpp without the rest of the data layer.
inline PathProbe probe_path(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  PathProbe out;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  out.type = st.type();
  if (out.type != fs::file_type::not_found) {
    if (ec) {
      out.type = fs::file_type::none;
      out.problem = "cannot be examined: " + ec.message();
    }
    return out;
  }
  // Absent (ENOENT or ENOTDIR): a dangling link, a file where a directory should be, or nothing.
  std::error_code lec;
  if (fs::is_symlink(fs::symlink_status(p, lec))) {
    const fs::path target = fs::read_symlink(p, lec);
    out.problem = "is a symbolic link to " + (lec ? std::string("an unreadable target") : target.string()) +
                  ", which does not exist";
    return out;
  }
  for (fs::path q = p.parent_path(); !q.empty(); q = q.parent_path()) {
    const fs::file_status qs = fs::status(q, lec);
    if (qs.type() == fs::file_type::not_found) {
      if (q == q.parent_path()) break;
      continue;
    }
    if (!lec && qs.type() != fs::file_type::directory)
      out.problem = "cannot exist: " + q.string() + " is a file, not a directory";
    break;
  }
  return out;
}

}  // namespace mixprec::dataset::detail
