// The train step's one pipeline (step.h draws it): the stages in order, each named, the ones
// that read the found-inf flag asking the Decisions strategy (host.cpp: read at once; device.cpp:
// kept on the device). A skipped step touches nothing but the counters and the scale: weights,
// optimizer state, step count and learning-rate schedule stay as they were.
#include <chrono>
#include <cmath>

#include "amp/step/step.h"
#include "mixprec/ops/ops.h"
#include "mixprec/rng.h"

namespace mixprec::amp::detail {
namespace {

// Gradient accumulation: sums the (still scaled) micro-batch gradients; false until the last
// micro-batch of the accumulation (data parallel: the reducer already added the earlier ones to
// the last, during backward).
bool accumulate(StepCore& c, StepRun& r) {
  if (c.options.accumulation_steps == 1) return true;
  if (!r.reducer) {
    if (c.accumulated.empty())
      c.accumulated = r.grads;
    else
      for (size_t i = 0; i < r.grads.size(); ++i)
        if (r.grads[i].defined())
          c.accumulated[i] =
              c.accumulated[i].defined() ? ops::add(c.accumulated[i], r.grads[i]) : r.grads[i];
  }
  if (++c.micro < c.options.accumulation_steps) return false;
  if (!r.reducer) r.grads = std::move(c.accumulated);
  c.accumulated.clear();
  c.micro = 0;
  return true;
}

// A micro-batch before the boundary: no update, no decision; its loss is reported.
Tensor micro_batch(StepCore& c, StepRun& r, Decisions& d) {
  if (d.reads_at_once()) {
    c.last = StepInfo{.step = c.attempted,
                      .loss = r.loss_value,
                      .loss_finite = std::isfinite(r.loss_value),
                      .loss_scale = r.scale,
                      .lr = c.optimizer.learning_rate()};
    fill_telemetry(c.last, r.counters_before);
    return full({}, r.loss_value);
  }
  return r.loss;
}

// Overflow provenance, check_numerics' event and gradient statistics: host stages that read the
// gradients' values (the strategy reads the flag at once).
void diagnose(StepCore& c, StepRun& r) {
  const bool single = c.options.accumulation_steps == 1;
  if (r.always)
    c.last.event = r.always->first();
  else if (r.local_overflow && c.options.provenance && single)
    c.last.event = replay_with_checks(c, r);
  if (r.reducer && ranks_agree() && (r.always || (r.overflow && c.options.provenance && single)))
    agree_on_event(c.last.event);
  if (c.options.grad_stats_every > 0 && r.finite && c.attempted % c.options.grad_stats_every == 0)
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (r.grads[i].defined())
        c.last.grad_stats.push_back(gradient_stats(c.param_name(i), r.grads[i], r.unscale));
}

}  // namespace

Tensor run_step(StepCore& c, const Tensor& data, const Tensor& label) {
  Decisions& d = decides_on_device(c) ? device_decisions() : host_decisions();
  StepRun r{.data = data, .label = label};
  const Generator& gen = default_generator();
  r.rng_before = {gen.seed(), gen.offset()};
  r.counters_before = amp_counters();
  if (c.options.check_numerics) r.always.emplace();
  d.begin(c, r);
  // Data parallel: the gradients are reduced at the last micro-batch of an accumulation only.
  if (c.micro + 1 >= c.options.accumulation_steps) r.reducer = c.reducer.get();
  if (r.reducer) r.reducer->begin();
  if (d.reads_at_once() && graph_mode_applies(c, r.reducer))
    graph_forward_backward(c, r);
  else
    forward_backward(c, r);
  if (!accumulate(c, r)) return micro_batch(c, r, d);
  d.check(c, r);
  if (r.reducer) d.agree(c, r);
  if (c.options.max_grad_norm > 0) d.clip(c, r);
  ++c.attempted;
  if (d.reads_at_once()) {
    c.last = StepInfo{.step = c.attempted,
                      .loss = r.loss_value,
                      .loss_finite = r.loss_finite,
                      .overflow = r.overflow,
                      .local_overflow = r.reducer ? r.local_overflow : r.overflow,
                      .skipped = r.skip,
                      .loss_scale = r.scale,
                      .lr = c.optimizer.learning_rate(),
                      .grad_norm = r.norm};
    fill_telemetry(c.last, r.counters_before);
    diagnose(c, r);
  }
  d.update(c, r);
  if (r.reducer && c.backbone) {  // every rank's BatchNorm statistics
    const auto t = std::chrono::steady_clock::now();
    nn::all_reduce_buffers(*c.backbone);
    r.reducer->add_sync_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  return d.record(c, r);
}

}  // namespace mixprec::amp::detail
