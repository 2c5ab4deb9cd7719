// TextDataset (data/text.h): reads a text file or a folder's text files into memory (bytes,
// as they are), decides which entries are text, splits each file into its train part (the
// first n - n / 10 bytes) and validation part (the last n / 10), and serves windows of
// context + 1 bytes of one part: random (start drawn from the Philox stream of (seed, epoch),
// block `index`) or consecutive (stride context). Errors name the path and what was expected;
// a path that exists but cannot be used is reported as such (path_probe.h). Only regular files
// are read, each checked as text while it is read, up to max_bytes in all.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "mixprec/data/text.h"
#include "mixprec/error.h"
#include "mixprec/rng.h"
#include "path_probe.h"

namespace mixprec::dataset {
namespace fs = std::filesystem;

namespace {

constexpr const char* kWho = "TextDataset";

std::string install_hint() {
  return "install the fortunes package (`apt-get install fortunes`, which scripts/setup.sh does: "
         "text under "
         "/usr/share/games/fortunes), or give TextDataset(path) a text file or a folder of text "
         "files";
}

// Checks b[from, end) as text and moves `from` past the last complete character: "" while it is
// text, else why not: a NUL byte, or the first offset that is not valid UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF). A character cut at the end of `b` waits
// for the next bytes, unless `final`.
std::string check_text(const std::vector<uint8_t>& b, size_t& from, bool final) {
  const size_t n = b.size();
  for (size_t& i = from; i < n;) {
    const uint8_t c = b[i];
    if (c == 0) return "binary: NUL byte at offset " + std::to_string(i);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    if (len > 0 && i + len > n && !final) return "";  // the rest of it comes with the next read
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (b[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (b[i + k] & 0x3Fu);
    }
    ok = ok && !(len == 2 && cp < 0x80) &&
         !(len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) &&
         !(len == 4 && (cp < 0x10000 || cp > 0x10FFFF));
    if (!ok) return "binary: not UTF-8 at offset " + std::to_string(i);
    i += len;
  }
  return "";
}

std::string limit_hint() {
  return "TextDataset holds its text in memory: give it a smaller file or folder, or raise "
         "TextOptions::max_bytes";
}

// Reads the regular file `p` while checking it is text: stops at the first byte that is not
// (setting `not_text`), and refuses a file that would take the text read so far past `budget`
// bytes (by its size, or as it grows while read).
std::vector<uint8_t> read_text(const fs::path& p, int64_t budget, std::string& not_text) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(p.c_str(), "rb"), &std::fclose);
  MIXPREC_CHECK(f != nullptr, kWho, ": ", p.string(), ": cannot open: ", std::strerror(errno));
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  MIXPREC_CHECK(ec || size <= static_cast<uintmax_t>(budget), kWho, ": ", p.string(), ": ", size,
                " bytes would exceed the limit of the text read in all (", budget, " bytes left)",
                Hint{limit_hint()});
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  size_t checked = 0;
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    out.insert(out.end(), buf, buf + n);
    MIXPREC_CHECK(out.size() <= static_cast<uint64_t>(budget), kWho, ": ", p.string(),
                  ": more than the ", budget, " bytes left of the limit of the text read in all",
                  Hint{limit_hint()});
    const bool last = n < sizeof buf;
    not_text = check_text(out, checked, last);
    if (!not_text.empty()) return out;
    if (last) {
      MIXPREC_CHECK(!std::ferror(f.get()), kWho, ": ", p.string(), ": cannot read (after ",
                    out.size(), " bytes): ", std::strerror(errno));
      return out;
    }
  }
}

struct Part {
  int64_t begin = 0, end = 0;  // in the concatenated bytes
};

}  // namespace

// The bytes of every file used, one part of each, and how windows map onto them.
class TextSource final : public Source {
 public:
  TextSource(const fs::path& path, TextOptions o);

  int64_t size() const override { return windows_; }
  Shape sample_shape() const override { return {o_.context}; }
  Shape label_shape() const override { return {o_.context}; }
  std::string describe() const override { return description_; }
  void gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const override {
    gather_epoch(indices, 0, images, labels);
  }
  void gather_epoch(std::span<const int64_t> indices, int64_t epoch, uint8_t* images,
                    int32_t* labels) const override;

  std::vector<TextFile> files;
  std::vector<SkippedFile> skipped;
  const TextOptions& options() const { return o_; }
  bool random() const { return random_; }

 private:
  void add_file(const fs::path& p, bool in_folder);
  void read_folder(const fs::path& dir);
  int64_t window_start(int64_t index, int64_t epoch) const;

  TextOptions o_;
  bool random_ = true;
  std::vector<uint8_t> bytes_;
  std::vector<Part> parts_;
  std::vector<int64_t> first_;  // per part: its first window (consecutive) or start (random) index
  int64_t windows_ = 0, starts_ = 0;
  std::string description_;
};

void TextSource::add_file(const fs::path& p, bool in_folder) {
  std::string why;
  std::vector<uint8_t> b = read_text(p, o_.max_bytes - static_cast<int64_t>(bytes_.size()), why);
  if (!why.empty()) {
    MIXPREC_CHECK(in_folder, kWho, ": ", p.string(), " is not a text file (", why, ")",
                  Hint{"TextDataset reads UTF-8 text without NUL bytes"});
    skipped.push_back({p, why});
    return;
  }
  const int64_t n = static_cast<int64_t>(b.size()), split = n - n / 10;
  const bool train = o_.usage == "train";
  const int64_t part = train ? split : n - split;
  if (part < o_.context + 1) {
    const std::string why =
        "too short: its " + o_.usage + " part holds " + std::to_string(part) +
        " bytes, a window needs context + 1 = " + std::to_string(o_.context + 1);
    MIXPREC_CHECK(
        in_folder, kWho, ": ", p.string(), ": ", why,
        Hint{"use a smaller context, or a longer file (the validation part is the last 10%)"});
    skipped.push_back({p, why});
    return;
  }
  const int64_t at = static_cast<int64_t>(bytes_.size()) + (train ? 0 : split);
  parts_.push_back({at, at + part});
  bytes_.insert(bytes_.end(), b.begin(), b.end());
  files.push_back({p, n, part});
}

void TextSource::read_folder(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    entries.push_back(it->path());
  MIXPREC_CHECK(!ec, kWho, ": ", dir.string(), ": the folder cannot be listed: ", ec.message());
  MIXPREC_CHECK(!entries.empty(), kWho, ": ", dir.string(),
                ": the folder is empty; expected text files", Hint{install_hint()});
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    const fs::file_status ls = fs::symlink_status(p, ec);
    MIXPREC_CHECK(!ec, kWho, ": ", p.string(), " cannot be examined: ", ec.message());
    if (fs::is_symlink(ls))
      skipped.push_back({p, "symbolic link (links are not followed in a folder)"});
    else if (fs::is_directory(ls)) skipped.push_back({p, "a folder (subfolders are not read)"});
    else if (!fs::is_regular_file(ls)) skipped.push_back({p, "not a regular file"});
    else add_file(p, /*in_folder=*/true);
  }
  if (!files.empty()) return;
  std::string list;
  for (size_t i = 0; i < skipped.size() && i < 6; ++i)
    list += (i ? "; " : "") + skipped[i].path.filename().string() + ": " + skipped[i].reason;
  if (skipped.size() > 6) list += "; ... (" + std::to_string(skipped.size()) + " entries)";
  MIXPREC_CHECK(false, kWho, ": ", dir.string(), ": no usable text file (", list, ")",
                Hint{install_hint()});
}

TextSource::TextSource(const fs::path& path, TextOptions o) : o_(std::move(o)) {
  MIXPREC_CHECK(o_.usage == "train" || o_.usage == "validation", kWho,
                ": expected usage \"train\" or \"validation\", got \"", o_.usage, "\"");
  MIXPREC_CHECK(o_.context >= 1 && o_.context <= (int64_t{1} << 24), kWho,
                ": expected a context in [1, 2^24], got ", o_.context);
  random_ = o_.random_windows.value_or(o_.usage == "train");
  MIXPREC_CHECK(random_ || !o_.num_windows, kWho,
                ": num_windows applies to random windows; consecutive "
                "windows cover the part once",
                Hint{"use take(n) for fewer windows"});
  MIXPREC_CHECK(!o_.num_windows || *o_.num_windows >= 1, kWho, ": expected num_windows >= 1, got ",
                o_.num_windows.value_or(0));
  MIXPREC_CHECK(o_.max_bytes >= 1, kWho, ": expected max_bytes >= 1, got ", o_.max_bytes);
  const detail::PathProbe probe = detail::probe_path(path);
  MIXPREC_CHECK(probe.exists(), kWho, ": ", path.string(),
                ": expected a text file or a folder of text files, found ",
                probe.problem.empty() ? std::string("nothing") : "a path that " + probe.problem,
                Hint{install_hint()});
  // A device or FIFO never ends (/dev/zero, /dev/urandom) or blocks: refused before a read.
  MIXPREC_CHECK(probe.type == fs::file_type::regular || probe.type == fs::file_type::directory,
                kWho, ": ", path.string(),
                ": expected a regular text file or a folder of them, found ",
                detail::file_type_name(probe.type), Hint{install_hint()});
  if (probe.type == fs::file_type::directory) read_folder(path);
  else add_file(path, /*in_folder=*/false);
  // Consecutive windows of a part of R bytes: (R - 1) / context; random starts: R - context.
  int64_t consecutive = 0;
  for (const Part& p : parts_) {
    const int64_t r = p.end - p.begin;
    first_.push_back(random_ ? starts_ : consecutive);
    consecutive += (r - 1) / o_.context;
    starts_ += r - o_.context;
  }
  windows_ = random_ ? o_.num_windows.value_or(consecutive) : consecutive;
  int64_t part_bytes = 0;
  for (const TextFile& f : files) part_bytes += f.part_bytes;
  description_ =
      std::string(kWho) + "(" + path.string() + ", usage=" + o_.usage + ", " +
      std::to_string(files.size()) + " files, " + std::to_string(part_bytes) + " bytes, " +
      std::to_string(windows_) + (random_ ? " random" : " consecutive") + " windows of " +
      std::to_string(o_.context) + " + 1 bytes" +
      (random_ ? ", seed " + std::to_string(o_.seed) : "") +
      (skipped.empty() ? "" : ", " + std::to_string(skipped.size()) + " entries skipped") + ")";
}

int64_t TextSource::window_start(int64_t index, int64_t epoch) const {
  int64_t k = index;
  if (random_) {
    // The epoch's key is block `epoch` of the seed's stream (as the pipeline's shuffle); window
    // `index` takes block `index` of that key, mapped onto [0, starts) by a 64x64 -> high-64
    // multiply.
    const auto key = Generator(o_.seed).block(static_cast<uint64_t>(epoch));
    const auto r = Generator((static_cast<uint64_t>(key[0]) << 32) | key[1])
                       .block(static_cast<uint64_t>(index));
    const uint64_t u = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    k = static_cast<int64_t>((static_cast<unsigned __int128>(u) * static_cast<uint64_t>(starts_)) >>
                             64);
  }
  const size_t part =
      static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), k) - first_.begin()) - 1;
  const int64_t within = k - first_[part];
  return parts_[part].begin + (random_ ? within : within * o_.context);
}

void TextSource::gather_epoch(std::span<const int64_t> indices, int64_t epoch, uint8_t* images,
                              int32_t* labels) const {
  const size_t c = static_cast<size_t>(o_.context);
  for (size_t s = 0; s < indices.size(); ++s) {
    MIXPREC_DEBUG_ASSERT(indices[s] >= 0 && indices[s] < windows_, "window ", indices[s],
                         " out of range");
    const uint8_t* w = bytes_.data() + window_start(indices[s], epoch);
    std::memcpy(images + s * c, w, c);
    for (size_t j = 0; j < c; ++j) labels[s * c + j] = w[j + 1];
  }
}

TextDataset::TextDataset(const fs::path& path, TextOptions options)
    : TextDataset(std::make_shared<const TextSource>(path, std::move(options))) {}
TextDataset::TextDataset(std::shared_ptr<const TextSource> source)
    : Dataset(source), text_(std::move(source)) {}

const std::vector<TextFile>& TextDataset::files() const { return text_->files; }
const std::vector<SkippedFile>& TextDataset::skipped() const { return text_->skipped; }
int64_t TextDataset::context() const { return text_->options().context; }
bool TextDataset::random_windows() const { return text_->random(); }

}  // namespace mixprec::dataset
