// The explicit-cast rule (ops/autocast.h, docs/amp.md): a level never overrides a cast the user
// wrote. The seed's softmax pitfall at O2/O3 in f16 (NaN without the cast, correct values with
// x.astype(f32) or ops::cast), the scope of a cast (it holds in the cell call that made it and in
// sub-cells only at O1, not in the caller after the return, never into a cell with its own
// precision), and to_float winning over the level on BatchNorm.
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

enum class CastHow { none, astype, ops_cast };

// The seed's "custom complex softmax": exp / sum / div, with no max subtraction, so that exp of a
// logit above 11.09 overflows f16.
struct MySoftmax : nn::Cell {
  CastHow how;
  Tensor seen;  // the input as it arrived, for the f64 reference
  explicit MySoftmax(CastHow h) : how(h) {}
  Tensor construct(const Tensor& x0) override {
    seen = x0.detach();
    Tensor x = x0;
    if (how == CastHow::astype) x = x.astype(DType::f32);
    if (how == CastHow::ops_cast) x = ops::cast(x, DType::f32);
    const Tensor e = ops::exp(x);
    return ops::div(e, ops::sum(e, {-1}, /*keepdims=*/true));
  }
  std::string type_name() const override { return "MySoftmax"; }
};

// Dense(4, 6) whose logits for an all-ones input are 5, 10, ..., 30.
struct PitfallNet : nn::Cell {
  nn::Dense fc{4, 6};
  MySoftmax softmax;
  explicit PitfallNet(CastHow how) : softmax(how) {
    std::vector<float> w(24);
    for (int o = 0; o < 6; ++o)
      for (int i = 0; i < 4; ++i) w[static_cast<size_t>(o * 4 + i)] = 1.25f * static_cast<float>(o + 1);
    NoGradGuard ng;
    fc.weight.copy_(Tensor::from_vector(w, {6, 4}));
    fc.bias.fill_(0.0);
    register_cell("fc", fc);
    register_cell("softmax", softmax);
  }
  Tensor construct(const Tensor& x) override { return softmax(fc(x)); }
};

Tensor softmax_f64(const Tensor& logits) {
  const auto v = logits.to_vector<double>();
  const int64_t cols = logits.shape().back();
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size() / static_cast<size_t>(cols); ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(v[r * static_cast<size_t>(cols) + static_cast<size_t>(c)]);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = r * static_cast<size_t>(cols) + static_cast<size_t>(c);
      out[i] = std::exp(v[i]) / s;
    }
  }
  return Tensor::from_vector(out, logits.shape());
}

bool any_nan(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (std::isnan(v)) return true;
  return false;
}

std::vector<OpRecord> recorded(nn::Cell& net, const Tensor& x, Tensor* out = nullptr) {
  std::vector<OpRecord> rec;
  OpRecorder r(&rec);
  Tensor y = net(x);
  if (out) *out = y;
  return rec;
}

TEST(ExplicitCast, SeedSoftmaxPitfallIsNaNWithoutTheCastAndCorrectWithIt) {
  const Tensor x = ones({3, 4});
  for (const char* level : {"O2", "O3"}) {
    {
      PitfallNet net(CastHow::none);
      amp::auto_mixed_precision(net, level, DType::f16);
      NoGradGuard ng;
      EXPECT_TRUE(any_nan(net(x))) << level << ": exp(30) overflows f16, inf / inf is NaN";
    }
    for (CastHow how : {CastHow::astype, CastHow::ops_cast}) {
      const char* what = how == CastHow::astype ? "astype" : "ops::cast";
      PitfallNet net(how);
      amp::auto_mixed_precision(net, level, DType::f16);
      Tensor y;
      const auto rec = recorded(net, x, &y);
      ASSERT_FALSE(any_nan(y)) << level << " " << what;
      EXPECT_EQ(net.softmax.seen.dtype(), DType::f16) << level << ": the sub-cell's input is low";
      EXPECT_TRUE(testing::all_close(y, softmax_f64(net.softmax.seen), {1e-6, 1e-9})) << level << " " << what;
      int inside = 0;
      for (const OpRecord& r : rec) {
        if (r.cell_path != "softmax" || op_info(r.op).kind == OpKind::layout) continue;
        ++inside;
        EXPECT_EQ(r.compute_dtype, DType::f32) << level << " " << what << ": " << op_name(r.op);
        EXPECT_EQ(r.output_dtype, DType::f32) << level << " " << what << ": " << op_name(r.op);
      }
      EXPECT_EQ(inside, 3) << "exp, sum, div";
    }
  }
}

TEST(ExplicitCast, GradientsFlowThroughTheExplicitCast) {
  for (CastHow how : {CastHow::astype, CastHow::ops_cast}) {
    PitfallNet net(how);
    amp::auto_mixed_precision(net, "O2", DType::f16);
    Tensor y = net(testing::random({3, 4}, 11, DType::f32, 0.5, 1.0));
    ops::sum(ops::mul(y, testing::random(y.shape(), 12, DType::f32))).backward();
    for (auto& [name, p] : net.parameters_and_names()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_EQ(p.grad().dtype(), DType::f32) << name;
      EXPECT_FALSE(any_nan(p.grad())) << name;
    }
  }
}

// A cast in the caller reaches into sub-cells only at O1 (per-op casts, as MindSpore's O1 rewrite).
// At O2/O3 every cell casts its inputs at its boundary, as MindSpore flags every cell there
// (GRAPH_MODE: the sub-cell's input arrives in f16 again), so the fix belongs inside the cell.
TEST(ExplicitCast, CastInTheCallerReachesSubCellsOnlyAtO1) {
  struct Wrap : nn::Cell {
    nn::Dense fc{6, 6};
    Wrap() { register_cell("fc", fc); }
    Tensor construct(const Tensor& x) override { return fc(x); }
  };
  struct Parent : nn::Cell {
    nn::Dense fc{4, 6};
    Wrap inner;
    Parent() {
      register_cell("fc", fc);
      register_cell("inner", inner);
    }
    Tensor construct(const Tensor& x) override { return inner(fc(x).astype(DType::f32)); }
  };
  for (const char* level : {"O1", "O2", "O3"}) {
    Parent net;
    amp::auto_mixed_precision(net, level, DType::bf16);
    const DType want = std::string(level) == "O1" ? DType::f32 : DType::bf16;
    int seen = 0;
    for (const OpRecord& r : recorded(net, testing::random({2, 4}, 13, DType::f32)))
      if (r.op == OpId::linear && r.cell_path == "inner.fc") {
        ++seen;
        EXPECT_EQ(r.compute_dtype, want) << level;
      }
    EXPECT_EQ(seen, 1) << level;
  }
  // The seed's fix written in the caller, around a custom softmax sub-cell: NaN at O2, as in
  // MindSpore; the cast must be inside the cell (the test above) or the cell set to_float(f32).
  struct SoftmaxParent : nn::Cell {
    nn::Dense fc{4, 6};
    MySoftmax softmax{CastHow::none};
    SoftmaxParent() {
      register_cell("fc", fc);
      register_cell("softmax", softmax);
    }
    Tensor construct(const Tensor& x) override { return softmax(fc(x).astype(DType::f32)); }
  };
  SoftmaxParent net;
  {
    NoGradGuard ng;
    net.fc.weight.fill_(4.0);
  }
  amp::auto_mixed_precision(net, "O2", DType::f16);
  NoGradGuard ng;
  EXPECT_TRUE(any_nan(net(ones({2, 4}))));
  net.softmax.to_float(DType::f32);
  EXPECT_FALSE(any_nan(net(ones({2, 4})))) << "to_float(f32) on the sub-cell is the fix from outside";
}

// At O1 a value derived from the caller's cast stays the caller's choice after a sub-cell returns
// it (SimpleNet's ReLU and Flatten are cells): the Dense after them still runs in f32.
TEST(ExplicitCast, AtO1TheCallersCastSurvivesPassingThroughSubCells) {
  struct Net : nn::Cell {
    nn::Dense a{4, 6}, b{6, 3};
    nn::ReLU relu;
    Net() {
      register_cell("a", a);
      register_cell("relu", relu);
      register_cell("b", b);
    }
    Tensor construct(const Tensor& x) override { return b(relu(a(x).astype(DType::f32))); }
  } net;
  amp::auto_mixed_precision(net, "O1", DType::bf16);
  int seen = 0;
  for (const OpRecord& r : recorded(net, testing::random({2, 4}, 19, DType::f32))) {
    if (r.cell_path == "relu") {
      EXPECT_EQ(r.compute_dtype, DType::f32) << "relu";
    }
    if (r.cell_path == "b" && r.op == OpId::linear) {
      ++seen;
      EXPECT_EQ(r.compute_dtype, DType::f32) << "b";
    }
  }
  EXPECT_EQ(seen, 1);
}

// Ops that bypass autocast (dropout runs in its input dtype) still carry the choice on.
TEST(ExplicitCast, DropoutKeepsTheChoice) {
  struct Net : nn::Cell {
    DType after = DType::f32;
    Tensor construct(const Tensor& x) override {
      Generator g(3);
      const Tensor d = ops::dropout(x.astype(DType::f32), 0.5, /*training=*/true, g);
      const Tensor y = ops::mul(d, d);
      after = y.dtype();
      return y;
    }
  } net;
  amp::auto_mixed_precision(net, "O2", DType::bf16);
  NoGradGuard ng;
  (void)net(testing::random({8}, 20, DType::f32));
  EXPECT_EQ(net.after, DType::f32);
}

// What a sub-cell returns follows the caller's level again; the caller's own marks still hold.
TEST(ExplicitCast, TheMarkEndsWhenTheCellReturns) {
  struct Parent : nn::Cell {
    MySoftmax softmax{CastHow::astype};
    std::vector<DType> mul_dtypes;
    Parent() { register_cell("softmax", softmax); }
    Tensor construct(const Tensor& x) override {
      const Tensor p = softmax(x);            // f32, made inside the sub-cell
      const Tensor a = ops::mul(p, p);        // the level again: f16
      const Tensor mine = x.astype(DType::f32);  // the caller's own cast
      (void)softmax(mine);                    // passes through a sub-cell ...
      const Tensor b = ops::mul(mine, mine);  // ... and still holds here: f32
      mul_dtypes = {a.dtype(), b.dtype()};
      return ops::add(a, b);
    }
  } net;
  amp::auto_mixed_precision(net, "O2", DType::f16);
  NoGradGuard ng;
  (void)net(testing::random({2, 5}, 14, DType::f32));
  ASSERT_EQ(net.mul_dtypes.size(), 2u);
  EXPECT_EQ(net.mul_dtypes[0], DType::f16);
  EXPECT_EQ(net.mul_dtypes[1], DType::f32);
}

// astype to the dtype a tensor already has marks an alias: the original keeps following the level.
TEST(ExplicitCast, AstypeToTheSameDtypeMarksAnAliasOnly) {
  struct Net : nn::Cell {
    std::vector<DType> dtypes;
    Tensor construct(const Tensor& x) override {  // x arrives as the caller's f32
      const Tensor e1 = ops::exp(x.astype(DType::f32));
      const Tensor e2 = ops::exp(x);
      dtypes = {e1.dtype(), e2.dtype()};
      return ops::add(e1, e2);
    }
  } net;
  amp::auto_mixed_precision(net, "O3", DType::bf16);
  NoGradGuard ng;
  (void)net(testing::random({4}, 15, DType::f32));
  ASSERT_EQ(net.dtypes.size(), 2u);
  EXPECT_EQ(net.dtypes[0], DType::f32) << "the user's cast";
  EXPECT_EQ(net.dtypes[1], DType::bf16) << "the level, on the unmarked original";
}

// A white-list op at O1 fed an explicit f32 tensor runs in f32 (its weights follow).
TEST(ExplicitCast, WhiteListOpAtO1HonoursTheCast) {
  struct Net : nn::Cell {
    nn::Dense a{4, 4}, b{4, 4};
    Net() {
      register_cell("a", a);
      register_cell("b", b);
    }
    Tensor construct(const Tensor& x) override { return b(a(x).astype(DType::f32)); }
  } net;
  amp::auto_mixed_precision(net, "O1", DType::bf16);
  int seen = 0;
  for (const OpRecord& r : recorded(net, testing::random({2, 4}, 16, DType::f32))) {
    if (r.op != OpId::linear) continue;
    ++seen;
    // a's output is cast back to f32 by O1 (not marked); the user's astype is a no-op alias, marked.
    EXPECT_EQ(r.compute_dtype, r.cell_path == "a" ? DType::bf16 : DType::f32) << r.cell_path;
    for (DType w : r.weight_dtypes) EXPECT_EQ(w, r.compute_dtype) << r.cell_path;
  }
  EXPECT_EQ(seen, 2);
}

// A cell with to_float() sets its own precision: a caller's cast does not cross its boundary.
TEST(ExplicitCast, ToFloatCellIsABoundary) {
  struct Parent : nn::Cell {
    nn::Dense fc{4, 4};
    Parent() {
      fc.to_float(DType::bf16);
      register_cell("fc", fc);
    }
    Tensor construct(const Tensor& x) override { return fc(x.astype(DType::f32)); }
  } net;
  amp::auto_mixed_precision(net, "O1", DType::bf16);
  int seen = 0;
  for (const OpRecord& r : recorded(net, testing::random({2, 4}, 17, DType::f32)))
    if (r.op == OpId::linear) {
      ++seen;
      EXPECT_EQ(r.compute_dtype, DType::bf16);
    }
  EXPECT_EQ(seen, 1);
}

// to_float wins over the level's lists for BatchNorm too (docs/amp.md).
TEST(ExplicitCast, ToFloatWinsOverTheLevelOnBatchNorm) {
  const Tensor x = testing::random({2, 1, 28, 28}, 18, DType::f32);
  struct Case {
    const char* level;
    DType forced;
  };
  for (Case c : {Case{"O2", DType::bf16}, Case{"O3", DType::f32}}) {
    auto net = nn::make_model("convnet-bn");
    amp::auto_mixed_precision(*net, c.level, DType::bf16);
    nn::Cell* bn = nullptr;
    for (auto& [name, cell] : net->cells_and_names())
      if (cell->type_name() == "BatchNorm2d") {
        bn = cell;
        cell->to_float(c.forced);
      }
    ASSERT_NE(bn, nullptr);
    int seen = 0;
    for (const OpRecord& r : recorded(*net, x)) {
      if (r.op != OpId::batch_norm) continue;
      ++seen;
      EXPECT_EQ(r.compute_dtype, c.forced) << c.level;
      for (DType w : r.weight_dtypes) EXPECT_EQ(w, c.forced) << c.level << " gamma/beta";
      EXPECT_EQ(r.output_dtype, c.forced) << c.level;
    }
    EXPECT_EQ(seen, 2) << c.level;
  }
}

}  // namespace
}  // namespace mixprec
