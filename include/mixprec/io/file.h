// Whole-file writes that never leave a half-written file: write_file_atomic writes a temporary
// beside the destination, checks every write, fsync and close, and renames it over the
// destination; a failure throws mixprec::Error naming the path and the OS reason, keeps the
// previous file intact and removes the temporary. Temporaries are named `.NAME.tmp.<pid>.<n>`,
// so a writer killed mid-save (kill -9) leaves one that the next save or read of NAME removes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace mixprec::io {

// Replaces `path` with the concatenation of `pieces` (binary-safe: a string_view may hold any
// bytes; pieces avoid copying large buffers into one). Steps: remove stale temporaries of
// `path` (remove_stale_temporaries), create `.NAME.tmp.<pid>.<n>` in the same directory,
// write, fsync, close, rename over `path`, fsync the directory (best effort: some file systems
// refuse a directory fsync). Throws mixprec::Error "PATH: <what failed>: <strerror>" on any
// failure, with the previous content of `path` untouched and no temporary left behind.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> pieces);
inline void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  write_file_atomic(path, std::span<const std::string_view>(&contents, 1));
}

// Removes temporaries `.NAME.tmp.<pid>[.<n>]` of `path` whose writer is gone: no process has
// that pid, or (Linux) the process that has it started after the file was last modified, so
// the pid was reused (pid 1 in a restarted container). Also removes `.NAME.tmp<digits>`, the
// random names earlier versions used, which carry no pid. A temporary that a live process may
// still be writing is left alone. Best effort: never throws; prints a note to stderr for each
// file removed. Returns the paths removed.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& path);

// Test hook: when set, write_file_atomic calls it after the temporary is written and closed,
// before the rename (a crash-safety test kills the process there).
void set_write_failpoint(void (*hook)(const std::filesystem::path& tmp));

}  // namespace mixprec::io
