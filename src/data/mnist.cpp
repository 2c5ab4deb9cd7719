// MnistDataset and FashionMnistDataset: find the four standard IDX files (raw or .gz) in a
// directory, read them with read_idx, check that image and label counts agree and that labels
// are < num_classes, and serve samples from memory (u8). Errors name the dataset class, the
// directory or file and what was expected; a path that exists but cannot be used (dangling link,
// permission error) is reported as such (path_probe.h). Not here: file parsing (idx.cpp),
// shuffling/batching/maps (pipeline.cpp).
#include <algorithm>
#include <cstring>
#include <system_error>

#include "mixprec/data/dataset.h"
#include "mixprec/data/idx.h"
#include "mixprec/error.h"
#include "path_probe.h"

namespace mixprec::dataset {
namespace {

namespace fs = std::filesystem;

std::string install_hint(const char* who) {
  return std::string("install Fashion-MNIST with `apt-get install dataset-fashion-mnist` (files under "
                     "/usr/share/datasets/fashion-mnist), or give ") +
         who + "(dir) a directory with MNIST-format IDX files";
}

// A few entries of `dir`, for "file not found" messages; the OS error if it cannot be listed.
std::string dir_listing(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) return "the directory cannot be listed: " + ec.message();
  if (names.empty()) return "the directory is empty";
  std::sort(names.begin(), names.end());
  std::string s = "the directory holds: ";
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += ", ... (" + std::to_string(names.size()) + " entries)";
  return s;
}

// `stem` raw if present, else `stem`.gz; an error listing both names if neither exists, or
// naming the path that is there but cannot be used.
fs::path find_file(const char* who, const fs::path& dir, const std::string& stem, const char* what) {
  for (const std::string& name : {stem, stem + ".gz"}) {
    const auto p = dir / name;
    const detail::PathProbe probe = detail::probe_path(p);
    if (probe.exists()) return p;
    MIXPREC_CHECK(probe.problem.empty(), who, ": ", what, " file ", p.string(), " ", probe.problem);
  }
  MIXPREC_CHECK(false, who, ": ", dir.string(), ": no ", what, " file: expected ", stem, ".gz or ",
                stem, "; ", dir_listing(dir), Hint{install_hint(who)});
  __builtin_unreachable();
}

struct Split {
  std::vector<uint8_t> images, labels;
  int64_t count = 0, height = 0, width = 0;
  std::vector<fs::path> image_files;  // where the images came from, in sample order
};

Split load_split(const char* who, const fs::path& dir, const std::string& prefix, int num_classes) {
  const auto images_path = find_file(who, dir, prefix + "-images-idx3-ubyte", (prefix + " images").c_str());
  const auto labels_path = find_file(who, dir, prefix + "-labels-idx1-ubyte", (prefix + " labels").c_str());
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  MIXPREC_CHECK(images.dims[0] == labels.dims[0], who, ": ", images_path.string(), " holds ",
                images.dims[0], " images but ", labels_path.string(), " holds ", labels.dims[0],
                " labels; expected equal counts",
                Hint{"the two files come from different datasets or one is damaged"});
  for (size_t i = 0; i < labels.data.size(); ++i) {
    MIXPREC_CHECK(labels.data[i] < num_classes, who, ": ", labels_path.string(), ": label[",
                  i, "] = ", int{labels.data[i]}, ", expected < ", num_classes, " (num_classes)",
                  Hint{"set MnistOptions::num_classes if this dataset has more classes"});
  }
  return Split{std::move(images.data), std::move(labels.data), images.dims[0], images.dims[1],
               images.dims[2], {images_path}};
}

class MnistSource final : public Source {
 public:
  MnistSource(Split split, std::string description)
      : split_(std::move(split)), description_(std::move(description)) {}
  int64_t size() const override { return split_.count; }
  Shape sample_shape() const override { return {1, split_.height, split_.width}; }
  std::string describe() const override { return description_; }
  std::vector<fs::path> image_files() const override { return split_.image_files; }
  void gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const override {
    const size_t pixels = static_cast<size_t>(split_.height * split_.width);
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t i = indices[k];
      MIXPREC_DEBUG_ASSERT(i >= 0 && i < split_.count, "sample ", i, " out of range");
      std::memcpy(images + k * pixels, split_.images.data() + static_cast<size_t>(i) * pixels,
                  pixels);
      labels[k] = split_.labels[static_cast<size_t>(i)];
    }
  }

 private:
  Split split_;
  std::string description_;
};

// Appends `b` to `a` (usage "all"); both must have the same image size.
void append_split(const char* who, Split& a, Split b) {
  MIXPREC_CHECK(a.height == b.height && a.width == b.width, who, ": ", a.image_files.front().string(), " holds ",
                a.height, "x", a.width, " images but ", b.image_files.front().string(), " holds ", b.height, "x",
                b.width, " images; expected the same size for usage \"all\"");
  a.image_files.insert(a.image_files.end(), b.image_files.begin(), b.image_files.end());
  a.images.insert(a.images.end(), b.images.begin(), b.images.end());
  a.labels.insert(a.labels.end(), b.labels.begin(), b.labels.end());
  a.count += b.count;
}

void truncate_split(Split& s, int64_t n) {
  if (n >= s.count) return;
  s.images.resize(static_cast<size_t>(n * s.height * s.width));
  s.images.shrink_to_fit();
  s.labels.resize(static_cast<size_t>(n));
  s.count = n;
}

std::shared_ptr<const Source> make_mnist_source(const char* who, const fs::path& dir, const MnistOptions& o) {
  const std::string& usage = o.usage;
  MIXPREC_CHECK(usage == "train" || usage == "test" || usage == "all",
                who, ": expected usage \"train\", \"test\" or \"all\", got \"", usage, "\"");
  MIXPREC_CHECK(!o.num_samples || *o.num_samples > 0,
                who, ": expected num_samples > 0, got ", o.num_samples.value_or(0));
  MIXPREC_CHECK(o.num_classes >= 1 && o.num_classes <= 256,
                who, ": expected num_classes in [1, 256] (labels are bytes), got ", o.num_classes);
  const detail::PathProbe probe = detail::probe_path(dir);
  MIXPREC_CHECK(probe.type == fs::file_type::directory, who, ": ", dir.string(),
                ": expected a directory with the MNIST/Fashion-MNIST files, found ",
                !probe.problem.empty() ? "a path that " + probe.problem
                : probe.exists()       ? std::string("a file")
                                       : std::string("nothing"),
                Hint{install_hint(who)});
  Split split = load_split(who, dir, usage == "test" ? "t10k" : "train", o.num_classes);
  if (usage == "all") append_split(who, split, load_split(who, dir, "t10k", o.num_classes));
  if (o.num_samples) truncate_split(split, *o.num_samples);
  const std::string description = std::string(who) + "(" + dir.string() + ", usage=" + usage + ", " +
                                  std::to_string(split.count) + " samples)";
  return std::make_shared<MnistSource>(std::move(split), description);
}

}  // namespace

MnistDataset::MnistDataset(const std::filesystem::path& dir, MnistOptions options)
    : Dataset(make_mnist_source("MnistDataset", dir, options)) {
  if (options.num_shards != 1 || options.shard_id != 0) Dataset::operator=(shard(options.num_shards, options.shard_id));
}

FashionMnistDataset::FashionMnistDataset(const std::filesystem::path& dir, MnistOptions options)
    : Dataset(make_mnist_source("FashionMnistDataset", dir, options)) {
  if (options.num_shards != 1 || options.shard_id != 0) Dataset::operator=(shard(options.num_shards, options.shard_id));
}

}  // namespace mixprec::dataset
