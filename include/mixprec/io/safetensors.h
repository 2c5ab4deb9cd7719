// The safetensors file format, read and written with hostile input in mind: an 8-byte
// little-endian header length, a JSON header ({name: {dtype, shape, data_offsets}} plus
// "__metadata__": {string: string}), then the raw little-endian tensor bytes. The reader checks
// every field against the file before allocating or reading (lengths, dtypes, shapes, offsets
// in range and not overlapping, sizes consistent, no key twice) and names the file and the field
// in every error; a foreign file (text, PNG, IDX, ...) is "not a safetensors file" with what was
// found. Writes go through io::write_file_atomic (io/file.h): a crash never destroys the old file.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/io/file.h"
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
// Reads `path` whole (a reader never removes temporaries: only a writer of `path` does).
SafetensorsFile read_safetensors(const std::filesystem::path& path, const ReadLimits& limits = {});
// The metadata of `path`, reading only its header: the header is checked exactly as
// read_safetensors checks it (lengths, dtypes, shapes, offsets against the file's size, no key
// twice, no overlap), but no tensor is read or allocated.
Metadata read_safetensors_metadata(const std::filesystem::path& path, const ReadLimits& limits = {});

// Writes tensors in the given order (names must be unique and not "__metadata__"), atomically.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const Metadata& metadata = {});

// The safetensors dtype string ("F32", "BF16", ...) and back.
std::string safetensors_dtype(DType d);

}  // namespace mixprec::io
