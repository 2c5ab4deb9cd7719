// IDX reader (the MNIST / Fashion-MNIST file format): big-endian header, then unsigned bytes.
// Raw and gzip files are both accepted; gzip is recognised by its content (1f 8b), not by the
// file name. Hostile input gives a mixprec::Error naming the file, the field, what was expected
// and what was found; nothing is read out of bounds and no buffer outgrows what the file backs.
// Trailing data after the declared payload is an error (a file longer than its header says is
// not what its header says). Not here: meaning of the dims (MnistDataset checks counts, labels).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace mixprec::dataset {

// The most payload bytes read_idx accepts (a sane cap on hostile headers; MNIST needs 47 MB).
inline constexpr uint64_t kIdxMaxPayloadBytes = uint64_t{2} << 30;  // 2 GiB

// The IDX magic for unsigned-byte data of `ndim` dims: 0x00000801 labels, 0x00000803 images.
constexpr uint32_t idx_u8_magic(int ndim) { return 0x00000800u | static_cast<uint32_t>(ndim); }

struct IdxArray {
  std::vector<int64_t> dims;  // outermost first, each > 0
  std::vector<uint8_t> data;  // row-major, exactly product(dims) bytes
};

// Reads `path` (raw or gzip), which must hold unsigned bytes (type 0x08) with `expected_ndim`
// dims (1 to 8) and a payload of at most `max_payload` bytes. Throws mixprec::Error otherwise.
IdxArray read_idx(const std::filesystem::path& path, int expected_ndim,
                  uint64_t max_payload = kIdxMaxPayloadBytes);

// The same from bytes in memory (raw or gzip); `name` stands for the file in messages. This is
// the entry point of the fuzz target.
IdxArray parse_idx(std::span<const uint8_t> bytes, std::string_view name, int expected_ndim,
                   uint64_t max_payload = kIdxMaxPayloadBytes);

// Writes an IDX file of unsigned bytes: raw, or gzip (zlib's gzwrite) when `gzip`. `data` holds
// product(dims) bytes; the file is written to a temporary name and renamed into place. For tools
// and tests that make small datasets.
void write_idx(const std::filesystem::path& path, const std::vector<int64_t>& dims,
               std::span<const uint8_t> data, bool gzip = false);

}  // namespace mixprec::dataset
