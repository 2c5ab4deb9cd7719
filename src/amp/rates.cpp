// Measured rates of f32, bf16 and f16 (amp/rates.h): a GEMM and a convolution per dtype, timed
// through the op library so that they run the kernels training would run.
#include "mixprec/amp/rates.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "mixprec/grad_mode.h"
#include "mixprec/ops/ops.h"
#include "mixprec/rng.h"
#include "ops/kernel_choice.h"

namespace mixprec::amp {
namespace {

// GFLOP/s of `run` (flops of work), best of 5 after one warm-up run.
double rate(double flops, const std::function<void()>& run) {
  run();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return flops / best / 1e9;
}

double gemm_rate(DType d) {
  constexpr int64_t n = 512;
  Generator g(1);
  const Tensor a = randn({n, n}, g, {.dtype = d}), b = randn({n, n}, g, {.dtype = d});
  return rate(2.0 * n * n * n, [&] { (void)ops::matmul(a, b); });
}

double conv_rate(DType d) {
  constexpr int64_t batch = 32, c = 64, hw = 28, k = 3;
  Generator g(2);
  const Tensor x = randn({batch, c, hw, hw}, g, {.dtype = d});
  const Tensor w = randn({c, c, k, k}, g, {.dtype = d});
  const ops::Conv2dOptions o{.pad_mode = ops::PadMode::same};
  return rate(2.0 * batch * c * c * k * k * hw * hw, [&] { (void)ops::conv2d(x, w, {}, o); });
}

}  // namespace

double PrecisionRates::combined(DType d) const {
  const auto gm = [](double a, double b) { return std::sqrt(a * b); };
  if (d == DType::bf16) return gm(gemm_gflops_bf16, conv_gflops_bf16);
  if (d == DType::f16) return gm(gemm_gflops_f16, conv_gflops_f16);
  return gm(gemm_gflops_f32, conv_gflops_f32);
}

DType PrecisionRates::faster_low() const {
  return combined(DType::f16) >= 1.05 * combined(DType::bf16) ? DType::f16 : DType::bf16;
}

double PrecisionRates::speedup() const { return combined(faster_low()) / combined(DType::f32); }

std::string PrecisionRates::describe() const {
  char buf[512];
  const DType low = faster_low();
  const double s = speedup();
  std::snprintf(buf, sizeof buf,
                "GEMM 512^3:            f32 %6.0f, bf16 %6.0f, f16 %6.0f GFLOP/s\n"
                "conv 3x3 64ch 28x28:   f32 %6.0f, bf16 %6.0f, f16 %6.0f GFLOP/s\n"
                "faster 16-bit type here: %s, %.2fx f32 (%s)%s",
                gemm_gflops_f32, gemm_gflops_bf16, gemm_gflops_f16, conv_gflops_f32,
                conv_gflops_bf16, conv_gflops_f16, std::string(dtype_name(low)).c_str(), s,
                s >= 1.05   ? "O2 computes faster than O0 and halves activation memory"
                : s >= 0.95 ? "O2 computes about as fast as O0; it halves activation memory"
                            : "O2 computes slower than O0 here; it halves activation memory",
                cached ? "\n(measured by an earlier run on this machine: the kernel cache, "
                         "MIXPREC_CACHE_DIR; delete it to measure again)"
                       : "");
  return buf;
}

PrecisionRates measure_precision_rates() {
  // Measured once per machine (and thread count), then read from the kernel-choice cache: a
  // decision such as --dtype auto must not flip between runs with the machine's noise.
  const std::string sig = ops::choice::signature_prefix("precision_rates", "v1") +
                          "GEMM 512^3, conv 3x3 64->64 channels 28x28 batch 32, GFLOP/s";
  static constexpr const char* kKeys[] = {"gemm_f32", "gemm_bf16", "gemm_f16",
                                          "conv_f32", "conv_bf16", "conv_f16"};
  PrecisionRates r;
  double* fields[] = {&r.gemm_gflops_f32, &r.gemm_gflops_bf16, &r.gemm_gflops_f16,
                      &r.conv_gflops_f32, &r.conv_gflops_bf16, &r.conv_gflops_f16};
  if (const auto c = ops::choice::lookup(sig); c && c->seconds.size() == 6) {
    for (const auto& [key, value] : c->seconds)
      for (size_t i = 0; i < 6; ++i)
        if (key == kKeys[i]) *fields[i] = value;
    r.cached = true;
    return r;
  }
  NoGradGuard no_grad;
  const ops::choice::UnrecordedScope not_the_runs_work;
  r.gemm_gflops_f32 = gemm_rate(DType::f32);
  r.gemm_gflops_bf16 = gemm_rate(DType::bf16);
  r.gemm_gflops_f16 = gemm_rate(DType::f16);
  r.conv_gflops_f32 = conv_rate(DType::f32);
  r.conv_gflops_bf16 = conv_rate(DType::bf16);
  r.conv_gflops_f16 = conv_rate(DType::f16);
  ops::choice::Choice c{"rates", {}};
  for (size_t i = 0; i < 6; ++i) c.seconds.emplace_back(kKeys[i], *fields[i]);  // GFLOP/s here
  ops::choice::store(sig, c);
  return r;
}

}  // namespace mixprec::amp
