// GRAPH_MODE for the train step: the forward+backward stage (step.h: AMP casts, loss, the
// loss-scale seed and every gradient kernel) comes from a graph::Plan keyed by the inputs' shapes
// and dtypes. A key's first step runs eagerly (it creates the lazily made state and measures the
// eager peak), its second is captured, later ones replay. The loss scale is an input of the plan
// (the backward's seed holds it), so a scale change needs no new capture. The stages after it
// (check, clip, update, adapt) are the pipeline's, exactly as in eager mode.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "amp/step/step.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/context.h"
#include "mixprec/nn/config_generation.h"
#include "mixprec/rng.h"
#include "ops/dispatch.h"

namespace mixprec::amp::detail {

// One key's state: seen once (no plan yet), captured (plan), or not capturable (failed).
struct CapturedStep {
  std::string key;
  uint64_t last_used = 0;
  std::string failed;
  std::unique_ptr<graph::Plan> plan;
  Tensor data, label, seed, loss;  // the plan's inputs (copied into) and its loss
  std::vector<Tensor> grads;       // its outputs
  AmpCounters counters;            // what the captured run added to the AMP telemetry
  int64_t eager_peak = 0;
};

struct StepGraphs {
  static constexpr size_t kMaxPlans = 4;
  std::vector<std::unique_ptr<CapturedStep>> entries;
  uint64_t clock = 0;
  GraphModeInfo info;
  bool said_why_not = false;

  CapturedStep* find(const std::string& key) {
    for (auto& e : entries)
      if (e->key == key) {
        e->last_used = ++clock;
        return e.get();
      }
    return nullptr;
  }
  CapturedStep& add(const std::string& key) {
    if (entries.size() >= kMaxPlans)
      entries.erase(std::min_element(entries.begin(), entries.end(),
                                     [](auto& a, auto& b) { return a->last_used < b->last_used; }));
    entries.push_back(std::make_unique<CapturedStep>());
    entries.back()->key = key;
    entries.back()->last_used = ++clock;
    return *entries.back();
  }
};

namespace {

// The inputs' shapes and dtypes, and the generation of the cells' configuration (a to_float, such
// as OverflowGuard's promotion, or a new AMP level makes older plans stale).
std::string step_key(const Tensor& data, const Tensor& label) {
  std::ostringstream k;
  k << 'g' << nn::config_generation() << ' ' << dtype_name(data.dtype()) << shape_str(data.shape())
    << ' ' << dtype_name(label.dtype()) << shape_str(label.shape());
  return k.str();
}

void say(const std::string& line) {
  if (ops::verbose_level() > 0) std::fprintf(stderr, "mixprec: graph mode: %s\n", line.c_str());
}

AmpCounters minus(const AmpCounters& a, const AmpCounters& b) {
  return {a.casts - b.casts, a.cast_bytes - b.cast_bytes, a.flops - b.flops,
          a.low_flops - b.low_flops};
}

}  // namespace

const GraphModeInfo& graph_mode_info(const StepCore& c) {
  static const GraphModeInfo none;
  return c.graphs ? c.graphs->info : none;
}

bool graph_mode_applies(StepCore& c, const nn::DistributedGradReducer* reducer) {
  if (get_context().mode != Mode::graph) return false;
  if (!c.graphs) c.graphs = std::make_shared<StepGraphs>();
  const char* why = reducer ? "data-parallel steps (the all-reduce runs during backward)"
                    : c.options.accumulation_steps > 1 ? "gradient accumulation"
                    : c.options.check_numerics ? "check_numerics (every op is checked as it runs)"
                                               : nullptr;
  if (!why) return true;
  c.graphs->info.fallback = std::string("not captured: ") + why;
  if (!c.graphs->said_why_not) say("step runs eagerly: " + c.graphs->info.fallback);
  c.graphs->said_why_not = true;
  ++c.graphs->info.eager_steps;
  return false;
}

namespace {
void capture_step(StepCore& c, CapturedStep& e, StepRun& r);
}

void graph_forward_backward(StepCore& c, StepRun& r) {
  StepGraphs& g = *c.graphs;
  const std::string key = step_key(r.data, r.label);
  CapturedStep* e = g.find(key);
  if (e && e->plan) {  // replay
    {
      NoGradGuard no_grad;
      e->data.copy_(r.data);
      e->label.copy_(r.label);
      e->seed.fill_(r.scale);
    }
    AmpCounters& c = amp_counters();
    const AmpCounters before = c;
    e->plan->replay();
    c = before;  // what the replayed kernels counted again is replaced by what the capture counted
    c.casts += e->counters.casts;
    c.cast_bytes += e->counters.cast_bytes;
    c.flops += e->counters.flops;
    c.low_flops += e->counters.low_flops;
    ++g.info.replays;
    r.loss = e->loss;
    r.grads = e->grads;
    return;
  }
  if (!e || !e->failed.empty()) {  // a new key's first step, or a key that cannot be captured
    if (!e) e = &g.add(key);
    const int64_t peak = graph::measure_peak([&] { forward_backward(c, r); });
    if (e->failed.empty()) e->eager_peak = peak;
    ++g.info.eager_steps;
    return;
  }
  capture_step(c, *e, r);
}

namespace {
// The key's second step: runs eagerly while recorded; from the next step on, the plan replays it.
void capture_step(StepCore& c, CapturedStep& e, StepRun& r) {
  {
    NoGradGuard no_grad;
    e.data = r.data.detach().clone();
    e.label = r.label.detach().clone();
  }
  const double scale = r.scale;
  const Generator& gen = default_generator();
  const std::pair<uint64_t, uint64_t> rng_before{gen.seed(), gen.offset()};
  const AmpCounters counters_before = amp_counters();
  Tensor loss;
  std::vector<Tensor> grads;
  std::string why;
  std::unique_ptr<graph::Plan> plan = graph::Plan::capture(
      [&] {
        loss = c.network(e.data, e.label);
        check_scalar_loss(loss);
        // d(loss * scale)/d(loss) = scale, as eager's multiply gives it; written at each replay.
        e.seed = Tensor::from_data(&scale, DType::f64, loss.shape(),
                                   {.dtype = loss.dtype(), .device = loss.device()});
        grads = run_backward({loss}, {e.seed}, {.capture = &c.optimizer.parameters()});
      },
      &why);
  if (plan && std::pair<uint64_t, uint64_t>{gen.seed(), gen.offset()} != rng_before) {
    why = "a random draw (dropout) inside the step";
    plan.reset();
  }
  {
    NoGradGuard no_grad;
    r.loss = loss.detach().clone();  // the plan may take the loss's buffer into its arena
  }
  r.grads = grads;
  ++c.graphs->info.captures;
  if (!plan) {
    e.failed = why;
    c.graphs->info.fallback = why;
    say("step runs eagerly from now on (" + e.key + "): " + why);
    return;
  }
  e.counters = minus(amp_counters(), counters_before);
  e.loss = loss.detach();
  e.grads = grads;
  loss = Tensor();
  std::vector<Tensor> outputs = grads;
  outputs.push_back(e.loss);
  plan->plan_memory(outputs);
  e.plan = std::move(plan);
  graph::PlanStats st = e.plan->stats();
  st.eager_peak_bytes = e.eager_peak;
  c.graphs->info.plan = st;
  say("captured " + e.key + ": " + std::to_string(st.kernels) + " kernels (" +
      std::to_string(st.fused) + " fused away, " + std::to_string(st.casts_elided) +
      " casts back removed), arena " + std::to_string(st.arena_bytes) + " bytes for " +
      std::to_string(st.planned_buffers) + " buffers (" + std::to_string(st.unplanned_bytes) +
      " unplanned), eager peak " + std::to_string(st.eager_peak_bytes) + " bytes");
}
}  // namespace

}  // namespace mixprec::amp::detail
