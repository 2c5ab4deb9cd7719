// linear: hand-computed values and gradients, every dtype against the f64 oracle (the zoo's
// layer shapes included), f64 gradient checks, fused relu against linear-then-relu, f32 weight
// and bias gradients for bf16 inputs, oneDNN against the reference, strided inputs, errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "gemm_test_util.h"
#include "mixprec/amp/level.h"
#include "mixprec/cpu_features.h"
#include "mixprec/version.h"
#include "ops/cpu/kernels.h"
#include "ops/ref/kernels.h"
#if MIXPREC_WITH_ONEDNN
#include "ops/onednn/context.h"
#include "ops/onednn/kernels.h"
#endif

namespace mixprec {
namespace {
using ops::Activation;
using testing::gemm_close;
using testing::gemm_matches_f64;
using testing::gradcheck;
using testing::random;
using V = std::vector<Tensor>;

Tensor lin(const V& in) { return ops::linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor()); }
Tensor lin_relu(const V& in) { return ops::linear(in[0], in[1], in[2], Activation::relu); }

TEST(Linear, HandComputed) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor x = Tensor::from_vector<float>({1, 2}, {1, 2}, d).set_requires_grad(true);
    Tensor w = Tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}, d).set_requires_grad(true);
    Tensor b = Tensor::from_vector<float>({0.5f, -1, -4}, {3}, d).set_requires_grad(true);
    const Tensor y = ops::linear(x, w, b);
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, 1, -1})) << dtype_name(d);
    ops::sum(y).backward();
    EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2}));
    EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 2, 1, 2, 1, 2}));
    EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
    for (Tensor* t : {&x, &w, &b}) t->set_grad({});
    const Tensor r = ops::linear(x, w, b, Activation::relu);
    EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1.5f, 1, 0}));
    ops::sum(r).backward();
    EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1}));
    EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 2, 1, 2, 0, 0}));
    EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 1, 0}));
  }
}

TEST(Linear, ForwardMatchesF64InEveryDtype) {
  EXPECT_TRUE(gemm_matches_f64(lin, {random({5, 7}, 1), random({3, 7}, 2), random({3}, 3)}, 7));
  EXPECT_TRUE(gemm_matches_f64(lin, {random({2, 4, 7}, 4), random({6, 7}, 5)}, 7));
  EXPECT_TRUE(gemm_matches_f64(lin, {random({7}, 6), random({6, 7}, 7), random({6}, 8)}, 7));
  EXPECT_TRUE(
      gemm_matches_f64(lin_relu, {random({9, 33}, 9), random({17, 33}, 10), random({17}, 11)}, 33));
  // The zoo's layers (mlp's first Dense, simplenet's Dense), with fewer rows for the f64 oracle.
  EXPECT_TRUE(gemm_matches_f64(
      lin_relu,
      {random({32, 784}, 12), random({2048, 784}, 13, DType::f64, -0.05, 0.05), random({2048}, 14)},
      784));
  EXPECT_TRUE(gemm_matches_f64(lin,
                               {random({8, 21632}, 15, DType::f64, 0, 1),
                                random({10, 21632}, 16, DType::f64, -0.01, 0.01), random({10}, 17)},
                               21632));
}

TEST(Linear, GradCheck) {
  EXPECT_TRUE(gradcheck(lin, {random({4, 5}, 20), random({3, 5}, 21), random({3}, 22)}));
  EXPECT_TRUE(gradcheck(lin, {random({2, 3, 5}, 23), random({4, 5}, 24)}));
  EXPECT_TRUE(gradcheck(lin, {random({5}, 25), random({2, 5}, 26), random({2}, 27)}));
  // Relu: keep the pre-activations away from the kink at 0.
  const Tensor x = random({4, 5}, 28), w = random({3, 5}, 29);
  Tensor b = random({3}, 30);
  {
    NoGradGuard ng;
    const auto pre = ops::linear(x, w, b).to_vector<double>();
    for (double v : pre) ASSERT_GT(std::fabs(v), 1e-4);
  }
  EXPECT_TRUE(gradcheck(lin_relu, {x, w, b}));
}

TEST(Linear, FusedReluMatchesLinearThenRelu) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    Tensor x = random({6, 2, 24}, 40, d).set_requires_grad(true);
    Tensor w = random({10, 24}, 41, d).set_requires_grad(true);
    Tensor b = random({10}, 42, d).set_requires_grad(true);
    const Tensor g = random({6, 2, 10}, 43, d);
    auto run = [&](bool fused) {
      for (Tensor* t : {&x, &w, &b}) t->set_grad({});
      const Tensor y =
          fused ? ops::linear(x, w, b, Activation::relu) : ops::relu(ops::linear(x, w, b));
      y.backward(g);
      return V{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const V fused = run(true), separate = run(false);
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_TRUE(testing::all_close(fused[i], separate[i], testing::tolerance_for(d)))
          << dtype_name(d) << " output " << i;
  }
}

TEST(Linear, WeightAndBiasGradsAreF32ForBf16Inputs) {
  // fp32 master weights cast to bf16 at use (what O1/O2 do): the gradient reaching the master
  // must be the exact f32 accumulation of the bf16 products, not a bf16-rounded one.
  const Tensor x = random({64, 96}, 50, DType::bf16);
  Tensor w32 = random({24, 96}, 51, DType::f32).set_requires_grad(true);
  Tensor b32 = random({24}, 52, DType::f32).set_requires_grad(true);
  const Tensor g = random({64, 24}, 53, DType::bf16);
  const Tensor y =
      ops::linear(x, w32.astype(DType::bf16), b32.astype(DType::bf16), Activation::relu);
  EXPECT_EQ(y.dtype(), DType::bf16);
  y.backward(g);
  ASSERT_EQ(w32.grad().dtype(), DType::f32);
  ASSERT_EQ(b32.grad().dtype(), DType::f32);
  // Oracle: the same bf16 values in f64 (relu mask from the bf16 forward).
  std::vector<double> gv = g.to_vector<double>();
  const std::vector<double> yv = y.to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i)
    if (!(yv[i] > 0)) gv[i] = 0;
  const Tensor gm = Tensor::from_vector<double>(gv, g.shape());
  const Tensor dw = ops::matmul(gm.transpose(0, 1), x.astype(DType::f64));
  const Tensor db = ops::sum(gm, {0});
  EXPECT_TRUE(gemm_close(w32.grad(), dw, 64, DType::f32));
  EXPECT_TRUE(gemm_close(b32.grad(), db, 64, DType::f32));
  // And they really are finer than bf16: rounding them to bf16 changes some of them.
  const auto v = w32.grad().to_vector<float>();
  const auto r = w32.grad().astype(DType::bf16).to_vector<float>();
  EXPECT_NE(v, r);
}

// The bias gradient's column sums (ops::sum_rows): per column one f32 chain over each block of
// 1024 rows in order, then the blocks added in order, whatever the columns' grouping in vectors
// (32, 8, the scalar tail) or the thread count. Checked bit for bit against that order computed
// here, for f32, bf16 and f16 rows, with row blocks and column tails.
TEST(Linear, BiasGradientIsTheColumnSumInItsFixedOrder) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{
             {2500, 45}, {37, 1000}, {1030, 71}, {1, 7}, {3000, 32}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(R) + "x" + std::to_string(C));
      const Tensor x = random({R, 3}, 60, dt);
      const Tensor w = random({C, 3}, 61, dt);
      Tensor b = random({C}, 62, DType::f32).set_requires_grad(true);
      const Tensor g = random({R, C}, 63, dt);
      ops::linear(x, w, b.astype(dt)).backward(g);
      const std::vector<float> gv = g.to_vector<float>();
      std::vector<float> want(static_cast<size_t>(C), 0.0f);
      for (int64_t r0 = 0; r0 < R; r0 += 1024)
        for (int64_t c = 0; c < C; ++c) {
          float s = 0.0f;
          for (int64_t r = r0; r < std::min(R, r0 + 1024); ++r)
            s += gv[static_cast<size_t>(r * C + c)];
          want[static_cast<size_t>(c)] = r0 == 0 ? s : want[static_cast<size_t>(c)] + s;
        }
      const int saved = omp_get_max_threads();
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        b.set_grad(Tensor());
        ops::linear(x, w, b.astype(dt)).backward(g);
        ASSERT_EQ(b.grad().dtype(), DType::f32);
        EXPECT_EQ(b.grad().to_vector<float>(), want) << threads << " threads";
      }
      omp_set_num_threads(saved);
    }
}

TEST(Linear, AutocastO1KeepsMasterGradientsUnrounded) {
  const Tensor x = random({16, 40}, 60, DType::f32);
  Tensor w = random({8, 40}, 61, DType::f32).set_requires_grad(true);
  Tensor b = random({8}, 62, DType::f32).set_requires_grad(true);
  const Tensor g = random({16, 8}, 63, DType::bf16).astype(DType::f32);  // exact in bf16
  {
    AutocastState o1 = amp::level_state(AmpLevel::O1, DType::bf16);
    AutocastScope scope(o1);
    const Tensor y = ops::linear(x, w, b);
    EXPECT_EQ(y.dtype(), DType::f32);  // O1 casts the white-list op's output back
    y.backward(g);
  }
  const Tensor xb = x.astype(DType::bf16).astype(DType::f64);
  const Tensor dw = ops::matmul(g.astype(DType::f64).transpose(0, 1), xb);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_TRUE(gemm_close(w.grad(), dw, 16, DType::f32));
  EXPECT_TRUE(gemm_close(b.grad(), ops::sum(g.astype(DType::f64), {0}), 16, DType::f32));
}

TEST(Linear, OneDnnMatchesReference) {
#if MIXPREC_WITH_ONEDNN
  struct Shp {
    Shape x, w;
  };
  for (DType d : {DType::f32, DType::bf16}) {
    if (!ops::onednn::computes_in(d)) continue;
    for (const Shp& s :
         {Shp{{64, 200}, {48, 200}}, Shp{{3, 5, 31}, {17, 31}}, Shp{{31}, {9, 31}}}) {
      for (bool relu : {false, true}) {
        Tensor x = random(s.x, 70, d).set_requires_grad(true);
        Tensor w = random(s.w, 71, d).set_requires_grad(true);
        Tensor b = random({s.w[0]}, 72, d).set_requires_grad(true);
        Shape ys = s.x;
        ys.back() = s.w[0];
        const Tensor g = random(ys, 73, d);
        auto [fast, ref] = testing::fast_and_ref([&] {
          for (Tensor* t : {&x, &w, &b}) t->set_grad({});
          const Tensor y = ops::linear(x, w, b, relu ? Activation::relu : Activation::none);
          y.backward(g);
          return V{y.detach(), x.grad(), w.grad(), b.grad()};
        });
        const int64_t rows = shape_numel(s.x) / s.x.back();
        const int64_t ks[] = {s.w[1], s.w[1], rows, rows};
        for (size_t i = 0; i < fast.size(); ++i)
          EXPECT_TRUE(gemm_close(fast[i], ref[i], ks[i], d))
              << dtype_name(d) << " " << shape_str(s.x) << " relu " << relu << " output " << i;
      }
    }
  }
  // The mlp zoo layer at its real batch, forward only.
  const Tensor x = random({256, 784}, 74, DType::bf16),
               w = random({2048, 784}, 75, DType::bf16, -0.05, 0.05);
  auto [fast, ref] =
      testing::fast_and_ref([&] { return V{ops::linear(x, w, {}, Activation::relu)}; });
  EXPECT_TRUE(gemm_close(fast[0], ref[0], 784, DType::bf16));
#else
  GTEST_SKIP() << "built without oneDNN";
#endif
}

TEST(Linear, OneDnnTakesAFastKernelForTheZooShapes) {
#if MIXPREC_WITH_ONEDNN
  for (DType d : {DType::f32, DType::bf16}) {
    if (!ops::onednn::computes_in(d)) continue;
    for (auto [rows, in, out] :
         {std::array<int64_t, 3>{256, 784, 2048}, {256, 21632, 10}, {256, 2048, 10}}) {
      const Tensor x = zeros({rows, in}, {.dtype = d}), w = zeros({out, in}, {.dtype = d});
      const Tensor g = zeros({rows, out}, {.dtype = d});
      const ops::MatmulProblem fwd{x, w.transpose(0, 1), zeros({out}, {.dtype = d}),
                                   zeros({rows, out}, {.dtype = d}), true};
      const ops::MatmulProblem bwd_w{g.transpose(0, 1), x, {}, zeros({out, in}), false};
      for (const ops::MatmulProblem* p : {&fwd, &bwd_w}) {
        const std::string impl = ops::onednn::matmul_impl_name(*p);
        EXPECT_EQ(impl.find("declined"), std::string::npos) << impl;
        EXPECT_EQ(impl.find("ref"), std::string::npos) << p->describe() << ": " << impl;
      }
    }
  }
#else
  GTEST_SKIP() << "built without oneDNN";
#endif
}

// The skinny GEMM kernels (ops/cpu/gemm_skinny.cpp) on the three products of a Dense layer with
// at most 16 outputs, called directly against the reference kernel: forward x W^T (`dot`),
// backward-data dy W and backward-weights dy^T x (`rows`), with K and N tails (K mod 8, columns
// mod 16 and mod 8), partial row tiles, bias, ReLU, both 16-bit dtypes and an f32 output (held
// to f32's tolerance: the products of 16-bit values are exact, only the order of the f32 sums
// differs from the reference's). Then:
// bitwise equal on 1 and 2 threads, inf and NaN where the reference has them, f16 overflow to inf,
// and dispatch choosing them for SimpleNet's Dense layer in bf16 and f16 but not in f32.
TEST(Linear, SkinnyKernelsMatchTheReference) {
  if (!cpu_features().avx2 || !cpu_features().fma || !cpu_features().f16c)
    GTEST_SKIP() << "the skinny kernels need AVX2, FMA and F16C";
  struct Case {
    int64_t m, k, n;  // x [m, k], W [n, k]
  };
  const Case cases[] = {{37, 300, 10}, {5, 131, 3}, {64, 1000, 16}, {1, 64, 1}, {13, 2050, 7}};
  auto run = [](void (*kernel)(const ops::MatmulProblem&), ops::MatmulProblem p) {
    p.out = Tensor::empty(p.out.shape(), {.dtype = p.out.dtype()});  // a fresh one per run
    kernel(p);
    return p.out;
  };
  for (DType d : {DType::bf16, DType::f16}) {
    if (d == DType::bf16 && cpu_features().avx512f) continue;  // oneDNN's, natively
    for (const Case& c : cases) {
      const Tensor x = random({c.m, c.k}, 120, d), w = random({c.n, c.k}, 121, d);
      const Tensor dy = random({c.m, c.n}, 122, d), b = random({c.n}, 123, DType::f32);
      for (bool relu : {false, true}) {
        for (DType od : {d, DType::f32}) {
          const std::string what = std::string(dtype_name(d)) + " m" + std::to_string(c.m) + " k" +
                                   std::to_string(c.k) + " n" + std::to_string(c.n) +
                                   (relu ? " relu" : "") + " out " + std::string(dtype_name(od));
          const ops::MatmulProblem fwd{x, w.transpose(0, 1), b,
                                       Tensor::empty({c.m, c.n}, {.dtype = od}), relu};
          ASSERT_EQ(ops::cpu::gemm_skinny_dot_declines(fwd), "") << what;
          EXPECT_TRUE(
              gemm_close(run(ops::cpu::gemm_skinny_dot, fwd), run(ops::ref::matmul, fwd), c.k, od))
              << what;
          const ops::MatmulProblem bwd_data{
              dy, w, {}, Tensor::empty({c.m, c.k}, {.dtype = od}), relu};
          if (c.k >= 16) {
            ASSERT_EQ(ops::cpu::gemm_skinny_rows_declines(bwd_data), "") << what;
            EXPECT_TRUE(gemm_close(run(ops::cpu::gemm_skinny_rows, bwd_data),
                                   run(ops::ref::matmul, bwd_data), c.n, od))
                << what << " backward-data";
          }
          const ops::MatmulProblem bwd_w{dy.transpose(0, 1), x,
                                         relu ? random({c.k}, 129, d) : Tensor(),
                                         Tensor::empty({c.n, c.k}, {.dtype = od}), relu};
          ASSERT_EQ(ops::cpu::gemm_skinny_rows_declines(bwd_w), "") << what;
          EXPECT_TRUE(gemm_close(run(ops::cpu::gemm_skinny_rows, bwd_w),
                                 run(ops::ref::matmul, bwd_w), c.m, od))
              << what << " backward-weights";
        }
      }
    }
  }
  // The sums' order is fixed by the shape: 1 and 2 threads give the same bits.
  {
    const Tensor x = random({40, 777}, 124, DType::bf16), w = random({10, 777}, 125, DType::bf16);
    const Tensor dy = random({40, 10}, 126, DType::bf16);
    auto all = [&] {
      return V{run(ops::cpu::gemm_skinny_dot,
                   {x, w.transpose(0, 1), {}, Tensor::empty({40, 10}), false}),
               run(ops::cpu::gemm_skinny_rows, {dy, w, {}, Tensor::empty({40, 777}), false}),
               run(ops::cpu::gemm_skinny_rows,
                   {dy.transpose(0, 1), x, {}, Tensor::empty({10, 777}), false})};
    };
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const V one = all();
    omp_set_num_threads(2);
    const V two = all();
    omp_set_num_threads(saved);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(one[i].to_vector<float>(), two[i].to_vector<float>()) << "product " << i;
  }
  // inf and NaN land where the reference puts them (a whole row of x, one weight column).
  {
    std::vector<float> xv = random({6, 200}, 127, DType::f32).to_vector<float>();
    xv[2 * 200 + 199] = INFINITY;  // row 2's last element: the K tail
    xv[4 * 200 + 17] = NAN;
    const Tensor x = Tensor::from_vector(xv, {6, 200}).astype(DType::f16);
    const Tensor w = random({5, 200}, 128, DType::f16);
    const ops::MatmulProblem fwd{x, w.transpose(0, 1), {}, Tensor::empty({6, 5}), false};
    const std::vector<float> a = run(ops::cpu::gemm_skinny_dot, fwd).to_vector<float>();
    const std::vector<float> r = run(ops::ref::matmul, fwd).to_vector<float>();
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(std::isnan(a[i]), std::isnan(r[i])) << i;
      EXPECT_EQ(std::isinf(a[i]), std::isinf(r[i])) << i;
    }
    const ops::MatmulProblem bwd_w{Tensor::from_vector(std::vector<float>(6 * 5, 1.0f), {6, 5})
                                       .astype(DType::f16)
                                       .transpose(0, 1),
                                   x,
                                   {},
                                   Tensor::empty({5, 200}),
                                   false};
    const std::vector<float> aw = run(ops::cpu::gemm_skinny_rows, bwd_w).to_vector<float>();
    const std::vector<float> rw = run(ops::ref::matmul, bwd_w).to_vector<float>();
    for (size_t i = 0; i < rw.size(); ++i) {
      EXPECT_EQ(std::isnan(aw[i]), std::isnan(rw[i])) << i;
      EXPECT_EQ(std::isinf(aw[i]), std::isinf(rw[i])) << i;
    }
  }
  // f16 outputs overflow to inf on the one rounding, as on an accelerator.
  {
    const Tensor x = full({2, 64}, 100.0, {.dtype = DType::f16}),
                 w = full({3, 64}, 100.0, {.dtype = DType::f16});
    const Tensor y =
        run(ops::cpu::gemm_skinny_dot,
            {x, w.transpose(0, 1), {}, Tensor::empty({2, 3}, {.dtype = DType::f16}), false});
    EXPECT_TRUE(std::isinf(y.at({1, 2})));
  }
  // Dispatch: SimpleNet's Dense layer takes them in the 16-bit dtypes, oneDNN keeps f32.
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor x = zeros({256, 21632}, {.dtype = d}), w = zeros({10, 21632}, {.dtype = d});
    const Tensor g = zeros({256, 10}, {.dtype = d});
    const ops::MatmulProblem fwd{x, w.transpose(0, 1), zeros({10}),
                                 Tensor::empty({256, 10}, {.dtype = d}), false};
    const ops::MatmulProblem bwd_data{g, w, {}, Tensor::empty({256, 21632}, {.dtype = d}), false};
    const ops::MatmulProblem bwd_w{g.transpose(0, 1), x, {}, Tensor::empty({10, 21632}), false};
    const bool takes = d == DType::f16 || (d == DType::bf16 && !cpu_features().avx512f);
    EXPECT_EQ(ops::cpu::gemm_skinny_dot_declines(fwd).empty(), takes) << dtype_name(d);
    EXPECT_EQ(ops::cpu::gemm_skinny_rows_declines(bwd_data).empty(), takes) << dtype_name(d);
    EXPECT_EQ(ops::cpu::gemm_skinny_rows_declines(bwd_w).empty(), takes) << dtype_name(d);
  }
}

// linear's backward-weights dy^T x through AVX512-BF16's pair dot product (ops/cpu/
// conv_bf16_pairs.cpp, `bf16_pairs`), called directly against the reference kernel: odd and even
// reductions (the last pair's missing partner), M and N of 16, 32 and 48 (one vector a tile, two,
// and the interleaved channel order with a last 16 in order), f32 and bf16 outputs; the same bits
// on 1 and 2 threads; inf and NaN where the reference has them; what it declines.
TEST(Linear, Bf16PairsWeightGradientMatchesTheReference) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16))
    GTEST_SKIP() << "bf16_pairs needs AVX512-BF16, which this CPU lacks";
  struct Case {
    int64_t tokens, in, out;
  };
  const Case cases[] = {{1024, 64, 32}, {1537, 48, 16}, {3000, 32, 48}, {1100, 16, 64}};
  auto run = [](void (*kernel)(const ops::MatmulProblem&), ops::MatmulProblem p) {
    p.out = Tensor::empty(p.out.shape(), {.dtype = p.out.dtype()});
    kernel(p);
    return p.out;
  };
  for (const Case& c : cases) {
    const Tensor x = random({c.tokens, c.in}, 130, DType::bf16);
    Tensor dy = random({c.tokens, c.out}, 131, DType::bf16);
    for (DType od : {DType::f32, DType::bf16}) {
      const std::string what = "tokens " + std::to_string(c.tokens) + " in " + std::to_string(c.in) +
                               " out " + std::to_string(c.out) + " " + std::string(dtype_name(od));
      const ops::MatmulProblem p{dy.transpose(0, 1), x, {}, Tensor::empty({c.out, c.in}, {.dtype = od}),
                                 false};
      ASSERT_EQ(ops::cpu::gemm_bf16_pairs_declines(p), "") << what;
      const Tensor got = run(ops::cpu::gemm_bf16_pairs, p);
      EXPECT_TRUE(gemm_close(got, run(ops::ref::matmul, p), c.tokens, od)) << what;
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      const Tensor one = run(ops::cpu::gemm_bf16_pairs, p);
      omp_set_num_threads(saved);
      EXPECT_EQ(one.astype(DType::f32).to_vector<float>(), got.astype(DType::f32).to_vector<float>())
          << what << ": the thread count changed the bits";
    }
  }
  // An inf in one token of x reaches every output of its column; a NaN in dy its row.
  {
    std::vector<float> xv = random({1025, 32}, 132, DType::f32).to_vector<float>();
    std::vector<float> dv = random({1025, 16}, 133, DType::f32).to_vector<float>();
    xv[1024 * 32 + 5] = INFINITY;  // the last token: the odd one, without a partner
    dv[7 * 16 + 3] = NAN;
    const Tensor x = Tensor::from_vector(xv, {1025, 32}).astype(DType::bf16);
    const Tensor dy = Tensor::from_vector(dv, {1025, 16}).astype(DType::bf16);
    const ops::MatmulProblem p{dy.transpose(0, 1), x, {}, Tensor::empty({16, 32}), false};
    const std::vector<float> a = run(ops::cpu::gemm_bf16_pairs, p).to_vector<float>();
    const std::vector<float> r = run(ops::ref::matmul, p).to_vector<float>();
    for (size_t k = 0; k < r.size(); ++k) {
      EXPECT_EQ(std::isnan(a[k]), std::isnan(r[k])) << k;
      EXPECT_EQ(std::isinf(a[k]), std::isinf(r[k])) << k;
    }
  }
  const Tensor x = random({2048, 32}, 134, DType::bf16), dy = random({2048, 32}, 135, DType::bf16);
  auto why = [&](const Tensor& a, const Tensor& b) {
    return ops::cpu::gemm_bf16_pairs_declines(
        {a, b, {}, Tensor::empty({a.size(0), b.size(1)}), false});
  };
  EXPECT_EQ(why(dy.transpose(0, 1), x), "");
  EXPECT_EQ(why(dy.transpose(0, 1).astype(DType::f32), x.astype(DType::f32)), "not bf16");
  EXPECT_EQ(why(dy.transpose(0, 1).contiguous(), x), "a is not the transpose of a row-major matrix");
  EXPECT_EQ(why(dy.slice(0, 0, 512).transpose(0, 1), x.slice(0, 0, 512)),
            "a reduction shorter than 1024");
  EXPECT_EQ(why(dy.slice(1, 0, 24).transpose(0, 1), x), "M or N not a multiple of 16");
  const Tensor wide = Tensor::empty({1024, 1040}, {.dtype = DType::bf16});  // 1040 * 1040 > 2^20
  EXPECT_EQ(why(wide.transpose(0, 1), Tensor::empty({1024, 1040}, {.dtype = DType::bf16})),
            "an output of more than 2^20 elements");
}

TEST(Linear, NonContiguousInputAndWeight) {
  const Tensor x = random({20, 6}, 80, DType::f32).transpose(0, 1);  // [6, 20], column-major
  const Tensor w = random({20, 9}, 81, DType::f32).transpose(0, 1);  // [9, 20], transposed storage
  const Tensor x3 = random({4, 6, 20}, 82, DType::bf16).slice(0, 0, 4, 2);  // [2, 6, 20], gaps
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(testing::all_close(ops::linear(x, w), ops::linear(x.contiguous(), w.contiguous())));
  const Tensor wb = w.astype(DType::bf16);
  EXPECT_TRUE(
      testing::all_close(ops::linear(x3, wb), ops::linear(x3.contiguous(), wb.contiguous())));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::linear(in[0].transpose(0, 1), in[1]); },
                        {random({5, 3}, 83), random({2, 5}, 84)}));
}

TEST(Linear, F16OverflowsToInfLikeAnAccelerator) {
  const Tensor x = full({1, 2}, 200.0, {.dtype = DType::f16}),
               w = full({1, 2}, 200.0, {.dtype = DType::f16});
  EXPECT_TRUE(std::isinf(ops::linear(x, w).item()));
  EXPECT_EQ(ops::linear(x, w).dtype(), DType::f16);
}

TEST(Linear, ShapeErrorsAreClear) {
  try {
    ops::linear(random({4, 5}, 1), random({3, 6}, 2));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in_features = 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::linear(random({4, 5}, 1), random({3, 5}, 2), random({4}, 3)), Error);
  EXPECT_THROW(ops::linear(random({4, 5}, 1), random({15}, 2)), Error);
}

}  // namespace
}  // namespace mixprec
