// safetensors reader and writer (see include/mixprec/io/safetensors.h for the guarantees).
#include "mixprec/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "mixprec/error.h"

namespace mixprec::io {
namespace {

void (*g_failpoint)(const std::filesystem::path&) = nullptr;

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

}  // namespace

std::string safetensors_dtype(DType d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  MIXPREC_ASSERT(false, "no safetensors dtype for ", dtype_name(d));
  return "";
}

SafetensorsFile parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file,
                                  const ReadLimits& limits) {
  if (size < 8) fail(file, "header length", "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  const uint64_t hlen = read_u64_le(bytes);
  if (hlen > size - 8)
    fail(file, "header length", "declares " + std::to_string(hlen) + " header bytes but only " +
                                    std::to_string(size - 8) + " follow");
  if (hlen > limits.max_header_bytes)
    fail(file, "header length", std::to_string(hlen) + " bytes exceeds the limit of " + std::to_string(limits.max_header_bytes));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + hlen);
  } catch (const nlohmann::json::exception& e) {
    fail(file, "header", std::string("not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(file, "header", std::string("expected a JSON object, got ") + header.type_name());
  const uint8_t* data = bytes + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;

  SafetensorsFile out;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail(file, "__metadata__", "expected an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(file, "__metadata__." + m.key(), "expected a string value");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string f = "tensor '" + name + "'";
    if (!it->is_object()) fail(file, f, "expected an object with dtype, shape and data_offsets");
    const auto& e = *it;
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
    spans.push_back({b, en, name});
    Tensor t = Tensor::empty(shape, {.dtype = *dt});
    if (expect) std::memcpy(t.data_ptr(), data + b, expect);
    tensors.emplace_back(name, std::move(t));
  }
  // Non-empty spans must not overlap; tensors come back in offset order.
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return spans[x].begin < spans[y].begin; });
  uint64_t reach = 0;
  std::string reach_name;
  for (size_t k : order) {
    if (spans[k].begin == spans[k].end) continue;
    if (spans[k].begin < reach)
      fail(file, "tensor '" + spans[k].name + "'.data_offsets", "overlaps tensor '" + reach_name + "'");
    reach = spans[k].end;
    reach_name = spans[k].name;
  }
  std::vector<std::pair<std::string, Tensor>> sorted;
  for (size_t k : order) sorted.push_back(std::move(tensors[k]));
  tensors = std::move(sorted);
  for (auto& [n, t] : tensors) check_finite(t, n, out.warnings);
  out.tensors = std::move(tensors);
  return out;
}

SafetensorsFile read_safetensors(const std::filesystem::path& path, const ReadLimits& limits) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  MIXPREC_CHECK(!ec, path.string(), ": cannot read checkpoint: ", ec.message());
  MIXPREC_CHECK(size <= limits.max_file_bytes, path.string(), ": ", size, " bytes exceeds the limit of ",
                limits.max_file_bytes);
  std::ifstream f(path, std::ios::binary);
  MIXPREC_CHECK(f.good(), path.string(), ": cannot open checkpoint");
  std::vector<uint8_t> bytes(size);
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  MIXPREC_CHECK(static_cast<uint64_t>(f.gcount()) == size, path.string(), ": short read (", f.gcount(), " of ", size, " bytes)");
  return parse_safetensors(bytes.data(), bytes.size(), path.string(), limits);
}

void set_write_failpoint(void (*hook)(const std::filesystem::path&)) { g_failpoint = hook; }

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

  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::random_device rd;
  const std::filesystem::path tmp = dir / ("." + path.filename().string() + ".tmp" + std::to_string(rd()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MIXPREC_CHECK(fd >= 0, path.string(), ": cannot create temporary file ", tmp.string(), ": ", std::strerror(errno));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        MIXPREC_CHECK(false, path.string(), ": write failed: ", std::strerror(err), Hint{"check free disk space"});
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  write_all(len, 8);
  write_all(h.data(), h.size());
  for (const Tensor& t : packed) write_all(t.data_ptr(), t.nbytes());
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    MIXPREC_CHECK(false, path.string(), ": fsync/close failed: ", std::strerror(errno));
  }
  if (g_failpoint) g_failpoint(tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MIXPREC_CHECK(false, path.string(), ": rename from temporary file failed: ", std::strerror(err));
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace mixprec::io
