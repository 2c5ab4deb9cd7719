// Run-time CPU feature detection (CPUID + XGETBV, so OS support for the wide registers counts).
// mixprec is never built with -march=native: kernels pick their instruction set from here.
// MIXPREC_ISA=scalar|avx2|avx512 caps what is reported, to test the slower paths on a fast CPU.
#pragma once

#include <string>

namespace mixprec {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_bf16 = false;
};

// Detected once, then capped by MIXPREC_ISA if set.
const CpuFeatures& cpu_features();
// The features the hardware has, ignoring MIXPREC_ISA.
CpuFeatures detect_cpu_features();
// "avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 amx_bf16" style summary.
std::string describe(const CpuFeatures& f);

}  // namespace mixprec
