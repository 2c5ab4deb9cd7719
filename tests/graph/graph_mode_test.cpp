// GRAPH_MODE against eager (pynative): every zoo model at O0, O2-bf16 and O2-f16 with dynamic
// loss scaling trains N steps both ways and must end with bitwise-identical weights, buffers
// (BatchNorm statistics), optimizer state, per-step losses, loss scales and skip decisions; the
// initial scale is chosen so that the first steps overflow and are skipped, and the window is
// short so that the scale also grows. The graph runs must really replay (not fall back).
// Plus: a new input shape captures again, a host read falls back with a reason, and a plan
// replays on new input values without allocating.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "mixprec/amp/amp.h"
#include "mixprec/graph/plan.h"
#include "mixprec/mixprec.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/ops/profile.h"
#include "op_test_util.h"

namespace mixprec {
namespace {

struct Config {
  const char* level;
  DType low;
  double init_scale;  // large enough that the first steps overflow
};

struct Trace {
  std::vector<std::vector<uint32_t>> tensors;  // weights, buffers, optimizer state, as f32 bits
  std::vector<uint64_t> losses, scales;        // as f64 bits
  std::vector<bool> skipped;
  amp::GraphModeInfo info;
};

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// The inputs of step i: images (or byte tokens for gpt-tiny) and class labels, seeded by i.
std::pair<Tensor, Tensor> batch_for(const std::string& model, int64_t batch, int64_t i) {
  Generator g(100 + static_cast<uint64_t>(i));
  if (nn::is_language_model(model)) {
    const int64_t len = 16;
    std::vector<int32_t> tok(static_cast<size_t>(batch * len)), lab(tok.size());
    for (size_t k = 0; k < tok.size(); ++k) {
      tok[k] = static_cast<int32_t>(g.next_u64() % 256);
      lab[k] = static_cast<int32_t>(g.next_u64() % 256);
    }
    return {Tensor::from_vector(tok, {batch, len}), Tensor::from_vector(lab, {batch, len})};
  }
  std::vector<int32_t> lab(static_cast<size_t>(batch));
  for (size_t k = 0; k < lab.size(); ++k) lab[k] = static_cast<int32_t>(g.next_u64() % 10);
  return {randn({batch, 1, 28, 28}, g), Tensor::from_vector(lab, {batch})};
}

Trace train(const std::string& model, const Config& c, Mode mode, int steps,
            std::vector<int64_t> batches) {
  set_context({.mode = mode});
  manual_seed(0);
  auto net = nn::make_model(model);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
  // The scale (f32) halves on an overflow and grows back every two clean steps.
  auto manager = std::make_shared<amp::DynamicLossScaleManager>(c.init_scale, 2.0, 2);
  auto step = amp::build_train_network(*net, opt, loss_fn, c.level,
                                       {.cast_model_type = c.low, .loss_scale_manager = manager});
  Trace t;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch_for(model, batches[static_cast<size_t>(i) % batches.size()], i);
    // The f32 scale cannot grow past f32's range, and O0/O2-bf16 gradients stay below it: an
    // infinite image at step 2 makes those steps overflow and skip (a token input cannot).
    if (i == 2 && c.low != DType::f16 && !nn::is_language_model(model))
      x = ops::mul(x, 0x1p127f * 4.0f);
    (void)(*step)(x, y);
    const amp::StepInfo& s = step->last_step();
    t.losses.push_back(std::bit_cast<uint64_t>(s.loss));
    t.scales.push_back(std::bit_cast<uint64_t>(s.loss_scale));
    t.skipped.push_back(s.skipped);
  }
  for (const Tensor& p : net->trainable_params()) t.tensors.push_back(bits(p));
  for (auto& [name, b] : net->buffers_and_names())
    if (is_floating(b.dtype())) t.tensors.push_back(bits(b));
  for (const optim::NamedState& st : opt.state()) t.tensors.push_back(bits(st.tensor));
  t.tensors.push_back({static_cast<uint32_t>(opt.global_step())});
  t.info = step->graph_mode_info();
  set_context({});
  return t;
}

int64_t small_batch(const std::string& model) { return nn::is_language_model(model) ? 2 : 4; }

// Returns the graph run's trace (its plan's statistics included).
Trace expect_graph_equals_eager(const std::string& model, const Config& c, int steps,
                                std::vector<int64_t> batches) {
  SCOPED_TRACE(model + " " + c.level + " " + std::string(dtype_name(c.low)));
  const Trace eager = train(model, c, Mode::pynative, steps, batches);
  const Trace graph = train(model, c, Mode::graph, steps, batches);
  int skips = 0;
  for (bool s : eager.skipped) skips += s;
  if (c.low == DType::f16 || !nn::is_language_model(model))
    EXPECT_GE(skips, 1) << "the configuration must overflow at least once";
  EXPECT_LT(skips, steps) << "and apply at least one update";
  EXPECT_EQ(graph.info.fallback, "");
  EXPECT_GE(graph.info.replays, steps - 2 * static_cast<int>(batches.size()))
      << "the graph run must replay";
  EXPECT_EQ(graph.skipped, eager.skipped);
  EXPECT_EQ(graph.scales, eager.scales);
  EXPECT_EQ(graph.losses, eager.losses);
  EXPECT_EQ(graph.tensors.size(), eager.tensors.size());
  for (size_t i = 0; i < std::min(eager.tensors.size(), graph.tensors.size()); ++i)
    EXPECT_EQ(graph.tensors[i], eager.tensors[i]) << "tensor " << i;
  return graph;
}

// f16 gradients overflow from 2^20; O0 and O2-bf16 ones overflow through the infinite input.
const Config kConfigs[] = {{"O0", DType::f32, amp::kMaxLossScale},
                           {"O2", DType::bf16, amp::kMaxLossScale},
                           {"O2", DType::f16, 0x1p20}};

class GraphModeZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphModeZoo, SixStepsBitwiseEqualToEagerAtO0O2Bf16O2F16WithSkippedSteps) {
  for (const Config& c : kConfigs)
    expect_graph_equals_eager(GetParam(), c, 6, {small_batch(GetParam())});
}

TEST_P(GraphModeZoo, SlowTwentyStepsBitwiseEqualToEager) {
  for (const Config& c : kConfigs)
    expect_graph_equals_eager(GetParam(), c, 20, {2 * small_batch(GetParam())});
  expect_graph_equals_eager(GetParam(), {"O1", DType::bf16, amp::kMaxLossScale}, 20,
                            {2 * small_batch(GetParam())});
}

INSTANTIATE_TEST_SUITE_P(Zoo, GraphModeZoo, ::testing::ValuesIn(nn::model_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(GraphMode, ANewInputShapeCapturesAgainAndStaysBitwiseEqual) {
  const Config c{"O2", DType::bf16, amp::kMaxLossScale};
  expect_graph_equals_eager("lenet", c, 10, {4, 6});
  const Trace graph = train("lenet", c, Mode::graph, 10, {4, 6});
  EXPECT_EQ(graph.info.captures, 2);  // one per batch size
  EXPECT_EQ(graph.info.eager_steps, 2);
  EXPECT_EQ(graph.info.replays, 6);
}

// Fusion (src/graph/fuse.cpp): at O2-f16 (the tile-wise BatchNorm kernel takes f16 on every CPU)
// each BatchNorm + ReLU pair is one kernel forward and one backward, each add + ReLU one pass,
// and the run stays bitwise equal to eager, skipped steps included; MIXPREC_GRAPH_FUSE=0 keeps
// them apart.
TEST(GraphMode, BatchNormReluPairsFuseForwardAndBackwardAndStayBitwiseEqual) {
  const Config f16{"O2", DType::f16, 0x1p20};
  const Trace convnet = expect_graph_equals_eager("convnet-bn", f16, 6, {4});
  EXPECT_EQ(convnet.info.plan.fused, 4) << "two BatchNorm + ReLU pairs, forward and backward";
  // Every buffer the step makes is in the arena (the gradients and loss included): the max-pool
  // workspace a call owns through a pointer, and the tensors kernels hold but read only through
  // views of their own (the chunked 16-bit convolutions), too. Apart: the 4-byte scale seed.
  EXPECT_LE(convnet.info.plan.held_bytes, 8);
  // resnet-small: BatchNorm + ReLU in the stem and the first half of each of the six blocks
  // (7 forward, 7 backward); each block ends with relu(add(bn2, shortcut)): 6 add_relu.
  const Trace resnet = expect_graph_equals_eager("resnet-small", f16, 4, {2});
  EXPECT_EQ(resnet.info.plan.fused, 20);
  EXPECT_LE(resnet.info.plan.held_bytes, 8);
  ::setenv("MIXPREC_GRAPH_FUSE", "0", 1);
  const Trace unfused = train("convnet-bn", f16, Mode::graph, 6, {4});
  ::unsetenv("MIXPREC_GRAPH_FUSE");
  EXPECT_EQ(unfused.info.plan.fused, 0);
  EXPECT_EQ(unfused.info.plan.kernels, convnet.info.plan.kernels + 4);
  EXPECT_EQ(unfused.tensors, convnet.tensors);
  EXPECT_EQ(unfused.losses, convnet.losses);
}

// Promoting a cell to fp32 mid-run (what OverflowGuard's promote does) must not replay a plan
// captured before: the new configuration captures again, and the run stays equal to eager.
TEST(GraphMode, ToFloatMidRunCapturesAgainAndStaysBitwiseEqual) {
  auto run = [](Mode mode) {
    set_context({.mode = mode});
    manual_seed(0);
    auto net = nn::make_model("lenet");
    nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
    optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
    auto step =
        amp::build_train_network(*net, opt, loss_fn, "O2", {.cast_model_type = DType::bf16});
    for (int i = 0; i < 8; ++i) {
      if (i == 4) net->to_float(DType::f32);
      auto [x, y] = batch_for("lenet", 4, i);
      (void)(*step)(x, y);
    }
    std::vector<std::vector<uint32_t>> w;
    for (const Tensor& p : net->trainable_params()) w.push_back(bits(p));
    const amp::GraphModeInfo info = step->graph_mode_info();
    set_context({});
    return std::pair{w, info};
  };
  const auto eager = run(Mode::pynative).first;
  const auto [graph, info] = run(Mode::graph);
  EXPECT_EQ(info.captures, 2);
  EXPECT_EQ(info.replays, 4);
  EXPECT_EQ(graph, eager);
}

// A cell whose construct reads a tensor value on the host: not capturable.
struct HostReader : nn::Cell {
  nn::Dense fc{784, 10};
  HostReader() { register_cell("fc", fc); }
  Tensor construct(const Tensor& x) override {
    Tensor y = fc(ops::flatten(x));
    return y.at({0, 0}) > 1e9 ? ops::mul(y, 2.0) : y;
  }
};

TEST(GraphMode, AHostReadOfATensorValueFallsBackToEagerWithAReason) {
  set_context({.mode = Mode::graph});
  manual_seed(0);
  HostReader net;
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  optim::SGD opt(net.trainable_params(), 0.1);
  auto step = amp::build_train_network(net, opt, loss_fn, "O0");
  for (int i = 0; i < 4; ++i) {
    auto [x, y] = batch_for("simplenet", 4, i);
    (void)(*step)(x, y);
  }
  set_context({});
  EXPECT_EQ(step->graph_mode_info().replays, 0);
  EXPECT_EQ(step->graph_mode_info().eager_steps, 3);
  EXPECT_EQ(step->graph_mode_info().captures, 1);
  EXPECT_NE(step->graph_mode_info().fallback.find("host read of a tensor value"), std::string::npos)
      << step->graph_mode_info().fallback;
}

TEST(GraphPlan, ReplaysOnNewInputValuesWithoutAllocatingAndPlansAnArena) {
  NoGradGuard ng;
  Tensor a = testing::random({64, 32}, 1, DType::f32);
  const Tensor w = testing::random({32, 48}, 2, DType::f32);
  Tensor out;
  std::string why;
  auto plan = graph::Plan::capture(
      [&] {
        Tensor h = ops::relu(ops::matmul(a, w));
        Tensor h2 = ops::mul(ops::add(h, h), 0.5);
        out = ops::sum(h2.astype(DType::bf16).astype(DType::f32));
      },
      &why);
  ASSERT_TRUE(plan) << why;
  plan->plan_memory();
  EXPECT_GT(plan->stats().planned_buffers, 1);
  EXPECT_LE(plan->stats().arena_bytes, plan->stats().unplanned_bytes);
  a.copy_(testing::random({64, 32}, 3, DType::f32));
  const int64_t allocs = memory_stats().allocations;
  plan->replay();
  EXPECT_EQ(memory_stats().allocations, allocs);
  const Tensor h = ops::relu(ops::matmul(a, w));
  const Tensor expect =
      ops::sum(ops::mul(ops::add(h, h), 0.5).astype(DType::bf16).astype(DType::f32));
  EXPECT_EQ(out.item(), expect.item());
}

TEST(GraphPlan, AReplayIsInTheKernelProfileUnderTheOpsItWasCapturedAs) {
  // The profile of a GRAPH_MODE step: each replayed call under its op, phase and kernel, once a
  // replay; the capture itself (the eager step it records) is not profiled.
  NoGradGuard ng;
  const Tensor a = testing::random({64, 32}, 1, DType::f32);
  const Tensor w = testing::random({32, 48}, 2, DType::f32);
  Tensor out;
  std::string why;
  ops::profile_reset();
  ops::set_profiling(true);
  auto plan = graph::Plan::capture([&] { out = ops::relu(ops::matmul(a, w)); }, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_TRUE(ops::profile_rows().empty());
  plan->replay();
  plan->replay();
  ops::set_profiling(false);
  plan->replay();  // not counted
  const std::vector<ops::ProfileRow> rows = ops::profile_rows();
  ops::profile_reset();
  auto calls = [&](const std::string& op, const std::string& phase) {
    int64_t n = 0;
    for (const ops::ProfileRow& r : rows)
      if (r.op == op && r.phase == phase) n += r.calls;
    return n;
  };
  EXPECT_EQ(calls("matmul", "forward"), 2);
  EXPECT_EQ(calls("relu", "forward"), 2);
  for (const ops::ProfileRow& r : rows) EXPECT_FALSE(r.impl.empty()) << r.op;
}

// Outputs handed to plan_memory share the arena with the intermediates that die before them
// (their span starts at their first kernel), keep the values the capture computed, and hold the
// new values after each replay.
TEST(GraphPlan, OutputsGoIntoTheArenaKeepTheirValuesAndAreRewrittenByEachReplay) {
  NoGradGuard ng;
  Tensor a = testing::random({128, 64}, 4, DType::f32);
  const Tensor w = testing::random({64, 64}, 5, DType::f32);
  auto run = [&](Tensor& big, Tensor& small) {
    Tensor h = ops::relu(ops::matmul(a, w));    // 32 KiB, dead once h2 exists
    Tensor h2 = ops::mul(ops::add(h, h), 0.5);  // dead once `big` exists
    big = ops::mul(h2, 3.0);                    // an output made late: may reuse h's bytes
    small = ops::sum(big);
  };
  Tensor big, small;
  std::string why;
  auto plan = graph::Plan::capture([&] { run(big, small); }, &why);
  ASSERT_TRUE(plan) << why;
  const std::vector<float> captured = big.to_vector<float>();
  const double captured_sum = small.item();
  plan->plan_memory({big, small});
  EXPECT_EQ(big.to_vector<float>(), captured) << "values copied into the arena";
  EXPECT_EQ(small.item(), captured_sum);
  EXPECT_EQ(plan->stats().held_bytes, 0) << "the outputs are planned, not held apart";
  EXPECT_LT(plan->stats().arena_bytes, plan->stats().unplanned_bytes)
      << "the late output reuses dead bytes";
  a.copy_(testing::random({128, 64}, 6, DType::f32));
  plan->replay();
  Tensor want_big, want_small;
  run(want_big, want_small);
  EXPECT_EQ(big.to_vector<float>(), want_big.to_vector<float>());
  EXPECT_EQ(small.item(), want_small.item());
}

// A cast of a 16-bit x to f32 that is cast straight back is removed: the second cast's result
// aliases x (its bits), and the replay stays equal to eager on new inputs. When x is written in
// between, the cast back stays (aliasing would give the new x).
TEST(GraphPlan, ACastCastStraightBackIsRemovedUnlessItsSourceIsWrittenMeanwhile) {
  NoGradGuard ng;
  Tensor a = testing::random({64, 48}, 7, DType::f32), b = testing::random({64, 48}, 8, DType::f32);
  for (const bool overwrite : {false, true}) {
    SCOPED_TRACE(overwrite ? "x written between the casts" : "x untouched");
    auto run = [&](Tensor& out) {
      Tensor x = ops::relu(a).astype(DType::bf16);
      Tensor y = x.astype(DType::f32);
      if (overwrite) x.copy_(b);
      Tensor z = y.astype(DType::bf16);  // x's bits, as long as nothing wrote x
      out = ops::add(ops::sum(ops::mul(z, x).astype(DType::f32)), ops::sum(y));
    };
    Tensor out;
    std::string why;
    auto plan = graph::Plan::capture([&] { run(out); }, &why);
    ASSERT_TRUE(plan) << why;
    plan->plan_memory({out});
    EXPECT_EQ(plan->stats().casts_elided, overwrite ? 0 : 1);
    for (uint64_t seed : {9, 10}) {
      a.copy_(testing::random({64, 48}, seed, DType::f32));
      b.copy_(testing::random({64, 48}, seed + 10, DType::f32));
      plan->replay();
      Tensor want;
      run(want);
      EXPECT_EQ(std::bit_cast<uint64_t>(out.item()), std::bit_cast<uint64_t>(want.item()));
    }
  }
}

// At O1 the zoo's plans hold such pairs (a white-list op's 16-bit output read in f32, and its
// gradient path casting the f32 result back): they are removed, and the runs stay bitwise equal
// to eager; with MIXPREC_GRAPH_FUSE=0 they stay, with the same bits.
TEST(GraphMode, O1CastsCastStraightBackAreRemovedAndTheRunStaysBitwiseEqual) {
  const Config o1{"O1", DType::bf16, amp::kMaxLossScale};
  for (const char* model : {"lenet", "resnet-small"}) {
    const Trace graph = expect_graph_equals_eager(model, o1, 6, {small_batch(model)});
    EXPECT_GT(graph.info.plan.casts_elided, 0) << model;
    ::setenv("MIXPREC_GRAPH_FUSE", "0", 1);
    const Trace kept = train(model, o1, Mode::graph, 6, {small_batch(model)});
    ::unsetenv("MIXPREC_GRAPH_FUSE");
    EXPECT_EQ(kept.info.plan.casts_elided, 0);
    EXPECT_EQ(kept.info.plan.kernels,
              graph.info.plan.kernels + graph.info.plan.casts_elided + graph.info.plan.fused);
    EXPECT_EQ(kept.tensors, graph.tensors) << model;
    EXPECT_EQ(kept.losses, graph.losses) << model;
  }
}

TEST(GraphMode, ModeNamesParseAndAnUnknownOneIsRefused) {
  EXPECT_EQ(parse_mode("graph"), Mode::graph);
  EXPECT_EQ(parse_mode("pynative"), Mode::pynative);
  EXPECT_STREQ(mode_name(Mode::graph), "graph");
  EXPECT_THROW((void)parse_mode("GRAPH"), Error);
}

}  // namespace
}  // namespace mixprec
