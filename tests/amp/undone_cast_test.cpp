// Never silent about an undone cast (issue 31, item 2): a value cast explicitly in a cell and
// passed to a sub-cell that the level casts at its boundary (the seed's softmax fix written in the
// caller, at O2 f16) prints one warning per (cell, dtype) naming the cell, the level and the fix;
// nothing when the fix is applied, at O1, for data cast before the network, or when silenced; the
// overflow provenance of a NaN inside that cell mentions it.
#include <gtest/gtest.h>

#include <cmath>

#include "mixprec/mixprec.h"

namespace mixprec {
namespace {

// The seed's custom softmax (exp / sum / div, no max subtraction), optionally casting inside.
struct MySoftmax : nn::Cell {
  bool cast_inside = false;
  Tensor construct(const Tensor& x0) override {
    const Tensor x = cast_inside ? x0.astype(DType::f32) : x0;
    const Tensor e = ops::exp(x);
    return ops::div(e, ops::sum(e, {-1}, /*keepdims=*/true));
  }
  std::string type_name() const override { return "MySoftmax"; }
};

// The seed's fix written in the caller: self.softmax(x.astype(ms.float32)).
struct Net : nn::Cell {
  nn::Dense fc{4, 6};
  MySoftmax softmax;
  bool cast_in_caller = true;
  Net() {
    register_cell("fc", fc);
    register_cell("softmax", softmax);
    NoGradGuard ng;
    fc.weight.fill_(4.0);  // logits 16: exp overflows f16
    fc.bias.fill_(0.0);
  }
  Tensor construct(const Tensor& x) override {
    const Tensor h = fc(x);
    return softmax(cast_in_caller ? h.astype(DType::f32) : h);
  }
};

bool any_nan(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (std::isnan(v)) return true;
  return false;
}

// Runs net twice on ones and returns what it printed on stderr.
std::string run_twice(Net& net, bool* nan = nullptr) {
  NoGradGuard ng;
  const Tensor x = Tensor::from_vector<float>(std::vector<float>(8, 1.0f), {2, 4});
  testing::internal::CaptureStderr();
  net(x);
  const Tensor y = net(x);
  if (nan) *nan = any_nan(y);
  return testing::internal::GetCapturedStderr();
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

struct UndoneCast : ::testing::Test {
  void SetUp() override {
    nn::clear_undone_casts();
    nn::set_undone_cast_warnings(true);
  }
  void TearDown() override { nn::clear_undone_casts(); }
};

TEST_F(UndoneCast, TheSeedsSoftmaxFixInTheCallerWarnsOnceNamingCellLevelAndFix) {
  Net net;
  amp::auto_mixed_precision(net, "O2", DType::f16);
  bool nan = false;
  const std::string err = run_twice(net, &nan);
  EXPECT_TRUE(nan) << "the cast is undone, as in MindSpore's GRAPH_MODE";
  EXPECT_EQ(count(err, "mixprec: warning:"), 1) << err;
  EXPECT_NE(err.find("'softmax' (MySoftmax)"), std::string::npos) << err;
  EXPECT_NE(err.find("O2 casts it back to float16"), std::string::npos) << err;
  EXPECT_NE(err.find("net.softmax.to_float(ms.float32)"), std::string::npos) << err;
  EXPECT_NE(err.find("cast inside MySoftmax's construct"), std::string::npos) << err;
  EXPECT_NE(err.find("MIXPREC_WARN_UNDONE_CAST=0"), std::string::npos) << err;
  const auto all = nn::undone_casts();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].path, "softmax");
  EXPECT_EQ(all[0].cell_class, "MySoftmax");
  EXPECT_EQ(all[0].level, "O2");
  EXPECT_EQ(all[0].user_dtype, DType::f32);
  EXPECT_EQ(all[0].cell_dtype, DType::f16);
}

TEST_F(UndoneCast, NoWarningWhenTheFixIsApplied) {
  {
    Net net;  // to_float(f32) on the sub-cell
    amp::auto_mixed_precision(net, "O2", DType::f16);
    net.softmax.to_float(DType::f32);
    bool nan = true;
    EXPECT_EQ(run_twice(net, &nan), "");
    EXPECT_FALSE(nan);
  }
  {
    Net net;  // the cast inside the cell's construct
    net.cast_in_caller = false;
    net.softmax.cast_inside = true;
    amp::auto_mixed_precision(net, "O3", DType::f16);
    bool nan = true;
    EXPECT_EQ(run_twice(net, &nan), "");
    EXPECT_FALSE(nan);
  }
  EXPECT_TRUE(nn::undone_casts().empty());
}

TEST_F(UndoneCast, NoWarningWhereTheCastHolds) {
  {
    Net net;  // O1: per-op casts, the caller's cast reaches into the sub-cell
    amp::auto_mixed_precision(net, "O1", DType::f16);
    EXPECT_EQ(run_twice(net), "");
  }
  {
    Net net;  // no cast at all: nothing was undone (the NaN is the level's, documented)
    net.cast_in_caller = false;
    amp::auto_mixed_precision(net, "O2", DType::f16);
    EXPECT_EQ(run_twice(net), "");
  }
  {
    nn::Dense fc(4, 3);  // data cast before the network is data preparation, not a cell's cast
    amp::auto_mixed_precision(fc, "O2", DType::bf16);
    testing::internal::CaptureStderr();
    NoGradGuard ng;
    fc(Tensor::from_vector<double>(std::vector<double>(8, 0.5), {2, 4}).astype(DType::f32));
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  EXPECT_TRUE(nn::undone_casts().empty());
}

TEST_F(UndoneCast, OnePerCellAndDtypeAndSilenced) {
  Net net;
  amp::auto_mixed_precision(net, "O2", DType::bf16);
  EXPECT_EQ(count(run_twice(net), "mixprec: warning:"), 1);
  Net other;  // a second network: the same path and class, already reported
  amp::auto_mixed_precision(other, "O2", DType::bf16);
  EXPECT_EQ(run_twice(other), "");
  Net f16;  // another dtype is a new warning
  amp::auto_mixed_precision(f16, "O2", DType::f16);
  EXPECT_EQ(count(run_twice(f16), "mixprec: warning:"), 1);
  nn::clear_undone_casts();
  nn::set_undone_cast_warnings(false);
  EXPECT_EQ(run_twice(net), "");
  EXPECT_EQ(nn::undone_casts().size(), 1u) << "recorded, not printed";
}

TEST_F(UndoneCast, TheOverflowProvenanceMentionsIt) {
  Net net;
  amp::auto_mixed_precision(net, "O2", DType::f16);
  nn::set_undone_cast_warnings(false);
  NumericsCheckScope check;
  run_twice(net);
  ASSERT_TRUE(check.first().has_value());
  EXPECT_EQ(check.first()->cell, "softmax");
  const std::string why = train::describe(*check.first());
  EXPECT_NE(
      why.find(
          "the explicit cast to float32 of the input of 'softmax' (MySoftmax) was undone at its "
          "boundary by O2"),
      std::string::npos)
      << why;
  EXPECT_NE(why.find("net.softmax.to_float(ms.float32)"), std::string::npos) << why;
  EXPECT_EQ(nn::undone_cast_note("fc"), "");
}

}  // namespace
}  // namespace mixprec
