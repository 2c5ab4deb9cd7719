// The AMP multi-tensor kernels of the cpu backend (ops/cpu/amp.cpp) against the reference kernels,
// bit for bit: the unscale + finite check (every dtype, inf/NaN, overflow on store, a scale of 1
// that only checks, tensors large enough to be split across threads) and the fused SGD, Momentum
// and Adam/AdamW updates (every gradient dtype, working copies, inv_scale, scalars read from a
// tensor, the skip on found_inf); the thread count changes nothing. Then the element formulas
// written once in ops/amp_problem.h: finite_bits and the dynamic scale rule, hand-computed.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "mixprec/ops/amp_device.h"
#include "op_test_util.h"
#include "ops/amp_problem.h"
#include "ops/dispatch.h"

namespace mixprec {
namespace {

using testing::random;
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor scalar_f32(float v) { return full({1}, v); }

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

// Gradients of dtype d: one small, one that is not a multiple of the 4096-element chunk, one
// large enough for the kernels' threads (> 65536), each with a few values planted by `plant`.
std::vector<Tensor> gradients(DType d, uint64_t seed) {
  return {random({7, 5}, seed, d, -100, 100), random({4100}, seed + 1, d, -100, 100),
          random({70001}, seed + 2, d, -100, 100)};
}

void set(const Tensor& t, int64_t i, float v) { t.view({t.numel()}).slice(0, i, i + 1).fill_(v); }

struct UnscaleRun {
  std::vector<Tensor> grads;
  float found;
};
UnscaleRun unscale(std::string_view impl, const std::vector<Tensor>& grads, float inv) {
  ops::ForceImpl force(impl);
  UnscaleRun r{clones(grads), 0};
  const Tensor found = zeros({1});
  ops::amp_foreach_non_finite_check_and_unscale_(r.grads, found, scalar_f32(inv));
  r.found = found.data<float>()[0];
  return r;
}

TEST(AmpKernels, UnscaleCpuEqualsRefBitForBit) {
  struct Case {
    std::string what;
    std::function<void(std::vector<Tensor>&)> plant;
    float inv;
    bool bad;
  };
  const std::vector<Case> cases{
      {"finite, 1/1024", [](std::vector<Tensor>&) {}, 1.0f / 1024, false},
      {"finite, check only", [](std::vector<Tensor>&) {}, 1.0f, false},
      {"inf in the last chunk of the large tensor",
       [](std::vector<Tensor>& g) { set(g[2], 70000, kInf); }, 1.0f / 1024, true},
      {"NaN in the small tensor, check only",
       [](std::vector<Tensor>& g) { set(g[0], 3, std::nanf("")); }, 1.0f, true},
      {"-inf in the odd-sized tensor", [](std::vector<Tensor>& g) { set(g[1], 4099, -kInf); }, 0.5f,
       true},
  };
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    for (const Case& k : cases) {
      std::vector<Tensor> g = gradients(d, 10);
      k.plant(g);
      const UnscaleRun cpu = unscale("cpu", g, k.inv), ref = unscale("ref", g, k.inv);
      const std::string what = std::string(dtype_name(d)) + ": " + k.what;
      EXPECT_EQ(cpu.found, k.bad ? 1.0f : 0.0f) << what;
      EXPECT_EQ(ref.found, cpu.found) << what;
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_TRUE(same_bytes(cpu.grads[i], ref.grads[i])) << what << ", tensor " << i;
        if (k.inv == 1.0f) EXPECT_TRUE(same_bytes(cpu.grads[i], g[i])) << what << ": written";
      }
      // The scaled value, by hand: one f32 product rounded into the dtype.
      const float g0 = g[1].to_vector<float>()[17];
      const Tensor expect = Tensor::from_vector<float>({g0 * k.inv}, {1}).astype(d);
      EXPECT_EQ(cpu.grads[1].to_vector<float>()[17], expect.to_vector<float>()[0]) << what;
    }
}

TEST(AmpKernels, ATensorListedTwiceIsScaledTwiceInOrderAndDisjointViewsStayParallel) {
  // The cpu kernels run one parallel loop over the chunks of every tensor; a tensor listed twice
  // would have the same chunk scaled by two threads at once, so such a list runs in order on one
  // thread: each value scaled twice, as the reference does. Disjoint views of one buffer (data
  // parallel's buckets) are not a repeat.
  for (const char* impl : {"cpu", "ref"}) {
    ops::ForceImpl force(impl);
    const Tensor big = random({70001}, 5, DType::f32, -100, 100);
    std::vector<Tensor> twice{big.clone()};
    twice.push_back(twice[0]);
    const Tensor found = zeros({1});
    ops::amp_foreach_non_finite_check_and_unscale_(twice, found, scalar_f32(0.5f));
    const std::vector<float> before = big.to_vector<float>(), after = twice[0].to_vector<float>();
    for (size_t i = 0; i < before.size(); i += 997)
      ASSERT_EQ(after[i], before[i] * 0.5f * 0.5f) << impl << " element " << i;
    const Tensor buffer = random({140002}, 6, DType::f32, -100, 100);
    std::vector<Tensor> halves{buffer.clone()};
    halves.push_back(halves[0].slice(0, 70001, 140002));
    halves[0] = halves[0].slice(0, 0, 70001);
    ops::amp_foreach_non_finite_check_and_unscale_(halves, found, scalar_f32(0.25f));
    const std::vector<float> b0 = buffer.to_vector<float>();
    for (size_t i = 0; i < 70001; i += 991) {
      ASSERT_EQ(halves[0].to_vector<float>()[i], b0[i] * 0.25f) << impl;
      ASSERT_EQ(halves[1].to_vector<float>()[i], b0[70001 + i] * 0.25f) << impl;
    }
  }
}

TEST(AmpKernels, UnscaleChecksTheStoredValueOnEveryBackend) {
  // Finite in f32, inf once stored: f16 above 65519.99, bf16 from 0x1.ffp+127 (a scale below 1).
  for (const auto& [d, g, inv] :
       {std::tuple{DType::f16, 40000.0f, 2.0f}, std::tuple{DType::bf16, 1.0f, 0x1.ffp+127f}}) {
    std::vector<Tensor> grads = gradients(d, 20);
    set(grads[2], 123, g);
    const UnscaleRun cpu = unscale("cpu", grads, inv), ref = unscale("ref", grads, inv);
    EXPECT_EQ(cpu.found, 1.0f) << dtype_name(d);
    EXPECT_EQ(ref.found, 1.0f) << dtype_name(d);
    EXPECT_TRUE(std::isinf(cpu.grads[2].to_vector<float>()[123])) << dtype_name(d);
    for (size_t i = 0; i < grads.size(); ++i)
      EXPECT_TRUE(same_bytes(cpu.grads[i], ref.grads[i])) << dtype_name(d) << " tensor " << i;
  }
}

// One optimizer's fused update on fresh copies of the same tensors, by kernel `impl`.
struct UpdateRun {
  std::vector<Tensor> params, s0, s1, working;
};
struct UpdateCase {
  std::string what;
  int slots;
  std::function<void(const UpdateRun&, const std::vector<Tensor>&, const Tensor&, const Tensor&)>
      op;  // (run, grads, found_inf, inv_scale)
};

UpdateRun update(std::string_view impl, const UpdateCase& k, const UpdateRun& start,
                 const std::vector<Tensor>& grads, const Tensor& found, const Tensor& inv,
                 int steps) {
  ops::ForceImpl force(impl);
  UpdateRun r{clones(start.params), clones(start.s0), clones(start.s1), clones(start.working)};
  for (int s = 0; s < steps; ++s) k.op(r, grads, found, inv);
  return r;
}

std::vector<UpdateCase> update_cases() {
  std::vector<UpdateCase> cases;
  for (double wd : {0.0, 1e-2}) {
    const std::string w = wd > 0 ? ", weight decay" : "";
    cases.push_back({"sgd" + w, 0, [wd](const UpdateRun& r, auto& g, auto& f, auto& inv) {
                       ops::fused_sgd_(r.params, g, r.working, f, inv,
                                       {.lr = 0.05, .weight_decay = wd});
                     }});
    for (bool nesterov : {false, true})
      cases.push_back(
          {"momentum" + w + (nesterov ? ", nesterov" : ""), 1,
           [wd, nesterov](const UpdateRun& r, auto& g, auto& f, auto& inv) {
             ops::fused_momentum_(
                 r.params, g, r.s0, r.working, f, inv,
                 {.lr = 0.05, .momentum = 0.9, .weight_decay = wd, .nesterov = nesterov},
                 full({1}, 0.03));  // the rate from the tensor
           }});
    for (bool decoupled : {false, true})
      cases.push_back({std::string(decoupled ? "adamw" : "adam") + w, 2,
                       [wd, decoupled](const UpdateRun& r, auto& g, auto& f, auto& inv) {
                         ops::fused_adam_(r.params, g, r.s0, r.s1, r.working, f, inv,
                                          {.lr = 1e-3,
                                           .weight_decay = wd,
                                           .decoupled = decoupled,
                                           .bias_correction1 = 1 / (1 - 0.9),
                                           .bias_correction2 = 1 / (1 - 0.999)},
                                          Tensor::from_vector<float>({2e-3f, 5.3f, 300.2f}, {3}));
                       }});
  }
  return cases;
}

TEST(AmpKernels, FusedUpdatesCpuEqualRefBitForBit) {
  const std::vector<Tensor> params{random({7, 5}, 1, DType::f32), random({4100}, 2, DType::f32),
                                   random({70001}, 3, DType::f32)};
  for (const UpdateCase& k : update_cases())
    for (DType gd : {DType::f32, DType::f16, DType::bf16})
      for (DType wd : {DType::f32, DType::f16, DType::bf16}) {  // f32: no working copies
        UpdateRun start{params, {}, {}, {}};
        for (const Tensor& p : params) {
          if (k.slots > 0) start.s0.push_back(random(p.shape(), 4, DType::f32, 0, 0.1));
          if (k.slots > 1) start.s1.push_back(random(p.shape(), 5, DType::f32, 0, 0.1));
          if (wd != DType::f32) start.working.push_back(zeros(p.shape(), {.dtype = wd}));
        }
        const std::vector<Tensor> grads = gradients(gd, 30);
        for (const Tensor& inv : {Tensor(), scalar_f32(1.0f / 256)}) {
          const std::string what = k.what + ", gradients " + std::string(dtype_name(gd)) +
                                   ", working " + std::string(dtype_name(wd)) +
                                   (inv.defined() ? ", inv_scale" : "");
          const UpdateRun cpu = update("cpu", k, start, grads, scalar_f32(0), inv, 3);
          const UpdateRun ref = update("ref", k, start, grads, Tensor(), inv, 3);
          for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_FALSE(same_bytes(cpu.params[i], params[i])) << what << ": not updated";
            EXPECT_TRUE(same_bytes(cpu.params[i], ref.params[i])) << what << ", param " << i;
            if (k.slots > 0) EXPECT_TRUE(same_bytes(cpu.s0[i], ref.s0[i])) << what << ", slot 0";
            if (k.slots > 1) EXPECT_TRUE(same_bytes(cpu.s1[i], ref.s1[i])) << what << ", slot 1";
            if (wd == DType::f32) continue;
            EXPECT_TRUE(same_bytes(cpu.working[i], ref.working[i])) << what << ", working";
            EXPECT_TRUE(same_bytes(cpu.working[i], cpu.params[i].astype(wd)))
                << what << ": the working copy is the master rounded once";
          }
          // found_inf set: neither kernel writes anything.
          for (std::string_view impl : {"cpu", "ref"}) {
            const UpdateRun skipped = update(impl, k, start, grads, scalar_f32(1), inv, 1);
            for (size_t i = 0; i < params.size(); ++i) {
              EXPECT_TRUE(same_bytes(skipped.params[i], params[i])) << what << " " << impl;
              if (k.slots > 0) EXPECT_TRUE(same_bytes(skipped.s0[i], start.s0[i])) << what;
              if (k.slots > 1) EXPECT_TRUE(same_bytes(skipped.s1[i], start.s1[i])) << what;
              if (wd != DType::f32)
                EXPECT_TRUE(same_bytes(skipped.working[i], start.working[i])) << what;
            }
          }
        }
      }
}

TEST(AmpKernels, TheThreadCountChangesNoBit) {
  const int saved = omp_get_max_threads();
  std::vector<Tensor> g = gradients(DType::bf16, 40);
  set(g[2], 69000, kInf);
  const UpdateCase adam = update_cases()[3];
  ASSERT_EQ(adam.what, "adam");
  const std::vector<Tensor> params{random({7, 5}, 1, DType::f32), random({4100}, 2, DType::f32),
                                   random({70001}, 3, DType::f32)};
  UpdateRun start{params, {}, {}, {}};
  for (const Tensor& p : params) {
    start.s0.push_back(zeros(p.shape()));
    start.s1.push_back(zeros(p.shape()));
    start.working.push_back(zeros(p.shape(), {.dtype = DType::f16}));
  }
  const std::vector<Tensor> clean = gradients(DType::bf16, 41);
  std::vector<UnscaleRun> unscaled;
  std::vector<UpdateRun> updated;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    unscaled.push_back(unscale("cpu", g, 1.0f / 8));
    updated.push_back(update("cpu", adam, start, clean, Tensor(), scalar_f32(0.5f), 2));
  }
  omp_set_num_threads(saved);
  for (size_t t = 1; t < 3; ++t) {
    EXPECT_EQ(unscaled[t].found, 1.0f);
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(same_bytes(unscaled[t].grads[i], unscaled[0].grads[i])) << t << " " << i;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(same_bytes(updated[t].params[i], updated[0].params[i])) << t << " " << i;
      EXPECT_TRUE(same_bytes(updated[t].working[i], updated[0].working[i])) << t << " " << i;
    }
  }
}

// The clip stage's global norm (ops::amp_clip_by_global_norm_): each tensor's chunks of
// kClipChunk summed in f64 in element order, the chunk sums added in order, tensor by tensor, the
// bits of that sum computed here by hand; on 1, 2 and 3 threads; over many small tensors (each
// under the 65536 elements at which the kernel used to start a parallel loop per tensor), large
// ones, and 16-bit gradients widened chunk by chunk.
TEST(AmpKernels, ClipNormIsTheDocumentedSumOnAnyThreadCount) {
  std::vector<Tensor> grads;
  for (int i = 0; i < 30; ++i) grads.push_back(random({7 + 997 * i}, 80 + i, DType::f32));
  grads.push_back(random({70001}, 120, DType::f32));
  grads.push_back(random({9000}, 121, DType::f32).astype(DType::bf16));
  grads.push_back(random({4097}, 122, DType::f32).astype(DType::f16));
  const float scale = 1024.0f;
  const double unscale = ops::clip_unscale(scale, 2);
  double want = 0.0;
  for (const Tensor& g : grads) {
    const std::vector<float> x = g.astype(DType::f32).to_vector<float>();
    for (size_t lo = 0; lo < x.size(); lo += ops::kClipChunk) {
      double acc = 0.0;
      for (size_t i = lo; i < std::min(x.size(), lo + ops::kClipChunk); ++i) {
        const double v = static_cast<double>(x[i]) * unscale;
        acc += v * v;
      }
      want += acc;
    }
  }
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const Tensor found = zeros({}), inv = zeros({}), norm = zeros({}, {.dtype = DType::f64});
    ops::amp_clip_by_global_norm_(grads, full({}, scale), 2, 1e9, found, inv, norm);
    EXPECT_EQ(norm.item(), std::sqrt(want)) << threads << " threads";
    EXPECT_EQ(found.item(), 0.0);
  }
  omp_set_num_threads(saved);
}

TEST(AmpKernels, UpdatesCheckTheirListsAndScalars) {
  const Tensor w = zeros({3});
  EXPECT_TRUE(testing::throws_error_with(
      [&] { ops::fused_adam_({w}, {zeros({3})}, {zeros({3})}, {zeros({4})}, {}, {}, {}, {}); },
      "fused_adam_: second moments 0 has shape [4], expected [3]"));
  EXPECT_TRUE(testing::throws_error_with(
      [&] {
        ops::fused_adam_({w}, {zeros({3})}, {zeros({3})}, {zeros({3})}, {}, {}, {}, {}, zeros({1}));
      },
      "fused_adam_: the step's scalars must be a contiguous f32 tensor of at least 3 elements"));
  EXPECT_TRUE(testing::throws_error_with(
      [&] { ops::fused_sgd_({w}, {zeros({3}, {.dtype = DType::f16})}, {zeros({3})}, {}, {}, {}); },
      "fused_sgd_: working copy 0 must be f16 or bf16, got f32"));
}

TEST(AmpRules, FiniteBits) {
  for (float v : {0.0f, -0.0f, 1e-45f, -3.5f, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max()})
    EXPECT_TRUE(ops::finite_bits(v)) << v;
  for (float v : {kInf, -kInf, std::nanf(""), -std::nanf("")})
    EXPECT_FALSE(ops::finite_bits(v)) << v;
  EXPECT_TRUE(ops::stores_finite(65519.0f, DType::f16));
  EXPECT_FALSE(ops::stores_finite(65520.0f, DType::f16));
  EXPECT_FALSE(ops::stores_finite(std::nanf(""), DType::f32));
}

TEST(AmpRules, DynamicScaleRuleByHand) {
  const ops::DynamicScaleRule rule{.growth_factor = 2.0f,
                                   .backoff_divisor = 4.0f,
                                   .min_scale = 1.0f,
                                   .max_scale = 64.0f,
                                   .growth_interval = 2};
  float scale = 16.0f;
  int32_t tracker = 0;
  struct Expect {
    bool overflow;
    float scale;
    int32_t tracker;
  };
  // grow at every second clean step, never past 64; an overflow divides by 4, floored at 1.
  for (const Expect& e :
       {Expect{false, 16, 1}, Expect{false, 32, 0}, Expect{false, 32, 1}, Expect{false, 64, 0},
        Expect{false, 64, 1}, Expect{false, 64, 0}, Expect{true, 16, 0}, Expect{false, 16, 1},
        Expect{true, 4, 0}, Expect{true, 1, 0}, Expect{true, 1, 0}, Expect{false, 1, 1}}) {
    rule(scale, tracker, e.overflow);
    EXPECT_EQ(scale, e.scale);
    EXPECT_EQ(tracker, e.tracker);
  }
  // Growth past f32's range keeps the scale (the default max_scale is f32's max).
  float big = 3e38f;
  int32_t t = 1999;
  ops::DynamicScaleRule{}(big, t, false);
  EXPECT_EQ(big, 3e38f);
  EXPECT_EQ(t, 0);
}

TEST(AmpRules, UpdateScaleOnCpuTensorsTakesMaxScale) {
  const Tensor scale = scalar_f32(512.0f), tracker = zeros({1}, {.dtype = DType::i32});
  for (int i = 0; i < 4; ++i)
    ops::amp_update_scale_(scale, tracker, scalar_f32(0), 2.0, 0.5, 1, 1.0, 1024.0);
  EXPECT_EQ(scale.item(), 1024.0);  // 512 -> 1024, then held at max_scale
  ops::amp_update_scale_(scale, tracker, scalar_f32(1), 2.0, 0.25, 1, 1.0, 1024.0);
  EXPECT_EQ(scale.item(), 256.0);
  EXPECT_THROW(ops::amp_update_scale_(scale, tracker, scalar_f32(0), 2.0, 0.5, 1, 8.0, 4.0), Error)
      << "max_scale below min_scale";
}

}  // namespace
}  // namespace mixprec
