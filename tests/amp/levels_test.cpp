// AMP levels, checked on what actually ran: every op executed in simplenet, convnet-bn and
// resnet-small is recorded (ops/autocast.h OpRecorder) and its compute dtype compared with the
// DESIGN.md table for O0/O1/O2/O3/auto in bf16 and f16. Also: BatchNorm fp32 at O2 but not O3,
// fp32 master-weight gradients, cast-cache invalidation by an optimizer step, to_float winning
// over the level, lists and error messages; custom lists accept only names that change what runs.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <optional>

#include "mixprec/mixprec.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

// The compute dtype DESIGN.md prescribes, or nullopt where it is "the input dtype".
std::optional<DType> expected_compute(OpId op, AmpLevel level, DType low, bool keep_bn) {
  const OpInfo& info = op_info(op);
  const bool norm = info.kind == OpKind::norm;
  switch (level) {
    case AmpLevel::O0: return DType::f32;
    case AmpLevel::O1: return info.policy == AmpPolicy::to_low ? low : DType::f32;
    case AmpLevel::O2:
      if (norm) return keep_bn ? DType::f32 : low;
      return info.policy == AmpPolicy::to_fp32 ? DType::f32 : low;
    case AmpLevel::O3: return norm && keep_bn ? DType::f32 : low;
    case AmpLevel::auto_:
      if (info.policy == AmpPolicy::to_low) return low;
      if (info.policy == AmpPolicy::to_fp32) return DType::f32;
      return std::nullopt;
  }
  return std::nullopt;
}

std::vector<OpRecord> run_recorded(nn::Cell& net, const Tensor& x) {
  std::vector<OpRecord> rec;
  OpRecorder r(&rec);
  (void)net(x);
  return rec;
}

struct Case {
  const char* level;
  DType low;
};

TEST(AmpLevels, EveryExecutedOpRunsInTheDesignDtype) {
  const Tensor x = testing::random({2, 1, 28, 28}, 1, DType::f32);
  for (const char* model : {"simplenet", "convnet-bn", "resnet-small"}) {
    for (const char* level : {"O0", "O1", "O2", "O3", "auto"}) {
      for (DType low : {DType::bf16, DType::f16}) {
        manual_seed(0);
        auto net = nn::make_model(model);
        const AmpLevel lv = parse_amp_level(level);
        const bool keep_bn = lv == AmpLevel::O2;
        amp::auto_mixed_precision(*net, lv, low);
        const auto records = run_recorded(*net, x);
        ASSERT_FALSE(records.empty());
        int compute_ops = 0;
        for (const OpRecord& r : records) {
          if (op_info(r.op).kind == OpKind::layout) continue;
          ++compute_ops;
          const auto want = expected_compute(r.op, lv, low, keep_bn);
          const DType in = r.input_dtypes.empty() ? DType::f32 : r.input_dtypes[0];
          EXPECT_EQ(r.compute_dtype, want.value_or(in))
              << model << " " << level << "/" << dtype_name(low) << ": " << op_name(r.op) << " in cell '"
              << r.cell_path << "' ran in " << dtype_name(r.compute_dtype);
          if (lv == AmpLevel::O1 && op_info(r.op).policy == AmpPolicy::to_low) {
            EXPECT_EQ(r.output_dtype, DType::f32) << "O1 casts white-list outputs back to fp32";
          }
        }
        EXPECT_GT(compute_ops, 2);
      }
    }
  }
}

TEST(AmpLevels, EachLevelIsOneRuleTableForTheOpsMechanism) {
  // amp/level.h turns a level into the rules ops/autocast.h applies: one per policy (keep,
  // to_low, to_fp32, promote), the norms' rule, and whether every cell casts at its boundary.
  using R = CastRule;
  struct Want {
    AmpLevel level;
    std::array<R, kNumAmpPolicies> rules;
    std::optional<R> norm;
    bool every_cell, keep_bn;
  };
  for (const Want& w : {Want{AmpLevel::O0, {R::keep, R::keep, R::keep, R::keep}, {}, false, false},
                        Want{AmpLevel::O1, {R::keep, R::low_out_f32, R::keep, R::keep}, {}, false, false},
                        Want{AmpLevel::O2, {R::low, R::low, R::f32_out_low, R::low}, R::low, true, true},
                        Want{AmpLevel::O3, {R::low, R::low, R::low, R::low}, R::low, true, false},
                        Want{AmpLevel::auto_, {R::keep, R::low, R::f32, R::widest}, {}, false, false}}) {
    const AutocastState s = amp::level_state(w.level, DType::f16);
    EXPECT_EQ(s.rules, w.rules) << amp_level_name(w.level);
    EXPECT_EQ(s.norm_rule, w.norm) << amp_level_name(w.level);
    EXPECT_EQ(s.cast_every_cell, w.every_cell) << amp_level_name(w.level);
    EXPECT_EQ(s.keep_norm_fp32, w.keep_bn) << amp_level_name(w.level);
    EXPECT_EQ(s.low, DType::f16);
    EXPECT_FALSE(s.forced.has_value());
    AutocastScope scope(s);
    EXPECT_EQ(autocast_active(), w.level != AmpLevel::O0) << amp_level_name(w.level);
  }
  EXPECT_TRUE(amp::level_state(AmpLevel::O3, DType::bf16, true).keep_norm_fp32);
  EXPECT_FALSE(amp::level_state(AmpLevel::O2, DType::bf16, false).keep_norm_fp32);
}

TEST(AmpLevels, NetworkOutputIsFp32FromO1ToO3) {
  const Tensor x = testing::random({2, 1, 28, 28}, 2, DType::f32);
  for (const char* level : {"O0", "O1", "O2", "O3"}) {
    auto net = nn::make_model("lenet");
    amp::auto_mixed_precision(*net, level, DType::bf16);
    NoGradGuard ng;
    EXPECT_EQ((*net)(x).dtype(), DType::f32) << level;
  }
  auto net = nn::make_model("lenet");
  amp::auto_mixed_precision(*net, "auto", DType::bf16);
  NoGradGuard ng;
  EXPECT_EQ((*net)(x).dtype(), DType::bf16) << "auto leaves the output low; the loss wrapper casts it";
}

TEST(AmpLevels, BatchNormStaysFp32AtO2ButNotAtO3) {
  const Tensor x = testing::random({2, 1, 28, 28}, 3, DType::f32);
  for (const char* level : {"O2", "O3"}) {
    auto net = nn::make_model("convnet-bn");
    amp::auto_mixed_precision(*net, level, DType::bf16);
    int seen = 0;
    for (const OpRecord& r : run_recorded(*net, x)) {
      if (r.op != OpId::batch_norm) continue;
      ++seen;
      const DType want = std::string(level) == "O2" ? DType::f32 : DType::bf16;
      EXPECT_EQ(r.compute_dtype, want) << level;
      for (DType w : r.weight_dtypes) EXPECT_EQ(w, want) << level << " gamma/beta";
      EXPECT_EQ(r.output_dtype, DType::bf16) << level << ": activations stay low";
    }
    EXPECT_EQ(seen, 2);
  }
  // keep_batchnorm_fp32 = true at O3 brings it back.
  auto net = nn::make_model("convnet-bn");
  amp::auto_mixed_precision(*net, AmpLevel::O3, DType::bf16, true);
  for (const OpRecord& r : run_recorded(*net, x)) {
    if (r.op == OpId::batch_norm) {
      EXPECT_EQ(r.compute_dtype, DType::f32);
    }
  }
}

TEST(AmpLevels, MasterWeightGradientsAreFp32) {
  for (const char* level : {"O1", "O2", "O3", "auto"}) {
    manual_seed(0);
    auto net = nn::make_model("convnet-bn");
    amp::auto_mixed_precision(*net, level, DType::bf16);
    Tensor out = (*net)(testing::random({4, 1, 28, 28}, 4, DType::f32));
    ops::sum(out.astype(DType::f32)).backward();
    for (auto& [name, p] : net->parameters_and_names()) {
      ASSERT_TRUE(p.grad().defined()) << level << " " << name;
      EXPECT_EQ(p.grad().dtype(), DType::f32) << level << " " << name;
      EXPECT_EQ(p.dtype(), DType::f32) << level << " " << name;
    }
  }
}

TEST(AmpLevels, OptimizerStepInvalidatesTheCastCache) {
  manual_seed(0);
  nn::Dense d(4, 3);
  amp::auto_mixed_precision(d, "O1", DType::bf16);
  nn::AmpConfig* cfg = d.mutable_amp_config();
  ASSERT_NE(cfg, nullptr);
  const Tensor x = testing::random({2, 4}, 5, DType::f32);
  // Two uses of the weight inside one call hit the cache; a write after the call is seen.
  Tensor y1 = d(x);
  optim::SGD opt(d.trainable_params(), 1.0);
  ops::sum(y1).backward();
  opt.step();
  Tensor y2;
  {
    NoGradGuard ng;
    y2 = d(x);
  }
  Tensor expect;
  {
    NoGradGuard ng;
    expect = ops::linear(x.astype(DType::bf16), d.weight.astype(DType::bf16), d.bias.astype(DType::bf16)).astype(DType::f32);
  }
  EXPECT_TRUE(testing::all_close(y2, expect, {0, 0})) << "the forward after the step must use the new weights";
  EXPECT_FALSE(testing::all_close(y1.detach(), y2, {1e-3, 0}));
}

TEST(AmpLevels, CastCacheReusesOneCastPerStep) {
  manual_seed(0);
  struct Twice : nn::Cell {
    nn::Dense d{4, 4};
    Twice() { register_cell("d", d); }
    Tensor construct(const Tensor& x) override { return d(d(x)); }
  } net;
  amp::auto_mixed_precision(net, "O1", DType::bf16);
  const int64_t misses_before = net.mutable_amp_config()->cache->misses();
  (void)net(testing::random({2, 4}, 6, DType::f32));
  const CastCache& cache = *net.mutable_amp_config()->cache;
  EXPECT_EQ(cache.misses() - misses_before, 2) << "weight and bias cast once";
  EXPECT_EQ(cache.hits(), 2) << "and reused by the second call";
}

TEST(AmpLevels, ToFloatOnASubCellWinsOverTheLevel) {
  manual_seed(0);
  auto net = nn::make_model("lenet");
  auto& seq = dynamic_cast<nn::SequentialCell&>(*net);
  seq[0].to_float(DType::f32);  // the first conv stays fp32 at O2
  amp::auto_mixed_precision(*net, "O2", DType::bf16);
  bool saw_first = false;
  for (const OpRecord& r : run_recorded(*net, testing::random({2, 1, 28, 28}, 7, DType::f32))) {
    if (r.cell_path == "0" && r.op == OpId::conv2d) {
      saw_first = true;
      EXPECT_EQ(r.compute_dtype, DType::f32);
    } else if (r.cell_path == "2" && r.op == OpId::conv2d) {
      EXPECT_EQ(r.compute_dtype, DType::bf16);
    }
  }
  EXPECT_TRUE(saw_first);
}

TEST(AmpLevels, ListsAndErrors) {
  const auto white = amp::get_white_list();
  const auto black = amp::get_black_list();
  for (const char* n : {"conv2d", "linear", "matmul", "relu"}) {
    EXPECT_NE(std::find(white.begin(), white.end(), n), white.end()) << n;
  }
  for (const char* n : {"batch_norm", "layer_norm", "softmax", "log_softmax", "exp", "sum", "softmax_cross_entropy"}) {
    EXPECT_NE(std::find(black.begin(), black.end(), n), black.end()) << n;
  }
  try {
    parse_amp_level("O4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("O0, O1, O2, O3, auto"), std::string::npos);
  }
  nn::Dense d(2, 2);
  EXPECT_THROW(amp::custom_mixed_precision(d, {}), Error);
  EXPECT_THROW(amp::custom_mixed_precision(d, {.white_list = {"conv9d"}}), Error);
}

TEST(AmpLevels, CustomWhiteListCastsOnlyThoseOps) {
  manual_seed(0);
  auto net = nn::make_model("lenet");
  amp::custom_mixed_precision(*net, {.white_list = {"Dense"}}, DType::bf16);
  for (const OpRecord& r : run_recorded(*net, testing::random({2, 1, 28, 28}, 8, DType::f32))) {
    if (r.op == OpId::linear) {
      EXPECT_EQ(r.compute_dtype, DType::bf16);
    }
    if (r.op == OpId::conv2d) {
      EXPECT_EQ(r.compute_dtype, DType::f32);
    }
  }
}

// A cell running one of most compute ops, on an f32 input, for the custom-list tests.
struct OpMix : nn::Cell {
  nn::Conv2d conv{1, 3, 3, {.pad_mode = nn::PadMode::valid}};
  nn::BatchNorm2d bn{3};
  nn::Dense fc{12, 8};
  nn::LayerNorm ln{{8}};
  OpMix() {
    register_cell("conv", conv);
    register_cell("bn", bn);
    register_cell("fc", fc);
    register_cell("ln", ln);
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = ops::max_pool2d(ops::relu(bn(conv(x))));
    h = ln(fc(ops::flatten(h)));
    const Tensor e = ops::exp(ops::mul(ops::tanh(h), 0.5));
    const Tensor s = ops::softmax(ops::add(e, ops::sigmoid(h)));
    const Tensor t = ops::sum(ops::log_softmax(ops::gelu(h)), {1}, true);
    return ops::add(ops::mul(s, ops::mean(t)), ops::max(h, {1}, true));
  }
};

// Op -> the records of that op in one forward pass of `net` under `lists` (nullopt: no AMP).
std::map<OpId, std::vector<OpRecord>> records_by_op(const std::optional<amp::CustomLists>& lists) {
  manual_seed(0);
  OpMix net;
  if (lists) amp::custom_mixed_precision(net, *lists, DType::bf16);
  std::map<OpId, std::vector<OpRecord>> out;
  for (OpRecord& r : run_recorded(net, testing::random({2, 1, 6, 6}, 10, DType::f32)))
    if (op_info(r.op).kind != OpKind::layout) out[r.op].push_back(std::move(r));
  return out;
}

bool accepted(const amp::CustomLists& lists) {
  nn::Dense d(2, 2);
  try {
    amp::custom_mixed_precision(d, lists, DType::bf16);
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(AmpLevels, CustomListsRefuseNamesThatCannotTakeEffectWithTheReason) {
  nn::Dense d(2, 2);
  auto message = [&](const amp::CustomLists& lists) {
    try {
      amp::custom_mixed_precision(d, lists, DType::bf16);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  for (const char* name : {"softmax", "Softmax", "log_softmax", "LogSoftmax", "sum", "mean"}) {
    const std::string m = message({.white_list = {"Dense", name}});
    EXPECT_NE(m.find("white_list: '" + std::string(name) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("always computes in fp32"), std::string::npos) << m;
    EXPECT_TRUE(accepted({.black_list = {name}})) << name << " on a black list keeps an fp32 input unrounded";
  }
  for (const char* name : {"view", "cast", "concat", "dropout", "contiguous", "argmax"}) {
    for (bool white : {true, false}) {
      const std::string m = message(white ? amp::CustomLists{.white_list = {name}} : amp::CustomLists{.black_list = {name}});
      EXPECT_NE(m.find("never autocast"), std::string::npos) << name << ": " << m;
    }
  }
  // The default lists are accepted as custom lists.
  EXPECT_TRUE(accepted({.white_list = amp::get_white_list()}));
  EXPECT_TRUE(accepted({.black_list = amp::get_black_list()}));
}

TEST(AmpLevels, EveryNameACustomListAcceptsChangesWhatRuns) {
  const auto plain = records_by_op(std::nullopt);
  // Black-list baseline: an op the network does not run, so every op it runs is in bf16.
  const auto all_low = records_by_op(amp::CustomLists{.black_list = {"embedding"}});
  ASSERT_GE(plain.size(), 15u);
  int white_taken = 0, white_refused = 0;
  for (const auto& [op, base] : plain) {
    const std::string name(op_name(op));
    for (const OpRecord& r : base) ASSERT_EQ(r.compute_dtype, DType::f32) << name;
    // White list: the op's arithmetic moves to bf16.
    if (accepted({.white_list = {name}})) {
      ++white_taken;
      const auto listed = records_by_op(amp::CustomLists{.white_list = {name}});
      for (const OpRecord& r : listed.at(op)) EXPECT_EQ(r.compute_dtype, DType::bf16) << name << " on the white list";
    } else {
      ++white_refused;
      // The refusal's reason holds: fed bf16 it still computes in fp32.
      for (const OpRecord& r : all_low.at(op)) {
        EXPECT_EQ(r.input_dtypes.at(0), DType::bf16) << name;
        EXPECT_EQ(r.compute_dtype, DType::f32) << name << " was refused, so it must compute in fp32 anyway";
      }
    }
    // Black list: the op computes in fp32 with fp32 weights and (norms aside, whose activations
    // may stay low, DESIGN.md) fp32 inputs, where the baseline runs it or feeds it in bf16.
    ASSERT_TRUE(accepted({.black_list = {name}})) << name;
    const auto listed = records_by_op(amp::CustomLists{.black_list = {name}});
    ASSERT_EQ(listed.at(op).size(), all_low.at(op).size()) << name;
    for (size_t i = 0; i < listed.at(op).size(); ++i) {
      const OpRecord& r = listed.at(op)[i];
      const OpRecord& base_low = all_low.at(op)[i];
      EXPECT_EQ(r.compute_dtype, DType::f32) << name << " on the black list";
      for (DType d : r.weight_dtypes) EXPECT_EQ(d, DType::f32) << name << " weights on the black list";
      if (op_info(op).kind != OpKind::norm) {
        for (DType d : r.input_dtypes) EXPECT_EQ(d, DType::f32) << name << " inputs on the black list";
      }
      EXPECT_TRUE(r.compute_dtype != base_low.compute_dtype || r.input_dtypes != base_low.input_dtypes)
          << name << ": the black list changed nothing";
    }
  }
  EXPECT_EQ(white_refused, 4) << "softmax, log_softmax, sum, mean";
  EXPECT_GE(white_taken, 11);
}

TEST(AmpLevels, PrecisionTableShowsWhatRan) {
  manual_seed(0);
  auto net = nn::make_model("convnet-bn");
  amp::auto_mixed_precision(*net, "O2", DType::bf16);
  const auto rows = amp::precision_table(*net, testing::random({2, 1, 28, 28}, 9, DType::f32));
  bool conv = false, bn = false;
  for (const auto& r : rows) {
    if (r.type == "Conv2d") { conv = true; EXPECT_EQ(r.compute, "bf16"); EXPECT_EQ(r.weights, "bf16"); EXPECT_EQ(r.output, "bf16"); }
    if (r.type == "BatchNorm2d") { bn = true; EXPECT_EQ(r.compute, "f32"); EXPECT_EQ(r.weights, "f32"); EXPECT_EQ(r.output, "bf16"); }
  }
  EXPECT_TRUE(conv && bn);
  EXPECT_NE(amp::format_precision_table(rows).find("BatchNorm2d"), std::string::npos);
}

}  // namespace
}  // namespace mixprec
