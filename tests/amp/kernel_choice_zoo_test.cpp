// Measured kernel choice on every zoo model: three O2 steps (bf16 and f16) with the kernels that
// measure fastest here take the same decisions as the fixed order and end within the AMP contract
// of its weights (the candidates differ only in the order of f32 additions before the one
// rounding). The cache is a fresh folder, so this run measures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "mixprec/version.h"  // MIXPREC_WITH_ONEDNN
#include "ops/kernel_choice.h"
#include "train_steps_util.h"

namespace mixprec {
namespace {
using ops::KernelChoice;
using ops::KernelChoiceScope;

class KernelChoiceZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelChoiceZoo, MeasuredAndFirstAgreeWithinTheContractAtO2) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mixprec-kc-zoo-" + std::to_string(::getpid()));
  ::setenv("MIXPREC_CACHE_DIR", dir.c_str(), 1);
  ops::choice::reset_for_testing();
  for (DType low : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(low)));
    testing::StepsSpec spec{.model = GetParam(), .level = "O2", .low = low, .steps = 3};
    spec.manager = [] { return Handle<amp::LossScaleManager>(amp::FixedLossScaleManager(128.0)); };
    testing::StepsRun first, measured;
    {
      KernelChoiceScope s(KernelChoice::first);
      first = testing::run_steps(spec, Device::cpu());
    }
    {
      KernelChoiceScope s(KernelChoice::measure);
      measured = testing::run_steps(spec, Device::cpu());
    }
    testing::expect_same_decisions(measured, first);
    // The losses within two roundings of the 16-bit type. The weights: within that of their
    // tensor's largest value, plus a tenth of what 3 steps of lr 0.02 move a weight with a unit
    // gradient: a 16-bit rounding that flips the other way in one kernel's activations changes
    // single gradients by much more than a rounding (through ReLU and BatchNorm), so element-wise
    // bounds are loose by nature; a kernel that wrote a wrong or doubled output is far outside.
    const double rel = low == DType::bf16 ? 2e-2 : 1e-2;
    for (size_t k = 0; k < first.steps.size(); ++k)
      EXPECT_NEAR(measured.steps[k].loss, first.steps[k].loss, rel * std::fabs(first.steps[k].loss))
          << "step " << k;
    for (size_t i = 0; i < first.weights.size(); ++i) {
      double mx = 0;
      for (float v : first.weights[i]) mx = std::max(mx, std::fabs(static_cast<double>(v)));
      for (size_t j = 0; j < first.weights[i].size(); ++j)
        ASSERT_NEAR(measured.weights[i][j], first.weights[i][j], rel * mx + 3 * 0.02 * 0.1)
            << "weight tensor " << i << " element " << j;
    }
  }
#if MIXPREC_WITH_ONEDNN  // without it, a model of GEMMs alone (mlp, gpt-tiny) has nothing to choose
  EXPECT_GE(ops::choice::measurements(), 1) << "nothing was measured for " << GetParam();
#endif
  ops::choice::reset_for_testing();
  std::filesystem::remove_all(dir);
  ::unsetenv("MIXPREC_CACHE_DIR");
}

INSTANTIATE_TEST_SUITE_P(Zoo, KernelChoiceZoo, ::testing::ValuesIn(nn::model_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace mixprec
