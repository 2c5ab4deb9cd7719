// Whole-file writes that never leave a half-written file: write_file_atomic writes a temporary
// beside the destination, checks every write, fsync and close, and renames it over the
// destination; a failure throws mixprec::Error naming the path and the OS reason, keeps the
// previous file intact and removes the temporary. Only regular files are replaced (a symbolic
// link is followed, so it stays a link); a directory, device, FIFO or socket is refused.
// Temporaries are named `.NAME.tmp.<host>.<pid>.<n>`, so that a writer killed mid-save (kill -9)
// leaves one that the next save of NAME on the same machine removes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::io {

// Replaces the file at `path` with the concatenation of `pieces` (binary-safe: a string_view may
// hold any bytes; pieces avoid copying large buffers into one). The file replaced is
// replace_target(path). Steps: remove stale temporaries of it (remove_stale_temporaries),
// create `.NAME.tmp.<host>.<pid>.<n>` in its directory, write, fsync, close, rename over it,
// fsync the directory (best effort: some file systems refuse a directory fsync). Throws
// mixprec::Error "PATH: <what failed>: <strerror>" on any failure, with the previous content
// untouched and no temporary left behind. Does not create directories.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> pieces);
inline void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  write_file_atomic(path, std::span<const std::string_view>(&contents, 1));
}

// The file a write of `path` replaces: `path` itself when it is a regular file or does not exist;
// when it is a symbolic link (or a chain of them), the file the link points to (created if it
// does not exist), so that the link stays a link. Throws when that file exists and is not a
// regular file (a directory, a device such as /dev/null, a FIFO, a socket): such a path is never
// replaced by a rename. A path that cannot be inspected is returned as is; writing to it then
// fails with the OS reason.
std::filesystem::path replace_target(const std::filesystem::path& path);

// Checks that write_file_atomic(path) can replace `path`, changing nothing that stays: the
// destination passes replace_target, and a temporary can be created in its directory (one is
// created and removed at once). Throws as write_file_atomic would ("PATH: cannot create a
// temporary file in DIR: <strerror>").
void check_replaceable(const std::filesystem::path& path);

// What stands at `path` (links followed) when it is not a regular file: "a directory", "a
// character device", "a block device", "a FIFO (named pipe)" or "a socket"; "" when it is a
// regular file or cannot be examined (nothing there: opening it then says why).
std::string non_regular_kind(const std::filesystem::path& path);

// Removes temporaries of `path` that no writer will finish:
//  - `.NAME.tmp.<host>.<pid>.<n>` written on this machine (same host name and pid namespace)
//    whose process is gone, or (Linux) whose pid now belongs to a process that started after
//    the file was last modified (the pid was reused, e.g. pid 1 in a restarted container);
//  - temporaries that are not provably this machine's: those of another host or pid namespace
//    (a job on another node of a shared file system), and the names earlier versions used
//    (`.NAME.tmp.<pid>[.<n>]`, `.NAME.tmp<digits>`, `.NAME.tmpXXXXXX`, `.NAME.probeXXXXXX`),
//    only when they were last modified more than kStaleTemporaryAge ago.
// A temporary a live writer may still be writing is left alone. Best effort: never throws;
// prints a note to stderr for each file removed. Returns the paths removed. Called before each
// write of `path`, never by a reader (a reader on a login node must not judge a compute node's
// writers).
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& path);

// Age after which a temporary whose writer cannot be checked from here counts as abandoned.
inline constexpr int64_t kStaleTemporaryAgeSeconds = 3600;

// This machine's part of a temporary's name: the host name (characters other than letters,
// digits, '-' and '_' replaced by '_', at most 32 of them) followed, on Linux, by '~' and the
// inode of this process's pid namespace, so that containers sharing a host name differ.
const std::string& temporary_host_tag();

// Test hook: when set, write_file_atomic calls it after the temporary is written and closed,
// before the rename (a crash-safety test kills the process there).
void set_write_failpoint(void (*hook)(const std::filesystem::path& tmp));

}  // namespace mixprec::io
