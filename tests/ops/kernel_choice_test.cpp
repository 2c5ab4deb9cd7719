// Measured kernel choice (ops/kernel_choice.h): a measured GEMM gives what the fixed order gives
// within the AMP contract, writes its real output once, saves its choice; a second run confirms it
// (each candidate's best time of both runs), after which a warm cache times nothing; a corrupt,
// foreign or unwritable cache is a warning, never an error; two processes writing at once lose
// nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mixprec/ops/ops.h"
#include "mixprec/version.h"  // MIXPREC_WITH_ONEDNN
#include "cache_dir.h"
#include "op_test_util.h"
#include "ops/dispatch.h"
#include "ops/kernel_choice.h"

namespace mixprec {
namespace {
namespace fs = std::filesystem;
using ops::KernelChoice;
using ops::KernelChoiceScope;
namespace choice = ops::choice;

using testing::CacheDir;
using testing::read_text;

// bf16 GEMMs that several kernels accept on every x86 CPU (oneDNN native or through f32). A
// build without oneDNN (-DMIXPREC_WITH_ONEDNN=OFF, the CUDA device build) has one CPU kernel for
// them: nothing to choose between, so the tests that measure GEMMs are skipped there.
#if MIXPREC_WITH_ONEDNN
#define SKIP_WITHOUT_ONEDNN()
#else
#define SKIP_WITHOUT_ONEDNN() GTEST_SKIP() << "built without oneDNN: one CPU kernel for bf16 GEMMs"
#endif
Tensor gemm(int64_t m, int64_t k, int64_t n, uint64_t seed) {
  const Tensor a = testing::random({m, k}, seed, DType::f32).astype(DType::bf16);
  const Tensor b = testing::random({k, n}, seed + 1, DType::f32).astype(DType::bf16);
  return ops::matmul(a, b);
}

TEST(KernelChoice, MeasuredGemmMatchesTheFixedOrderWithinTheContractAndIsSaved) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  Tensor first, measured;
  {
    KernelChoiceScope s(KernelChoice::first);
    first = gemm(96, 160, 128, 3);
  }
  {
    KernelChoiceScope s(KernelChoice::measure);
    measured = gemm(96, 160, 128, 3);
  }
  EXPECT_GE(choice::measurements(), 1);
  // Each candidate rounds an f32 accumulation once: the two agree within a bf16 rounding or two.
  EXPECT_TRUE(testing::all_close(measured.astype(DType::f32), first.astype(DType::f32),
                                 testing::tolerance_for(DType::bf16)));
  ASSERT_TRUE(fs::exists(cache.file()));
  const nlohmann::json j = nlohmann::json::parse(read_text(cache.file()));
  EXPECT_EQ(j.at("format"), "mixprec kernel choices");
  EXPECT_EQ(j.at("version"), 1);
  ASSERT_EQ(j.at("machines").size(), 1u);
  bool found = false;
  for (const auto& [key, section] : j.at("machines").items())
    for (const auto& [sig, c] : section.items())
      if (sig.find("matmul forward") != std::string::npos &&
          sig.find("bf16[96, 160]") != std::string::npos) {
        found = true;
        EXPECT_GE(c.at("seconds").size(), 2u) << sig;
        EXPECT_TRUE(c.at("seconds").contains(c.at("kernel").get<std::string>())) << sig;
      }
  EXPECT_TRUE(found) << read_text(cache.file());
}

// The bf16[64, 96] x [96, 80] GEMM's entries in the cache file, by signature.
std::map<std::string, nlohmann::json> gemm_entries(const fs::path& file) {
  std::map<std::string, nlohmann::json> out;
  const nlohmann::json j = nlohmann::json::parse(read_text(file));
  for (const auto& [key, section] : j.at("machines").items())
    for (const auto& [sig, c] : section.items())
      if (sig.find("matmul forward") != std::string::npos &&
          sig.find("bf16[64, 96]") != std::string::npos)
        out[sig] = c;
  return out;
}

TEST(KernelChoice, ASecondRunConfirmsAChoiceAndAWarmCacheThenTimesNothing) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  KernelChoiceScope s(KernelChoice::measure);
  (void)gemm(64, 96, 80, 5);
  EXPECT_GE(choice::measurements(), 1);
  for (const auto& [sig, c] : gemm_entries(cache.file())) EXPECT_EQ(c.at("runs"), 1) << sig;
  choice::reset_for_testing();  // a new process: only the file remembers
  const Tensor second = gemm(64, 96, 80, 5);
  EXPECT_GE(choice::measurements(), 1) << "the first run's choice was taken unconfirmed";
  const auto entries = gemm_entries(cache.file());
  ASSERT_FALSE(entries.empty()) << read_text(cache.file());
  for (const auto& [sig, c] : entries) EXPECT_EQ(c.at("runs"), 2) << sig;
  choice::reset_for_testing();
  const Tensor warm = gemm(64, 96, 80, 5);
  EXPECT_EQ(choice::measurements(), 0);
  EXPECT_EQ(warm.astype(DType::f32).to_vector<float>(),
            second.astype(DType::f32).to_vector<float>());
  EXPECT_FALSE(choice::used().empty());
}

TEST(KernelChoice, MeasureOnceTrustsTheFirstRun) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  ::setenv("MIXPREC_KERNEL_CHOICE", "measure-once", 1);
  KernelChoiceScope s(KernelChoice::measure);
  const Tensor first = gemm(64, 96, 80, 5);
  EXPECT_GE(choice::measurements(), 1);
  choice::reset_for_testing();
  const Tensor second = gemm(64, 96, 80, 5);
  EXPECT_EQ(choice::measurements(), 0);
  EXPECT_EQ(second.astype(DType::f32).to_vector<float>(),
            first.astype(DType::f32).to_vector<float>());
  for (const auto& [sig, c] : gemm_entries(cache.file())) EXPECT_EQ(c.at("runs"), 1) << sig;
  ::unsetenv("MIXPREC_KERNEL_CHOICE");
}

TEST(KernelChoice, AConfirmingRunKeepsEachCandidatesBestTimeOfBothRuns) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  KernelChoiceScope s(KernelChoice::measure);
  (void)gemm(64, 96, 80, 5);
  // Rewrite the first run's timings as a slowed-down run would have left them: every candidate
  // 5 s, except one at 1e-12 s, faster than any real run (so it must stay the choice).
  nlohmann::json j = nlohmann::json::parse(read_text(cache.file()));
  std::map<std::string, std::string> fastest;
  for (auto& [key, section] : j.at("machines").items())
    for (auto& [sig, c] : section.items()) {
      if (c.at("seconds").size() < 2) continue;
      const std::string pick = c.at("seconds").begin().key();
      for (auto& [name, t] : c.at("seconds").items()) t = name == pick ? 1e-12 : 5.0;
      c["kernel"] = pick;
      fastest[sig] = pick;
    }
  ASSERT_FALSE(fastest.empty()) << "no signature had two candidates: the test proves nothing";
  std::ofstream(cache.file()) << j.dump(1);
  choice::reset_for_testing();
  (void)gemm(64, 96, 80, 5);
  EXPECT_GE(choice::measurements(), 1);
  const nlohmann::json after = nlohmann::json::parse(read_text(cache.file()));
  for (const auto& [key, section] : after.at("machines").items())
    for (const auto& [sig, c] : section.items()) {
      const auto it = fastest.find(sig);
      if (it == fastest.end()) continue;
      EXPECT_EQ(c.at("runs"), 2) << sig;
      EXPECT_EQ(c.at("kernel"), it->second) << sig;
      for (const auto& [name, t] : c.at("seconds").items()) {
        if (name == it->second) {
          EXPECT_EQ(t.get<double>(), 1e-12) << sig << " " << name;
        } else {
          EXPECT_LT(t.get<double>(), 5.0) << sig << " " << name << ": the slowed time was kept";
        }
      }
    }
}

// A trusted choice in the file that never timed one of this build's candidates (a kernel added
// since the file was written, under the same library version) is measured again, and the file
// then holds that kernel's time; a complete one is taken as it is.
TEST(KernelChoice, AKernelTheFileNeverTimedIsMeasuredAgain) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  ::setenv("MIXPREC_KERNEL_CHOICE", "measure-once", 1);  // one run's choice is trusted
  KernelChoiceScope s(KernelChoice::measure);
  (void)gemm(64, 96, 80, 5);
  nlohmann::json j = nlohmann::json::parse(read_text(cache.file()));
  std::map<std::string, std::string> dropped;
  for (auto& [key, section] : j.at("machines").items())
    for (auto& [sig, c] : section.items()) {
      if (c.at("seconds").size() < 2) continue;
      for (const auto& [name, t] : c.at("seconds").items())
        if (name != c.at("kernel")) {
          dropped[sig] = name;
          break;
        }
      c.at("seconds").erase(dropped[sig]);
    }
  ASSERT_FALSE(dropped.empty()) << "no signature had two candidates: the test proves nothing";
  std::ofstream(cache.file()) << j.dump(1);
  choice::reset_for_testing();
  (void)gemm(64, 96, 80, 5);
  EXPECT_GE(choice::measurements(), 1) << "a choice that never timed a candidate was trusted";
  const nlohmann::json after = nlohmann::json::parse(read_text(cache.file()));
  for (const auto& [key, section] : after.at("machines").items())
    for (const auto& [sig, c] : section.items())
      if (dropped.count(sig)) EXPECT_TRUE(c.at("seconds").contains(dropped[sig])) << sig;
  choice::reset_for_testing();  // now complete: taken as it is
  (void)gemm(64, 96, 80, 5);
  EXPECT_EQ(choice::measurements(), 0);
  ::unsetenv("MIXPREC_KERNEL_CHOICE");
}

TEST(KernelChoice, AMeasuredLinearMatchesTheReferenceKernel) {
  SKIP_WITHOUT_ONEDNN();
  // The timing runs write fresh outputs; the real output is written once, by the chosen kernel.
  CacheDir cache;
  const Tensor x = testing::random({48, 64}, 9, DType::f32).astype(DType::bf16);
  const Tensor w = testing::random({32, 64}, 10, DType::f32).astype(DType::bf16);
  const Tensor b = testing::random({32}, 11, DType::f32).astype(DType::bf16);
  Tensor ref_y;
  {
    ops::ForceImpl r("ref");
    ref_y = ops::linear(x, w, b);
  }
  KernelChoiceScope s(KernelChoice::measure);
  const Tensor y = ops::linear(x, w, b);
  EXPECT_GE(choice::measurements(), 1);
  EXPECT_TRUE(testing::all_close(y.astype(DType::f32), ref_y.astype(DType::f32),
                                 testing::tolerance_for(DType::bf16)));
}

TEST(KernelChoice, ACorruptOrForeignCacheIsIgnoredWithAWarningAndRewritten) {
  SKIP_WITHOUT_ONEDNN();
  for (const std::string bad :
       {std::string("{not json"), std::string("[1, 2, 3]"),
        std::string(R"({"format": "mixprec kernel choices", "version": 1, "library": "0.0.0",)"
                    R"( "machines": {}})"),
        std::string(R"({"format": "mixprec kernel choices", "version": 99, "library": "0.1.0",)"
                    R"( "machines": {}})")}) {
    CacheDir cache;
    fs::create_directories(cache.path());
    std::ofstream(cache.file()) << bad;
    KernelChoiceScope s(KernelChoice::measure);
    ::testing::internal::CaptureStderr();
    (void)gemm(40, 72, 56, 13);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("ignoring the kernel-choice cache"), std::string::npos)
        << bad << ": " << err;
    EXPECT_GE(choice::measurements(), 1) << bad;
    const nlohmann::json j = nlohmann::json::parse(read_text(cache.file()));
    EXPECT_EQ(j.at("format"), "mixprec kernel choices") << bad;
    EXPECT_EQ(j.at("version"), 1) << bad;
    EXPECT_FALSE(j.at("machines").empty()) << bad;
  }
}

TEST(KernelChoice, AnUnwritableCacheCostsAWarningNotTheRun) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  fs::create_directories(cache.path());
  std::ofstream(cache.path() / "blocker") << "a file where the cache folder should be";
  ::setenv("MIXPREC_CACHE_DIR", (cache.path() / "blocker").c_str(), 1);
  KernelChoiceScope s(KernelChoice::measure);
  ::testing::internal::CaptureStderr();
  const Tensor y = gemm(36, 52, 44, 17);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(y.shape(), (Shape{36, 44}));
  EXPECT_NE(err.find("cannot save measured kernel choices"), std::string::npos) << err;
}

TEST(KernelChoice, TwoProcessesWritingAtOnceLoseNothing) {
  CacheDir cache;
  constexpr int kEach = 40;
  const auto writer = [&](const char* who) {
    for (int i = 0; i < kEach; ++i)
      choice::store(std::string(who) + " sig " + std::to_string(i),
                    {"onednn", {{"onednn", 1e-3}, {"low_via_f32", 2e-3}}});
  };
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    writer("child");
    ::_exit(0);
  }
  writer("parent");
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const nlohmann::json j = nlohmann::json::parse(read_text(cache.file()));
  size_t entries = 0;
  for (const auto& [key, section] : j.at("machines").items()) entries += section.size();
  EXPECT_EQ(entries, 2u * kEach);
  for (const fs::directory_entry& e : fs::directory_iterator(cache.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << "a temporary file was left: " << e.path();
}

TEST(KernelChoice, PinnedChoicesWin) {
  SKIP_WITHOUT_ONEDNN();
  CacheDir cache;
  KernelChoiceScope s(KernelChoice::measure);
  (void)gemm(32, 48, 40, 21);
  const auto used = choice::used();
  ASSERT_FALSE(used.empty());
  // Pin every signature to the f32 route (a candidate on every CPU for bf16 GEMMs).
  std::map<std::string, std::string> pins;
  for (const auto& [sig, c] : used) pins[sig] = "low_via_f32";
  choice::reset_for_testing();
  choice::pin(pins);
  const Tensor y = gemm(32, 48, 40, 21);
  EXPECT_EQ(choice::measurements(), 0);
  for (const auto& [sig, c] : choice::used()) EXPECT_EQ(c.kernel, "low_via_f32") << sig;
  EXPECT_EQ(y.shape(), (Shape{32, 40}));
}

}  // namespace
}  // namespace mixprec
