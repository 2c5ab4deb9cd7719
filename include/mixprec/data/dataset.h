// The dataset pipeline, in the seed's MindSpore vocabulary:
//   auto ds = MnistDataset(dir, {.usage = "train"}).map(transforms::rescale(1.0 / 255, 0))
//                 .map(transforms::normalize(0.2860, 0.3530)).shuffle(seed).batch(64, true);
//   for (const Batch& b : ds.epoch(e)) ...  // or ds.iterator(epoch, start_batch)
// A Dataset is an immutable value describing a pipeline over a shared, read-only Source; each
// call returns a new description. Execution order is fixed whatever the call order: sample
// order (file order, or the (seed, epoch) permutation) -> batch -> maps, in the order given.
// take(n) is the one call whose place matters, as in MindSpore: before batch() it counts rows
// (before shuffle(): the first n rows in file order, permuted each epoch; after shuffle(): the
// first n rows of each epoch's permutation), after batch() it counts batches.
// shard(n, k) (MnistDataset's {.num_shards, .shard_id}) keeps, of each epoch's rows, those at
// positions k, k + n, k + 2n, ... of the order every rank computes alike, so the shards of one
// epoch are disjoint; every shard gets floor(rows / n) of them (the last rows mod n are left out
// of that epoch), so all ranks have the same number of batches of the same sizes. Batch b of the
// n shards together holds exactly the rows of batch b of the unsharded data at n times the batch.
// Resume invariant: iterator(e, k) yields exactly the batches k, k+1, ... that iterator(e, 0)
// yields after skipping k, on every machine and thread count. Depends on the core layer only.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/data/transforms.h"
#include "mixprec/shape.h"
#include "mixprec/tensor.h"

namespace mixprec::dataset {

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr std::array<std::string_view, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// One batch. Tensors are fresh per batch (never reused buffers), so a Batch may be kept.
// TextDataset (data/text.h): image = the input bytes [B, context] (u8), label = the next bytes
// [B, context] (i32).
struct Batch {
  Tensor image;       // [B, C, H, W]: u8 as stored; f32 after rescale / normalize
  Tensor label;       // [B, ...label_shape] i32 ([B] for images) (unless a map on "label" changes it)
  int64_t epoch = 0;  // the epoch whose sample order it came from
  int64_t index = 0;  // its index in that epoch: resume after it with iterator(epoch, index + 1)
  int64_t size() const { return label.defined() ? label.size(0) : 0; }
};

// Where samples come from. Sample i (0 <= i < size()) is a u8 image of sample_shape() and an
// int32 label. gather() is called from the prefetch thread, concurrently with other const
// calls: implementations must be immutable after construction.
class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // e.g. {1, 28, 28}
  virtual std::string describe() const = 0;
  // The files the images were read from, in sample order (empty when they come from no file).
  virtual std::vector<std::filesystem::path> image_files() const { return {}; }
  // For messages about image shapes: "DIR/train-images-idx3-ubyte holds 27x29 images ([1, 27, 29]
  // per sample)"; describe() stands for the files when there are none.
  std::string describe_images() const;
  // Writes samples `indices` (each in [0, size())) contiguously: images gets
  // indices.size() * numel(sample_shape()) bytes, labels indices.size() * numel(label_shape())
  // values.
  virtual void gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const = 0;
  // The shape of one sample's label: {} (one int32, the default) or e.g. {context} for text.
  virtual Shape label_shape() const { return {}; }
  // gather() for epoch `epoch`, which the pipeline calls: a source whose samples depend on the
  // epoch (TextDataset's random windows) overrides it; by default the epoch is ignored.
  virtual void gather_epoch(std::span<const int64_t> indices, int64_t epoch, uint8_t* images,
                            int32_t* labels) const {
    (void)epoch;
    gather(indices, images, labels);
  }
  // The dtypes and names of the two columns: u8 "image" and i32 "label" unless the source says
  // otherwise (ArraySource holds the user's arrays as they are).
  virtual DType image_dtype() const { return DType::u8; }
  virtual DType label_dtype() const { return DType::i32; }
  virtual std::array<std::string, 2> column_names() const { return {"image", "label"}; }
  // gather_epoch into buffers of image_dtype() and label_dtype(): what the pipeline calls.
  virtual void gather_columns(std::span<const int64_t> indices, int64_t epoch, void* images,
                              void* labels) const {
    gather_epoch(indices, epoch, static_cast<uint8_t*>(images), static_cast<int32_t*>(labels));
  }
};

// Samples held in memory: row i of `data` and of `labels` (MindSpore's NumpySlicesDataset and
// GeneratorDataset; the Python module builds one from numpy arrays). Any dtype and sample shape;
// both tensors are copied to contiguous CPU memory at construction and never change.
class ArraySource : public Source {
 public:
  // `names`: the two columns' names (MindSpore's column_names), e.g. {"data", "label"}.
  ArraySource(Tensor data, Tensor labels, std::array<std::string, 2> names = {"data", "label"});
  int64_t size() const override { return data_.size(0); }
  Shape sample_shape() const override { return {data_.shape().begin() + 1, data_.shape().end()}; }
  Shape label_shape() const override {
    return {labels_.shape().begin() + 1, labels_.shape().end()};
  }
  std::string describe() const override;
  DType image_dtype() const override { return data_.dtype(); }
  DType label_dtype() const override { return labels_.dtype(); }
  std::array<std::string, 2> column_names() const override { return names_; }
  void gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const override;
  void gather_columns(std::span<const int64_t> indices, int64_t epoch, void* images,
                      void* labels) const override;

 private:
  Tensor data_, labels_;
  std::array<std::string, 2> names_;
};

inline std::string Source::describe_images() const {
  const std::vector<std::filesystem::path> files = image_files();
  std::string out;
  for (size_t i = 0; i < files.size(); ++i) out += (i ? " and " : "") + files[i].string();
  if (files.empty()) out = describe();
  const Shape s = sample_shape();
  out += files.size() > 1 ? " hold " : " holds ";
  if (s.size() >= 2) out += std::to_string(s[s.size() - 2]) + "x" + std::to_string(s.back()) + " ";
  return out + "images (" + shape_str(s) + " per sample)";
}

class Dataset;

// A move-only C++20 input iterator over the batches of one epoch. It owns the prefetch thread,
// which prepares up to `prefetch` batches ahead into a bounded queue; destroying the iterator
// early stops and joins the thread. An exception thrown while preparing batch k is rethrown by
// the access to batch k (and every later access), after batches < k were delivered normally.
class BatchIterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::input_iterator_tag;

  BatchIterator();  // an empty iterator (equal to the sentinel)
  BatchIterator(BatchIterator&&) noexcept;
  BatchIterator& operator=(BatchIterator&&) noexcept;
  ~BatchIterator();

  // The current batch; waits for it if the prefetch thread has not finished it yet.
  const Batch& operator*() const;
  const Batch* operator->() const { return &**this; }
  BatchIterator& operator++();
  void operator++(int) { ++*this; }
  friend bool operator==(const BatchIterator& it, std::default_sentinel_t) { return it.done(); }

  bool done() const;
  int64_t epoch() const;
  int64_t position() const;  // index of the current batch; num_batches() once done

 private:
  friend class Dataset;
  struct State;
  explicit BatchIterator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// `for (const Batch& b : ds.epoch(e, k))`: batches k, k+1, ... of epoch e.
class EpochRange;

class Dataset {
 public:
  explicit Dataset(std::shared_ptr<const Source> source);

  // Appends a transform on "image" or "label" (MindSpore's input_columns).
  Dataset map(Transform transform, std::string_view input_column = "image") const;
  // Shuffles samples: epoch e uses a permutation derived from (seed, e) alone.
  Dataset shuffle(uint64_t seed) const;
  // Batches of batch_size; the last one is smaller unless drop_remainder drops it.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // Batches prepared ahead by a background thread (default 2); 0 prepares them on demand.
  Dataset prefetch(int depth) const;
  // MindSpore's take(count): the first `count` rows, or batches when called after batch() (see
  // the top of this file); -1 takes everything; more than there are takes everything.
  Dataset take(int64_t count) const;
  // Shard `shard_id` of `num_shards` equal, disjoint shards of every epoch (top of this file).
  Dataset shard(int64_t num_shards, int64_t shard_id) const;

  int64_t num_samples() const;
  int64_t num_batches() const;
  int64_t get_dataset_size() const { return num_batches(); }  // MindSpore's name
  int64_t batch_size() const { return batch_size_; }
  bool drop_remainder() const { return drop_remainder_; }
  std::optional<uint64_t> shuffle_seed() const { return shuffle_seed_; }
  int64_t num_shards() const { return num_shards_; }
  int64_t shard_id() const { return shard_id_; }
  const Source& source() const { return *source_; }

  // The sample indices of epoch e in order (identity without shuffle), of this shard when sharded.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // Batch `index` of epoch `epoch`, prepared on the calling thread (O(num_samples) to order).
  Batch get_batch(int64_t epoch, int64_t index) const;
  // Batches start_batch, start_batch + 1, ... of `epoch`; start_batch may equal num_batches().
  BatchIterator iterator(int64_t epoch = 0, int64_t start_batch = 0) const;
  EpochRange epoch(int64_t epoch, int64_t start_batch = 0) const;
  // Epoch 0, for `for (const Batch& b : ds)`.
  BatchIterator begin() const { return iterator(0, 0); }
  std::default_sentinel_t end() const { return {}; }

 private:
  friend struct BatchIterator::State;
  struct MapStep {
    Transform transform;
    bool on_label;
  };
  // Permutes `order` for `epoch`: Fisher-Yates on a stream keyed by (seed, epoch) alone.
  static void shuffle_order(std::vector<int64_t>& order, uint64_t seed, int64_t epoch);
  // Builds batch `index` from the sample order (`order` null: identity).
  Batch make_batch(const std::vector<int64_t>* order, int64_t epoch, int64_t index) const;

  // Samples the epoch order is drawn from: the source, less what a take() before shuffle() cut.
  int64_t pool_size() const;
  // Rows an epoch yields before sharding: the pool, less what a take() after shuffle() cut.
  int64_t rows() const;
  // Rows of this shard before batching (rows() when not sharded).
  int64_t shard_rows() const { return rows() / num_shards_; }
  // Whether batches are built from an explicit order (shuffled or sharded).
  bool has_order() const { return shuffle_seed_.has_value() || num_shards_ > 1; }

  std::shared_ptr<const Source> source_;
  std::vector<MapStep> maps_;
  std::optional<uint64_t> shuffle_seed_;
  int64_t batch_size_ = 1;
  bool drop_remainder_ = false;
  bool batched_ = false;  // batch() was called: a later take() counts batches
  int prefetch_ = 2;
  std::optional<int64_t> take_rows_;           // take() before shuffle() and batch()
  std::optional<int64_t> take_shuffled_rows_;  // take() after shuffle(), before batch()
  std::optional<int64_t> take_batches_;        // take() after batch()
  int64_t num_shards_ = 1, shard_id_ = 0;
};

class EpochRange {
 public:
  EpochRange(Dataset dataset, int64_t epoch, int64_t start_batch)
      : dataset_(std::move(dataset)), epoch_(epoch), start_(start_batch) {}
  BatchIterator begin() const { return dataset_.iterator(epoch_, start_); }
  std::default_sentinel_t end() const { return {}; }

 private:
  Dataset dataset_;
  int64_t epoch_;
  int64_t start_;
};

// ------------------------------------------------------------------ sources

// A Dataset over ArraySource(data, labels, names): unshuffled, batch 1, as every source starts.
Dataset array_dataset(Tensor data, Tensor labels,
                      std::array<std::string, 2> names = {"data", "label"});

struct MnistOptions {
  std::string usage = "train";  // "train", "test" or "all" (train, then test)
  // The first N samples in file order (clipped to the split's size); all when unset.
  std::optional<int64_t> num_samples = std::nullopt;
  int num_classes = 10;  // every label must be < num_classes
  // Data parallel (MindSpore's num_shards / shard_id): this rank's shard of every epoch, e.g.
  // {.num_shards = communication::get_group_size(), .shard_id = communication::get_rank()}.
  int64_t num_shards = 1;
  int64_t shard_id = 0;
};

// MNIST or Fashion-MNIST from `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or
// .gz (the raw file wins when both exist). All samples are kept in memory as u8 (~55 MB for
// "all"); those bytes are not counted by the tensor allocator's memory statistics.
// source().image_files() names the image files read (one, or train then test for "all"), and
// source().describe_images() their image size, for messages.
class MnistDataset : public Dataset {
 public:
  explicit MnistDataset(const std::filesystem::path& dir = kFashionMnistDir,
                        MnistOptions options = {});
};

// MindSpore's FashionMnistDataset: the same files, format and options as MnistDataset (the
// class name in messages and describe() is the only difference); the default directory is
// where Debian's dataset-fashion-mnist package puts them.
class FashionMnistDataset : public Dataset {
 public:
  explicit FashionMnistDataset(const std::filesystem::path& dir = kFashionMnistDir,
                               MnistOptions options = {});
};

struct SyntheticOptions {
  int64_t num_samples = 1024;
  Shape image_shape = {1, 28, 28};  // per sample: [C, H, W]
  int num_classes = 10;
  uint64_t seed = 0;
};

// Random u8 images and labels in [0, num_classes), computed on the fly from (seed, index) with
// the counter-based Generator: no memory held, identical everywhere. For benchmarks and tests.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options = {});
};

}  // namespace mixprec::dataset
