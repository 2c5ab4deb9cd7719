// TextDataset: byte-level language-model data from a text file or a folder of text files (by
// default Debian's `fortunes` package). Each file is split in two: its first 90% is "train", its
// last 10% "validation". A sample is a window of context + 1 consecutive bytes of one file's
// part: image = the first `context` bytes (u8 [context]), label = the `context` bytes that follow
// each of them (i32 [context], the next-byte targets). Batches come from the Dataset pipeline
// (batch, shuffle, take, iterators, exact resume) as for MnistDataset.
//   auto ds = dataset::TextDataset(dataset::kFortunesDir, {.context = 128, .seed = 1}).batch(32,
//   true);
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/data/dataset.h"

namespace mixprec::dataset {

// Where Debian's `fortunes` package puts its text (about 2.5 MB of English in 43 files, beside
// their binary `.dat` indexes and `.u8` symbolic links).
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

struct TextOptions {
  std::string usage = "train";  // "train" (each file's first 90%) or "validation" (its last 10%)
  int64_t context = 128;        // input bytes per window (a window holds context + 1 bytes)
  // Random windows: window i of epoch e starts at a position drawn uniformly, from (seed, e, i)
  // alone, among every start whose window fits in one file's part. Otherwise consecutive
  // windows (stride `context`, so each byte but a part's first is a target once). Default:
  // random for "train", consecutive for "validation".
  std::optional<bool> random_windows{};
  uint64_t seed = 0;
  // Random windows per epoch; default: as many as the consecutive windows (part bytes / context).
  std::optional<int64_t> num_windows{};
  // The most bytes read in all (the text is held in memory); a file that would pass it is an
  // error, not cut.
  int64_t max_bytes = int64_t{1} << 30;
};

struct TextFile {
  std::filesystem::path path;
  int64_t bytes = 0;       // the whole file
  int64_t part_bytes = 0;  // its train or validation part
};
struct SkippedFile {
  std::filesystem::path path;
  std::string reason;  // "symbolic link", "binary: NUL byte at offset 12", "too short: ..."
};

class TextSource;

// `path`: a regular file (read whatever its name; a symbolic link is followed; a device or FIFO
// is refused) or a folder, whose regular files directly inside are read in name order. In a
// folder, entries that are not text are skipped, each with its reason (skipped()): symbolic
// links (fortunes' `.u8` aliases; a link is never followed inside a folder), subfolders and other
// non-regular files, and binary files. A file is text when it holds no NUL byte and is valid
// UTF-8 (fortunes' `.dat` indexes hold NULs), checked as it is read. A text file whose part is
// shorter than context + 1 bytes is skipped too (in a folder) or refused (a single file). Errors
// name the path and what was expected: a missing path, a folder without usable text, an
// unreadable file or folder (with the OS reason), text past max_bytes.
class TextDataset : public Dataset {
 public:
  explicit TextDataset(const std::filesystem::path& path = kFortunesDir, TextOptions options = {});
  const std::vector<TextFile>& files() const;       // the files windows come from, in order
  const std::vector<SkippedFile>& skipped() const;  // what was not used, and why
  int64_t context() const;
  bool random_windows() const;

 private:
  explicit TextDataset(std::shared_ptr<const TextSource> source);
  std::shared_ptr<const TextSource> text_;
};

}  // namespace mixprec::dataset
