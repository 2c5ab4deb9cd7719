// embedding: hand-computed gathers, every dtype and index type, accumulation of repeated
// indices in the (f32) gradient, determinism, out-of-range errors. dropout: identity cases,
// p validation, keep fraction and exact scale, masks independent of the thread count,
// backward through the saved mask, f64 gradient check.
#include <gtest/gtest.h>
#include <omp.h>

#include "op_test_util.h"

namespace mixprec {
namespace {
using testing::gradcheck;
using testing::matches_f64_in_all_dtypes;
using testing::random;
using V = std::vector<Tensor>;

// Runs fn with 1 thread, then with 2, restoring the setting.
template <class F>
std::pair<Tensor, Tensor> with_1_and_2_threads(F fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor a = fn();
  omp_set_num_threads(2);
  Tensor b = fn();
  omp_set_num_threads(saved);
  return {a, b};
}

// ---------------------------------------------------------------- embedding

TEST(Embedding, HandComputed) {
  const Tensor w = arange(6.0).reshape({3, 2});
  for (DType it : {DType::i32, DType::i64}) {
    const Tensor idx = Tensor::from_vector<int64_t>({2, 0, 1, 2}, {2, 2}).astype(it);
    const Tensor y = ops::embedding(idx, w);
    EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{4, 5, 0, 1, 2, 3, 4, 5}));
  }
  EXPECT_EQ(ops::embedding(Tensor::from_vector<int64_t>({1}, {}), w).shape(), (Shape{2}));
}

TEST(Embedding, ForwardInEveryDtypeIsAnExactGather) {
  const Tensor idx = Tensor::from_vector<int32_t>({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  EXPECT_TRUE(matches_f64_in_all_dtypes([&](const V& in) { return ops::embedding(idx, in[0]); },
                                        {random({10, 7}, 1)}));
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor w = random({10, 7}, 2, d);
    const Tensor y = ops::embedding(idx, w);
    EXPECT_EQ(y.dtype(), d);
    EXPECT_EQ(y.slice(0, 1, 2).slice(1, 0, 1).reshape({7}).to_vector<float>(),  // idx[1][0] = 5
              w.slice(0, 5, 6).reshape({7}).to_vector<float>());
  }
}

TEST(Embedding, GradAccumulatesRepeatedIndices) {
  const Tensor idx = Tensor::from_vector<int64_t>({1, 1, 3, 1}, {4});
  Tensor w = random({5, 3}, 10, DType::f32).set_requires_grad(true);
  const Tensor g = random({4, 3}, 11, DType::f32);
  ops::embedding(idx, w).backward(g);
  const auto gw = w.grad().to_vector<float>();
  const auto gv = g.to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(gw[0 * 3 + j], 0.0f);
    EXPECT_EQ(gw[1 * 3 + j], (gv[0 * 3 + j] + gv[1 * 3 + j]) + gv[3 * 3 + j]);  // in position order
    EXPECT_EQ(gw[3 * 3 + j], gv[2 * 3 + j]);
    EXPECT_EQ(gw[4 * 3 + j], 0.0f);
  }
}

TEST(Embedding, GradIsF32ForBf16WeightsAndDeterministic) {
  // Many repeats of few rows, large enough to run threaded.
  std::vector<int64_t> iv(20000);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>((i * 7919) % 13);
  const Tensor idx = Tensor::from_vector<int64_t>(iv, {200, 100});
  Tensor w32 = random({13, 16}, 20, DType::f32).set_requires_grad(true);
  const Tensor g = random({200, 100, 16}, 21, DType::bf16);
  auto [one, two] = with_1_and_2_threads([&] {
    w32.set_grad({});
    ops::embedding(idx, w32.astype(DType::bf16)).backward(g);
    return w32.grad();
  });
  EXPECT_EQ(one.dtype(), DType::f32);
  EXPECT_EQ(one.to_vector<float>(), two.to_vector<float>());
  // Against f64: the sum over 1538 bf16 terms per row, accumulated in f32.
  const auto gv = g.to_vector<double>();
  std::vector<double> expect(13 * 16, 0.0);
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t j = 0; j < 16; ++j) expect[static_cast<size_t>(iv[i]) * 16 + j] += gv[i * 16 + j];
  EXPECT_TRUE(testing::all_close(one, Tensor::from_vector<double>(expect, {13, 16}), {1e-5, 1e-4}));
}

TEST(Embedding, GradCheck) {
  const Tensor idx = Tensor::from_vector<int64_t>({0, 2, 2, 3, 0, 2}, {3, 2});
  EXPECT_TRUE(gradcheck([&](const V& in) { return ops::embedding(idx, in[0]); }, {random({4, 3}, 30)}));
}

TEST(Embedding, NonContiguousWeight) {
  const Tensor w = random({5, 8}, 40, DType::f32).transpose(0, 1);  // [8, 5]
  const Tensor idx = Tensor::from_vector<int64_t>({7, 0, 3}, {3});
  EXPECT_TRUE(testing::all_close(ops::embedding(idx, w), ops::embedding(idx, w.contiguous()), {0, 0}));
}

TEST(Embedding, OutOfRangeIndexNamesTheIndexAndTheCount) {
  const Tensor w = random({4, 2}, 50, DType::f32);
  for (int64_t bad : {4, 100, -1}) {
    try {
      ops::embedding(Tensor::from_vector<int64_t>({0, bad}, {2}), w);
      FAIL() << "expected an error for index " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("index " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("4 embeddings"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(ops::embedding(random({2}, 1, DType::f32), w), Error);                 // float indices
  EXPECT_THROW(ops::embedding(Tensor::from_vector<int64_t>({0}, {1}), random({4}, 2)), Error);  // 1-D weight
}

// ---------------------------------------------------------------- dropout

TEST(Dropout, IdentityWhenNotTrainingOrPIsZero) {
  Generator gen(1);
  Tensor x = random({10}, 60, DType::f32).set_requires_grad(true);
  const Tensor a = ops::dropout(x, 0.5, /*training=*/false, gen);
  const Tensor b = ops::dropout(x, 0.0, /*training=*/true, gen);
  EXPECT_TRUE(a.same(x));
  EXPECT_TRUE(b.same(x));
  EXPECT_EQ(a.grad_fn(), nullptr);
  EXPECT_EQ(gen.offset(), 0u);  // no random numbers drawn
}

TEST(Dropout, RejectsProbabilitiesOutsideZeroToOne) {
  Generator gen(1);
  const Tensor x = random({10}, 61, DType::f32);
  for (double p : {1.0, -0.1, 1.5}) EXPECT_THROW(ops::dropout(x, p, true, gen), Error) << p;
  EXPECT_THROW(ops::dropout(x, std::nan(""), true, gen), Error);
}

TEST(Dropout, KeepFractionAndExactScale) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (double p : {0.1, 0.5, 0.8}) {
      Generator gen(7);
      const Tensor x = random({200000}, 62, d, 0.5, 1.5);  // never 0: dropped <=> output 0
      const Tensor y = ops::dropout(x, p, true, gen);
      EXPECT_EQ(y.dtype(), d);
      EXPECT_EQ(gen.offset(), 50000u);  // one Philox block per 4 elements
      const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
      const double scale = 1.0 / (1.0 - p);
      // Kept elements are x * scale computed in compute_t, rounded once to d.
      std::vector<double> want(xv.size());
      if (d == DType::f64) {
        for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * scale;
      } else {
        std::vector<float> prod(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) prod[i] = static_cast<float>(xv[i]) * static_cast<float>(scale);
        want = Tensor::from_vector<float>(prod, x.shape(), d).to_vector<double>();
      }
      int64_t kept = 0, wrong = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        if (yv[i] == 0) continue;
        ++kept;
        wrong += yv[i] != want[i];
      }
      EXPECT_EQ(wrong, 0) << dtype_name(d) << " p " << p;
      const double frac = static_cast<double>(kept) / static_cast<double>(xv.size());
      const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(xv.size()));
      EXPECT_NEAR(frac, 1 - p, 5 * sigma) << dtype_name(d) << " p " << p;
    }
  }
}

TEST(Dropout, MaskIndependentOfThreadCountAndReproducible) {
  const Tensor x = random({300, 501}, 63, DType::f32);
  auto [one, two] = with_1_and_2_threads([&] {
    Generator gen(11);
    return ops::dropout(x, 0.3, true, gen);
  });
  EXPECT_EQ(one.to_vector<float>(), two.to_vector<float>());
  // Successive calls draw fresh masks; restoring the generator state repeats them.
  Generator gen(11);
  const Tensor first = ops::dropout(x, 0.3, true, gen);
  const Tensor second = ops::dropout(x, 0.3, true, gen);
  EXPECT_EQ(first.to_vector<float>(), one.to_vector<float>());
  EXPECT_NE(first.to_vector<float>(), second.to_vector<float>());
  gen.set_state(11, 0);
  EXPECT_EQ(ops::dropout(x, 0.3, true, gen).to_vector<float>(), first.to_vector<float>());
}

TEST(Dropout, BackwardUsesTheSavedMask) {
  Generator gen(5);
  Tensor x = random({1000}, 64, DType::bf16, 0.5, 1.5).set_requires_grad(true);
  const Tensor y = ops::dropout(x, 0.25, true, gen);
  ops::sum(y).backward();
  const auto yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  const float scale = static_cast<float>(Tensor::from_vector<float>({1.0f / 0.75f}, {1}, DType::bf16).item());
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(gv[i], yv[i] != 0 ? scale : 0.0f) << i;
  // f64 gradient check: a fresh generator per call gives the same mask every time.
  EXPECT_TRUE(gradcheck([](const V& in) {
    Generator g(9);
    return ops::dropout(in[0], 0.4, true, g);
  }, {random({4, 6}, 65)}));
}

TEST(Dropout, NonContiguousInputUsesLogicalOrder) {
  const Tensor x = random({40, 30}, 66, DType::f32).transpose(0, 1);
  Generator g1(3), g2(3);
  EXPECT_EQ(ops::dropout(x, 0.5, true, g1).to_vector<float>(),
            ops::dropout(x.contiguous(), 0.5, true, g2).to_vector<float>());
}

}  // namespace
}  // namespace mixprec
