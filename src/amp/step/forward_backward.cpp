// The eager forward and backward of the train step (step.h): loss * scale, backward into the
// captured gradients; data parallel, each gradient goes to the reducer as soon as it is final,
// plus what earlier micro-batches accumulated (the check stage finishes the reduction). And the
// provenance replay, which runs the same forward and backward with every op checked.
#include "amp/step/step.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/ops/ops.h"
#include "mixprec/rng.h"

namespace mixprec::amp::detail {

void check_scalar_loss(const Tensor& loss) {
  MIXPREC_CHECK(loss.numel() == 1, "train step: the loss must be a scalar, got shape ",
                shape_str(loss.shape()),
                Hint{"use a reduction (mean or sum) in the loss function"});
}

void forward_backward(StepCore& c, StepRun& r) {
  const std::vector<Tensor>& params = c.optimizer.parameters();
  Tensor loss = c.network(r.data, r.label);
  check_scalar_loss(loss);
  // The scale as the strategy holds it: the manager's tensor (read where it lives), or a number.
  const Tensor scaled = r.scale_t.defined() ? ops::mul(loss, r.scale_t)
                        : r.scale != 1.0    ? ops::mul(loss, r.scale)
                                            : loss;
  nn::DistributedGradReducer* reducer = r.reducer;
  if (!reducer) {
    r.grads = run_backward({scaled}, {Tensor()}, {.capture = &params});
  } else {
    auto with_accumulated = [&](size_t i, const Tensor& g) {
      if (i >= c.accumulated.size() || !c.accumulated[i].defined()) return g;
      return g.defined() ? ops::add(c.accumulated[i], g) : c.accumulated[i];
    };
    std::vector<char> reported(params.size(), 0);
    r.grads = run_backward({scaled}, {Tensor()},
                           {.capture = &params, .on_capture_ready = [&](size_t i, const Tensor& g) {
                              reported[i] = 1;
                              reducer->ready(i, with_accumulated(i, g));
                            }});
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (!reported[i]) r.grads[i] = with_accumulated(i, r.grads[i]);
  }
  NoGradGuard ng;
  r.loss = loss.detach();
}

std::optional<NonFiniteEvent> replay_with_checks(StepCore& c, StepRun& r) {
  Generator& gen = default_generator();
  const std::pair<uint64_t, uint64_t> rng_after{gen.seed(), gen.offset()};
  std::vector<std::pair<Tensor, Tensor>> saved;
  if (c.backbone) {
    NoGradGuard ng;
    for (auto& [n, b] : c.backbone->buffers_and_names()) saved.emplace_back(b, b.detach().clone());
  }
  gen.set_state(r.rng_before.first, r.rng_before.second);
  NumericsCheckScope check;
  {
    AmpCounters keep = amp_counters();
    StepRun again{.data = r.data, .label = r.label, .scale = r.scale, .scale_t = r.scale_t};
    forward_backward(c, again);
    amp_counters() = keep;
  }
  gen.set_state(rng_after.first, rng_after.second);
  NoGradGuard ng;
  for (auto& [live, copy] : saved) live.detach().copy_(copy);
  return check.first();
}

}  // namespace mixprec::amp::detail
