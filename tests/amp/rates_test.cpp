// What low precision buys (amp/rates.h): the verdict from given rates (bf16 unless f16 is 5%
// faster; the speed-up over f32), and the measurement made once per machine: a second call reads
// the cache, so a decision such as --dtype auto cannot flip between runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "mixprec/amp/rates.h"
#include "ops/kernel_choice.h"

namespace mixprec {
namespace {

TEST(PrecisionRates, VerdictFromGivenRates) {
  amp::PrecisionRates r;
  r.gemm_gflops_f32 = 400, r.conv_gflops_f32 = 100;
  r.gemm_gflops_bf16 = 800, r.conv_gflops_bf16 = 200;
  r.gemm_gflops_f16 = 820, r.conv_gflops_f16 = 205;  // 2.5% faster: a tie goes to bf16
  EXPECT_EQ(r.faster_low(), DType::bf16);
  EXPECT_DOUBLE_EQ(r.combined(DType::f32), 200.0);  // sqrt(400 * 100)
  EXPECT_DOUBLE_EQ(r.speedup(), 2.0);
  r.gemm_gflops_f16 = 900, r.conv_gflops_f16 = 225;  // 12.5% faster
  EXPECT_EQ(r.faster_low(), DType::f16);
  r.gemm_gflops_bf16 = r.gemm_gflops_f16 = 300;  // slower than f32: O2 buys memory only
  r.conv_gflops_bf16 = r.conv_gflops_f16 = 50;
  EXPECT_LT(r.speedup(), 1.0);
  EXPECT_NE(r.describe().find("O2 computes slower than O0 here"), std::string::npos)
      << r.describe();
}

TEST(PrecisionRates, MeasuredOnceThenReadFromTheCache) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mixprec-rates-" + std::to_string(::getpid()));
  ::setenv("MIXPREC_CACHE_DIR", dir.c_str(), 1);
  ops::choice::reset_for_testing();
  const amp::PrecisionRates first = amp::measure_precision_rates();
  EXPECT_FALSE(first.cached);
  for (double v : {first.gemm_gflops_f32, first.gemm_gflops_bf16, first.gemm_gflops_f16,
                   first.conv_gflops_f32, first.conv_gflops_bf16, first.conv_gflops_f16})
    EXPECT_GT(v, 0.0);
  ops::choice::reset_for_testing();  // a new process: only the file remembers
  const amp::PrecisionRates again = amp::measure_precision_rates();
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.gemm_gflops_bf16, first.gemm_gflops_bf16);
  EXPECT_EQ(again.conv_gflops_f16, first.conv_gflops_f16);
  EXPECT_EQ(again.faster_low(), first.faster_low());
  ops::choice::reset_for_testing();
  ::unsetenv("MIXPREC_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mixprec
