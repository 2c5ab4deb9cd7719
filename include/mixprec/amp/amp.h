// Automatic mixed precision, the seed's mindspore.amp in C++: levels O0-O3 and auto, the white
// and black lists, auto_mixed_precision / custom_mixed_precision, build_train_network with
// MindSpore's per-level defaults, the train-one-step cell that scales the loss, checks the
// gradients in a read-only pass, skips overflowing updates and unscales inside the optimizer's
// update pass (docs/design.md, decision 6), and the precision table of what actually ran. The
// mechanism (thread-local autocast consulted by every op) lives in ops/autocast.h; this layer
// sets the policy (levels: amp/level.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/amp/level.h"
#include "mixprec/amp/loss_scale.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/graph/plan.h"
#include "mixprec/nn/cell.h"
#include "mixprec/nn/distributed.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/numerics.h"
#include "mixprec/optim/optimizer.h"
#include "mixprec/handle.h"

namespace mixprec::amp {

using Level = AmpLevel;
using mixprec::parse_amp_level;

// The low dtype when none is given: bf16 on the CPU (MindSpore's default there; which 16-bit type
// is faster on a given CPU is measured by amp::measure_precision_rates), f16 on CUDA.
DType default_low_dtype(Device device = Device::cpu());

// Op names cast to low precision at O1 / auto (conv, matmul/dense, ReLU) and kept in fp32 at O2
// / auto (norms, softmax, log-softmax, exp/log/pow, reductions, losses).
std::vector<std::string> get_white_list();
std::vector<std::string> get_black_list();

// Sets `network`'s AMP configuration for `level` (MindSpore's auto_mixed_precision): O1 casts
// white-list ops to `dtype` and their outputs back to fp32; O2 runs everything but the black
// list in `dtype` with BatchNorm/LayerNorm in fp32; O3 runs everything in `dtype`; auto is
// op-level autocast. The network's output is cast to fp32 at O1-O3.
void auto_mixed_precision(nn::Cell& network, std::string_view level, DType dtype = DType::bf16);
void auto_mixed_precision(nn::Cell& network, Level level, DType dtype = DType::bf16,
                          std::optional<bool> keep_batchnorm_fp32 = std::nullopt);

// Exactly one list: white_list behaves like O1 with these ops, black_list like O2 with these
// ops in fp32. Names are op names (conv2d, linear, matmul, batch_norm, softmax...) or MindSpore
// cell names (Conv2d, Dense, BatchNorm2d, LayerNorm, Softmax, ReLU...). Every accepted name
// changes what runs; a name that could not is refused with the reason: layout ops (view, cast,
// concat, dropout...) on either list, and on the white list the ops whose arithmetic is always
// fp32 (softmax, log_softmax, sum, mean), which O1 would only round.
struct CustomLists {
  std::vector<std::string> white_list{};
  std::vector<std::string> black_list{};
};
void custom_mixed_precision(nn::Cell& network, const CustomLists& lists, DType dtype = DType::bf16);

// ---------------------------------------------------------------- the train step

// Statistics of one parameter's (unscaled) gradient.
struct GradStats {
  std::string param;
  double max_abs = 0.0;
  double underflow_fraction = 0.0;  // nonzero values that would round to 0 in f16 unscaled
  double zero_fraction = 0.0;       // values that are exactly 0
  double recommended_scale = 1.0;   // largest power of 2 keeping max_abs * scale <= 2^15
};
// `scale` multiplies the gradient first (1 / loss scale for a still-scaled gradient).
GradStats gradient_stats(const std::string& name, const Tensor& grad, double scale = 1.0);

struct StepInfo {
  int64_t step = 0;             // attempted steps so far (applied + skipped)
  double loss = 0.0;            // the unscaled fp32 loss
  bool loss_finite = true;      // false: NaN/inf already in the forward pass
  bool overflow = false;        // some gradient (or the loss) was not finite (on any rank)
  bool local_overflow = false;  // ... on this rank (data parallel; equals overflow otherwise)
  bool skipped = false;         // the update was not applied
  double loss_scale = 1.0;      // the scale used for this step
  double lr = 0.0;              // the learning rate of this step
  double grad_norm = -1.0;      // global norm after unscaling, when clipping is on
  // Overflow provenance: the first op whose output held inf/NaN (on overflow steps, or on
  // every step with check_numerics).
  std::optional<NonFiniteEvent> event{};
  // AMP telemetry of the forward pass.
  int64_t casts = 0;
  int64_t cast_bytes = 0;
  double low_flops_fraction = 0.0;
  std::vector<GradStats> grad_stats{};  // when requested this step
};

struct TrainStepOptions {
  double max_grad_norm = 0.0;    // > 0: clip by global norm (after unscaling)
  int accumulation_steps = 1;    // micro-batches per update (unscaled once, at the boundary)
  bool check_numerics = false;   // check every op of every step for inf/NaN (slower)
  bool provenance = true;        // on an overflow, replay the step with checks to name the op
  int64_t grad_stats_every = 0;  // > 0: gradient statistics every N steps
};

// What GRAPH_MODE did with a train step's calls (set_context({.mode = Mode::graph})).
struct GraphModeInfo {
  int64_t eager_steps = 0;  // run eagerly: a key's first step, fallbacks, pynative mode
  int64_t captures = 0;     // a key's second step: run eagerly while recorded
  int64_t replays = 0;      // run from a plan
  std::string fallback;     // why the last step that could not be captured was not ("" if none)
  graph::PlanStats plan{};  // the last plan made
};

namespace detail {
struct StepCore;  // the step's state and stages (src/amp/step/)
}

// network_with_loss(data, label) -> scalar loss; one call = one micro-batch.
// In data-parallel mode (is_data_parallel() when it is built) the cell reduces the gradients with
// an nn::DistributedGradReducer whose all-reduces start during backward (at the last micro-batch
// of an accumulation), combines the finite flags of all ranks (MAX all-reduce) before the manager
// sees them, clips by the norm of the reduced gradients, reports the loss averaged over the
// ranks, agrees on one overflow event (that of the lowest rank that had one), and averages
// BatchNorm statistics after each update, so that every rank keeps identical state.
// The step is one pipeline of stages (docs/design.md, "The train step"). On a CUDA device (the
// parameters' device; to() moves them) its decisions stay on the device: the found-inf flag is a
// device tensor, the finite check, the skip, the update and the manager's scale rule (on its own
// state tensors, which follow the step) are multi-tensor ops there (ops/amp_device.h), and the
// host reads nothing while it queues the step; the flag and the loss come back through
// cuda::Readback and complete the StepInfo when it is read (last_step(), skipped_steps()), polled
// (poll_steps(), the next step), or when kStepsInFlight steps are queued. The optimizer's step
// count is kept on the device as well, so a step's learning rate never waits for the previous
// step's outcome. There the step supports data parallel (NCCL), gradient accumulation, clipping,
// gradient statistics, check_numerics (each op's output read back as it runs) and every optimizer
// (Momentum, SGD, Adam, AdamW); no overflow provenance replay (docs/cuda.md).
class TrainOneStepCell : public nn::Cell {
 public:
  // The manager is a value (copied in), a shared_ptr (shared), or nullptr (no loss scaling).
  TrainOneStepCell(nn::Cell& network_with_loss, optim::Optimizer& optimizer,
                   Handle<LossScaleManager> manager = nullptr, TrainStepOptions options = {});
  ~TrainOneStepCell() override;
  // Runs forward, backward, the finite check of the (still scaled) gradients and, unless the
  // step is skipped, the optimizer's update, which unscales them as it applies them. Returns the
  // unscaled loss.
  Tensor construct(const Tensor& data, const Tensor& label) override;
  std::string type_name() const override { return "TrainOneStepCell"; }
  // The last step's outcome (a device step's waits for its flag and loss: see above).
  const StepInfo& last_step() const;
  LossScaleManager* loss_scale_manager() const;
  optim::Optimizer& optimizer() const;
  nn::Cell& network() const;
  int64_t skipped_steps() const;
  // Moves the network (with its loss cell), the optimizer's state and working copies and the
  // loss-scaling state to `device` (nn::Cell::to, optim::Optimizer::to). train::Model does it
  // for the context's device. Returns *this.
  TrainOneStepCell& to(Device device);
  // Where the step runs: the parameters' device.
  Device device() const;
  // Completes every device step in flight: its StepInfo, the counters, the optimizer's step count
  // and the manager's counters, waiting for the flags and losses not back yet; nothing otherwise.
  void sync() const;
  // Without waiting: completes the device steps whose flag and loss are back, oldest first, and
  // returns the number of completed steps (attempted_steps() for the host step).
  int64_t poll_steps() const;
  // The outcome of completed step k (1-based): one of the last kKeptOutcomes completed device
  // steps, or the last step of the host step. Throws for another k.
  const StepInfo& completed_step(int64_t k) const;
  // True when construct() returns before the step's outcome is known (the device step).
  bool steps_complete_later() const;
  // Device steps queued before the host waits for the oldest; outcomes kept for completed_step().
  static constexpr size_t kStepsInFlight = 3;
  static constexpr size_t kKeptOutcomes = 2 * kStepsInFlight;
  int64_t attempted_steps() const;
  void set_counters(int64_t attempted, int64_t skipped);
  void take_ownership(std::shared_ptr<nn::Cell> cell);
  // The network inside the loss wrapper: its buffers are restored after a provenance replay and
  // its parameter names label the gradient statistics.
  void set_backbone(nn::Cell& backbone);
  TrainStepOptions& options();
  // The data-parallel reducer (null outside data-parallel mode).
  nn::DistributedGradReducer* grad_reducer() const;
  // What every rank must hold identically: each parameter, buffer and optimizer state tensor, the
  // loss-scale state, the optimizer step and the step counters.
  std::vector<comm::RankCheckEntry> rank_check_entries() const;
  // Compares rank_check_entries() across the ranks; throws comm::RankMismatchError naming the
  // first value that differs. `when` names the moment ("step 20"). Collective.
  void check_ranks(const std::string& when) const;
  // GRAPH_MODE: what the step's calls did so far (all zero in pynative mode).
  const GraphModeInfo& graph_mode_info() const;

 private:
  std::unique_ptr<detail::StepCore> core_;
};

struct BuildOptions {
  std::optional<bool> keep_batchnorm_fp32{};  // level default: true at O2, false otherwise
  // The low dtype (f16 or bf16; default bf16 on CPU). f32 turns the level's casts off.
  std::optional<DType> cast_model_type{};
  // Level default when not set: DynamicLossScaleManager(2^24, 2, 2000) at O2, none otherwise.
  // Taken as train::ModelOptions takes it: a value (`FixedLossScaleManager(1024.0, {...})`, copied
  // in; read its state back with loss_scale_manager() on the returned cell), a shared_ptr
  // (shared with the caller), or nullptr for no loss scaling.
  std::optional<Handle<LossScaleManager>> loss_scale_manager{};
  TrainStepOptions step{};
};

// MindSpore's amp.build_train_network: applies the level to `network`, wraps it with the loss
// (casting the output, and a floating label, to fp32 at O1-O3), attaches fp32-master/low-copy
// weights to the optimizer at O2/O3, and returns the train-step cell. At O0 the network's AMP
// configuration is left as it is (MindSpore: "O0: do not change"), so a network the caller set
// up with auto_mixed_precision keeps it.
std::shared_ptr<TrainOneStepCell> build_train_network(nn::Cell& network,
                                                      optim::Optimizer& optimizer,
                                                      nn::Cell& loss_fn, std::string_view level,
                                                      BuildOptions options = {});

// ---------------------------------------------------------------- precision table

struct PrecisionRow {
  std::string cell;  // path, e.g. "features.0"
  std::string type;  // "Conv2d"
  std::vector<std::string> ops;
  std::string compute;  // dtypes the arithmetic ran in ("bf16", "f32", "bf16+f32")
  std::string weights;  // dtypes the parameters were used in ("-" if none)
  std::string output;   // dtype of the cell's last op output (the network row: what it returns)
};

// Runs `network` once on `sample` (no grad) and reports, per cell, what actually executed.
std::vector<PrecisionRow> precision_table(nn::Cell& network, const Tensor& sample);
std::string format_precision_table(const std::vector<PrecisionRow>& rows);

}  // namespace mixprec::amp
