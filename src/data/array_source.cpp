// ArraySource: samples held in memory as two tensors (data/array_source in dataset.h), for
// NumpySlicesDataset and GeneratorDataset. Immutable after construction, so gather() may run on
// the prefetch thread; rows are copied by bytes, whatever the dtype.
#include <cstring>

#include "mixprec/data/dataset.h"
#include "mixprec/error.h"

namespace mixprec::dataset {
namespace {

Tensor contiguous_cpu(const Tensor& t, const std::string& name) {
  MIXPREC_CHECK(t.defined(), "ArraySource: column '", name, "' is undefined");
  MIXPREC_CHECK(t.dim() >= 1, "ArraySource: column '", name,
                "' must have a first (sample) dimension, got shape ", shape_str(t.shape()),
                Hint{"a column holds one row per sample: an array of shape [N, ...]"});
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.to(Device::cpu());
  return c.contiguous().clone();  // owned: later writes to the caller's tensor do not reach it
}

void copy_rows(const Tensor& from, std::span<const int64_t> indices, void* out) {
  const size_t row = static_cast<size_t>(from.numel() / std::max<int64_t>(from.size(0), 1)) *
                     dtype_size(from.dtype());
  const auto* src = static_cast<const uint8_t*>(from.data_ptr());
  auto* dst = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < indices.size(); ++i) {
    MIXPREC_ASSERT(indices[i] >= 0 && indices[i] < from.size(0), "ArraySource: sample ", indices[i],
                   " out of range");
    std::memcpy(dst + i * row, src + static_cast<size_t>(indices[i]) * row, row);
  }
}

}  // namespace

ArraySource::ArraySource(Tensor data, Tensor labels, std::array<std::string, 2> names)
    : data_(contiguous_cpu(data, names[0])),
      labels_(contiguous_cpu(labels, names[1])),
      names_(std::move(names)) {
  MIXPREC_CHECK(data_.size(0) == labels_.size(0), "ArraySource: column '", names_[0], "' has ",
                data_.size(0), " samples and column '", names_[1], "' has ", labels_.size(0),
                Hint{"every column needs one row per sample"});
  MIXPREC_CHECK(names_[0] != names_[1], "ArraySource: the two columns are both named '", names_[0],
                "'");
}

std::string ArraySource::describe() const {
  return "in-memory arrays (" + std::to_string(size()) + " samples; '" + names_[0] + "' " +
         std::string(dtype_name(data_.dtype())) + " " + shape_str(sample_shape()) + ", '" +
         names_[1] + "' " + std::string(dtype_name(labels_.dtype())) + " " +
         shape_str(label_shape()) + " per sample)";
}

void ArraySource::gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const {
  MIXPREC_CHECK(data_.dtype() == DType::u8 && labels_.dtype() == DType::i32,
                "ArraySource::gather: holds ", dtype_name(data_.dtype()), " and ",
                dtype_name(labels_.dtype()), ", not u8 images and i32 labels",
                Hint{"use gather_columns (the pipeline does)"});
  gather_columns(indices, 0, images, labels);
}

void ArraySource::gather_columns(std::span<const int64_t> indices, int64_t, void* images,
                                 void* labels) const {
  copy_rows(data_, indices, images);
  copy_rows(labels_, indices, labels);
}

Dataset array_dataset(Tensor data, Tensor labels, std::array<std::string, 2> names) {
  return Dataset(
      std::make_shared<const ArraySource>(std::move(data), std::move(labels), std::move(names)));
}

}  // namespace mixprec::dataset
