// The train step's insides (TrainOneStepCell, amp.h), one pipeline of named stages over one
// state (docs/design.md, "The train step"):
//
//   forward+backward of loss * scale     eager, a replayed plan (graph.cpp), or eager with the
//        |                               data-parallel reducer's all-reduces during backward
//   accumulate                           micro-batches summed until the boundary
//   check          -> found-inf flag     one read-only pass over the (scaled) gradients and loss
//   agree          (data parallel)       every rank's flag, the mean loss
//   clip           (max_grad_norm > 0)   the global norm of the unscaled gradients
//   diagnose       (host)                overflow provenance, check_numerics, gradient statistics
//   update                               the optimizer's fused update, unscaling as it reads;
//        |                               skipped when the flag is set (drop_overflow_update)
//   sync buffers   (data parallel)       every rank's BatchNorm statistics
//   adapt                                the manager's scale rule, the step count
//   record                               the StepInfo: at once, or when the flag is back
//
// pipeline.cpp runs the stages in that order. What differs between a step whose flag the host
// reads at once (on the CPU a read is free: host.cpp) and one whose flag stays on the device
// while the host queues the next steps (device.cpp) is a Decisions strategy; graph.cpp and
// forward_backward.cpp produce the gradients. Adding a stage: docs/design.md's checklist.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/consensus.h"
#include "mixprec/amp/amp.h"

namespace mixprec::amp::detail {

struct StepGraphs;   // the cell's plans by key (graph.cpp)
struct DeviceState;  // the device strategy's tensors and steps in flight (device.cpp)

// One call of construct(): what the stages hand each other.
struct StepRun {
  const Tensor& data;
  const Tensor& label;
  double scale = 1.0;  // the loss scale this step multiplies by (host decisions: read at once)
  Tensor scale_t;      // ... as the manager's f32 tensor (device decisions: read there)
  std::pair<uint64_t, uint64_t> rng_before{};
  AmpCounters counters_before{};
  nn::DistributedGradReducer* reducer = nullptr;  // data parallel, at the accumulation boundary
  Tensor loss;                                    // the unscaled f32 loss, detached
  std::vector<Tensor> grads;                      // the scaled gradients (the reduced ones)
  std::optional<NumericsCheckScope> always;       // check_numerics
  // Host decisions.
  double loss_value = 0.0;
  bool finite = true, loss_finite = true, local_overflow = false, overflow = false, skip = false;
  double unscale = 1.0;     // 1 / (scale * micro-batches), in f64
  double grad_scale = 1.0;  // multiplies each gradient in the update: unscale, clipped
  double norm = -1.0;
  // Device decisions.
  Tensor inv_scale;                   // f32 [], the update's gradient multiplier
  bool clipped = false;               // inv_scale is the clip stage's
  std::vector<GradStats> grad_stats;  // this step's gradient statistics, for its StepInfo
  // The device strategy's check_numerics event, as forward+backward left it (the host strategy
  // reads r.always in its diagnose stage, before any later stage's op could add one).
  std::optional<NonFiniteEvent> event{};
};

// The cell's state: the network and optimizer it steps, the manager, the options and counters.
struct StepCore {
  StepCore(nn::Cell& net, optim::Optimizer& opt, Handle<LossScaleManager> m, TrainStepOptions o)
      : network(net), optimizer(opt), manager(std::move(m)), options(o) {}
  nn::Cell& network;
  nn::Cell* backbone = nullptr;
  std::vector<std::string> param_names;
  optim::Optimizer& optimizer;
  Handle<LossScaleManager> manager;
  TrainStepOptions options;
  std::unique_ptr<nn::DistributedGradReducer> reducer;
  std::vector<Tensor> accumulated;
  int micro = 0;
  int64_t attempted = 0;
  int64_t skipped = 0;
  StepInfo last;
  std::vector<std::shared_ptr<nn::Cell>> owned;
  std::shared_ptr<StepGraphs> graphs;
  std::shared_ptr<DeviceState> device;

  std::string param_name(size_t i) const {
    return i < param_names.size() ? param_names[i] : "param" + std::to_string(i);
  }
  // Where the step runs: the parameters' device.
  Device where() const { return optimizer.parameters().front().device(); }
};

// ---------------------------------------------------------------- the strategies

// How the stages that read the found-inf flag take their decisions.
class Decisions {
 public:
  virtual ~Decisions() = default;
  // Before forward: room for the step (device: steps in flight), the scale it multiplies by.
  virtual void begin(StepCore& c, StepRun& r) = 0;
  // The flag from one read-only pass over the loss and the (scaled) gradients.
  virtual void check(StepCore& c, StepRun& r) = 0;
  // Data parallel: every rank's flag, and the loss averaged over the ranks.
  virtual void agree(StepCore& c, StepRun& r) = 0;
  // Clipping by the global norm of the unscaled gradients (options.max_grad_norm > 0).
  virtual void clip(StepCore& c, StepRun& r) = 0;
  // The optimizer's update (unless skipped), unscaling by 1 / (scale * micro-batches).
  virtual void update(StepCore& c, StepRun& r) = 0;
  // The manager's scale rule and the step count, then the StepInfo; returns the loss.
  virtual Tensor record(StepCore& c, StepRun& r) = 0;
  // True when the flag and loss are known on the host as soon as the step ran.
  virtual bool reads_at_once() const = 0;
};
Decisions& host_decisions();
Decisions& device_decisions();
// Whether the step takes its decisions on the device: a CUDA parameter, or the test switch.
bool decides_on_device(const StepCore& c);

// ---------------------------------------------------------------- the stages

// The pipeline (pipeline.cpp).
Tensor run_step(StepCore& c, const Tensor& data, const Tensor& label);

// Forward + backward of loss * scale (forward_backward.cpp): the loss and the scaled gradients,
// reduced when r.reducer is set (begun by the caller).
void forward_backward(StepCore& c, StepRun& r);
// The same forward and backward with the non-finite checker on, to name the first op that
// produced inf/NaN; changes nothing (the RNG is rewound and the buffers restored).
std::optional<NonFiniteEvent> replay_with_checks(StepCore& c, StepRun& r);
void check_scalar_loss(const Tensor& loss);

// GRAPH_MODE (graph.cpp): true when this step's forward and backward come from a plan; then
// graph_forward_backward produces them.
bool graph_mode_applies(StepCore& c, const nn::DistributedGradReducer* reducer);
const GraphModeInfo& graph_mode_info(const StepCore& c);
void graph_forward_backward(StepCore& c, StepRun& r);

// Data parallel: every rank takes the event of the lowest rank that has one (stages.cpp).
void agree_on_event(std::optional<NonFiniteEvent>& event);
// The AMP telemetry of the forward pass since `before`.
void fill_telemetry(StepInfo& s, const AmpCounters& before);
// "applied an update with non-finite gradients" (drop_overflow_update false), once per step.
void warn_applied_overflow(int64_t step);

// The device strategy's queue (device.cpp): completes what is back (or waits).
void device_sync(const StepCore& c);
int64_t device_poll(const StepCore& c);
const StepInfo* device_completed_step(const StepCore& c, int64_t k);
void device_forget(StepCore& c);  // after a move: its tensors are remade at the next step

// The manager's state tensors and outcome counting, for the step (loss_scale.cpp).
struct ScaleAccess {
  static const Tensor& scale(const LossScaleManager& m) { return m.scale_; }
  static void to(LossScaleManager& m, Device device);
  // Queues the scale rule on the state tensors from `found_inf` (nothing read on the host).
  static void adapt(LossScaleManager& m, const Tensor& found_inf) { m.adapt(found_inf); }
  // Counts one step's outcome (throws after too many overflows in a row), unless the state was
  // set since the step was queued (`generation` then differs).
  static void count(LossScaleManager& m, bool overflow, bool loss_finite, int64_t generation);
  static int64_t generation(const LossScaleManager& m) { return m.generation_; }
};

}  // namespace mixprec::amp::detail
