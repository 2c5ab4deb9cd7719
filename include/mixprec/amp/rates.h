// What low precision buys on this machine, measured rather than assumed: the rates of a GEMM and
// a convolution in f32, bf16 and f16 through the op library (the kernels dispatch would choose,
// measured choice included), and from them the faster 16-bit dtype. `mixprec info` prints them;
// `mixprec train --dtype auto` trains in the faster one; `mixprec train` says what O2 buys.
#pragma once

#include <string>

#include "mixprec/dtype.h"

namespace mixprec::amp {

struct PrecisionRates {
  double gemm_gflops_f32 = 0, gemm_gflops_bf16 = 0, gemm_gflops_f16 = 0;
  double conv_gflops_f32 = 0, conv_gflops_bf16 = 0, conv_gflops_f16 = 0;
  bool cached = false;  // read from the kernel-choice cache, measured by an earlier run
  // The combined rate of a dtype: the geometric mean of its GEMM and convolution rates.
  double combined(DType d) const;
  // bf16 unless f16's combined rate is at least 5% higher (bf16 needs no loss scaling to stay in
  // range, so a tie goes to it).
  DType faster_low() const;
  // combined(faster_low()) / combined(f32): above 1, O2 computes faster here; below, it buys
  // memory (activations in 16 bits) but not speed.
  double speedup() const;
  // One line per kind of kernel and the verdict, for people.
  std::string describe() const;
};

// Times a 512^3 GEMM and a batch-32 3x3 convolution (64 -> 64 channels at 28x28) in each dtype on
// the CPU, best of 5 after a warm-up: about 0.2-0.5 s, once per machine and thread count; later
// calls (and runs) read the figures from the kernel-choice cache (ops/kernel_choice.h), so that
// decisions made from them do not change from run to run. Without autograd.
PrecisionRates measure_precision_rates();

}  // namespace mixprec::amp
