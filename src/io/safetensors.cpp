// safetensors reader and writer (see include/mixprec/io/safetensors.h for the guarantees).
#include "mixprec/io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "mixprec/error.h"
#include "mixprec/io/file.h"

namespace mixprec::io {
namespace {

struct DtypeName {
  const char* name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {{"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16},
                                 {"BF16", DType::bf16}, {"I32", DType::i32}, {"I64", DType::i64},
                                 {"U8", DType::u8}, {"BOOL", DType::boolean}};

std::optional<DType> parse_st_dtype(const std::string& s) {
  for (const auto& d : kDtypes)
    if (s == d.name) return d.dtype;
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& what) {
  MIXPREC_CHECK(false, file, ": ", field.empty() ? "" : field + ": ", what);
  __builtin_unreachable();
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void check_finite(const Tensor& t, const std::string& name, std::vector<std::string>& warnings) {
  if (!is_floating(t.dtype())) return;
  int64_t bad = 0;
  for (double v : t.to_vector<double>()) bad += !std::isfinite(v);
  if (bad) warnings.push_back("tensor '" + name + "' holds " + std::to_string(bad) + " NaN/inf values");
}

// What a foreign file looks like, for "not a safetensors file: found ...": a known signature,
// else text (quoted, cut at 32 characters), else the first bytes in hex. `b` holds the first `n`
// of the file's `total` bytes.
std::string describe_bytes(const uint8_t* b, size_t n, uint64_t total) {
  const std::string_view head(reinterpret_cast<const char*>(b), std::min<size_t>(n, 16));
  struct Magic {
    std::string_view prefix;
    const char* what;
  };
  static constexpr Magic kMagics[] = {
      {"\x89PNG\r\n\x1a\n", "a PNG image"}, {"\xff\xd8\xff", "a JPEG image"}, {"\x1f\x8b", "gzip data"},
      {"PK\x03\x04", "a zip archive (a PyTorch .pt/.pth file is one)"}, {"\x93NUMPY", "a NumPy .npy array"},
      {"\x89HDF", "an HDF5 file (Keras .h5?)"}, {"\x7f" "ELF", "an ELF executable"},
      {std::string_view("\0\0\x08", 3), "an IDX file (MNIST data, unsigned bytes)"}};
  for (const auto& m : kMagics)
    if (head.substr(0, m.prefix.size()) == m.prefix) return m.what;
  if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return "a Python pickle (a PyTorch checkpoint?)";
  const size_t shown = std::min<size_t>(n, 32);
  bool text = true;
  for (size_t i = 0; i < shown && text; ++i) text = (b[i] >= 0x20 && b[i] < 0x7f) || b[i] == '\n' || b[i] == '\r' || b[i] == '\t';
  if (text) {
    std::string t;
    for (size_t i = 0; i < shown; ++i) t += (b[i] == '\n' || b[i] == '\r' || b[i] == '\t') ? ' ' : static_cast<char>(b[i]);
    return "text \"" + t + (total > shown ? "...\"" : "\"");
  }
  std::string hex = "bytes";
  char buf[4];
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    std::snprintf(buf, sizeof buf, " %02x", b[i]);
    hex += buf;
  }
  return hex;
}

// Bytes of a file's start that the length check looks at (describe_bytes shows up to 32).
constexpr size_t kHeadBytes = 40;

// Checks the 8-byte header length against the file's `size` bytes, of which `head` holds the
// first `n` (at least min(size, kHeadBytes)); returns the length.
uint64_t check_header_length(const uint8_t* head, size_t n, uint64_t size, const std::string& file,
                             const ReadLimits& limits) {
  constexpr const char* kFormat = " (a safetensors file starts with an 8-byte little-endian header length, then a JSON object)";
  if (size < 8)
    fail(file, "", "not a safetensors file: " + std::to_string(size) + " bytes, shorter than the 8-byte header length" +
                       (size ? ": found " + describe_bytes(head, n, size) : std::string()));
  const uint64_t hlen = read_u64_le(head);
  // A length that overruns the file is a foreign file unless the JSON header starts where it
  // should; then the file is a truncated or damaged safetensors file.
  if (hlen > size - 8 && (size == 8 || head[8] != '{'))
    fail(file, "", "not a safetensors file: found " + describe_bytes(head, n, size) + kFormat);
  if (hlen > size - 8)
    fail(file, "header length", "declares " + std::to_string(hlen) + " header bytes but only " +
                                    std::to_string(size - 8) + " follow (truncated or damaged file)");
  if (hlen > limits.max_header_bytes)
    fail(file, "header length", std::to_string(hlen) + " bytes exceeds the limit of " + std::to_string(limits.max_header_bytes));
  return hlen;
}

// Parses the JSON header, refusing a key repeated in any object: JSON parsers keep the last of
// two equal keys, so a repeated tensor name would silently replace the first.
nlohmann::json parse_header(const uint8_t* p, uint64_t n, const std::string& file) {
  struct Level {
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Level> open;
  auto where = [&] {
    if (open.size() <= 1) return std::string("header");
    return open[0].last == "__metadata__" ? std::string("__metadata__") : "tensor '" + open[0].last + "'";
  };
  using Event = nlohmann::json::parse_event_t;
  auto cb = [&](int, Event ev, nlohmann::json& parsed) {
    if (ev == Event::object_start) open.emplace_back();
    if (ev == Event::object_end && !open.empty()) open.pop_back();
    if (ev == Event::key && !open.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second)
        fail(file, where(), "key '" + key + "' appears twice (each name may appear once; a reader would keep only one)");
      open.back().last = key;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(p, p + n, cb);
  } catch (const nlohmann::json::exception& e) {
    fail(file, "header", std::string("not valid JSON: ") + e.what());
  }
}

// One tensor of a checked header: its data spans bytes [begin, end) of the data section.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// A checked header: the metadata and the tensors in offset order.
struct Header {
  Metadata metadata;
  std::vector<Entry> entries;
};

// Checks tensor `name`'s header entry `e` against the `data_size` bytes of the data section.
Entry check_entry(const std::string& name, const nlohmann::json& e, uint64_t data_size, const std::string& file) {
  const std::string f = "tensor '" + name + "'";
  if (!e.is_object()) fail(file, f, "expected an object with dtype, shape and data_offsets");
  if (!e.contains("dtype") || !e["dtype"].is_string()) fail(file, f + ".dtype", "missing or not a string");
  const auto dt = parse_st_dtype(e["dtype"].get<std::string>());
  if (!dt) fail(file, f + ".dtype", "unknown dtype '" + e["dtype"].get<std::string>() + "' (expected F32, F64, F16, BF16, I32, I64, U8 or BOOL)");
  if (!e.contains("shape") || !e["shape"].is_array()) fail(file, f + ".shape", "missing or not an array");
  Shape shape;
  // The bound is on `extent`, the product of the non-zero dims, not on numel: a tensor with a
  // 0 dim holds no elements, but its strides still multiply the other dims (found by review while
  // writing the fuzz target: shape [0, 2^40, 2^40, 2^40] overflowed int64 in contiguous_strides).
  uint64_t numel = 1, extent = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned()) fail(file, f + ".shape", "dimensions must be non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t{1} << 40) || (v != 0 && extent > (uint64_t{1} << 50) / v))
      fail(file, f + ".shape", "dimension " + std::to_string(v) + " makes the tensor impossibly large");
    numel *= v;
    extent *= v != 0 ? v : 1;
    shape.push_back(static_cast<int64_t>(v));
  }
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
      !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
    fail(file, f + ".data_offsets", "expected [begin, end] as non-negative integers");
  const uint64_t b = e["data_offsets"][0].get<uint64_t>(), en = e["data_offsets"][1].get<uint64_t>();
  if (b > en)
    fail(file, f + ".data_offsets", "[" + std::to_string(b) + ", " + std::to_string(en) + "] begins after it ends");
  if (en > data_size)
    fail(file, f + ".data_offsets", "[" + std::to_string(b) + ", " + std::to_string(en) +
                                        "] is outside the " + std::to_string(data_size) + " data bytes");
  const uint64_t expect = numel * dtype_size(*dt);
  if (en - b != expect)
    fail(file, f + ".data_offsets", "span of " + std::to_string(en - b) + " bytes, but shape " + shape_str(shape) +
                                        " of " + std::string(dtype_name(*dt)) + " needs " + std::to_string(expect));
  return Entry{name, *dt, std::move(shape), b, en};
}

// Parses and checks the `hlen` header bytes at `p` against a data section of `data_size` bytes:
// every entry (check_entry), the metadata (strings only), no key twice, no overlapping spans.
Header check_header(const uint8_t* p, uint64_t hlen, uint64_t data_size, const std::string& file) {
  const nlohmann::json json = parse_header(p, hlen, file);
  if (!json.is_object()) fail(file, "header", std::string("expected a JSON object, got ") + json.type_name());
  Header out;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() != "__metadata__") {
      out.entries.push_back(check_entry(it.key(), *it, data_size, file));
      continue;
    }
    if (!it->is_object()) fail(file, "__metadata__", "expected an object of strings");
    for (auto m = it->begin(); m != it->end(); ++m) {
      if (!m->is_string()) fail(file, "__metadata__." + m.key(), "expected a string value");
      out.metadata[m.key()] = m->get<std::string>();
    }
  }
  // Non-empty spans must not overlap; entries come back in offset order.
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const Entry& x, const Entry& y) { return x.begin < y.begin; });
  uint64_t reach = 0;
  const Entry* reacher = nullptr;
  for (const Entry& e : out.entries) {
    if (e.begin == e.end) continue;
    if (reacher && e.begin < reach) fail(file, "tensor '" + e.name + "'.data_offsets", "overlaps tensor '" + reacher->name + "'");
    reach = e.end;
    reacher = &e;
  }
  return out;
}

// Opens `path` for reading after checking its size against the limit; sets `size`.
std::ifstream open_checked(const std::filesystem::path& path, const ReadLimits& limits, uint64_t& size) {
  const std::string kind = non_regular_kind(path);  // a FIFO or device has no size to check
  MIXPREC_CHECK(kind.empty(), path.string(), ": cannot read checkpoint: not a regular file (", kind,
                ")",
                Hint{"pass the .safetensors file that `mixprec train --checkpoint FILE` wrote"});
  std::error_code ec;
  size = std::filesystem::file_size(path, ec);
  MIXPREC_CHECK(!ec, path.string(), ": cannot read checkpoint: ", ec.message());
  MIXPREC_CHECK(size <= limits.max_file_bytes, path.string(), ": ", size, " bytes exceeds the limit of ",
                limits.max_file_bytes);
  std::ifstream f(path, std::ios::binary);
  MIXPREC_CHECK(f.good(), path.string(), ": cannot open checkpoint");
  return f;
}

// Reads exactly `n` bytes from `f` into `dst`.
void read_checked(std::ifstream& f, uint8_t* dst, uint64_t n, const std::string& file) {
  f.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n));
  MIXPREC_CHECK(static_cast<uint64_t>(f.gcount()) == n, file, ": short read (", f.gcount(), " of ", n, " bytes)");
}

}  // namespace

std::string safetensors_dtype(DType d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  MIXPREC_ASSERT(false, "no safetensors dtype for ", dtype_name(d));
  return "";
}

SafetensorsFile parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file,
                                  const ReadLimits& limits) {
  const uint64_t hlen = check_header_length(bytes, size, size, file, limits);
  Header header = check_header(bytes + 8, hlen, size - 8 - hlen, file);
  const uint8_t* data = bytes + 8 + hlen;
  SafetensorsFile out;
  for (const Entry& e : header.entries) {
    Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype});
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    check_finite(t, e.name, out.warnings);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  out.metadata = std::move(header.metadata);
  return out;
}

SafetensorsFile read_safetensors(const std::filesystem::path& path, const ReadLimits& limits) {
  uint64_t size = 0;
  std::ifstream f = open_checked(path, limits, size);
  std::vector<uint8_t> bytes(size);
  read_checked(f, bytes.data(), size, path.string());
  return parse_safetensors(bytes.data(), bytes.size(), path.string(), limits);
}

Metadata read_safetensors_metadata(const std::filesystem::path& path, const ReadLimits& limits) {
  const std::string file = path.string();
  uint64_t size = 0;
  std::ifstream f = open_checked(path, limits, size);
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(size, kHeadBytes)));
  read_checked(f, head.data(), head.size(), file);
  const uint64_t hlen = check_header_length(head.data(), head.size(), size, file, limits);
  std::vector<uint8_t> json(static_cast<size_t>(hlen));
  f.seekg(8);
  read_checked(f, json.data(), json.size(), file);
  return check_header(json.data(), hlen, size - 8 - hlen, file).metadata;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<Tensor> packed;
  for (const auto& [name, t] : tensors) {
    MIXPREC_CHECK(name != "__metadata__" && !header.contains(name), "save: tensor name '", name,
                  "' is reserved or repeated");
    MIXPREC_CHECK(t.device().is_cpu(), "save: tensor '", name, "' is not on the cpu");
    const Tensor c = t.contiguous();
    header[name] = {{"dtype", safetensors_dtype(c.dtype())},
                    {"shape", c.shape()},
                    {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    packed.push_back(c);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // align the data to 8 bytes, as the reference does
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * i));
  std::vector<std::string_view> pieces{std::string_view(len, 8), h};
  for (const Tensor& t : packed) pieces.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
  write_file_atomic(path, pieces);
}

}  // namespace mixprec::io
