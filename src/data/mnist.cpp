// MnistDataset: finds the four standard IDX files (raw or .gz) in a directory, reads them with
// read_idx, checks that image and label counts agree and that labels are < num_classes, and
// serves samples from memory (u8). Errors name the directory or file and what was expected.
// Not here: file parsing (idx.cpp), shuffling/batching/maps (pipeline.cpp).
#include <algorithm>
#include <cstring>
#include <system_error>

#include "mixprec/data/dataset.h"
#include "mixprec/data/idx.h"
#include "mixprec/error.h"

namespace mixprec::dataset {
namespace {

constexpr const char* kInstallHint =
    "install Fashion-MNIST with `apt-get install dataset-fashion-mnist` (files under "
    "/usr/share/datasets/fashion-mnist), or pass --data DIR naming a directory with "
    "MNIST-format IDX files";

// A few entries of `dir`, for "file not found" messages.
std::string dir_listing(const std::filesystem::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    names.push_back(it->path().filename().string());
  if (names.empty()) return "the directory is empty";
  std::sort(names.begin(), names.end());
  std::string s = "the directory holds: ";
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += ", ... (" + std::to_string(names.size()) + " entries)";
  return s;
}

// `stem` raw if present, else `stem`.gz; an error listing both names if neither exists.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& stem,
                                const char* what) {
  std::error_code ec;
  for (const std::string& name : {stem, stem + ".gz"}) {
    const auto p = dir / name;
    if (std::filesystem::exists(p, ec)) return p;
  }
  MIXPREC_CHECK(false, "MnistDataset: ", dir.string(), ": no ", what, " file: expected ", stem,
                ".gz or ", stem, "; ", dir_listing(dir), Hint{kInstallHint});
  __builtin_unreachable();
}

struct Split {
  std::vector<uint8_t> images, labels;
  int64_t count = 0, height = 0, width = 0;
};

Split load_split(const std::filesystem::path& dir, const std::string& prefix, int num_classes) {
  const auto images_path =
      find_file(dir, prefix + "-images-idx3-ubyte", (prefix + " images").c_str());
  const auto labels_path =
      find_file(dir, prefix + "-labels-idx1-ubyte", (prefix + " labels").c_str());
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  MIXPREC_CHECK(images.dims[0] == labels.dims[0], "MnistDataset: ", images_path.string(), " holds ",
                images.dims[0], " images but ", labels_path.string(), " holds ", labels.dims[0],
                " labels; expected equal counts",
                Hint{"the two files come from different datasets or one is damaged"});
  for (size_t i = 0; i < labels.data.size(); ++i) {
    MIXPREC_CHECK(labels.data[i] < num_classes, "MnistDataset: ", labels_path.string(), ": label[",
                  i, "] = ", int{labels.data[i]}, ", expected < ", num_classes, " (num_classes)",
                  Hint{"set MnistOptions::num_classes if this dataset has more classes"});
  }
  return Split{std::move(images.data), std::move(labels.data), images.dims[0], images.dims[1],
               images.dims[2]};
}

class MnistSource final : public Source {
 public:
  MnistSource(Split split, std::string description)
      : split_(std::move(split)), description_(std::move(description)) {}
  int64_t size() const override { return split_.count; }
  Shape sample_shape() const override { return {1, split_.height, split_.width}; }
  std::string describe() const override { return description_; }
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
void append_split(Split& a, Split b, const std::filesystem::path& dir) {
  MIXPREC_CHECK(a.height == b.height && a.width == b.width, "MnistDataset: ", dir.string(),
                ": train images are ", a.height, "x", a.width, " but test images are ", b.height,
                "x", b.width, "; expected the same size for usage \"all\"");
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

std::shared_ptr<const Source> make_mnist_source(const std::filesystem::path& dir,
                                                const MnistOptions& o) {
  const std::string& usage = o.usage;
  MIXPREC_CHECK(usage == "train" || usage == "test" || usage == "all",
                "MnistDataset: expected usage \"train\", \"test\" or \"all\", got \"", usage, "\"");
  MIXPREC_CHECK(!o.num_samples || *o.num_samples > 0,
                "MnistDataset: expected num_samples > 0, got ", o.num_samples.value_or(0));
  MIXPREC_CHECK(o.num_classes >= 1 && o.num_classes <= 256,
                "MnistDataset: expected num_classes in [1, 256] (labels are bytes), got ",
                o.num_classes);
  std::error_code ec;
  MIXPREC_CHECK(std::filesystem::is_directory(dir, ec), "MnistDataset: ", dir.string(),
                ": expected a directory with the MNIST/Fashion-MNIST files, found ",
                std::filesystem::exists(dir, ec) ? "a file" : "nothing", Hint{kInstallHint});
  Split split = load_split(dir, usage == "test" ? "t10k" : "train", o.num_classes);
  if (usage == "all") append_split(split, load_split(dir, "t10k", o.num_classes), dir);
  if (o.num_samples) truncate_split(split, *o.num_samples);
  const std::string description = "MnistDataset(" + dir.string() + ", usage=" + usage + ", " +
                                  std::to_string(split.count) + " samples)";
  return std::make_shared<MnistSource>(std::move(split), description);
}

}  // namespace

MnistDataset::MnistDataset(const std::filesystem::path& dir, MnistOptions options)
    : Dataset(make_mnist_source(dir, options)) {}

}  // namespace mixprec::dataset
