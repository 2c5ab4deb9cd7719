// The host strategy of the train step's decisions (step.h): on the CPU a value is read at once,
// so the flag, the loss and the norm are host numbers and every decision is taken as the stage
// runs. The loss scale is the manager's (read from its tensor), its rule runs once per step
// (LossScaleManager::update_loss_scale), and the unscaling by 1 / (scale * micro-batches), 1/x
// computed in f64, happens inside the optimizer's fused update pass.
#include <chrono>
#include <cmath>

#include "amp/step/step.h"
#include "mixprec/comm/communication.h"
#include "mixprec/ops/amp_device.h"

namespace mixprec::amp::detail {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class HostDecisions final : public Decisions {
 public:
  void begin(StepCore& c, StepRun& r) override {
    if (c.manager) {
      ScaleAccess::to(*c.manager, c.where());
      r.scale = c.manager->get_loss_scale();
    }
  }

  // One read-only pass (data parallel: done while packing the buckets, as the reduction
  // finishes).
  void check(StepCore& c, StepRun& r) override {
    r.loss_value = r.loss.item();
    if (r.reducer) {
      r.grads = r.reducer->finish(r.grads);
      r.finite = r.reducer->local_finite();
    } else {
      r.finite = unscale_and_check(r.grads, 1.0);  // skips undefined entries
    }
    r.loss_finite = std::isfinite(r.loss_value);
    r.local_overflow = !r.finite || !r.loss_finite;
    r.unscale = 1.0 / (r.scale * c.options.accumulation_steps);
    r.grad_scale = r.unscale;
    decide(c, r);
  }

  // This rank's flags become every rank's (one MAX all-reduce, before anything decides) and the
  // loss the mean over the ranks.
  void agree(StepCore& c, StepRun& r) override {
    const auto start = std::chrono::steady_clock::now();
    double flags[2] = {r.finite ? 0.0 : 1.0, r.loss_finite ? 0.0 : 1.0};
    agree_on_flags(flags);
    r.finite = flags[0] == 0.0;
    r.loss_finite = flags[1] == 0.0;
    double mean_loss = r.loss_value / communication::get_group_size();
    comm::all_reduce_sum({&mean_loss, 1});
    r.loss_value = mean_loss;
    r.reducer->add_sync_seconds(seconds_since(start));
    decide(c, r);
  }

  // The norm is the ops kit's (ops::amp_clip_by_global_norm_ on CPU tensors), the device
  // strategy's kernel: one definition of the norm's summation order.
  void clip(StepCore& c, StepRun& r) override {
    if (!r.finite) return;
    std::vector<Tensor> grads;
    for (const Tensor& g : r.grads)
      if (g.defined()) grads.push_back(g.contiguous());
    const Tensor found = zeros({}), inv = zeros({}), norm = zeros({}, {.dtype = DType::f64});
    ops::amp_clip_by_global_norm_(grads, c.manager ? ScaleAccess::scale(*c.manager) : Tensor(),
                                  c.options.accumulation_steps, c.options.max_grad_norm, found, inv,
                                  norm);
    r.norm = norm.item();
    if (found.item() != 0.0)
      r.finite = false;
    else
      r.grad_scale = inv.item();  // f32: the update's multiplier, as Optimizer::step rounds it
    decide(c, r);
  }

  void update(StepCore& c, StepRun& r) override {
    if (r.skip) {
      ++c.skipped;
      return;
    }
    if (r.overflow) warn_applied_overflow(c.attempted);
    const std::vector<Tensor>& params = c.optimizer.parameters();
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (!r.grads[i].defined()) r.grads[i] = zeros(params[i].shape());
    c.optimizer.step(r.grads, r.grad_scale);
  }

  Tensor record(StepCore& c, StepRun& r) override {
    if (c.manager) c.manager->update_loss_scale(r.overflow, r.loss_finite);
    return full({}, r.loss_value);
  }

  bool reads_at_once() const override { return true; }

 private:
  static void decide(StepCore& c, StepRun& r) {
    r.overflow = !r.finite || !r.loss_finite;
    r.skip = r.overflow && (c.manager ? c.manager->get_drop_overflow_update() : false);
  }
};

}  // namespace

Decisions& host_decisions() {
  static HostDecisions d;
  return d;
}

}  // namespace mixprec::amp::detail
