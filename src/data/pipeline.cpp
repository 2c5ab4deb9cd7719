// Dataset (the pipeline description) and BatchIterator (its execution with a prefetch thread).
// Epoch order: Fisher-Yates driven by a Philox stream whose key is derived from (seed, epoch)
// alone, so any epoch's order can be rebuilt anywhere, which is what makes iterator(e, k) an
// exact resume. Prefetch: one producer thread, a bounded queue of `depth` batches, stop flag
// and join on destruction; the producer's exception is stored and rethrown to the consumer.
// Not here: reading files (mnist.cpp, idx.cpp), the transforms themselves (transforms.cpp).
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "mixprec/data/dataset.h"
#include "mixprec/error.h"
#include "mixprec/rng.h"

namespace mixprec::dataset {

// ------------------------------------------------------------------ Dataset

Dataset::Dataset(std::shared_ptr<const Source> source) : source_(std::move(source)) {
  MIXPREC_CHECK(source_ != nullptr, "Dataset: expected a source, got null");
}

Dataset Dataset::map(Transform transform, std::string_view input_column) const {
  // The first column is "image" (or the source's own name for it), the second "label".
  const std::array<std::string, 2> names = source_->column_names();
  const bool first = input_column == "image" || input_column == names[0];
  const bool second = input_column == "label" || input_column == names[1];
  MIXPREC_CHECK(first || second, "Dataset::map(", transform.name, "): expected input_column \"",
                names[0], "\" or \"", names[1], "\", got \"", input_column, "\"");
  MIXPREC_CHECK(static_cast<bool>(transform.apply), "Dataset::map(", transform.name,
                "): expected a transform with a function, got an empty one");
  Dataset d = *this;
  d.maps_.push_back({std::move(transform), !first});
  return d;
}

Dataset Dataset::shuffle(uint64_t seed) const {
  MIXPREC_CHECK(!take_shuffled_rows_, "Dataset::shuffle: called after shuffle().take(",
                *take_shuffled_rows_, "); the pipeline has one permutation per epoch",
                Hint{"call shuffle() once; take() before it keeps the same rows every epoch, after it "
                     "draws new ones"});
  Dataset d = *this;
  d.shuffle_seed_ = seed;
  return d;
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  MIXPREC_CHECK(batch_size > 0, "Dataset::batch: expected batch_size > 0, got ", batch_size);
  MIXPREC_CHECK(!take_batches_, "Dataset::batch: called after batch().take(", *take_batches_,
                "), which counts batches of the earlier batch size",
                Hint{"call batch() once, then take(n) for n batches"});
  Dataset d = *this;
  d.batch_size_ = batch_size;
  d.drop_remainder_ = drop_remainder;
  d.batched_ = true;
  return d;
}

Dataset Dataset::take(int64_t count) const {
  MIXPREC_CHECK(count > 0 || count == -1, "Dataset::take: expected count > 0, or -1 for all, got ", count);
  Dataset d = *this;
  if (count == -1) return d;
  std::optional<int64_t>& slot = batched_ ? d.take_batches_ : shuffle_seed_ ? d.take_shuffled_rows_ : d.take_rows_;
  slot = std::min(count, slot.value_or(count));
  return d;
}

Dataset Dataset::shard(int64_t num_shards, int64_t shard_id) const {
  MIXPREC_CHECK(num_shards >= 1 && shard_id >= 0 && shard_id < num_shards,
                "Dataset::shard: expected num_shards >= 1 and 0 <= shard_id < num_shards, got num_shards ",
                num_shards, ", shard_id ", shard_id);
  MIXPREC_CHECK(num_shards_ == 1, "Dataset::shard: the dataset is already shard ", shard_id_, " of ", num_shards_,
                Hint{"shard once, with the number of ranks"});
  MIXPREC_CHECK(!take_batches_, "Dataset::shard: called after batch().take(", *take_batches_,
                "), which counts batches of the unsharded data", Hint{"shard before batch() and take()"});
  Dataset d = *this;
  d.num_shards_ = num_shards;
  d.shard_id_ = shard_id;
  return d;
}

Dataset Dataset::prefetch(int depth) const {
  MIXPREC_CHECK(depth >= 0 && depth <= 64, "Dataset::prefetch: expected a depth in [0, 64], got ",
                depth);
  Dataset d = *this;
  d.prefetch_ = depth;
  return d;
}

int64_t Dataset::pool_size() const { return std::min(source_->size(), take_rows_.value_or(source_->size())); }

int64_t Dataset::rows() const {
  const int64_t pool = pool_size();
  return std::min(pool, take_shuffled_rows_.value_or(pool));
}

int64_t Dataset::num_samples() const {
  const int64_t n = shard_rows();
  const int64_t all_batches = drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  if (!take_batches_ || *take_batches_ >= all_batches) return n;
  return *take_batches_ * batch_size_;  // the taken batches are all full ones
}

int64_t Dataset::num_batches() const {
  const int64_t n = num_samples();
  return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> Dataset::epoch_order(int64_t epoch) const {
  MIXPREC_CHECK(epoch >= 0, "Dataset::epoch_order: expected epoch >= 0, got ", epoch);
  const int64_t n = pool_size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (shuffle_seed_) shuffle_order(order, *shuffle_seed_, epoch);
  order.resize(static_cast<size_t>(rows()));  // a take() after shuffle() keeps the first rows
  if (num_shards_ > 1) {
    const int64_t per = shard_rows();
    for (int64_t i = 0; i < per; ++i) order[i] = order[i * num_shards_ + shard_id_];
  }
  order.resize(static_cast<size_t>(num_samples()));
  return order;
}

// Permutes `order` for `epoch` of `seed`.
void Dataset::shuffle_order(std::vector<int64_t>& order, uint64_t seed, int64_t epoch) {
  const int64_t n = static_cast<int64_t>(order.size());
  // The epoch's key is block `epoch` of the seed's stream; the shuffle draws from that key's
  // stream from counter 0. Draw i picks j in [0, i] by a 64x64 -> high-64 multiply (bias below
  // n / 2^64, i.e. none that any test could see).
  const auto key = Generator(seed).block(static_cast<uint64_t>(epoch));
  Generator g((static_cast<uint64_t>(key[0]) << 32) | key[1]);
  for (int64_t i = n - 1; i > 0; --i) {
    const unsigned __int128 r =
        static_cast<unsigned __int128>(g.next_u64()) * static_cast<unsigned __int128>(i + 1);
    std::swap(order[i], order[static_cast<int64_t>(r >> 64)]);
  }
}

Batch Dataset::make_batch(const std::vector<int64_t>* order, int64_t epoch, int64_t index) const {
  const int64_t n = num_samples();
  const int64_t first = index * batch_size_;
  const int64_t count = std::min(batch_size_, n - first);
  MIXPREC_ASSERT(index >= 0 && count > 0, "batch ", index, " is out of range");
  std::vector<int64_t> identity;
  std::span<const int64_t> indices;
  if (order != nullptr) {
    indices = std::span<const int64_t>(order->data() + first, static_cast<size_t>(count));
  } else {
    identity.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) identity[i] = first + i;
    indices = identity;
  }
  Shape image_shape = source_->sample_shape();
  image_shape.insert(image_shape.begin(), count);
  Shape label_shape = source_->label_shape();
  label_shape.insert(label_shape.begin(), count);
  Batch b;
  b.image = Tensor::empty(image_shape, {.dtype = source_->image_dtype()});
  b.label = Tensor::empty(label_shape, {.dtype = source_->label_dtype()});
  source_->gather_columns(indices, epoch, b.image.data_ptr(), b.label.data_ptr());
  b.epoch = epoch;
  b.index = index;
  for (const MapStep& m : maps_) {
    Tensor& column = m.on_label ? b.label : b.image;
    Tensor out = m.transform.apply(column);
    MIXPREC_CHECK(out.defined() && out.dim() >= 1 && out.size(0) == count, "Dataset::map(",
                  m.transform.name, "): expected a ", m.on_label ? "label" : "image",
                  " batch with ", count, " rows, got ",
                  out.defined() ? shape_str(out.shape()) : std::string("an undefined tensor"),
                  Hint{"transforms must keep the batch dimension (they act per sample)"});
    column = std::move(out);
  }
  return b;
}

Batch Dataset::get_batch(int64_t epoch, int64_t index) const {
  MIXPREC_CHECK(index >= 0 && index < num_batches(),
                "Dataset::get_batch: expected a batch index in [0, ", num_batches(), "), got ",
                index);
  if (!has_order()) return make_batch(nullptr, epoch, index);
  const std::vector<int64_t> order = epoch_order(epoch);
  return make_batch(&order, epoch, index);
}

EpochRange Dataset::epoch(int64_t epoch, int64_t start_batch) const {
  return EpochRange(*this, epoch, start_batch);
}

// ------------------------------------------------------------------ BatchIterator

struct BatchIterator::State {
  Dataset dataset;
  int64_t epoch = 0;
  int64_t end = 0;             // num_batches()
  int64_t position = 0;        // the consumer's current batch
  std::vector<int64_t> order;  // empty without shuffle (identity)
  std::optional<Batch> current;

  // Prefetch (only `error` is used with depth 0). Guarded by mu while the producer runs:
  // queue, stop, producer_done, error.
  std::mutex mu;
  std::condition_variable not_full, not_empty;
  std::deque<Batch> queue;
  bool stop = false;
  bool producer_done = false;
  std::exception_ptr error;
  std::thread producer;

  State(Dataset ds, int64_t e, int64_t start) : dataset(std::move(ds)), epoch(e), position(start) {
    end = dataset.num_batches();
    if (dataset.has_order()) order = dataset.epoch_order(epoch);
    if (dataset.prefetch_ > 0 && position < end)
      producer = std::thread([this, start] { produce(start); });
  }

  ~State() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    not_full.notify_all();
    if (producer.joinable()) producer.join();
  }

  Batch build(int64_t index) const {
    return dataset.make_batch(order.empty() ? nullptr : &order, epoch, index);
  }

  // The producer thread: batches start .. end-1 in order, at most `depth` ahead.
  void produce(int64_t start) {
    const size_t depth = static_cast<size_t>(dataset.prefetch_);
    for (int64_t index = start; index < end; ++index) {
      {
        std::unique_lock<std::mutex> lock(mu);
        not_full.wait(lock, [&] { return stop || queue.size() < depth; });
        if (stop) break;
      }
      try {
        Batch b = build(index);
        std::lock_guard<std::mutex> lock(mu);
        queue.push_back(std::move(b));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        error = std::current_exception();
        break;
      }
      not_empty.notify_one();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      producer_done = true;
    }
    not_empty.notify_one();
  }

  // Moves to the next batch. A batch never looked at is still made (and taken off the queue),
  // so both modes behave alike, errors included.
  void advance() {
    fetch();
    current.reset();
    ++position;
  }

  // Makes `current` hold batch `position` (which must be < end).
  void fetch() {
    if (current) return;
    if (dataset.prefetch_ == 0) {
      if (error) std::rethrow_exception(error);
      try {
        current = build(position);
      } catch (...) {
        error = std::current_exception();  // sticky, as with prefetch
        throw;
      }
      return;
    }
    std::unique_lock<std::mutex> lock(mu);
    not_empty.wait(lock, [&] { return !queue.empty() || producer_done; });
    if (queue.empty()) {
      if (error) std::rethrow_exception(error);
      MIXPREC_ASSERT(false, "prefetch thread stopped before batch ", position);
    }
    current = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    not_full.notify_one();
    MIXPREC_ASSERT(current->index == position, "prefetched batch ", current->index, " where batch ",
                   position, " was expected");
  }
};

BatchIterator::BatchIterator() = default;
BatchIterator::BatchIterator(std::unique_ptr<State> state) : state_(std::move(state)) {}
BatchIterator::BatchIterator(BatchIterator&&) noexcept = default;
BatchIterator& BatchIterator::operator=(BatchIterator&&) noexcept = default;
BatchIterator::~BatchIterator() = default;

bool BatchIterator::done() const { return state_ == nullptr || state_->position >= state_->end; }
int64_t BatchIterator::epoch() const { return state_ ? state_->epoch : 0; }
int64_t BatchIterator::position() const { return state_ ? state_->position : 0; }

const Batch& BatchIterator::operator*() const {
  MIXPREC_CHECK(!done(), "BatchIterator: dereferenced past the last batch of the epoch");
  state_->fetch();
  return *state_->current;
}

BatchIterator& BatchIterator::operator++() {
  MIXPREC_CHECK(!done(), "BatchIterator: incremented past the last batch of the epoch");
  state_->advance();
  return *this;
}

BatchIterator Dataset::iterator(int64_t epoch, int64_t start_batch) const {
  MIXPREC_CHECK(epoch >= 0, "Dataset::iterator: expected epoch >= 0, got ", epoch);
  MIXPREC_CHECK(start_batch >= 0 && start_batch <= num_batches(),
                "Dataset::iterator: expected start_batch in [0, ", num_batches(),
                "] (batches per epoch), got ", start_batch);
  return BatchIterator(std::make_unique<BatchIterator::State>(*this, epoch, start_batch));
}

}  // namespace mixprec::dataset
