// The train step on a device (TrainOneStepCell, amp.h): the loss scale, growth tracker and
// found-inf flag are one-element tensors on the parameters' device; the finite check, the skip,
// the optimizer's update and the dynamic scale's adaptation are the multi-tensor ops of
// ops/amp_device.h, queued there, so the host reads nothing while it queues a step. The flag and
// the loss come back through cuda::Readback; sync() completes the StepInfo, the counters, the
// optimizer's step count and the manager's (host) state from them, exactly as the host step
// would have, and a later step starts with sync(), so the learning rate is the same as well.
// Data parallel: the gradients go through the reducer's buckets (NCCL on a GPU), the found-inf
// flag of this rank's own gradients and loss becomes every rank's by an all-reduce max on the
// device, and the loss the mean over the ranks, as the host step's consensus does.
#include <cmath>
#include <cstdio>
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
bool g_device_step_on_cpu = false;

// A one-element value of `t` read on the host: on a GPU through a Readback (queued now, read
// when needed), on the CPU at once.
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
  double wait() {  // polls: the copy was queued behind the step
    while (!value_) {
      value_ = readback_->poll();
      if (!value_) std::this_thread::yield();
    }
    return *value_;
  }

 private:
  std::unique_ptr<cuda::Readback> readback_;
  std::optional<double> value_;
};
}  // namespace

void testing::set_device_step_on_cpu(bool on) { g_device_step_on_cpu = on; }

struct detail::DeviceStep {
  Device device;
  Tensor found_inf, scale, tracker, one;  // f32, f32, i32, f32: shape []
  Tensor local_inf;                       // data parallel: this rank's flag before the consensus
  LossScaleState mirrored;                // the manager's state the device tensors hold
  bool pending = false;
  StepInfo info;  // the pending step's, less what the flag and the loss tell
  Pending flag, local_flag, loss;
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
  if (!device_ || !device_->pending) return;
  const double flag = device_->flag.wait(), loss = device_->loss.wait();
  const double local = device_->local_inf.defined() ? device_->local_flag.wait() : flag;
  device_->pending = false;
  resolve_device_step(flag, local, loss);
}

// What the host step decides after its finite check, from the flag the device computed.
void TrainOneStepCell::resolve_device_step(double found_inf, double local_found_inf, double loss) const {
  StepInfo s = device_->info;
  s.loss = loss;
  s.loss_finite = std::isfinite(loss);
  s.overflow = found_inf != 0.0;
  s.local_overflow = local_found_inf != 0.0;
  s.skipped = s.overflow && (manager_ ? manager_->get_drop_overflow_update() : false);
  last_ = s;
  if (s.skipped) {
    ++skipped_;
  } else {
    if (s.overflow && communication::get_rank() == 0)
      std::fprintf(stderr, "mixprec: warning: step %lld applied an update with non-finite gradients "
                   "(drop_overflow_update is false)\n", static_cast<long long>(s.step));
    optimizer_.set_global_step(optimizer_.global_step() + 1);
  }
  if (manager_) {
    manager_->update_loss_scale(s.overflow, s.loss_finite);  // throws after too many overflows
    device_->mirrored = manager_->state();
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

bool same_state(const LossScaleState& a, const LossScaleState& b) {
  return a.scale == b.scale && a.good_steps == b.good_steps;
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
  sync();  // the previous step's outcome: counters, step count (the learning rate), the scale
  const Device dev = device();
  check_device_options(options_, reducer_ != nullptr, dev);
  auto* dynamic = dynamic_cast<DynamicLossScaleManager*>(manager_.get());
  if (dynamic)
    MIXPREC_CHECK(dynamic->options().max_scale == DynamicLossScaleOptions{}.max_scale,
                  "TrainOneStepCell: a maximum loss scale is not available on a device yet");
  if (!device_ || device_->device != dev) {
    device_ = std::make_shared<detail::DeviceStep>();
    device_->device = dev;
    device_->found_inf = zeros({}, {.device = dev});
    device_->scale = zeros({}, {.device = dev});
    device_->tracker = zeros({}, {.dtype = DType::i32, .device = dev});
    device_->one = full({}, 1.0, {.device = dev});
    device_->mirrored.scale = -1;  // uploaded below
  }
  detail::DeviceStep& d = *device_;
  if (manager_ && !same_state(manager_->state(), d.mirrored)) {  // new, or set_state (a resume)
    d.scale.fill_(manager_->state().scale);
    d.tracker.fill_(static_cast<double>(manager_->state().good_steps));
    d.mirrored = manager_->state();
  }
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
  optimizer_.fused_step(grads, drop ? d.found_inf : Tensor(), inv_scale, optimizer_.global_step());
  if (dynamic)
    ops::amp_update_scale_(d.scale, d.tracker, d.found_inf, dynamic->scale_factor(),
                           1.0 / dynamic->scale_factor(), dynamic->scale_window(),
                           dynamic->options().min_scale);
  if (reducer && backbone_) nn::all_reduce_buffers(*backbone_);  // every rank's BatchNorm statistics

  ++attempted_;
  const double scale = manager_ ? manager_->get_loss_scale() : 1.0;
  last_ = StepInfo{.step = attempted_, .loss_scale = scale, .lr = optimizer_.learning_rate()};
  fill_telemetry(counters_before);
  d.info = last_;
  d.flag.request(d.found_inf);
  if (reducer) d.local_flag.request(d.local_inf);
  else d.local_inf = Tensor();
  d.loss.request(loss);
  d.pending = true;
  return loss;
}

}  // namespace mixprec::amp
