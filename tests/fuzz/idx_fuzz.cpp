// libFuzzer target for the IDX reader: arbitrary bytes (raw or gzip) into dataset::parse_idx,
// once for each expected rank 1..8 (a wrong rank fails at the magic, so this is cheap). Bad input
// must end in a mixprec::Error (caught here); anything else is a finding: a crash, a sanitizer
// report, another exception, a timeout, or an accepted file whose dims and data disagree.
// Built by MIXPREC_FUZZ (clang, -fsanitize=fuzzer) and, with replay_main.cpp, as a ctest replay.
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "mixprec/data/idx.h"
#include "mixprec/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  for (int ndim = 1; ndim <= 8; ++ndim) {
    try {
      const mixprec::dataset::IdxArray a = mixprec::dataset::parse_idx(bytes, "fuzz-input", ndim);
      FUZZ_REQUIRE(a.dims.size() == static_cast<size_t>(ndim), "rank as expected");
      uint64_t n = 1;
      for (int64_t d : a.dims) {
        FUZZ_REQUIRE(d > 0 && d <= int64_t{UINT32_MAX}, "dims in [1, 2^32)");
        n *= static_cast<uint64_t>(d);
      }
      FUZZ_REQUIRE(n == a.data.size(), "data holds product(dims) bytes");
      FUZZ_REQUIRE(n <= mixprec::dataset::kIdxMaxPayloadBytes, "payload within the cap");
    } catch (const mixprec::Error&) {
      // The expected answer to bad input.
    }
  }
  return 0;
}
