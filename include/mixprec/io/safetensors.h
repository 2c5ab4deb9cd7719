// The safetensors file format, read and written with hostile input in mind: an 8-byte
// little-endian header length, a JSON header ({name: {dtype, shape, data_offsets}} plus
// "__metadata__": {string: string}), then the raw little-endian tensor bytes. The reader checks
// every field against the file before allocating or reading (lengths, dtypes, shapes, offsets
// in range and not overlapping, sizes consistent) and names the file and the field in every
// error. Writes are crash-safe: temporary file in the same directory, fsync, rename, fsync dir.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/tensor.h"

namespace mixprec::io {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file (offset) order
  Metadata metadata;
  std::vector<std::string> warnings;                    // e.g. NaN/inf in a tensor
};

struct ReadLimits {
  uint64_t max_header_bytes = 100ull << 20;   // 100 MiB of JSON
  uint64_t max_file_bytes = 64ull << 30;      // 64 GiB
};

// Parses a safetensors image held in memory (`bytes`); `name` is used in error messages.
SafetensorsFile parse_safetensors(const uint8_t* bytes, size_t size, const std::string& name,
                                  const ReadLimits& limits = {});
SafetensorsFile read_safetensors(const std::filesystem::path& path, const ReadLimits& limits = {});

// Writes tensors in the given order (names must be unique and not "__metadata__").
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const Metadata& metadata = {});

// The safetensors dtype string ("F32", "BF16", ...) and back.
std::string safetensors_dtype(DType d);

// Test hook: when set, write_safetensors calls it after writing the temporary file and before
// the rename (a crash-safety test kills the process there).
void set_write_failpoint(void (*hook)(const std::filesystem::path& tmp));

}  // namespace mixprec::io
