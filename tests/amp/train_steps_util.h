// A few train steps of a zoo model (the transformers too) on fixed random batches, on a given
// device, and what they
// left: each step's StepInfo, the weights, the buffers (BatchNorm statistics), the counters and
// the loss-scale state. The device-step tests compare two such runs (tests/amp on the CPU,
// tests/cuda on a GPU against the CPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mixprec/amp/amp.h"
#include "mixprec/nn/loss.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/optim/optimizer.h"
#include "mixprec/rng.h"
#include "op_test_util.h"

namespace mixprec::testing {

struct StepsSpec {
  std::string model = "simplenet";
  std::string level = "O0";
  DType low = DType::f16;
  std::function<Handle<amp::LossScaleManager>()> manager = [] { return Handle<amp::LossScaleManager>(); };
  int steps = 4;
  int64_t batch = 16;
  std::string optimizer = "momentum";  // or "sgd", "adamw"
  // The learning rate: the optimizer's base rate (0.05 SGD, 1e-3 AdamW, 0.02 Momentum) as given
  // to this function, which may wrap it in a schedule.
  std::function<optim::LearningRate(double)> lr = [](double base) { return optim::LearningRate(base); };
  // true: each step's outcome is read at once (last_step(), which waits for a device step);
  // false: as the steps complete (poll_steps()), so that device steps stay in flight.
  bool wait_each_step = true;
  int accumulation = 1;  // micro-batches per update (TrainStepOptions::accumulation_steps)
  double max_grad_norm = 0.0;  // > 0: clipping (TrainStepOptions::max_grad_norm)
  int64_t grad_stats_every = 0;  // > 0: gradient statistics (TrainStepOptions::grad_stats_every)
  bool check_numerics = false;    // TrainStepOptions::check_numerics
};

struct StepsRun {
  std::vector<amp::StepInfo> steps;
  std::vector<std::vector<float>> weights, buffers;
  int64_t skipped = 0, optimizer_step = 0;
  amp::LossScaleState scale{};
  int64_t max_in_flight = 0;  // most steps queued and not yet complete after a step returned
};

// Step k's batch: images in [-1.5, 1.5] with labels (i * 7 + k * 3) % 10, or for a language
// model (gpt-tiny) windows of 32 byte tokens from an LCG's stream with their next bytes as labels.
inline std::pair<Tensor, Tensor> steps_batch(const StepsSpec& s, int k) {
  if (nn::is_language_model(s.model)) {
    const int64_t L = 32;
    std::vector<uint8_t> tokens;
    std::vector<int64_t> next;
    uint32_t r = 7u + static_cast<uint32_t>(k);
    for (int64_t b = 0; b < s.batch; ++b) {
      std::vector<uint8_t> w(L + 1);
      for (uint8_t& t : w) t = static_cast<uint8_t>((r = r * 1664525u + 1013904223u) >> 24);
      tokens.insert(tokens.end(), w.begin(), w.end() - 1);
      next.insert(next.end(), w.begin() + 1, w.end());
    }
    return {Tensor::from_vector(tokens, {s.batch, L}), Tensor::from_vector(next, {s.batch, L})};
  }
  const Tensor x = random({s.batch, 1, 28, 28}, 100 + static_cast<uint64_t>(k), DType::f32, -1.5, 1.5);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < s.batch; ++i) labels.push_back((i * 7 + k * 3) % 10);
  return {x, Tensor::from_vector(labels, {s.batch})};
}

inline StepsRun run_steps(const StepsSpec& s, Device device) {
  manual_seed(7);
  std::shared_ptr<nn::Cell> net = nn::make_model(s.model);
  nn::SoftmaxCrossEntropyWithLogits loss_fn({.sparse = true, .reduction = nn::Reduction::mean});
  std::unique_ptr<optim::Optimizer> opt;
  if (s.optimizer == "sgd") opt = std::make_unique<optim::SGD>(net->trainable_params(), s.lr(0.05), 1e-4);
  else if (s.optimizer == "adamw")
    opt = std::make_unique<optim::AdamW>(net->trainable_params(), s.lr(1e-3), 0.9, 0.999, 1e-8, 0.01);
  else opt = std::make_unique<optim::Momentum>(net->trainable_params(), s.lr(0.02), 0.9, 1e-4);
  amp::BuildOptions bo{.cast_model_type = s.low, .loss_scale_manager = s.manager(),
                       .step = {.max_grad_norm = s.max_grad_norm,
                                .accumulation_steps = s.accumulation,
                                .check_numerics = s.check_numerics,
                                .grad_stats_every = s.grad_stats_every}};
  auto step = amp::build_train_network(*net, *opt, loss_fn, s.level, bo);
  step->to(device);
  StepsRun r;
  for (int k = 0; k < s.steps; ++k) {
    const auto [x, y] = steps_batch(s, k);
    (void)(*step)(x.to(device), y.to(device));
    if (s.wait_each_step) {
      r.steps.push_back(step->last_step());
      continue;
    }
    const int64_t done = step->poll_steps();
    r.max_in_flight = std::max(r.max_in_flight, step->attempted_steps() - done);
    while (static_cast<int64_t>(r.steps.size()) < done)
      r.steps.push_back(step->completed_step(static_cast<int64_t>(r.steps.size()) + 1));
  }
  step->sync();
  while (static_cast<int64_t>(r.steps.size()) < step->attempted_steps())
    r.steps.push_back(step->completed_step(static_cast<int64_t>(r.steps.size()) + 1));
  for (const Tensor& p : net->trainable_params()) r.weights.push_back(p.to_vector<float>());
  for (const auto& [n, b] : net->buffers_and_names()) r.buffers.push_back(b.to_vector<float>());
  r.skipped = step->skipped_steps();
  r.optimizer_step = opt->global_step();
  if (step->loss_scale_manager()) r.scale = step->loss_scale_manager()->state();
  return r;
}

// Same decisions: skipped steps, scales, learning rates, counters.
inline void expect_same_decisions(const StepsRun& a, const StepsRun& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) {
    EXPECT_EQ(a.steps[k].step, b.steps[k].step) << "step " << k;
    EXPECT_EQ(a.steps[k].overflow, b.steps[k].overflow) << "step " << k;
    EXPECT_EQ(a.steps[k].skipped, b.steps[k].skipped) << "step " << k;
    EXPECT_EQ(a.steps[k].loss_finite, b.steps[k].loss_finite) << "step " << k;
    EXPECT_EQ(a.steps[k].loss_scale, b.steps[k].loss_scale) << "step " << k;
    EXPECT_EQ(a.steps[k].lr, b.steps[k].lr) << "step " << k;
  }
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.optimizer_step, b.optimizer_step);
  EXPECT_EQ(a.scale.scale, b.scale.scale);
  EXPECT_EQ(a.scale.good_steps, b.scale.good_steps);
  EXPECT_EQ(a.scale.total_overflows, b.scale.total_overflows);
}

// Every value of `a` within rel * max|b| + abs of `b` (rel = abs = 0: bit for bit).
inline void expect_close(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b, double rel, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " " << i;
    double mx = 0;
    for (float v : b[i]) mx = std::max(mx, std::fabs(static_cast<double>(v)));
    size_t bad = 0, first = 0;
    for (size_t j = 0; j < a[i].size(); ++j)
      if (!(std::fabs(static_cast<double>(a[i][j]) - b[i][j]) <= rel * mx) && !(a[i][j] == b[i][j]))
        if (bad++ == 0) first = j;
    EXPECT_EQ(bad, 0u) << what << " " << i << ": first at " << first << ": " << a[i][first]
                       << " vs " << b[i][first];
  }
}

}  // namespace mixprec::testing
