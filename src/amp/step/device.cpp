// The device strategy of the train step's decisions (step.h): the found-inf flag stays a
// one-element tensor on the parameters' device, and the stages that read it are multi-tensor ops
// queued there (ops/amp_device.h), so the host reads nothing while it queues a step: the check
// over the loss and the gradients, the skip inside the optimizer's fused update, the manager's
// scale rule on its own state tensors. The optimizer's step count lives there too
// (amp_advance_step_): the learning rate and Adam's bias corrections of each update are selected
// on the device from a small table of the values every possible count would give, so a step
// never waits for the host to learn whether the steps before it were skipped. Up to
// kStepsInFlight steps are queued; the flag, the loss and the scale each used come back through
// cuda::Readback, and the host completes the StepInfo, the counters, the optimizer's step count
// and the manager's overflow counters in order, exactly as the host strategy would have, when
// they are back (poll_steps, the next step) or when asked to wait (sync, last_step).
// Data parallel: the gradients go through the reducer's buckets (NCCL on a GPU), the found-inf
// flag of this rank's own gradients and loss becomes every rank's by an all-reduce max on the
// device, and the loss the mean over the ranks, as the host strategy's consensus does.
// Gradient accumulation sums on the device; the update then unscales by 1 / (scale * n), both
// f32 there (the host computes 1/x in f64: the same bits when n and the scale are powers of two).
#include <cmath>
#include <cstdint>
#include <deque>
#include <thread>

#include "amp/step/step.h"
#include "amp/step/testing.h"
#include "comm/transport.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/cuda_readback.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/nn/distributed.h"
#include "mixprec/ops/amp_device.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/ops.h"

namespace mixprec::amp {

namespace {
bool g_device_step_on_cpu = false;
int64_t g_cpu_readback_lag = 0;

// A one-element value of `t` read on the host: on a GPU through a Readback (queued now, polled
// later), on the CPU at once.
class Pending {
 public:
  void request(const Tensor& t) {
    if (t.device().is_cpu()) {
      value_ = t.item();
      return;
    }
    if (!readback_) readback_ = std::make_unique<cuda::Readback>(t.device());
    readback_->request(t);
    value_.reset();
  }
  bool ready() {  // never blocks
    if (!value_) value_ = readback_->poll();
    return value_.has_value();
  }
  double wait() {  // polls: the copy was queued behind the step
    while (!ready()) std::this_thread::yield();
    return *value_;
  }

 private:
  std::unique_ptr<cuda::Readback> readback_;  // its pinned buffer is reused by later steps
  std::optional<double> value_;
};

// A queued step whose outcome the host does not know yet.
struct InFlight {
  StepInfo info;           // less what the flag and the loss tell, and the lr it used
  int64_t queued_at = 0;   // attempted steps when it was queued
  int64_t generation = 0;  // the manager's, when it was queued
  bool data_parallel = false;
  bool clipped = false;
  Pending flag, local_flag, loss, scale, norm;
};
}  // namespace

void testing::set_device_step_on_cpu(bool on) { g_device_step_on_cpu = on; }
void testing::set_cpu_readback_lag(int64_t steps) { g_cpu_readback_lag = steps; }

namespace detail {

struct DeviceState {
  Device device;
  Tensor found_inf, one;        // f32 []
  Tensor local_inf;             // data parallel: this rank's flag before the consensus
  Tensor count;                 // i32 [1]: the optimizer's applied updates
  Tensor scalars;               // f32 [width]: this update's step_scalars (from count)
  Tensor norm, clip_inv;        // f64 [], f32 []: the clip stage's norm and multiplier
  int64_t count_mirrored = -1;  // the optimizer's step count `count` holds
  std::deque<std::unique_ptr<InFlight>> in_flight;  // oldest first
  std::vector<std::unique_ptr<InFlight>> spare;     // completed, their Readbacks kept for reuse
  std::deque<StepInfo> completed;                   // the last kKeptOutcomes outcomes
};

bool decides_on_device(const StepCore& c) { return c.where().is_cuda() || g_device_step_on_cpu; }

namespace {

constexpr size_t kStepsInFlight = TrainOneStepCell::kStepsInFlight;
constexpr size_t kKeptOutcomes = TrainOneStepCell::kKeptOutcomes;

// What the host strategy decides after its finite check, from the flag the device computed, in
// the order the steps ran. The optimizer's step count is that the step ran with unless the caller
// changed it meanwhile (set_global_step): then the caller's value stands and the next step
// uploads it; the manager counts the outcome unless its state was set meanwhile (set_state).
void resolve(StepCore& c, InFlight& f, double found_inf, double local_found_inf, double loss,
             double scale) {
  DeviceState& d = *c.device;
  const bool count_followed = c.optimizer.global_step() == d.count_mirrored;
  StepInfo s = f.info;
  s.loss = loss;
  s.loss_finite = std::isfinite(loss);
  s.overflow = found_inf != 0.0;
  s.local_overflow = local_found_inf != 0.0;
  s.skipped = s.overflow && (c.manager ? c.manager->get_drop_overflow_update() : false);
  s.loss_scale = scale;
  s.lr = c.optimizer.learning_rate();
  c.last = s;
  if (s.skipped) {
    ++c.skipped;
  } else {
    if (s.overflow) warn_applied_overflow(s.step);
    if (count_followed) {
      c.optimizer.set_global_step(c.optimizer.global_step() + 1);
      d.count_mirrored = c.optimizer.global_step();
    }
  }
  d.completed.push_back(s);
  while (d.completed.size() > kKeptOutcomes) d.completed.pop_front();
  if (c.manager)
    ScaleAccess::count(*c.manager, s.overflow, s.loss_finite, f.generation);  // may throw
}

// Completes the oldest step in flight if its flag and loss are back (or waits for them). Returns
// false when it is not back (wait false).
bool complete_oldest(StepCore& c, bool wait) {
  DeviceState& d = *c.device;
  InFlight& f = *d.in_flight.front();
  const bool cpu = d.device.is_cpu();
  if (!wait) {
    const bool back = cpu ? c.attempted - f.queued_at >= g_cpu_readback_lag
                          : f.flag.ready() && f.loss.ready() && f.scale.ready() &&
                                (!f.data_parallel || f.local_flag.ready()) &&
                                (!f.clipped || f.norm.ready());
    if (!back) return false;
  }
  const double flag = f.flag.wait(), loss = f.loss.wait(), scale = c.manager ? f.scale.wait() : 1.0;
  const double local = f.data_parallel ? f.local_flag.wait() : flag;
  if (f.clipped) f.info.grad_norm = f.norm.wait();
  std::unique_ptr<InFlight> done = std::move(d.in_flight.front());
  d.in_flight.pop_front();
  d.spare.push_back(std::move(done));
  resolve(c, *d.spare.back(), flag, local, loss, scale);
  return true;
}

// Data parallel: the collectives' own check (tensors on a GPU need NCCL in the build).
void check_device_transport(bool parallel, Device device) {
  if (parallel)
    (void)comm::detail::transport_for(device, true, communication::built_with_nccl(),
                                      "TrainOneStepCell (data parallel)");
}

class DeviceDecisions final : public Decisions {
 public:
  // The steps whose outcome is back complete now; the host waits only when kStepsInFlight are
  // queued already (for the oldest), never for the step just before this one.
  void begin(StepCore& c, StepRun& r) override {
    device_poll(c);
    while (c.device && c.device->in_flight.size() >= kStepsInFlight) complete_oldest(c, true);
    const Device dev = c.where();
    check_device_transport(c.reducer != nullptr, dev);
    if (!c.device || c.device->device != dev) {
      device_sync(c);
      c.device = std::make_shared<DeviceState>();
      DeviceState& d = *c.device;
      d.device = dev;
      d.found_inf = zeros({}, {.device = dev});
      d.one = full({}, 1.0, {.device = dev});
      d.count = zeros({1}, {.dtype = DType::i32, .device = dev});
      d.scalars = zeros({c.optimizer.step_scalars_width()}, {.device = dev});
    }
    DeviceState& d = *c.device;
    // Changed by the caller (set_global_step: a resume): the steps in flight complete first (the
    // caller's value stands), then the device takes the host's count.
    if (c.optimizer.global_step() != d.count_mirrored) {
      device_sync(c);
      MIXPREC_CHECK(c.optimizer.global_step() <= INT32_MAX,
                    "TrainOneStepCell: the optimizer's step count ", c.optimizer.global_step(),
                    " does not fit the device's i32 counter");
      d.count.fill_(static_cast<double>(c.optimizer.global_step()));
      d.count_mirrored = c.optimizer.global_step();
    }
    if (c.manager) {
      ScaleAccess::to(*c.manager, dev);
      r.scale_t = ScaleAccess::scale(*c.manager);
    }
  }

  // The finite check over this rank's gradients and loss (multiplying by 1 leaves them as they
  // are); data parallel, then the reduced gradients.
  void check(StepCore& c, StepRun& r) override {
    DeviceState& d = *c.device;
    NoGradGuard ng;
    if (r.always) r.event = r.always->first();  // check_numerics: what forward+backward found
    std::vector<Tensor> checked{r.loss.reshape({1})};
    for (const Tensor& g : r.grads)
      if (g.defined()) checked.push_back(g.contiguous());
    d.found_inf.fill_(0.0);
    ops::amp_foreach_non_finite_check_and_unscale_(checked, d.found_inf, d.one);
    if (r.reducer) r.grads = r.reducer->finish(r.grads);
  }

  // Keeps this rank's flag in local_inf, makes found_inf every rank's (max; unless consensus is
  // switched off for a test) and the loss the mean over the ranks. All on the device (NCCL).
  void agree(StepCore& c, StepRun& r) override {
    DeviceState& d = *c.device;
    NoGradGuard ng;
    if (!d.local_inf.defined()) d.local_inf = zeros({}, {.device = d.device});
    d.local_inf.copy_(d.found_inf);
    if (ranks_agree()) comm::all_reduce_max(d.found_inf);
    Tensor total = zeros({}, {.device = d.device});
    total.copy_(r.loss);
    comm::all_reduce_sum(total);
    AutocastScope as_is(AutocastState{});  // the mean stays f32
    r.loss = ops::mul(total, 1.0 / communication::get_group_size());
  }

  // The global norm and the clip's multiplier on the device (ops::amp_clip_by_global_norm_, the
  // host strategy's norm): the update then reads the gradients with it; a non-finite norm sets
  // the flag. The multiplier starts as the plain 1 / (scale * n), what an overflowing step
  // applies when it is not dropped.
  void clip(StepCore& c, StepRun& r) override {
    DeviceState& d = *c.device;
    NoGradGuard ng;
    if (!d.norm.defined()) {
      d.norm = zeros({}, {.dtype = DType::f64, .device = d.device});
      d.clip_inv = zeros({}, {.device = d.device});
    }
    unscale_multiplier(c, r);
    d.clip_inv.copy_(r.inv_scale.defined() ? r.inv_scale : d.one);
    std::vector<Tensor> grads;
    for (const Tensor& g : r.grads)
      if (g.defined()) grads.push_back(g.contiguous());
    ops::amp_clip_by_global_norm_(grads, r.scale_t, c.options.accumulation_steps,
                                  c.options.max_grad_norm, d.found_inf, d.clip_inv, d.norm);
    r.inv_scale = d.clip_inv;
    r.clipped = true;
  }

  // 1 / (scale * micro-batches), f32 [] divided on the device (undefined: 1).
  static void unscale_multiplier(StepCore& c, StepRun& r) {
    DeviceState& d = *c.device;
    AutocastScope as_is(AutocastState{});
    const int n = c.options.accumulation_steps;
    if (c.manager)
      r.inv_scale =
          ops::div(d.one, n == 1 ? r.scale_t : ops::mul(r.scale_t, static_cast<double>(n)));
    else if (n > 1)
      r.inv_scale = full({}, 1.0 / n, {.device = d.device});
  }

  // Gradient statistics (grad_stats_every > 0, at the host step's steps): as the host step takes
  // them, of the gradients the update is about to read, unscaled by 1 / (scale * micro-batches) in
  // f64, and only when the step's flag (after consensus and clipping) is clear. This waits for
  // the flag and the scale and copies the gradients to the host: every N steps, not every step.
  static void grad_stats(StepCore& c, StepRun& r) {
    const int64_t every = c.options.grad_stats_every;
    if (every <= 0 || c.attempted % every != 0) return;
    DeviceState& d = *c.device;
    if (d.found_inf.item() != 0.0) return;
    const double scale = c.manager ? r.scale_t.item() : 1.0;
    const double unscale = 1.0 / (scale * c.options.accumulation_steps);
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (r.grads[i].defined())
        r.grad_stats.push_back(gradient_stats(c.param_name(i), r.grads[i], unscale));
  }

  // The update, skipped on the device when the flag is set (drop_overflow_update), unscaling by
  // 1 / (scale * micro-batches) (f32 [], divided there) as it reads the gradients.
  void update(StepCore& c, StepRun& r) override {
    DeviceState& d = *c.device;
    NoGradGuard ng;
    grad_stats(c, r);
    const std::vector<Tensor>& params = c.optimizer.parameters();
    for (size_t i = 0; i < r.grads.size(); ++i)
      if (!r.grads[i].defined()) r.grads[i] = zeros(params[i].shape(), {.device = d.device});
    const bool drop = c.manager && c.manager->get_drop_overflow_update();
    if (!r.clipped) unscale_multiplier(c, r);
    // The step-dependent scalars (learning rate, Adam's bias corrections) of every update count
    // this step can run with: the host knows `base` updates; each step in flight adds one unless
    // it is skipped. amp_advance_step_ picks the row on the device.
    const int64_t base = c.optimizer.global_step(),
                  rows = static_cast<int64_t>(d.in_flight.size()) + 1;
    const int64_t width = c.optimizer.step_scalars_width();
    std::vector<float> table;
    table.reserve(static_cast<size_t>(rows * width));
    for (int64_t j = 0; j < rows; ++j)
      for (double v : c.optimizer.step_scalars(base + j)) table.push_back(static_cast<float>(v));
    const Tensor table_t = Tensor::from_data(table.data(), DType::f32, {rows, width},
                                             {.dtype = DType::f32, .device = d.device});
    ops::amp_advance_step_(d.count, drop ? d.found_inf : Tensor(), table_t, base, d.scalars);
    c.optimizer.fused_step(r.grads, drop ? d.found_inf : Tensor(), r.inv_scale, d.scalars);
  }

  // The scale this step used is read back before the manager's rule changes it there; the
  // outcome completes later (resolve).
  Tensor record(StepCore& c, StepRun& r) override {
    DeviceState& d = *c.device;
    std::unique_ptr<InFlight> f;
    if (d.spare.empty())
      f = std::make_unique<InFlight>();
    else {
      f = std::move(d.spare.back());
      d.spare.pop_back();
    }
    c.last = StepInfo{.step = c.attempted};  // the loss scale and lr are filled in as it completes
    fill_telemetry(c.last, r.counters_before);
    f->info = c.last;
    f->info.grad_stats = std::move(r.grad_stats);
    // check_numerics: the first op whose output was not finite (each op's output was read back as
    // it ran, the host strategy's check), agreed between the ranks as the host step agrees it.
    if (r.always) {
      f->info.event = std::move(r.event);
      if (r.reducer && ranks_agree()) agree_on_event(f->info.event);
    }
    f->queued_at = c.attempted;
    f->data_parallel = r.reducer != nullptr;
    f->clipped = r.clipped;
    if (r.clipped) f->norm.request(d.norm);
    f->flag.request(d.found_inf);
    if (r.reducer)
      f->local_flag.request(d.local_inf);
    else
      d.local_inf = Tensor();
    f->loss.request(r.loss);
    if (c.manager) {
      f->scale.request(r.scale_t);
      f->generation = ScaleAccess::generation(*c.manager);
      ScaleAccess::adapt(*c.manager, d.found_inf);
    }
    d.in_flight.push_back(std::move(f));
    return r.loss;
  }

  bool reads_at_once() const override { return false; }
};

}  // namespace

Decisions& device_decisions() {
  static DeviceDecisions d;
  return d;
}

void device_sync(const StepCore& c) {
  auto& core = const_cast<StepCore&>(c);  // completing steps changes the counters, not the step
  while (core.device && !core.device->in_flight.empty()) complete_oldest(core, true);
}

int64_t device_poll(const StepCore& c) {
  auto& core = const_cast<StepCore&>(c);
  if (!core.device) return core.attempted;
  while (!core.device->in_flight.empty() && complete_oldest(core, false)) {}
  return core.attempted - static_cast<int64_t>(core.device->in_flight.size());
}

const StepInfo* device_completed_step(const StepCore& c, int64_t k) {
  if (!c.device || !decides_on_device(c)) return nullptr;
  for (const StepInfo& s : c.device->completed)
    if (s.step == k) return &s;
  return nullptr;
}

void device_forget(StepCore& c) { c.device.reset(); }

}  // namespace detail
}  // namespace mixprec::amp
