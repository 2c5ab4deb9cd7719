// IDX parsing: the whole file is read into memory (bounded by its size on disk), then decoded
// from a span by one code path shared with the fuzz target. Gzip input is inflated with zlib's
// inflate API in bounded chunks; the payload buffer grows geometrically with the bytes actually
// produced, so a tiny file that declares a huge payload costs a "truncated" error, not memory.
// Invariants: every read is bounded by the span or by zlib's avail_in/avail_out; a gzip stream
// is read to its end (so its CRC and length trailer are verified) before a file is accepted.
#include "mixprec/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "mixprec/error.h"
#include "path_probe.h"

namespace mixprec::dataset {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string hex8(uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v);
  return buf;
}

const char* idx_type_name(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "not an IDX type";
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Decompressed bytes of a raw or gzip buffer. read() returns fewer bytes than asked only at
// the end of the data; gzip corruption and truncation throw, naming the file.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, std::string_view name) : bytes_(bytes), name_(name) {
    gzip_ = bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
    if (!gzip_) return;
    MIXPREC_CHECK(bytes.size() <= UINT_MAX, "read_idx: ", name_, ": gzip file: expected at most ",
                  UINT_MAX, " compressed bytes, found ", bytes.size());
    std::memset(&z_, 0, sizeof z_);
    const int rc = inflateInit2(&z_, 16 + MAX_WBITS);  // gzip wrapper only
    MIXPREC_CHECK(rc == Z_OK, "read_idx: ", name_, ": zlib inflateInit2 failed with code ", rc);
    z_.next_in = const_cast<Bytef*>(bytes.data());  // zlib never writes through next_in
    z_.avail_in = static_cast<uInt>(bytes.size());
  }
  ~Reader() {
    if (gzip_) inflateEnd(&z_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool gzip() const { return gzip_; }
  // Raw input: the bytes not yet read (exact). Gzip: unknown until inflated.
  uint64_t raw_remaining() const { return bytes_.size() - pos_; }
  uint64_t produced() const { return produced_; }

  size_t read(uint8_t* dst, size_t n) {
    if (!gzip_) {
      const size_t k = std::min<size_t>(n, bytes_.size() - pos_);
      if (k > 0) std::memcpy(dst, bytes_.data() + pos_, k);
      pos_ += k;
      produced_ += k;
      return k;
    }
    size_t got = 0;
    while (got < n) {
      if (member_done_) {
        if (z_.avail_in == 0) break;  // the end of the last member: end of data
        start_next_member();
      }
      const size_t want = std::min<size_t>(n - got, size_t{1} << 30);
      z_.next_out = dst + got;
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t made = want - z_.avail_out;
      got += made;
      produced_ += made;
      if (rc == Z_STREAM_END)
        member_done_ = true;
      else if (rc != Z_OK)
        fail(rc);
    }
    return got;
  }

 private:
  // After a gzip member: either another member (concatenated gzip) or nothing may follow.
  void start_next_member() {
    const bool another = z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b;
    MIXPREC_CHECK(
        another, "read_idx: ", name_,
        ": gzip stream: expected the end of the file or another gzip member after the "
        "compressed data, found ",
        z_.avail_in, " bytes of trailing garbage",
        Hint{"the file is damaged or was appended to; re-download or reinstall it"});
    const int rc = inflateReset(&z_);
    MIXPREC_CHECK(rc == Z_OK, "read_idx: ", name_, ": zlib inflateReset failed with code ", rc);
    member_done_ = false;
  }

  [[noreturn]] void fail(int rc) {
    const uint64_t at = bytes_.size() - z_.avail_in;
    MIXPREC_CHECK(
        rc != Z_BUF_ERROR, "read_idx: ", name_,
        ": gzip stream: truncated: the compressed data ends inside the deflate stream, after ",
        produced_, " decompressed bytes (", bytes_.size(), " compressed bytes in the file)",
        Hint{"the download was cut short; re-download or reinstall the dataset"});
    MIXPREC_CHECK(false, "read_idx: ", name_, ": gzip stream: corrupt at compressed byte ", at,
                  " (after ", produced_,
                  " decompressed bytes): ", z_.msg != nullptr ? z_.msg : zError(rc),
                  Hint{"the file is damaged; re-download or reinstall the dataset"});
    __builtin_unreachable();
  }

  std::span<const uint8_t> bytes_;
  std::string_view name_;
  bool gzip_ = false;
  size_t pos_ = 0;
  uint64_t produced_ = 0;
  z_stream z_;
  bool member_done_ = false;
};

// Checks the 4 magic bytes: 0, 0, element type, number of dims.
void check_magic(const uint8_t m[4], std::string_view name, int expected_ndim, bool gzip) {
  const uint32_t found =
      (uint32_t{m[0]} << 24) | (uint32_t{m[1]} << 16) | (uint32_t{m[2]} << 8) | m[3];
  const uint32_t expected = idx_u8_magic(expected_ndim);
  std::string hint = "expected an IDX file such as the MNIST/Fashion-MNIST *-idx3-ubyte.gz files";
  if (std::memcmp(m, "<!DO", 4) == 0 || std::memcmp(m, "<htm", 4) == 0 ||
      std::memcmp(m, "<HTM", 4) == 0)
    hint = "this is an HTML page, probably a failed download; re-download the file";
  else if (!gzip && ends_with(name, ".gz"))
    hint = "the name ends in .gz but the content is not gzip data; the file is damaged";
  MIXPREC_CHECK(m[0] == 0 && m[1] == 0, "read_idx: ", name, ": field 'magic': expected ",
                hex32(expected), " (IDX, unsigned bytes, ", expected_ndim, " dims), found ",
                hex32(found), Hint{hint});
  MIXPREC_CHECK(m[2] == 0x08, "read_idx: ", name,
                ": field 'element type' (magic byte 2): expected 0x08 (unsigned byte), found ",
                hex8(m[2]), " (", idx_type_name(m[2]), "); magic ", hex32(found), " vs expected ",
                hex32(expected),
                Hint{"mixprec reads unsigned-byte IDX files (MNIST, Fashion-MNIST) only"});
  std::string dims_hint = "check that the file is the one the dataset expects";
  if (expected_ndim == 3 && m[3] == 1)
    dims_hint = "this looks like a labels file (idx1) where an images file (idx3) was expected";
  else if (expected_ndim == 1 && m[3] == 3)
    dims_hint = "this looks like an images file (idx3) where a labels file (idx1) was expected";
  MIXPREC_CHECK(m[3] == expected_ndim, "read_idx: ", name,
                ": field 'number of dims' (magic byte 3): expected ", expected_ndim, ", found ",
                int{m[3]}, "; magic ", hex32(found), " vs expected ", hex32(expected),
                Hint{dims_hint});
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// Reads and checks the header; returns the dims and the declared payload size in bytes.
std::vector<int64_t> read_header(Reader& r, std::string_view name, int expected_ndim,
                                 uint64_t max_payload, uint64_t& payload) {
  const size_t header_bytes = 4 + 4 * static_cast<size_t>(expected_ndim);
  uint8_t magic[4];
  const size_t got = r.read(magic, 4);
  MIXPREC_CHECK(got == 4, "read_idx: ", name,
                ": field 'header': expected at least 4 bytes (the magic number), found ", got,
                " (empty or truncated file)", Hint{"re-download or reinstall the dataset"});
  check_magic(magic, name, expected_ndim, r.gzip());
  std::vector<int64_t> dims(static_cast<size_t>(expected_ndim));
  for (int i = 0; i < expected_ndim; ++i) {
    uint8_t b[4];
    const size_t k = r.read(b, 4);
    MIXPREC_CHECK(k == 4, "read_idx: ", name, ": field 'header': expected ", header_bytes,
                  " header bytes (magic and ", expected_ndim, " dims), found only ", 4 + 4 * i + k,
                  " (truncated file)", Hint{"re-download or reinstall the dataset"});
    const uint32_t d =
        (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    MIXPREC_CHECK(d > 0, "read_idx: ", name, ": field 'dim[", i, "]': expected > 0, found 0",
                  Hint{"the header is corrupt; re-download or reinstall the dataset"});
    dims[i] = d;
  }
  payload = 1;
  bool overflow = false;
  for (int64_t d : dims) overflow |= __builtin_mul_overflow(payload, uint64_t(d), &payload);
  MIXPREC_CHECK(!overflow && payload <= max_payload, "read_idx: ", name,
                ": field 'dims': expected a payload of at most ", max_payload, " bytes, found ",
                dims_str(dims), " = ",
                overflow ? std::string("more than 2^64") : std::to_string(payload), " bytes",
                Hint{"the header is corrupt, or the file is larger than mixprec reads"});
  return dims;
}

std::vector<uint8_t> read_payload_gzip(Reader& r, std::string_view name,
                                       const std::vector<int64_t>& dims, uint64_t declared) {
  std::vector<uint8_t> data;
  uint64_t have = 0;
  while (have < declared) {
    const uint64_t chunk = std::min(declared - have, std::max<uint64_t>(have, uint64_t{1} << 20));
    data.resize(have + chunk);
    const size_t got = r.read(data.data() + have, chunk);
    have += got;
    if (got < chunk) break;
  }
  MIXPREC_CHECK(have == declared, "read_idx: ", name, ": field 'payload': the header declares ",
                declared, " bytes (", dims_str(dims), "), found only ", have,
                " after decompression (truncated file)",
                Hint{"re-download or reinstall the dataset"});
  uint8_t scratch[4096];
  uint64_t extra = 0;
  for (size_t k; extra < (uint64_t{1} << 20) && (k = r.read(scratch, sizeof scratch)) > 0;)
    extra += k;
  MIXPREC_CHECK(extra == 0, "read_idx: ", name, ": field 'payload': the header declares ", declared,
                " bytes (", dims_str(dims), "), found ",
                extra >= (uint64_t{1} << 20) ? "at least " : "", extra,
                " more after them (trailing data after decompression)",
                Hint{"the header and the data disagree; the file is damaged"});
  return data;
}

std::vector<uint8_t> read_payload_raw(Reader& r, std::string_view name,
                                      const std::vector<int64_t>& dims, uint64_t declared) {
  const uint64_t available = r.raw_remaining();
  MIXPREC_CHECK(available >= declared, "read_idx: ", name,
                ": field 'payload': the header declares ", declared, " bytes (", dims_str(dims),
                "), found only ", available, " (truncated file)",
                Hint{"re-download or reinstall the dataset"});
  MIXPREC_CHECK(available == declared, "read_idx: ", name,
                ": field 'payload': the header declares ", declared, " bytes (", dims_str(dims),
                "), found ", available, " (", available - declared, " bytes of trailing data)",
                Hint{"the header and the data disagree; the file is damaged"});
  std::vector<uint8_t> data(declared);
  const size_t got = r.read(data.data(), declared);
  MIXPREC_ASSERT(got == declared, "raw read came up short");
  return data;
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, std::string_view name, int expected_ndim,
                   uint64_t max_payload) {
  MIXPREC_CHECK(expected_ndim >= 1 && expected_ndim <= 8,
                "read_idx: expected_ndim must be in [1, 8], got ", expected_ndim);
  Reader r(bytes, name);
  IdxArray out;
  uint64_t declared = 0;
  out.dims = read_header(r, name, expected_ndim, max_payload, declared);
  out.data = r.gzip() ? read_payload_gzip(r, name, out.dims, declared)
                      : read_payload_raw(r, name, out.dims, declared);
  return out;
}

IdxArray read_idx(const std::filesystem::path& path, int expected_ndim, uint64_t max_payload) {
  const std::string name = path.string();
  std::error_code ec;
  const detail::PathProbe probe = detail::probe_path(path);
  MIXPREC_CHECK(probe.exists(), "read_idx: ", name, ": ", probe.problem.empty() ? "file not found" : probe.problem);
  MIXPREC_CHECK(probe.type == std::filesystem::file_type::regular, "read_idx: ", name,
                ": expected a regular file, found ", detail::file_type_name(probe.type));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(name.c_str(), "rb"), &std::fclose);
  MIXPREC_CHECK(f != nullptr, "read_idx: ", name, ": cannot open: ", std::strerror(errno));
  const uint64_t size = std::filesystem::file_size(path, ec);
  MIXPREC_CHECK(!ec, "read_idx: ", name, ": cannot get the file size: ", ec.message());
  // A raw file holds header + payload; a gzip one may exceed its content by a few bytes.
  const uint64_t max_file = max_payload + max_payload / 64 + (uint64_t{1} << 16);
  MIXPREC_CHECK(size <= max_file, "read_idx: ", name, ": field 'file size': expected at most ",
                max_file, " bytes, found ", size,
                Hint{"this is not an IDX dataset file mixprec can hold in memory"});
  std::vector<uint8_t> bytes(size);
  const size_t got = size == 0 ? 0 : std::fread(bytes.data(), 1, size, f.get());
  MIXPREC_CHECK(got == size, "read_idx: ", name, ": read error after ", got, " of ", size,
                " bytes: ", std::strerror(errno));
  return parse_idx(bytes, name, expected_ndim, max_payload);
}

void write_idx(const std::filesystem::path& path, const std::vector<int64_t>& dims,
               std::span<const uint8_t> data, bool gzip) {
  const std::string name = path.string();
  MIXPREC_CHECK(!dims.empty() && dims.size() <= 255, "write_idx: ", name,
                ": expected 1 to 255 dims, got ", dims.size());
  uint64_t n = 1;
  bool overflow = false;
  std::vector<uint8_t> header = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int64_t d : dims) {
    MIXPREC_CHECK(d > 0 && d <= int64_t{UINT32_MAX}, "write_idx: ", name,
                  ": expected dims in [1, 2^32), got ", dims_str(dims));
    overflow |= __builtin_mul_overflow(n, uint64_t(d), &n);
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(d >> shift));
  }
  MIXPREC_CHECK(!overflow && n == data.size(), "write_idx: ", name, ": dims ", dims_str(dims),
                " need ", overflow ? std::string("more than 2^64") : std::to_string(n),
                " bytes, got ", data.size());
  const std::string tmp = name + ".tmp";
  bool ok = true;
  if (gzip) {
    gzFile f = gzopen(tmp.c_str(), "wb");
    MIXPREC_CHECK(f != nullptr, "write_idx: ", tmp,
                  ": cannot open for writing: ", std::strerror(errno));
    ok = gzwrite(f, header.data(), static_cast<unsigned>(header.size())) == int(header.size());
    for (size_t at = 0; ok && at < data.size();) {
      const unsigned k = static_cast<unsigned>(std::min<size_t>(data.size() - at, size_t{1} << 30));
      ok = gzwrite(f, data.data() + at, k) == static_cast<int>(k);
      at += k;
    }
    ok = (gzclose(f) == Z_OK) && ok;
  } else {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    MIXPREC_CHECK(f != nullptr, "write_idx: ", tmp,
                  ": cannot open for writing: ", std::strerror(errno));
    ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
         (data.empty() || std::fwrite(data.data(), 1, data.size(), f.get()) == data.size());
    ok = (std::fclose(f.release()) == 0) && ok;
  }
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  }
  MIXPREC_CHECK(ok && !ec, "write_idx: ", name, ": write failed",
                ec ? ": " + ec.message() : std::string(" (disk full or not writable?)"));
}

}  // namespace mixprec::dataset
