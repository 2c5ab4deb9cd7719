// SyntheticDataset: random u8 images and labels computed on demand from (seed, sample index)
// with the counter-based Philox generator, so any sample is reproducible without storing it.
// Sample i's pixels are the bytes of Philox blocks [i * B, (i + 1) * B) of key `seed` (B blocks
// of 16 bytes cover one image); its label comes from block i of a second key derived from seed.
#include "mixprec/data/dataset.h"
#include "mixprec/error.h"
#include "mixprec/rng.h"

namespace mixprec::dataset {
namespace {

class SyntheticSource final : public Source {
 public:
  explicit SyntheticSource(SyntheticOptions o) : o_(std::move(o)) {
    MIXPREC_CHECK(o_.num_samples > 0, "SyntheticDataset: expected num_samples > 0, got ",
                  o_.num_samples);
    MIXPREC_CHECK(
        !o_.image_shape.empty(),
        "SyntheticDataset: expected an image_shape such as {1, 28, 28}, got an empty one");
    for (int64_t d : o_.image_shape)
      MIXPREC_CHECK(d > 0, "SyntheticDataset: expected image_shape dims > 0, got ",
                    shape_str(o_.image_shape));
    numel_ = shape_numel(o_.image_shape);
    MIXPREC_CHECK(numel_ <= (int64_t{1} << 30),
                  "SyntheticDataset: expected at most 2^30 pixels per sample, got ",
                  shape_str(o_.image_shape));
    MIXPREC_CHECK(o_.num_classes >= 1, "SyntheticDataset: expected num_classes >= 1, got ",
                  o_.num_classes);
    blocks_ = static_cast<uint64_t>((numel_ + 15) / 16);
    MIXPREC_CHECK(o_.num_samples <= (int64_t{1} << 62) / static_cast<int64_t>(blocks_),
                  "SyntheticDataset: num_samples ", o_.num_samples, " x image_shape ",
                  shape_str(o_.image_shape), " is too large");
  }
  int64_t size() const override { return o_.num_samples; }
  Shape sample_shape() const override { return o_.image_shape; }
  std::string describe() const override {
    return "SyntheticDataset(" + std::to_string(o_.num_samples) + " samples of " +
           shape_str(o_.image_shape) + ", seed " + std::to_string(o_.seed) + ")";
  }
  void gather(std::span<const int64_t> indices, uint8_t* images, int32_t* labels) const override {
    const Generator pixels(o_.seed);
    const Generator label_gen(o_.seed ^ 0x9E3779B97F4A7C15ull);
    for (size_t k = 0; k < indices.size(); ++k) {
      const uint64_t i = static_cast<uint64_t>(indices[k]);
      uint8_t* dst = images + k * static_cast<size_t>(numel_);
      for (uint64_t j = 0; j < blocks_; ++j) {
        const auto b = pixels.block(i * blocks_ + j);
        for (int64_t byte = 0; byte < 16; ++byte) {
          const int64_t at = static_cast<int64_t>(j) * 16 + byte;
          if (at >= numel_) break;
          dst[at] = static_cast<uint8_t>(b[static_cast<size_t>(byte / 4)] >> (8 * (byte % 4)));
        }
      }
      const uint64_t r = label_gen.block(i)[0];
      labels[k] = static_cast<int32_t>((r * static_cast<uint64_t>(o_.num_classes)) >> 32);
    }
  }

 private:
  SyntheticOptions o_;
  int64_t numel_ = 0;
  uint64_t blocks_ = 0;
};

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options)
    : Dataset(std::make_shared<SyntheticSource>(std::move(options))) {}

}  // namespace mixprec::dataset
