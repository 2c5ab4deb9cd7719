// Losses: softmax_cross_entropy (sparse and one-hot), nll_loss and mse_loss. Hand-computed
// values (CE = log(sum exp) - logit), every reduction, gradients by hand and by f64 central
// differences, large logits, every input dtype against the f64 oracle (the result is always
// f32), fp32 output under O2, non-contiguous logits, and the label / shape error messages; the
// vector kernel for sparse f32 rows against the reference, and the same bits at every width.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "mixprec/amp/level.h"
#include "op_test_util.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/ref/kernels.h"

namespace mixprec {
namespace {
using testing::all_close;
using testing::gradcheck;
using testing::random;
using V = std::vector<Tensor>;
using ops::Reduction;
using ops::CrossEntropyBwdProblem;
using ops::CrossEntropyFwdProblem;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

Tensor ce(const Tensor& logits, const Tensor& labels, bool sparse, Reduction r) {
  return ops::softmax_cross_entropy(logits, labels, {.sparse = sparse, .reduction = r});
}

Tensor one_hot(const std::vector<int64_t>& labels, int64_t classes) {
  Tensor t = zeros({static_cast<int64_t>(labels.size()), classes});
  float* p = t.data<float>();
  for (size_t i = 0; i < labels.size(); ++i) p[static_cast<int64_t>(i) * classes + labels[i]] = 1;
  return t;
}

// Runs fn with inputs rounded to each dtype and compares with the f64 run on the same rounded
// values: the loss is computed in f32 whatever the input dtype, so f32 tolerances apply.
::testing::AssertionResult loss_matches_f64(const std::function<Tensor(const V&)>& fn, const V& in) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    V low, ref;
    for (const Tensor& t : in) {
      low.push_back(is_floating(t.dtype()) ? t.astype(d) : t);
      ref.push_back(is_floating(t.dtype()) ? low.back().astype(DType::f64) : t);
    }
    const Tensor out = fn(low);
    if (out.dtype() != DType::f32)
      return ::testing::AssertionFailure() << "loss dtype " << dtype_name(out.dtype()) << " for " << dtype_name(d);
    auto r = all_close(out, fn(ref), {1e-5, 1e-6});
    if (!r) return ::testing::AssertionFailure() << dtype_name(d) << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- softmax cross-entropy

TEST(SoftmaxCrossEntropy, HandComputedEveryReduction) {
  const Tensor logits = f32({1, 2, 3, 0, 0, 0}, {2, 3});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double l0 = lse0 - 3, l1 = std::log(3.0) - 0;  // labels 2 and 0
  EXPECT_TRUE(all_close(ce(logits, i64({2, 0}), true, Reduction::none), f32({float(l0), float(l1)}, {2})));
  EXPECT_NEAR(ce(logits, i64({2, 0}), true, Reduction::mean).item(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(ce(logits, i64({2, 0}), true, Reduction::sum).item(), l0 + l1, 1e-6);
  EXPECT_EQ(ce(logits, i64({2, 0}), true, Reduction::mean).shape(), Shape{});
  // i32 labels work the same.
  const Tensor lab32 = Tensor::from_vector<int32_t>({2, 0}, {2});
  EXPECT_NEAR(ce(logits, lab32, true, Reduction::sum).item(), l0 + l1, 1e-6);
}

TEST(SoftmaxCrossEntropy, GradientIsSoftmaxMinusOneHotOverN) {
  Tensor logits = f32({1, 2, 3, 0, 0, 0}, {2, 3}).set_requires_grad(true);
  ce(logits, i64({2, 0}), true, Reduction::mean).backward();
  const Tensor sm = ops::softmax(logits.detach());
  const Tensor expect = ops::mul(ops::sub(sm, one_hot({2, 0}, 3)), 0.5);
  EXPECT_TRUE(all_close(logits.grad(), expect)) << logits.grad();
}

TEST(SoftmaxCrossEntropy, SparseAndOneHotAgree) {
  const Tensor x = random({6, 5}, 1, DType::f32, -3, 3);
  const std::vector<int64_t> labels{0, 4, 2, 2, 1, 3};
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    Tensor a = x.detach().clone().set_requires_grad(true), b = x.detach().clone().set_requires_grad(true);
    const Tensor la = ce(a, i64(labels), true, r), lb = ce(b, one_hot(labels, 5), false, r);
    EXPECT_TRUE(all_close(la, lb));
    ops::sum(la).backward();
    ops::sum(lb).backward();
    EXPECT_TRUE(all_close(a.grad(), b.grad()));
  }
}

TEST(SoftmaxCrossEntropy, LargeLogitsStayFinite) {
  // lse = 1e4 + log(1 + e^-1e4 + ...) = 1e4; loss for label 1 = 1e4 - 0.
  Tensor x = f32({1e4f, 0, -1e4f, 1e4f, 1e4f, -1e4f}, {2, 3}).set_requires_grad(true);
  const Tensor l = ce(x, i64({1, 0}), true, Reduction::none);
  EXPECT_NEAR(l.at({0}), 1e4, 1e-2);
  EXPECT_NEAR(l.at({1}), std::log(2.0), 1e-6);
  ops::sum(l).backward();
  EXPECT_TRUE(all_close(x.grad(), f32({1, -1, 0, -0.5f, 0.5f, 0}, {2, 3})));
  // One-hot labels (no cancellation between 1e4-sized terms) and bf16 logits.
  EXPECT_NEAR(ce(x.detach(), one_hot({1, 0}, 3), false, Reduction::none).at({1}), std::log(2.0), 1e-6);
  const Tensor xb = x.detach().astype(DType::bf16);  // 1e4 rounds to 9984 in bf16
  EXPECT_NEAR(ce(xb, i64({1, 0}), true, Reduction::none).at({0}), xb.at({0, 0}), 1e-2);
}

TEST(SoftmaxCrossEntropy, RowsWithoutFiniteMaxGiveNanLossAndGradientInEveryDtype) {
  // Logit rows all -inf, with a +inf, with a NaN have no distribution: the loss and the whole
  // gradient row are NaN, as in PyTorch 1.13 (whose log_softmax is NaN there) and as
  // log_softmax is on every path here. Before, a +inf row gave a loss of +inf. Row 1 is
  // ordinary: loss lse - x[label], gradient softmax - onehot.
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x64 = Tensor::from_vector<double>({-inf, -inf, -inf, -inf, 1, 2, 3, 0, inf, 1, 2, 3, 1, nan, 2, 3}, {4, 4});
  const std::vector<int64_t> labels{0, 1, 1, 0};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1.0);
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (bool sparse : {true, false}) {
      Tensor x = x64.astype(d).clone().set_requires_grad(true);
      const Tensor lab = sparse ? i64(labels) : one_hot(labels, 4).astype(d);
      const Tensor loss = ce(x, lab, sparse, Reduction::none);
      ops::sum(loss).backward();
      const std::string what = std::string(dtype_name(d)) + (sparse ? " sparse" : " one-hot");
      for (int64_t r : {0, 2, 3}) {
        EXPECT_TRUE(std::isnan(loss.at({r}))) << what << " row " << r << ": " << loss.at({r});
        for (int64_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(x.grad().at({r, j}))) << what << " row " << r;
      }
      EXPECT_NEAR(loss.at({1}), lse - 2, 1e-6) << what;
      for (int64_t j = 0; j < 4; ++j) {
        const double p = std::exp((j == 3 ? 0.0 : j + 1.0) - lse) - (j == 1 ? 1 : 0);
        EXPECT_NEAR(x.grad().at({1, j}), p, 2 * testing::tolerance_for(d).rel) << what << " j " << j;
      }
      EXPECT_TRUE(std::isnan(ce(x.detach(), lab, sparse, Reduction::mean).item())) << what;
    }
  }
}

TEST(SoftmaxCrossEntropy, GradCheck) {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    EXPECT_TRUE(gradcheck([=](const V& in) { return ce(in[0], i64({1, 3, 0}), true, r); }, {random({3, 4}, 2, DType::f64, -2, 2)}));
    // Soft labels (rows need not sum to 1): gradient w.r.t. the logits only.
    const Tensor soft = random({3, 4}, 3, DType::f64, 0, 1);
    EXPECT_TRUE(gradcheck([=](const V& in) { return ce(in[0], soft, false, r); }, {random({3, 4}, 4, DType::f64, -2, 2)}));
  }
}

TEST(SoftmaxCrossEntropy, EveryDtypeMatchesF64AndReturnsF32) {
  const Tensor x = random({5, 7}, 5, DType::f64, -4, 4);
  EXPECT_TRUE(loss_matches_f64([](const V& in) { return ce(in[0], i64({0, 6, 3, 3, 1}), true, Reduction::none); }, {x}));
  EXPECT_TRUE(loss_matches_f64([](const V& in) { return ce(in[0], in[1], false, Reduction::mean); },
                               {x, random({5, 7}, 6, DType::f64, 0, 1)}));
  EXPECT_EQ(ce(x, i64({0, 6, 3, 3, 1}), true, Reduction::mean).dtype(), DType::f64);
}

TEST(SoftmaxCrossEntropy, LossStaysF32UnderO2) {
  std::vector<OpRecord> trace;
  OpRecorder rec(&trace);
  AutocastState s = amp::level_state(AmpLevel::O2);
  AutocastScope scope(s);
  Tensor x = random({4, 3}, 7, DType::bf16).set_requires_grad(true);
  const Tensor l = ce(x, i64({0, 1, 2, 0}), true, Reduction::mean);
  EXPECT_EQ(l.dtype(), DType::f32);
  ASSERT_FALSE(trace.empty());
  EXPECT_EQ(trace.back().op, OpId::softmax_cross_entropy);
  EXPECT_EQ(trace.back().compute_dtype, DType::f32);
  l.backward();
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
}

TEST(SoftmaxCrossEntropy, NonContiguousLogits) {
  const Tensor x = random({4, 3}, 8, DType::f32).transpose(0, 1);  // [3, 4]
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(all_close(ce(x, i64({0, 3, 1}), true, Reduction::none), ce(x.contiguous(), i64({0, 3, 1}), true, Reduction::none)));
  EXPECT_TRUE(gradcheck([](const V& in) { return ce(in[0].transpose(0, 1), i64({2, 0}), true, Reduction::sum); },
                        {random({3, 2}, 9)}));
}

TEST(SoftmaxCrossEntropy, ClearErrors) {
  const Tensor x = random({3, 10}, 10, DType::f32);
  try {
    ce(x, i64({1, 10, 2}), true, Reduction::mean);
    FAIL() << "expected an out-of-range label error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("label 10"), std::string::npos) << m;
    EXPECT_NE(m.find("index 1"), std::string::npos) << m;
    EXPECT_NE(m.find("[0, 10)"), std::string::npos) << m;
  }
  EXPECT_THROW(ce(x, i64({-1, 0, 0}), true, Reduction::mean), Error);
  EXPECT_THROW(ce(x, i64({1, 2}), true, Reduction::mean), Error);         // wrong count
  EXPECT_THROW(ce(x, i64({1, 2, 3}), false, Reduction::mean), Error);     // indices without sparse
  EXPECT_THROW(ce(x, zeros({3, 9}), false, Reduction::mean), Error);      // one-hot shape
  EXPECT_THROW(ce(x, zeros({3, 10}), true, Reduction::mean), Error);      // floats with sparse
  EXPECT_THROW(ce(random({3}, 11, DType::f32), i64({1}), true, Reduction::mean), Error);
}

// ---------------------------------------------------------------- nll

// The vector rows (cpu::cross_entropy_rows_*) against the reference kernels on the same problem:
// widths around the 16-partial blocks, ties (the first maximal element, +0 beside -0), NaN,
// -inf and +inf rows, huge logits and a label at the max; row_max bitwise, loss and gradient
// within 1e-5 relative (only the exp, within 1.01 ulp, and the order of the sum differ), NaN
// where the reference has NaN; every ISA this CPU runs gives the same bits.
TEST(SoftmaxCrossEntropy, VectorRowsMatchTheReferenceWithTheSameBitsAtEveryWidth) {
  using ops::cpu::simd::Isa;
  std::vector<Isa> isas{Isa::scalar};
  if (ops::cpu::simd::best_isa() != Isa::scalar) isas.push_back(Isa::avx2);
  if (ops::cpu::simd::best_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t c : {1, 2, 7, 15, 16, 17, 31, 33, 256, 1000}) {
    SCOPED_TRACE("classes " + std::to_string(c));
    const int64_t n = 40;
    Tensor logits = ops::mul(random({n, c}, static_cast<uint64_t>(c), DType::f32, -1, 1), 8.0f);
    float* x = logits.data<float>();
    std::vector<int64_t> lab(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) lab[static_cast<size_t>(i)] = (i * 7 + 3) % c;
    const auto row = [&](int64_t i) { return x + i * c; };
    std::fill(row(0), row(0) + c, 0.25f);                                  // all tied
    for (int64_t j = 0; j < c; ++j) row(1)[j] = j % 2 ? 0.0f : -0.0f;      // -0 first, then +0
    row(2)[c / 2] = nan;                                                    // a NaN logit
    std::fill(row(3), row(3) + c, -inf);                                    // no finite max
    row(4)[c - 1] = inf;                                                    // +inf
    std::fill(row(5), row(5) + c, nan);                                     // all NaN
    for (int64_t j = 0; j < c; ++j) row(6)[j] = j == lab[6] ? 1e30f : -1e30f;  // label at a huge max
    row(7)[c - 1] = 40.0f;                                                  // the max in the tail
    const Tensor labels = Tensor::from_vector<int64_t>(lab, {n});
    const auto fwd = [&] {
      return CrossEntropyFwdProblem{logits, labels, true, zeros({n}), zeros({n}), zeros({n})};
    };
    const CrossEntropyFwdProblem ref_f = fwd();
    ops::ref::cross_entropy_fwd(ref_f);
    const Tensor g = random({n}, 99, DType::f32, 0.5, 2);
    const auto bwd = [&](const CrossEntropyFwdProblem& f) {
      return CrossEntropyBwdProblem{logits, labels, true, f.row_max, f.row_logsum, g, 0.25, zeros({n, c})};
    };
    const CrossEntropyBwdProblem ref_b = bwd(ref_f);
    ops::ref::cross_entropy_bwd(ref_b);
    std::vector<std::vector<float>> first;
    for (Isa isa : isas) {
      SCOPED_TRACE(ops::cpu::simd::isa_name(isa));
      const CrossEntropyFwdProblem f = fwd();
      ops::cpu::cross_entropy_rows_fwd_isa(f, isa);
      const CrossEntropyBwdProblem b = bwd(f);
      ops::cpu::cross_entropy_rows_bwd_isa(b, isa);
      EXPECT_TRUE(all_close(f.row_max, ref_f.row_max, {0, 0}));
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(std::signbit(f.row_max.data<float>()[i]), std::signbit(ref_f.row_max.data<float>()[i])) << i;
      EXPECT_TRUE(all_close(f.row_logsum, ref_f.row_logsum, {1e-5, 1e-6}));
      EXPECT_TRUE(all_close(f.loss, ref_f.loss, {1e-5, 1e-6}));
      EXPECT_TRUE(all_close(b.dlogits, ref_b.dlogits, {1e-5, 1e-7}));
      std::vector<std::vector<float>> got{f.loss.to_vector<float>(), f.row_logsum.to_vector<float>(),
                                          b.dlogits.to_vector<float>()};
      if (first.empty()) {
        first = got;
        continue;
      }
      for (size_t k = 0; k < got.size(); ++k)
        for (size_t e = 0; e < got[k].size(); ++e)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k][e]), std::bit_cast<uint32_t>(first[k][e]))
              << "output " << k << " element " << e << ": not the scalar kernel's bits";
    }
  }
}

TEST(SoftmaxCrossEntropy, VectorRowsRunForSparseF32AndDeclineTheRest) {
  const Tensor x = random({4, 9}, 5, DType::f32);
  const Tensor lab = i64({0, 3, 8, 2});
  EXPECT_EQ(ops::cpu::cross_entropy_rows_fwd_declines({x, lab, true, zeros({4}), zeros({4}), zeros({4})}), "");
  EXPECT_NE(ops::cpu::cross_entropy_rows_fwd_declines({x, one_hot({0, 3, 8, 2}, 9), false, zeros({4}), zeros({4}), zeros({4})}), "");
  const Tensor x64 = x.astype(DType::f64);
  EXPECT_NE(ops::cpu::cross_entropy_rows_fwd_declines({x64, lab, true, zeros({4}), zeros({4}), zeros({4})}), "");
}

TEST(NllLoss, HandComputedAndMatchesCrossEntropy) {
  const Tensor lp = f32({-0.5f, -1.5f, -2.0f, -0.1f}, {2, 2});
  EXPECT_TRUE(all_close(ops::nll_loss(lp, i64({1, 0}), Reduction::none), f32({1.5f, 2.0f}, {2})));
  EXPECT_NEAR(ops::nll_loss(lp, i64({1, 0})).item(), 1.75, 1e-6);
  EXPECT_NEAR(ops::nll_loss(lp, i64({1, 0}), Reduction::sum).item(), 3.5, 1e-6);
  const Tensor x = random({4, 6}, 12, DType::f32, -3, 3);
  EXPECT_TRUE(all_close(ops::nll_loss(ops::log_softmax(x), i64({5, 0, 2, 2})),
                        ce(x, i64({5, 0, 2, 2}), true, Reduction::mean)));
}

TEST(NllLoss, GradCheckAndDtypes) {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    EXPECT_TRUE(gradcheck([=](const V& in) { return ops::nll_loss(in[0], i64({2, 0, 1}), r); }, {random({3, 3}, 13)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::nll_loss(ops::log_softmax(in[0]), i64({2, 0})); }, {random({2, 4}, 14)}));
  EXPECT_TRUE(loss_matches_f64([](const V& in) { return ops::nll_loss(in[0], i64({1, 3, 0}), Reduction::none); },
                               {random({3, 4}, 15, DType::f64, -5, 0)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::nll_loss(in[0].transpose(0, 1), i64({0, 1, 1})); },
                        {random({2, 3}, 16)}));  // non-contiguous
  EXPECT_THROW(ops::nll_loss(random({3, 4}, 17, DType::f32), i64({1, 4, 0})), Error);
}

// ---------------------------------------------------------------- mse

TEST(MseLoss, HandComputedEveryReduction) {
  const Tensor p = f32({1, 2, 3, 4}, {2, 2}), t = f32({1, 0, 5, 3}, {2, 2});
  EXPECT_TRUE(all_close(ops::mse_loss(p, t, Reduction::none), f32({0, 4, 4, 1}, {2, 2})));
  EXPECT_NEAR(ops::mse_loss(p, t).item(), 9.0 / 4, 1e-6);
  EXPECT_NEAR(ops::mse_loss(p, t, Reduction::sum).item(), 9.0, 1e-6);
  Tensor pg = p.clone().set_requires_grad(true);
  ops::mse_loss(pg, t).backward();
  EXPECT_TRUE(all_close(pg.grad(), f32({0, 1, -1, 0.5f}, {2, 2})));  // 2 (p - t) / 4
}

TEST(MseLoss, GradCheckBothInputsAndDtypes) {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    EXPECT_TRUE(gradcheck([=](const V& in) { return ops::mse_loss(in[0], in[1], r); }, {random({2, 3}, 18), random({2, 3}, 19)}));
  EXPECT_TRUE(loss_matches_f64([](const V& in) { return ops::mse_loss(in[0], in[1]); },
                               {random({4, 9}, 20), random({4, 9}, 21)}));
  EXPECT_TRUE(gradcheck([](const V& in) { return ops::mse_loss(in[0].transpose(0, 1), in[1]); },
                        {random({3, 2}, 22), random({2, 3}, 23)}));  // non-contiguous
}

TEST(MseLoss, ShapesMustMatch) {
  try {
    ops::mse_loss(random({4, 1}, 24, DType::f32), random({4}, 25, DType::f32));
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not broadcast"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixprec
