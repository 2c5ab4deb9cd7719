// libFuzzer target for the safetensors reader: arbitrary bytes into io::parse_safetensors. Bad
// input must end in a mixprec::Error (caught here); anything else is a finding: a crash, a
// sanitizer report, another exception, a timeout, or an accepted file that breaks the reader's
// promises (checked below: packed cpu tensors whose bytes the file backs, unique names).
// Built by MIXPREC_FUZZ (clang, -fsanitize=fuzzer) and, with replay_main.cpp, as a ctest replay.
#include <cstdint>
#include <set>
#include <string>

#include "fuzz_check.h"
#include "mixprec/error.h"
#include "mixprec/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mixprec::io::SafetensorsFile f = mixprec::io::parse_safetensors(data, size, "fuzz-input");
    std::set<std::string> names;
    uint64_t total = 0;
    for (const auto& [name, t] : f.tensors) {
      FUZZ_REQUIRE(name != "__metadata__" && names.insert(name).second, "unique tensor names");
      // Empty tensors are exempt: core's is_contiguous() says false for e.g. [4, 0, 2] made by
      // Tensor::empty (its strides treat a 0 dim as 1; is_contiguous multiplies by 0).
      FUZZ_REQUIRE(t.defined() && t.device().is_cpu() && (t.numel() == 0 || t.is_contiguous()),
                   "packed cpu tensor");
      FUZZ_REQUIRE(t.nbytes() <= size, "a tensor's bytes come from the file");
      total += t.nbytes();
      // Read every byte, so ASan checks the whole allocation.
      const auto* p = static_cast<const volatile uint8_t*>(t.data_ptr());
      uint8_t sink = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sink ^= p[i];
      (void)sink;
    }
    FUZZ_REQUIRE(total <= size, "tensors do not overlap (their bytes fit in the file)");
  } catch (const mixprec::Error&) {
    // The expected answer to bad input.
  }
  return 0;
}
