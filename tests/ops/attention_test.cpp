// scaled_dot_product_attention: a hand-computed case (L = 2, D = 1), the fused kernel against
// the reference in f32/bf16/f16 at the block edges (tiles of 32 query rows and 64 keys) with and
// without the causal mask, head dims 8 to 256, f64 gradient checks of the reference, rows whose
// logits are all equal, fully masked rows (NaN), boolean masks, strided inputs, errors; the fused
// kernel's bits on every ISA, at every thread count, in every wave of its backward; the 16-bit
// loads and stores of simd.h it widens and rounds with.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "attention_test_util.h"
#include "kernel_test_util.h"
#include "op_test_util.h"
#include "ops/attention_problem.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/dispatch.h"
#include "ops/layout.h"

namespace mixprec {
namespace {
using testing::close;
using testing::fused_tol;
using testing::random;
using testing::Tol;
using V = std::vector<Tensor>;

struct Result {
  Tensor o, dq, dk, dv;
};

// Output and gradients of sum(o * w) (w fixed, random), o = attn(q, k, v), through kernel
// `impl` ("flash" or "ref").
using Attn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
Result run_with(const Attn& attn, const Tensor& q, const Tensor& k, const Tensor& v,
                const char* impl) {
  ops::ForceImpl force(impl);
  V in{q.detach().clone().set_requires_grad(true), k.detach().clone().set_requires_grad(true),
       v.detach().clone().set_requires_grad(true)};
  const Tensor o = attn(in[0], in[1], in[2]);
  const Tensor w = random(o.shape(), 77, DType::f32);
  const V g = grad(ops::sum(ops::mul(o.astype(DType::f32), w)), in);
  return {o.detach(), g[0], g[1], g[2]};
}
Result run(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionOptions& opt,
           const char* impl) {
  return run_with([&](const Tensor& a, const Tensor& b,
                      const Tensor& c) { return ops::scaled_dot_product_attention(a, b, c, opt); },
                  q, k, v, impl);
}

::testing::AssertionResult same_result(const Result& a, const Result& e, Tol t) {
  for (auto [x, y, name] : {std::tuple{a.o, e.o, "o"}, std::tuple{a.dq, e.dq, "dq"},
                            std::tuple{a.dk, e.dk, "dk"}, std::tuple{a.dv, e.dv, "dv"}}) {
    auto r = close(x, y, t.rel, t.abs_frac);
    if (!r) return ::testing::AssertionFailure() << name << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }

TEST(Attention, HandComputedTinyCase) {
  // D = 1, scale 1: scores row 0 = [ln 3, 0] -> p = [3/4, 1/4]; row 1 = [ln 2, 0] -> [2/3, 1/3].
  const float l2 = std::log(2.0f), l3 = std::log(3.0f);
  const Tensor q = f32({l3, l2}, {1, 1, 2, 1}), k = f32({1, 0}, {1, 1, 2, 1}),
               v = f32({4, 8}, {1, 1, 2, 1});
  for (const char* impl : {"flash", "ref"}) {
    ops::ForceImpl force(impl);
    V in{q.clone().set_requires_grad(true), k.clone().set_requires_grad(true),
         v.clone().set_requires_grad(true)};
    const Tensor o = ops::scaled_dot_product_attention(in[0], in[1], in[2]);
    EXPECT_TRUE(testing::all_close(o, f32({5, 16.0f / 3}, {1, 1, 2, 1}))) << impl;
    // d(sum o): dv_j = sum_i p_ij; dS = p (v_j - o_i); dq_i = dS_i0; dk_j = sum_i dS_ij q_i.
    const V g = grad(ops::sum(o), in);
    EXPECT_TRUE(testing::all_close(g[2], f32({17.0f / 12, 7.0f / 12}, {1, 1, 2, 1}))) << impl;
    EXPECT_TRUE(testing::all_close(g[0], f32({-0.75f, -8.0f / 9}, {1, 1, 2, 1}))) << impl;
    const float dk0 = -0.75f * l3 - 8.0f / 9 * l2;
    EXPECT_TRUE(testing::all_close(g[1], f32({dk0, -dk0}, {1, 1, 2, 1}))) << impl;
    // Causal: row 0 sees key 0 only.
    const Tensor oc = ops::scaled_dot_product_attention(q, k, v, {.causal = true});
    EXPECT_TRUE(testing::all_close(oc, f32({4, 16.0f / 3}, {1, 1, 2, 1}))) << impl;
  }
}

TEST(Attention, KernelChoice) {
  const Tensor q = random({1, 1, 4, 8}, 1, DType::f32);
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const ops::AttentionFwdProblem p{q.astype(d),
                                     q.astype(d),
                                     q.astype(d),
                                     Tensor::empty({1, 1, 4, 8}, {.dtype = d}),
                                     Tensor::empty({1, 1, 4}),
                                     {}};
    EXPECT_EQ(testing::chosen_kernel(p), cpu_features().avx2 ? "flash" : "ref") << dtype_name(d);
  }
  const Tensor q64 = q.astype(DType::f64);
  const ops::AttentionFwdProblem p{q64,
                                   q64,
                                   q64,
                                   Tensor::empty({1, 1, 4, 8}, {.dtype = DType::f64}),
                                   Tensor::empty({1, 1, 4}, {.dtype = DType::f64}),
                                   {}};
  EXPECT_EQ(testing::chosen_kernel(p), "ref");
}

// Fused against reference, forward and backward, for one (L, D) in every dtype, plain and causal.
void expect_fused_matches_reference(int64_t L, int64_t D, int64_t H) {
  for (bool causal : {false, true})
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      const uint64_t seed = static_cast<uint64_t>(L * 100 + D);
      const Tensor q = random({1, H, L, D}, seed, DType::f32, -2, 2).astype(d);
      const Tensor k = random({1, H, L, D}, seed + 1, DType::f32, -2, 2).astype(d);
      const Tensor v = random({1, H, L, D}, seed + 2, DType::f32).astype(d);
      const Result fused = run(q, k, v, {.causal = causal}, "flash");
      const Result ref = run(q, k, v, {.causal = causal}, "ref");
      EXPECT_EQ(fused.o.dtype(), d);
      EXPECT_EQ(fused.dq.dtype(), d);
      EXPECT_TRUE(same_result(fused, ref, fused_tol(d)))
          << "L " << L << " D " << D << (causal ? " causal " : " ") << dtype_name(d);
    }
}

// The block edges of the fused kernel (32 query rows, 64 keys) and the lengths, at
// D = 32; the other head dims at a few lengths (all of them: the Exhaustive test).
TEST(Attention, FusedMatchesReferenceInEveryDtypeAtBlockEdges) {
  for (int64_t L : {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 257})
    expect_fused_matches_reference(L, 32, 1);
  for (int64_t L : {17, 65})
    for (int64_t D : {16, 64}) expect_fused_matches_reference(L, D, 1);
}

TEST(Attention, FusedMatchesReferenceAtHeadDimsOffTheVectorWidth) {
  // The kernel pads head dims to 16 (the B operands) and reads them unpadded (the A operands).
  for (int64_t D : {8, 24, 40, 80, 128, 256}) expect_fused_matches_reference(33, D, 1);
  expect_fused_matches_reference(70, 256, 1);
}

TEST(Attention, FusedMatchesReferenceAtEveryLengthAndHeadDimExhaustive) {
  for (int64_t L : {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 257})
    for (int64_t D : {16, 32, 64}) expect_fused_matches_reference(L, D, 2);
}

TEST(Attention, FusedMatchesReferenceForCrossAttentionAndOtherValueWidths) {
  // (Lq, Lk, D, Dv): a KV-cache step (Lq = 1), more keys than queries and the reverse (causal
  // aligned to the bottom right), a value width unlike the key width, batch > 1.
  for (auto [lq, lk, d, dv] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 65, 32, 32},
                               {17, 130, 16, 16},
                               {40, 33, 32, 32},
                               {20, 70, 24, 40},
                               {33, 33, 64, 8}})
    for (bool causal : {false, true}) {
      const Tensor q = random({2, 1, lq, d}, 5, DType::f32, -2, 2);
      const Tensor k = random({2, 1, lk, d}, 6, DType::f32, -2, 2);
      const Tensor v = random({2, 1, lk, dv}, 7, DType::f32);
      const ops::AttentionOptions opt{.causal = causal};
      if (causal && lq > lk) continue;  // rows without keys: FullyMaskedRowsAreNaN
      EXPECT_TRUE(
          same_result(run(q, k, v, opt, "flash"), run(q, k, v, opt, "ref"), fused_tol(DType::f32)))
          << lq << " " << lk << " " << d << " " << dv << " " << causal;
    }
}

TEST(Attention, GradCheckOfTheReferenceInF64) {
  for (bool causal : {false, true}) {
    const Tensor mask = Tensor::from_vector<uint8_t>(
        {1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {4, 5}, DType::boolean);
    for (const Tensor& m : {Tensor(), mask}) {
      const ops::AttentionOptions opt{.causal = causal, .mask = m, .scale = 0.7};
      auto fn = [opt](const V& in) {
        return ops::scaled_dot_product_attention(in[0], in[1], in[2], opt);
      };
      // Lq = 4 < Lk = 5: every causal row still sees a key.
      EXPECT_TRUE(testing::gradcheck(fn, {random({1, 2, 4, 3}, 11, DType::f64, -1, 1),
                                          random({1, 2, 5, 3}, 12, DType::f64, -1, 1),
                                          random({1, 2, 5, 2}, 13, DType::f64, -1, 1)}))
          << causal << " mask " << m.defined();
    }
  }
}

TEST(Attention, FusedGradientsMatchTheF64Reference) {
  // The fused kernel has no f64 path; its f32 gradients are checked against the f64 reference
  // (itself checked against finite differences above) at the f32 tolerance of fused_tol.
  for (bool causal : {false, true}) {
    const Tensor q = random({2, 2, 70, 32}, 21, DType::f64, -2, 2),
                 k = random({2, 2, 70, 32}, 22, DType::f64, -2, 2);
    const Tensor v = random({2, 2, 70, 32}, 23, DType::f64);
    const Result exact = run(q, k, v, {.causal = causal}, "ref");
    const Result fused = run(q.astype(DType::f32), k.astype(DType::f32), v.astype(DType::f32),
                             {.causal = causal}, "flash");
    EXPECT_TRUE(same_result(fused, exact, fused_tol(DType::f32))) << causal;
  }
}

TEST(Attention, RowOfEqualLogitsGivesExactlyUniformProbabilities) {
  // k's rows are all equal, so each query's logits are equal (here as large as 1000 * scale):
  // p = 1 / L exactly, o = the mean of v's rows, and no gradient reaches q.
  const int64_t L = 77, D = 16;
  const Tensor k = full({1, 1, L, D}, 10.0);
  const Tensor q = full({1, 1, 3, D}, 10.0);
  const Tensor v = random({1, 1, L, D}, 31, DType::f32);
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (const char* impl : {"flash", "ref"}) {
      const Tensor vd = v.astype(d);
      const Result r = run(q.astype(d), k.astype(d), vd, {}, impl);
      const Tensor expected =
          ops::broadcast_to(ops::mean(vd.astype(DType::f32), {2}, true), {1, 1, 3, D});
      EXPECT_TRUE(testing::all_close(r.o.astype(DType::f32), expected,
                                     {testing::tolerance_for(d).rel, 1e-6}))
          << dtype_name(d) << " " << impl;
      // sum_j dS_j = 0 and the k_j are equal; in 16 bits D = dO.o uses the rounded o, so only f32.
      if (d == DType::f32) {
        EXPECT_TRUE(testing::all_close(r.dq, zeros({1, 1, 3, D}), {0, 1e-5})) << impl;
      }
    }
  // The log-sum-exp the fused kernel saves: max + log(L), the max being 10 * 10 * 16 / 4 = 400.
  const Tensor lse = Tensor::empty({1, 1, 3});
  ops::AttentionParams prm;
  prm.scale = 0.25;
  ops::ForceImpl flash("flash");
  ops::dispatch(OpId::scaled_dot_product_attention, "forward",
                ops::AttentionFwdProblem{q, k, v, Tensor::empty({1, 1, 3, D}), lse, prm});
  for (float x : lse.to_vector<float>()) EXPECT_FLOAT_EQ(x, 400.0f + std::log(77.0f));
}

TEST(Attention, FullyMaskedRowsAreNaN) {
  // Row 1 of head 0 attends to nothing: its output and its dq row are NaN, and so are dk and
  // dv of head 0 (every key's gradient sums over that row, as in the composition); head 1 is
  // untouched. Causal with Lq > Lk: the first Lq - Lk rows see no key.
  const int64_t L = 70, D = 16;
  std::vector<uint8_t> m(2 * L * L, 1);
  for (int64_t j = 0; j < L; ++j) m[static_cast<size_t>(1 * L + j)] = 0;
  const Tensor mask = Tensor::from_vector<uint8_t>(m, {1, 2, L, L}, DType::boolean);
  const Tensor q = random({1, 2, L, D}, 41, DType::f32), k = random({1, 2, L, D}, 42, DType::f32);
  const Tensor v = random({1, 2, L, D}, 43, DType::f32);
  for (const char* impl : {"flash", "ref"}) {
    const Result r = run(q, k, v, {.mask = mask}, impl);
    auto nan_count = [](const Tensor& t) {
      int64_t n = 0;
      for (double x : t.to_vector<double>()) n += std::isnan(x);
      return n;
    };
    EXPECT_EQ(nan_count(r.o), D) << impl;
    EXPECT_TRUE(std::isnan(r.o.at({0, 0, 1, 0})));
    EXPECT_EQ(nan_count(r.dq), D) << impl;
    EXPECT_EQ(nan_count(r.dk.slice(1, 0, 1)), L * D) << impl;
    EXPECT_EQ(nan_count(r.dv.slice(1, 0, 1)), L * D) << impl;
    EXPECT_EQ(nan_count(r.dk.slice(1, 1, 2)) + nan_count(r.dv.slice(1, 1, 2)), 0) << impl;
  }
  const Result fused = run(q, k, v, {.mask = mask}, "flash"),
               ref = run(q, k, v, {.mask = mask}, "ref");
  EXPECT_TRUE(same_result(fused, ref, fused_tol(DType::f32)));
  // Causal, 40 queries over 33 keys: rows 0..6 see nothing.
  const Tensor qc = random({1, 1, 40, D}, 44, DType::f32);
  const Result c = run(qc, k.slice(2, 0, 33).slice(1, 0, 1), v.slice(2, 0, 33).slice(1, 0, 1),
                       {.causal = true}, "flash");
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(std::isnan(c.o.at({0, 0, i, 0})), i < 7) << i;
}

TEST(Attention, BooleanMasksBroadcastAndCombineWithCausal) {
  const int64_t B = 2, H = 1, L = 66, D = 32;
  const Tensor q = random({B, H, L, D}, 51, DType::f32, -2, 2),
               k = random({B, H, L, D}, 52, DType::f32, -2, 2);
  const Tensor v = random({B, H, L, D}, 53, DType::f32);
  // A padding mask per batch [B, 1, 1, L] and a random [L, L] mask with the diagonal kept.
  std::vector<uint8_t> pad(static_cast<size_t>(B * L), 1), rnd(static_cast<size_t>(L * L));
  for (int64_t j = 50; j < L; ++j) pad[static_cast<size_t>(L + j)] = 0;
  const std::vector<double> u = random({L, L}, 54, DType::f64, 0, 1).to_vector<double>();
  for (int64_t i = 0; i < L * L; ++i)
    rnd[static_cast<size_t>(i)] = u[static_cast<size_t>(i)] < 0.6 || i % (L + 1) == 0;
  for (const Tensor& mask : {Tensor::from_vector<uint8_t>(pad, {B, 1, 1, L}, DType::boolean),
                             Tensor::from_vector<uint8_t>(rnd, {L, L}, DType::u8)})
    for (bool causal : {false, true})
      for (DType d : {DType::f32, DType::bf16}) {
        const ops::AttentionOptions opt{.causal = causal, .mask = mask};
        const Tensor qd = q.astype(d), kd = k.astype(d), vd = v.astype(d);
        EXPECT_TRUE(
            same_result(run(qd, kd, vd, opt, "flash"), run(qd, kd, vd, opt, "ref"), fused_tol(d)))
            << shape_str(mask.shape()) << " " << causal << " " << dtype_name(d);
      }
  // The padding mask is the same as slicing the keys away.
  const Tensor m = Tensor::from_vector<uint8_t>(pad, {B, 1, 1, L}, DType::boolean);
  const Tensor masked = ops::scaled_dot_product_attention(q, k, v, {.mask = m}).slice(0, 1, 2);
  const Tensor sliced = ops::scaled_dot_product_attention(
      q.slice(0, 1, 2), k.slice(0, 1, 2).slice(2, 0, 50), v.slice(0, 1, 2).slice(2, 0, 50));
  EXPECT_TRUE(testing::all_close(masked, sliced, {1e-5, 1e-6}));
}

TEST(Attention, StridedHeadsAndTheOutputLayout) {
  // Heads split from [B, L, H, D] by a permute (no copy) give the same result as packed ones,
  // and the output merges back to [B, L, H * Dv] as a free view.
  const int64_t B = 2, L = 40, H = 3, D = 16;
  const Tensor x = random({B, L, H, D}, 61, DType::f32);
  const Tensor q = x.permute({0, 2, 1, 3});
  ASSERT_FALSE(q.is_contiguous());
  const Tensor o = ops::scaled_dot_product_attention(q, q, q, {.causal = true});
  const Tensor o2 = ops::scaled_dot_product_attention(q.contiguous(), q.contiguous(),
                                                      q.contiguous(), {.causal = true});
  EXPECT_TRUE(testing::all_close(o, o2, {0, 0}));
  EXPECT_NO_THROW(o.permute({0, 2, 1, 3}).view({B, L, H * D}));
  // Gradients of strided inputs come back in their layout.
  const Result r = run(q, q, q, {}, "flash"),
               e = run(q.contiguous(), q.contiguous(), q.contiguous(), {}, "ref");
  EXPECT_TRUE(same_result(r, e, fused_tol(DType::f32)));
}

TEST(Attention, PackedProjectionGradientsAreOneTensorWithTheSameValues) {
  // q, k, v unbound from one [B, L, 3, H, D] projection (MultiheadAttention's): the backward
  // writes dq, dk, dv interleaved in one new tensor that ops::unbind's backward takes whole. The
  // gradient is the one three slices give (which copy each part into zeros and sum them).
  using ops::detail::interleaved_views;
  const int64_t B = 2, L = 33, H = 3, D = 16;
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor w0 = random({B, L, 3, H, D}, 71, DType::f32).astype(dt);
    const Tensor dout = random({B, H, L, D}, 72, DType::f32).astype(dt);
    Tensor grads[2];
    for (int sliced = 0; sliced < 2; ++sliced) {
      Tensor w = w0.detach().set_requires_grad(true);
      const Tensor qkv = ops::permute(w, {2, 0, 3, 1, 4});
      std::vector<Tensor> p;
      if (sliced)
        for (int64_t i = 0; i < 3; ++i) p.push_back(ops::squeeze(ops::slice(qkv, 0, i, i + 1), 0));
      else
        p = ops::unbind(qkv, 0);
      if (!sliced) EXPECT_TRUE(interleaved_views({&p[0], &p[1], &p[2]}));
      ops::scaled_dot_product_attention(p[0], p[1], p[2], {.causal = true}).backward(dout);
      grads[sliced] = w.grad();
    }
    EXPECT_TRUE(testing::all_close(grads[0], grads[1], {0, 0})) << dtype_name(dt);
  }
  // Views that are not interleaved: the same one three times, overlapping columns, a broadcast.
  const Tensor x = random({4, 6, 8}, 73, DType::f32);
  const Tensor a = x.slice(2, 0, 4), b = x.slice(2, 2, 6), c = x.slice(2, 4, 8);
  EXPECT_FALSE(interleaved_views({&a, &a, &a}));
  EXPECT_FALSE(interleaved_views({&a, &b}));
  EXPECT_TRUE(interleaved_views({&a, &c}));
  const Tensor e = x.slice(2, 0, 2), f = x.slice(2, 5, 7);
  EXPECT_TRUE(interleaved_views({&e, &f})) << "columns {0, 1} and {5, 6} of 8";
  const Tensor s0 = ops::broadcast_to(x.slice(0, 0, 1), {4, 6, 8});
  EXPECT_FALSE(interleaved_views({&s0, &x}));
  // Views that repeat their own elements (two outer dims with one stride) are not either: their
  // gradients, laid out alike, would overwrite each other.
  const Tensor flat = random({160}, 74, DType::f32);
  auto self_overlapping = [&](int64_t off) {
    return Tensor::from_storage(flat.storage(), {2, 2, 2, 8}, {32, 32, 64, 1}, off, DType::f32);
  };
  const Tensor sq = self_overlapping(0), sk = self_overlapping(8), sv = self_overlapping(16);
  EXPECT_FALSE(interleaved_views({&sq, &sk, &sv}));
}

TEST(Attention, SoftmaxForcedIntoSixteenBitsMatchesTheReference) {
  // What a custom white list naming attention_softmax does (tests/amp/attention_policy_test.cpp):
  // both kernels round the scores, p, dP and dS to the low dtype; without overflow they agree.
  const Tensor q = random({2, 2, 40, 32}, 81, DType::f32, -2, 2),
               k = random({2, 2, 40, 32}, 82, DType::f32, -2, 2);
  const Tensor v = random({2, 2, 40, 32}, 83, DType::f32);
  // A cell whose custom white list names only attention_softmax: q, k, v stay f32.
  struct Cell : nn::Cell {
    Tensor v;
    Tensor construct(const Tensor& q, const Tensor& k) override {
      return ops::scaled_dot_product_attention(q, k, v, {.causal = true});
    }
  };
  for (DType low : {DType::f16, DType::bf16}) {
    Cell cell;
    amp::custom_mixed_precision(cell, {.white_list = {"attention_softmax"}}, low);
    const Attn forced = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      cell.v = c;
      return cell(a, b);
    };
    const Result fused = run_with(forced, q, k, v, "flash"), ref = run_with(forced, q, k, v, "ref");
    EXPECT_EQ(fused.o.dtype(), DType::f32);
    EXPECT_TRUE(same_result(fused, ref, fused_tol(low))) << dtype_name(low);
    // It is not the f32 softmax: the scores' rounding moves the output by more than f32 noise.
    const Result exact = run(q, k, v, {.causal = true}, "ref");
    EXPECT_FALSE(close(fused.o, exact.o, 0, 1e-5)) << dtype_name(low);
  }
}

TEST(Attention, FusedResultsDoNotDependOnTheThreadCount) {
  // One thread owns each output row (forward); in the backward each unit owns its key tiles' dK,
  // dV and its own share of dQ, summed in unit order. With B * H = 1 the keys of the one slice
  // are split into groups (5 tiles of 64 here): parallel over key groups, same bits.
  const std::vector<uint8_t> keep = [] {
    std::vector<uint8_t> m(300 * 300);
    for (size_t i = 0; i < m.size(); ++i) m[i] = (i * 7919) % 5 != 0 || i % 301 == 0;
    return m;
  }();
  const Tensor mask = Tensor::from_vector<uint8_t>(keep, {300, 300}, DType::boolean);
  // With B * H >= 64 each unit is a whole slice (one group: dq finished by the unit).
  for (auto [shape, d, m] : {std::tuple{Shape{2, 3, 70, 32}, DType::f32, false},
                             std::tuple{Shape{16, 4, 70, 16}, DType::bf16, false},
                             std::tuple{Shape{1, 1, 300, 32}, DType::f32, false},
                             std::tuple{Shape{1, 1, 300, 24}, DType::bf16, true}})
    for (bool causal : {false, true}) {
      const Tensor q = random(shape, 91, DType::f32, -2, 2).astype(d);
      const Tensor k = random(shape, 92, DType::f32, -2, 2).astype(d);
      const Tensor v = random(shape, 93, DType::f32).astype(d);
      const ops::AttentionOptions opt{.causal = causal, .mask = m ? mask : Tensor()};
      const int before = omp_get_max_threads();
      omp_set_num_threads(1);
      const Result one = run(q, k, v, opt, "flash");
      omp_set_num_threads(3);
      const Result three = run(q, k, v, opt, "flash");
      omp_set_num_threads(before);
      EXPECT_TRUE(same_result(one, three, {0, 0})) << shape_str(shape) << " " << causal;
      if (shape[2] == 300) {  // the split backward against the reference too
        EXPECT_TRUE(same_result(one, run(q, k, v, opt, "ref"), fused_tol(d))) << causal;
      }
    }
}

// The fused kernel's forward and backward problems for q, k, v (random) and dout, run directly
// on one ISA with a bound on the backward's dQ scratch: o, lse, dq, dk, dv.
std::vector<Tensor> run_fused_on(ops::cpu::simd::Isa isa, int64_t scratch, const Tensor& q,
                                 const Tensor& k, const Tensor& v,
                                 const ops::AttentionParams& prm) {
  const Shape lse_shape{q.size(0), q.size(1), q.size(2)};
  Shape o_shape = q.shape();
  o_shape[3] = v.size(3);
  const Tensor o = Tensor::empty(o_shape, {.dtype = q.dtype()});
  const Tensor lse = Tensor::empty(lse_shape);
  ops::cpu::flash_attention_fwd({q, k, v, o, lse, prm}, isa);
  const Tensor dout = random(o_shape, 99, DType::f32).astype(q.dtype());
  auto empty = [&](const Tensor& t) { return Tensor::empty(t.shape(), {.dtype = t.dtype()}); };
  const Tensor dq = empty(q), dk = empty(k), dv = empty(v);
  ops::cpu::flash_attention_bwd({q, k, v, o, lse, dout, dq, dk, dv, prm}, isa, scratch);
  return {o, lse, dq, dk, dv};
}

::testing::AssertionResult same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() ||
        std::memcmp(a[i].data_ptr(), b[i].data_ptr(), a[i].nbytes()) != 0)
      return ::testing::AssertionFailure() << "output " << i << " (o, lse, dq, dk, dv) differs";
  return ::testing::AssertionSuccess();
}

TEST(Attention, FusedKernelGivesTheSameBitsOnEveryIsa) {
  // Every value is a chain over one index in order, one output per lane: AVX-512 (16 lanes) and
  // AVX2 (8) agree bit for bit, at lengths and head dims off both widths, masks and forced
  // softmax dtypes included. On an AVX512-BF16 CPU the bf16 products run through vdpbf16ps on
  // AVX-512 and through FMAs in its pair order on AVX2: this compares the two (an FMA chain in
  // index order fails it).
  using ops::cpu::simd::Isa;
  if (ops::cpu::simd::best_isa() != Isa::avx512) GTEST_SKIP() << "one vector ISA here";
  std::vector<uint8_t> m(45 * 77);
  for (size_t i = 0; i < m.size(); ++i) m[i] = (i * 7919) % 3 != 0;
  const Tensor keep = ops::broadcast_to(
      Tensor::from_vector<uint8_t>(m, {1, 1, 45, 77}, DType::boolean), {2, 3, 45, 77});
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    for (auto [lq, lk, dh, dv] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{45, 77, 24, 40},
                                  {1, 130, 32, 32},
                                  {33, 50, 32, 32},
                                  {70, 70, 16, 16}})
      for (int variant = 0; variant < 4; ++variant) {
        ops::AttentionParams prm;
        prm.scale = 0.3;
        prm.causal = variant % 2 == 1 && lq <= lk;
        if (variant == 2 && lq == 45) prm.mask = keep;
        if (variant == 3) prm.softmax_dtype = d == DType::f16 ? DType::f16 : DType::bf16;
        const Tensor q = random({2, 3, lq, dh}, 95, DType::f32, -2, 2).astype(d);
        const Tensor k = random({2, 3, lk, dh}, 96, DType::f32, -2, 2).astype(d);
        const Tensor v = random({2, 3, lk, dv}, 97, DType::f32).astype(d);
        EXPECT_TRUE(same_bits(run_fused_on(Isa::avx512, int64_t{1} << 30, q, k, v, prm),
                              run_fused_on(Isa::avx2, int64_t{1} << 30, q, k, v, prm)))
            << dtype_name(d) << " " << lq << "x" << lk << " D " << dh << " variant " << variant;
      }
}

TEST(Attention, FusedBackwardGivesTheSameBitsInEveryWave) {
  // The backward holds each (b, h)'s dQ shares for a wave of slices at a time; a bound of one
  // slice's shares (and of less: still one slice a wave) gives the same bits as one wave for all.
  const auto isa = ops::cpu::simd::best_isa();
  if (isa == ops::cpu::simd::Isa::scalar) GTEST_SKIP() << "no AVX2";
  const Tensor q = random({3, 2, 150, 32}, 101, DType::f32, -2, 2).astype(DType::bf16);
  const Tensor k = random({3, 2, 150, 32}, 102, DType::f32, -2, 2).astype(DType::bf16);
  const Tensor v = random({3, 2, 150, 32}, 103, DType::f32).astype(DType::bf16);
  for (bool causal : {false, true}) {
    ops::AttentionParams prm;
    prm.scale = 0.2;
    prm.causal = causal;
    const std::vector<Tensor> all = run_fused_on(isa, int64_t{1} << 30, q, k, v, prm);
    // 6 slices of 3 groups (ceil(64 / 6) = 11, capped by the 3 tiles), 150 x 32 floats each.
    for (int64_t scratch : {int64_t{3 * 150 * 32}, int64_t{2 * 3 * 150 * 32 + 5}, int64_t{1}})
      EXPECT_TRUE(same_bits(all, run_fused_on(isa, scratch, q, k, v, prm)))
          << causal << " " << scratch;
  }
}

TEST(Attention, FusedKernelWithNoKeysGivesNaNRows) {
  // Lk = 0: no row has a distribution, so o, lse and dq are NaN (attention_problem.h), and the
  // backward's grouping of zero key tiles still finishes every dq row.
  const auto isa = ops::cpu::simd::best_isa();
  if (isa == ops::cpu::simd::Isa::scalar) GTEST_SKIP() << "no AVX2";
  for (DType d : {DType::f32, DType::bf16}) {
    const Tensor q = random({2, 2, 3, 16}, 121, DType::f32).astype(d);
    const Tensor kv = Tensor::empty({2, 2, 0, 16}, {.dtype = d});
    ops::AttentionParams prm;
    prm.scale = 0.25;
    const std::vector<Tensor> out = run_fused_on(isa, int64_t{1} << 30, q, kv, kv, prm);
    for (int i : {0, 1, 2}) {
      const Tensor t = out[static_cast<size_t>(i)].astype(DType::f64);
      const double* p = static_cast<const double*>(t.data_ptr());
      for (int64_t e = 0; e < t.numel(); ++e) ASSERT_TRUE(std::isnan(p[e])) << i << " " << e;
    }
  }
}

TEST(Attention, NoBatchOrNoHeadsGiveEmptyResults) {
  // B * H = 0: nothing to compute, forward or backward (the units' grouping divides by B * H).
  const auto isa = ops::cpu::simd::best_isa();
  if (isa == ops::cpu::simd::Isa::scalar) GTEST_SKIP() << "no AVX2";
  for (Shape shape : {Shape{0, 2, 8, 16}, Shape{2, 0, 8, 16}}) {
    const Tensor q = Tensor::empty(shape);
    const std::vector<Tensor> out = run_fused_on(isa, int64_t{1} << 30, q, q, q, {});
    for (const Tensor& t : out) EXPECT_EQ(t.numel(), 0);
  }
}

TEST(Attention, FusedForwardGivesTheSameBitsWidenedWholeOrByTile) {
  // A forward unit widens the keys and values of its (b, h) once when they fit its bound, else
  // tile by tile; f32 rows without padding are read in place either way. Units span groups of
  // query blocks (here 6 slices: ceil(64 / 6) = 11 groups wanted, capped by the 5 blocks).
  const auto isa = ops::cpu::simd::best_isa();
  if (isa == ops::cpu::simd::Isa::scalar) GTEST_SKIP() << "no AVX2";
  for (DType d : {DType::f32, DType::bf16})
    for (int64_t dv : {32, 24})
      for (bool causal : {false, true}) {
        const Tensor q = random({3, 2, 150, 32}, 111, DType::f32, -2, 2).astype(d);
        const Tensor k = random({3, 2, 150, 32}, 112, DType::f32, -2, 2).astype(d);
        const Tensor v = random({3, 2, 150, dv}, 113, DType::f32).astype(d);
        ops::AttentionParams prm;
        prm.scale = 0.2;
        prm.causal = causal;
        std::vector<Tensor> out[2];
        for (int whole = 0; whole < 2; ++whole) {
          Shape o_shape = q.shape();
          o_shape[3] = dv;
          const Tensor o = Tensor::empty(o_shape, {.dtype = d}), lse = Tensor::empty({3, 2, 150});
          ops::cpu::flash_attention_fwd({q, k, v, o, lse, prm}, isa,
                                        whole ? int64_t{1} << 30 : int64_t{0});
          out[whole] = {o, lse};
        }
        EXPECT_TRUE(same_bits(out[0], out[1])) << dtype_name(d) << " Dv " << dv << " " << causal;
      }
}

// One vector of each ISA through simd.h's 16-bit stores (bf16, f16), roundings and loads, by
// pointer (no vector crosses into this file's untargeted code).
struct Out16 {
  bf16 b[16];
  f16 h[16];
  float rb[16], rh[16], wb[16], wh[16];
};
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace through_avx512 {
using namespace ops::cpu::simd::avx512;
#include "ops/simd16_through.inc"
}  // namespace through_avx512
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace through_avx2 {
using namespace ops::cpu::simd::avx2;
#include "ops/simd16_through.inc"
}  // namespace through_avx2
#pragma GCC pop_options

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

::testing::AssertionResult matches_half_h(void (*through)(const float*, Out16&), int lanes,
                                          const std::vector<float>& x) {
  for (size_t i = 0; i + lanes <= x.size(); i += lanes) {
    Out16 o;
    through(x.data() + i, o);
    for (int l = 0; l < lanes; ++l) {
      const float xi = x[i + l];
      const bool ok =
          o.b[l] == to_bf16(xi) && o.h[l] == to_f16(xi) &&
          bits(o.rb[l]) == bits(to_f32(to_bf16(xi))) && bits(o.rh[l]) == bits(to_f32(to_f16(xi))) &&
          bits(o.wb[l]) == bits(to_f32(o.b[l])) && bits(o.wh[l]) == bits(to_f32(o.h[l]));
      if (!ok) return ::testing::AssertionFailure() << "at " << xi << " (bits " << bits(xi) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(Attention, SimdSixteenBitLoadsAndStoresMatchHalfH) {
  // The fused kernel widens and rounds rows with simd.h's loads and stores: half.h's bits, for
  // random bit patterns (NaN payloads, subnormals, overflow to inf included), on every ISA.
  std::vector<float> x(1 << 16);
  uint32_t state = 12345;
  for (float& f : x) {
    state = state * 1664525u + 1013904223u;
    f = std::bit_cast<float>(state);
  }
  const float special[] = {65519.99f,
                           65520.0f,
                           -0.0f,
                           1e-40f,
                           5.96e-8f,
                           2.98e-8f,
                           1.0f + 0x1p-8f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::bit_cast<float>(0x7F800001u),
                           std::bit_cast<float>(0xFFC00123u)};
  std::copy(std::begin(special), std::end(special), x.begin());
  const auto isa = ops::cpu::simd::best_isa();
  if (isa == ops::cpu::simd::Isa::avx512) {
    EXPECT_TRUE(matches_half_h(through_avx512::through16, 16, x));
  }
  if (isa != ops::cpu::simd::Isa::scalar) {
    EXPECT_TRUE(matches_half_h(through_avx2::through16, 8, x));
  }
}

TEST(Attention, NoQueriesGiveAnEmptyOutputAndZeroKeyGradients) {
  const Tensor q = random({1, 2, 0, 8}, 94, DType::f32), kv = random({1, 2, 5, 8}, 95, DType::f32);
  for (const char* impl : {"flash", "ref"}) {
    const Result r = run(q, kv, kv, {}, impl);
    EXPECT_EQ(r.o.shape(), Shape({1, 2, 0, 8}));
    EXPECT_TRUE(testing::all_close(r.dk, zeros({1, 2, 5, 8}), {0, 0})) << impl;
  }
}

TEST(Attention, ClearErrors) {
  const Tensor q = random({1, 2, 4, 8}, 1, DType::f32);
  auto sdpa = [](const Tensor& a, const Tensor& b, const Tensor& c, ops::AttentionOptions o = {}) {
    return [=] { ops::scaled_dot_product_attention(a, b, c, o); };
  };
  EXPECT_TRUE(
      testing::throws_error_with(sdpa(q.reshape({2, 4, 8}), q, q), "expected q [B, H, Lq, D]"));
  EXPECT_TRUE(testing::throws_error_with(sdpa(q, random({1, 2, 4, 7}, 2, DType::f32), q),
                                         "k [1, 2, 4, 7]"));
  EXPECT_TRUE(testing::throws_error_with(sdpa(q, q, q, {.mask = zeros({4, 4})}),
                                         "expected a bool (or u8) mask"));
  EXPECT_TRUE(testing::throws_error_with(
      sdpa(q, q, q, {.mask = Tensor::from_vector<uint8_t>({1, 1, 1}, {3}, DType::boolean)}),
      "does not broadcast"));
  EXPECT_TRUE(testing::throws_error_with(sdpa(q, q, q, {.scale = std::nan("")}), "finite scale"));
  EXPECT_TRUE(
      testing::throws_error_with(sdpa(q, q.slice(2, 0, 0), q.slice(2, 0, 0)), "at least one key"));
}

TEST(Attention, MixedInputDtypesArePromoted) {
  const Tensor q = random({1, 1, 5, 8}, 71, DType::f32);
  const Tensor o =
      ops::scaled_dot_product_attention(q.astype(DType::bf16), q, q.astype(DType::bf16));
  EXPECT_EQ(o.dtype(), DType::f32);
  const Tensor qb = q.astype(DType::bf16).astype(DType::f32);
  EXPECT_TRUE(testing::all_close(o, ops::scaled_dot_product_attention(qb, q, qb)));
}

}  // namespace
}  // namespace mixprec
