// The train step on a device (TrainOneStepCell, amp.h): the loss scale, growth tracker and
// found-inf flag are one-element tensors on the parameters' device; the finite check, the skip,
// the optimizer's update and the dynamic scale's adaptation are the multi-tensor ops of
// ops/amp_device.h, queued there, so the host reads nothing while it queues a step. The
// optimizer's step count lives there too (amp_advance_step_): the learning rate and Adam's bias
// corrections of each update are selected on the device from a small table of the values every
// possible count would give, so a step never waits for the host to learn whether the steps before
// it were skipped. Up to kStepsInFlight steps are queued; the flag and the loss of each come back
// through cuda::Readback, and the host completes the StepInfo, the counters, the optimizer's step
// count and the manager's (host) state from them in order, exactly as the host step would have,
// when they are back (poll_steps, the next step) or when asked to wait (sync, last_step).
// Data parallel: the gradients go through the reducer's buckets (NCCL on a GPU), the found-inf
// flag of this rank's own gradients and loss becomes every rank's by an all-reduce max on the
// device, and the loss the mean over the ranks, as the host step's consensus does.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <thread>

#include "comm/transport.h"
#include "mixprec/amp/amp.h"
#include "mixprec/autograd/autograd.h"
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
bool same_state(const LossScaleState& a, const LossScaleState& b) {
  return a.scale == b.scale && a.good_steps == b.good_steps;
}
}  // namespace

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
  StepInfo info;           // less what the flag and the loss tell, and the scale and lr it used
  int64_t queued_at = 0;   // attempted steps when it was queued
  bool data_parallel = false;
  Pending flag, local_flag, loss;
};
}  // namespace

void testing::set_device_step_on_cpu(bool on) { g_device_step_on_cpu = on; }
void testing::set_cpu_readback_lag(int64_t steps) { g_cpu_readback_lag = steps; }

struct detail::DeviceStep {
  Device device;
  Tensor found_inf, scale, tracker, one;  // f32, f32, i32, f32: shape []
  Tensor local_inf;                       // data parallel: this rank's flag before the consensus
  Tensor count;                           // i32 [1]: the optimizer's applied updates
  Tensor scalars;                         // f32 [width]: this update's step_scalars (from count)
  LossScaleState mirrored;                // the manager's state the device tensors hold
  int64_t count_mirrored = -1;            // the optimizer's step count `count` holds
  std::deque<std::unique_ptr<InFlight>> in_flight;  // oldest first
  std::vector<std::unique_ptr<InFlight>> spare;     // completed, their Readbacks kept for reuse
  std::deque<StepInfo> completed;                   // the last kKeptOutcomes outcomes
};

Device TrainOneStepCell::device() const { return optimizer_.parameters().front().device(); }

bool TrainOneStepCell::device_step_applies() const {
  return device().is_cuda() || g_device_step_on_cpu;
}

TrainOneStepCell& TrainOneStepCell::to(Device device) {
  sync();
  network_.to(device);
  if (backbone_) backbone_->to(device);  // WithLossCell does not register the backbone
  optimizer_.to(device);
  if (device_ && device_->device != device) device_.reset();  // remade at the next step
  return *this;
}

void TrainOneStepCell::sync() const {
  while (device_ && !device_->in_flight.empty()) complete_oldest(true);
}

int64_t TrainOneStepCell::poll_steps() const {
  if (!device_) return attempted_;
  while (!device_->in_flight.empty() && complete_oldest(false)) {
  }
  return attempted_ - static_cast<int64_t>(device_->in_flight.size());
}

const StepInfo& TrainOneStepCell::completed_step(int64_t k) const {
  if (!device_ || !device_step_applies()) {
    MIXPREC_CHECK(k == attempted_, "TrainOneStepCell::completed_step: only the last step (", attempted_,
                  ") is kept on the host, asked for ", k);
    return last_;
  }
  for (const StepInfo& s : device_->completed)
    if (s.step == k) return s;
  MIXPREC_CHECK(false, "TrainOneStepCell::completed_step: step ", k, " is not among the ",
                device_->completed.size(), " completed steps kept (", kKeptOutcomes, " at most)");
  return last_;  // not reached
}

// Completes the oldest step in flight if its flag and loss are back (or waits for them): the
// StepInfo, the counters, the optimizer's step count and the manager's state, exactly as the host
// step would have, in the order the steps ran. Returns false when it is not back (wait false).
bool TrainOneStepCell::complete_oldest(bool wait) const {
  detail::DeviceStep& d = *device_;
  InFlight& f = *d.in_flight.front();
  const bool cpu = d.device.is_cpu();
  if (!wait) {
    const bool back = cpu ? attempted_ - f.queued_at >= g_cpu_readback_lag
                          : f.flag.ready() && f.loss.ready() && (!f.data_parallel || f.local_flag.ready());
    if (!back) return false;
  }
  const double flag = f.flag.wait(), loss = f.loss.wait();
  const double local = f.data_parallel ? f.local_flag.wait() : flag;
  resolve_device_step(f.info, flag, local, loss);
  d.spare.push_back(std::move(d.in_flight.front()));
  d.in_flight.pop_front();
  return true;
}

// What the host step decides after its finite check, from the flag the device computed. The
// steps complete in order, so the manager's state and the optimizer's step count are those the
// step ran with, unless the caller changed them meanwhile (set_state, set_global_step): then the
// caller's values stand, and the next step uploads them.
void TrainOneStepCell::resolve_device_step(StepInfo s, double found_inf, double local_found_inf,
                                           double loss) const {
  detail::DeviceStep& d = *device_;
  const bool manager_followed = manager_ && same_state(manager_->state(), d.mirrored);
  const bool count_followed = optimizer_.global_step() == d.count_mirrored;
  s.loss = loss;
  s.loss_finite = std::isfinite(loss);
  s.overflow = found_inf != 0.0;
  s.local_overflow = local_found_inf != 0.0;
  s.skipped = s.overflow && (manager_ ? manager_->get_drop_overflow_update() : false);
  s.loss_scale = manager_ ? manager_->get_loss_scale() : 1.0;
  s.lr = optimizer_.learning_rate();
  last_ = s;
  if (s.skipped) {
    ++skipped_;
  } else {
    if (s.overflow && communication::get_rank() == 0)
      std::fprintf(stderr, "mixprec: warning: step %lld applied an update with non-finite gradients "
                   "(drop_overflow_update is false)\n", static_cast<long long>(s.step));
    if (count_followed) {
      optimizer_.set_global_step(optimizer_.global_step() + 1);
      d.count_mirrored = optimizer_.global_step();
    }
  }
  d.completed.push_back(s);
  while (d.completed.size() > kKeptOutcomes) d.completed.pop_front();
  if (manager_followed) {
    manager_->update_loss_scale(s.overflow, s.loss_finite);  // throws after too many overflows
    d.mirrored = manager_->state();
  }
}

namespace {
void check_device_options(const TrainStepOptions& o, bool parallel, Device device) {
  if (parallel)  // the collectives' own check: tensors on a GPU need NCCL in the build
    (void)comm::detail::transport_for(device, true, communication::built_with_nccl(), "TrainOneStepCell (data parallel)");
  const char* what = o.accumulation_steps > 1     ? "gradient accumulation (accumulation_steps > 1)"
                     : o.max_grad_norm > 0        ? "gradient clipping (max_grad_norm > 0)"
                     : o.check_numerics           ? "check_numerics"
                     : o.grad_stats_every > 0     ? "gradient statistics (grad_stats_every > 0)"
                                                  : nullptr;
  MIXPREC_CHECK(what == nullptr, "TrainOneStepCell: ", what, " is not available on a device yet",
                Hint{"train on the CPU for it (docs/cuda.md lists what the device step supports)"});
}

// Data parallel, after this rank's finite check set found_inf: keeps this rank's flag in
// local_inf, makes found_inf every rank's (max; unless consensus is switched off for a test) and
// returns the loss averaged over the ranks. All on the device (NCCL), nothing read by the host.
Tensor agree_on_device(detail::DeviceStep& d, const Tensor& loss) {
  if (!d.local_inf.defined()) d.local_inf = zeros({}, {.device = d.device});
  d.local_inf.copy_(d.found_inf);
  if (detail::ranks_agree()) comm::all_reduce_max(d.found_inf);
  Tensor total = zeros({}, {.device = d.device});
  total.copy_(loss);
  comm::all_reduce_sum(total);
  AutocastScope as_is(AutocastState{});  // the mean stays f32
  return ops::mul(total, 1.0 / communication::get_group_size());
}
}  // namespace

Tensor TrainOneStepCell::device_construct(const Tensor& data, const Tensor& label) {
  // The steps whose outcome is back complete now; the host waits only when kStepsInFlight are
  // queued already (for the oldest), never for the step just before this one.
  poll_steps();
  while (device_ && device_->in_flight.size() >= kStepsInFlight) complete_oldest(true);
  const Device dev = device();
  check_device_options(options_, reducer_ != nullptr, dev);
  auto* dynamic = dynamic_cast<DynamicLossScaleManager*>(manager_.get());
  if (dynamic)
    MIXPREC_CHECK(dynamic->options().max_scale == DynamicLossScaleOptions{}.max_scale,
                  "TrainOneStepCell: a maximum loss scale is not available on a device yet");
  if (!device_ || device_->device != dev) {
    sync();
    device_ = std::make_shared<detail::DeviceStep>();
    device_->device = dev;
    device_->found_inf = zeros({}, {.device = dev});
    device_->scale = zeros({}, {.device = dev});
    device_->tracker = zeros({}, {.dtype = DType::i32, .device = dev});
    device_->one = full({}, 1.0, {.device = dev});
    device_->count = zeros({1}, {.dtype = DType::i32, .device = dev});
    device_->scalars = zeros({optimizer_.step_scalars_width()}, {.device = dev});
    device_->mirrored.scale = -1;  // uploaded below
  }
  detail::DeviceStep& d = *device_;
  // New, or changed by the caller (set_state, set_global_step: a resume): the steps in flight
  // complete first (the caller's values stand), then the device takes the host's values.
  const bool new_state = manager_ && !same_state(manager_->state(), d.mirrored);
  const bool new_count = optimizer_.global_step() != d.count_mirrored;
  if (new_state || new_count) sync();
  if (new_state) {
    d.scale.fill_(manager_->state().scale);
    d.tracker.fill_(static_cast<double>(manager_->state().good_steps));
    d.mirrored = manager_->state();
  }
  if (new_count) {
    MIXPREC_CHECK(optimizer_.global_step() <= INT32_MAX, "TrainOneStepCell: the optimizer's step count ",
                  optimizer_.global_step(), " does not fit the device's i32 counter");
    d.count.fill_(static_cast<double>(optimizer_.global_step()));
    d.count_mirrored = optimizer_.global_step();
  }
  // The step-dependent scalars (learning rate, Adam's bias corrections) of every update count
  // this step can run with: the host knows `base` updates; each step in flight adds one unless
  // it is skipped. amp_advance_step_ picks the row on the device.
  const int64_t base = optimizer_.global_step(), rows = static_cast<int64_t>(d.in_flight.size()) + 1;
  const int64_t width = optimizer_.step_scalars_width();
  std::vector<float> table;
  table.reserve(static_cast<size_t>(rows * width));
  for (int64_t j = 0; j < rows; ++j)
    for (double v : optimizer_.step_scalars(base + j)) table.push_back(static_cast<float>(v));
  const Tensor table_t = Tensor::from_data(table.data(), DType::f32, {rows, width}, {.dtype = DType::f32, .device = dev});
  const AmpCounters counters_before = amp_counters();
  const std::vector<Tensor>& params = optimizer_.parameters();

  // Forward and backward of loss * scale (the scale read on the device); data parallel, each
  // gradient goes to its bucket as soon as it is final.
  Tensor loss = network_(data, label);
  detail::check_scalar_loss(loss);
  const Tensor scaled = manager_ ? ops::mul(loss, d.scale) : loss;
  nn::DistributedGradReducer* reducer = reducer_.get();
  if (reducer) reducer->begin();
  std::vector<Tensor> grads = run_backward(
      {scaled}, {Tensor()},
      {.capture = &params,
       .on_capture_ready = reducer ? std::function<void(size_t, const Tensor&)>(
                                         [&](size_t i, const Tensor& g) { reducer->ready(i, g); })
                                   : nullptr});
  NoGradGuard ng;
  loss = loss.detach();

  // The finite check over this rank's gradients and loss (multiplying by 1 leaves them as they
  // are); data parallel, then the reduced gradients and the consensus on the flag and the loss.
  std::vector<Tensor> checked{loss.reshape({1})};
  for (const Tensor& g : grads)
    if (g.defined()) checked.push_back(g.contiguous());
  d.found_inf.fill_(0.0);
  ops::amp_foreach_non_finite_check_and_unscale_(checked, d.found_inf, d.one);
  if (reducer) {
    grads = reducer->finish(grads);
    loss = agree_on_device(d, loss);
  }

  // The update, skipped on the device when the flag is set (drop_overflow_update), unscaling by
  // 1 / scale (f32 [], divided there) as it reads the gradients.
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) grads[i] = zeros(params[i].shape(), {.device = dev});
  const bool drop = manager_ && manager_->get_drop_overflow_update();
  const Tensor inv_scale = manager_ ? ops::div(d.one, d.scale) : Tensor();
  ops::amp_advance_step_(d.count, drop ? d.found_inf : Tensor(), table_t, base, d.scalars);
  optimizer_.fused_step(grads, drop ? d.found_inf : Tensor(), inv_scale, d.scalars);
  if (dynamic)
    ops::amp_update_scale_(d.scale, d.tracker, d.found_inf, dynamic->scale_factor(),
                           1.0 / dynamic->scale_factor(), dynamic->scale_window(),
                           dynamic->options().min_scale);
  if (reducer && backbone_) nn::all_reduce_buffers(*backbone_);  // every rank's BatchNorm statistics

  ++attempted_;
  std::unique_ptr<InFlight> f;
  if (d.spare.empty()) f = std::make_unique<InFlight>();
  else {
    f = std::move(d.spare.back());
    d.spare.pop_back();
  }
  last_ = StepInfo{.step = attempted_};  // the loss scale and lr are filled in as it completes
  fill_telemetry(counters_before);
  f->info = last_;
  f->queued_at = attempted_;
  f->data_parallel = reducer != nullptr;
  f->flag.request(d.found_inf);
  if (reducer) f->local_flag.request(d.local_inf);
  else d.local_inf = Tensor();
  f->loss.request(loss);
  d.in_flight.push_back(std::move(f));
  return loss;
}

}  // namespace mixprec::amp
