// CPUID-based feature detection. A feature counts only if the CPU has it and the OS saves the
// registers it needs (XCR0 bits for YMM, ZMM/opmask and AMX tile state).
#include "mixprec/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "mixprec/env.h"

namespace mixprec {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  const bool has_fma = ecx & (1u << 12);
  const bool has_f16c = ecx & (1u << 29);
  const bool has_avx = ecx & (1u << 28);
  if (!osxsave || !has_avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  const bool amx_ok = (xcr0 & 0x60000) == 0x60000;
  if (!ymm_ok) return f;
  f.fma = has_fma;
  f.f16c = has_f16c;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  f.avx2 = ebx & (1u << 5);
  if (zmm_ok) {
    f.avx512f = ebx & (1u << 16);
    f.avx512bw = ebx & (1u << 30);
    f.avx512vl = ebx & (1u << 31);
    f.avx512_fp16 = edx & (1u << 23);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx512_bf16 = a1 & (1u << 5);
  }
  f.amx_bf16 = amx_ok && (edx & (1u << 22));
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f = detect_cpu_features();
    const std::optional<std::string> cap = env::get("MIXPREC_ISA");  // checked: scalar|avx2|avx512
    if (!cap) return f;
    const std::string_view c(*cap);
    if (c != "avx512") {
      f.avx512f = f.avx512bw = f.avx512vl = f.avx512_bf16 = f.avx512_fp16 = f.amx_bf16 = false;
    }
    if (c == "scalar") f.avx2 = f.fma = f.f16c = false;
    return f;
  }();
  return features;
}

std::string describe(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  return s.empty() ? "baseline x86-64" : s;
}

}  // namespace mixprec
