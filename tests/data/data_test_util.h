// Helpers for the data tests: a self-deleting temporary directory, IDX byte builders, a gzip
// encoder independent of zlib (stored deflate blocks + CRC-32, so the reader is not only tested
// against our own writer), small MNIST-format datasets, and an error-substring matcher.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "mixprec/data/dataset.h"
#include "mixprec/data/idx.h"
#include "mixprec/error.h"

namespace mixprec::dataset::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("mixprec_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX file's bytes with any magic, dims and payload (consistent or not).
inline std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  for (uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline uint32_t crc32_ref(std::span<const uint8_t> data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// One gzip member holding `data` in stored (uncompressed) deflate blocks of at most 1000 bytes.
inline std::vector<uint8_t> gzip_stored(std::span<const uint8_t> data) {
  std::vector<uint8_t> out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(1000, data.size() - at);
    const bool last = at + n == data.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<uint8_t>(n));
    out.push_back(static_cast<uint8_t>(n >> 8));
    out.push_back(static_cast<uint8_t>(~n));
    out.push_back(static_cast<uint8_t>(~n >> 8));
    out.insert(out.end(), data.begin() + at, data.begin() + at + n);
    at += n;
  } while (at < data.size());
  const uint32_t crc = crc32_ref(data), size = static_cast<uint32_t>(data.size());
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<uint8_t>(crc >> shift));
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<uint8_t>(size >> shift));
  return out;
}

inline void write_bytes(const fs::path& path, std::span<const uint8_t> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Runs fn and checks that it throws a mixprec::Error whose what() contains every part.
inline ::testing::AssertionResult throws_with(const std::function<void()>& fn,
                                              const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const mixprec::Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts)
      if (what.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\":\n" << what;
    return ::testing::AssertionSuccess() << what;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-mixprec exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// Tiny MNIST-format split: image i pixel j = (i * 31 + j * 7) & 255, label i % 10.
inline uint8_t tiny_pixel(int64_t i, int64_t j) {
  return static_cast<uint8_t>((i * 31 + j * 7) & 255);
}
inline uint8_t tiny_label(int64_t i) { return static_cast<uint8_t>(i % 10); }

// The file-order index of every row of one epoch of a tiny split of at most 256 rows (pixel 0 of
// row i is tiny_pixel(i, 0), distinct for i < 256).
inline std::vector<int64_t> rows_of(const Dataset& ds, int64_t epoch, int64_t start_batch = 0) {
  std::vector<int64_t> out;
  const int64_t pixels = shape_numel(ds.source().sample_shape());
  for (const Batch& b : ds.epoch(epoch, start_batch)) {
    const std::vector<int32_t> px = b.image.to_vector<int32_t>();
    for (int64_t r = 0; r < b.size(); ++r) {
      const int32_t p = px[static_cast<size_t>(r * pixels)];
      int64_t i = 0;
      while (i < 256 && tiny_pixel(i, 0) != p) ++i;
      out.push_back(i);
    }
  }
  return out;
}

inline void write_tiny_split(const fs::path& dir, const std::string& prefix, int64_t n, int64_t h,
                             int64_t w, bool gzip, int64_t first_index = 0) {
  std::vector<uint8_t> images(static_cast<size_t>(n * h * w)), labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < h * w; ++j) images[i * h * w + j] = tiny_pixel(i + first_index, j);
    labels[i] = tiny_label(i + first_index);
  }
  const std::string ext = gzip ? ".gz" : "";
  write_idx(dir / (prefix + "-images-idx3-ubyte" + ext), {n, h, w}, images, gzip);
  write_idx(dir / (prefix + "-labels-idx1-ubyte" + ext), {n}, labels, gzip);
}

}  // namespace mixprec::dataset::testing
