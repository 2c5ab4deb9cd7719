// The train-step cell's public face (TrainOneStepCell, amp.h) over its state and pipeline
// (step.h), the rank checks of what every rank must hold alike, and build_train_network.
#include <map>
#include <utility>

#include "amp/apply_level.h"
#include "amp/step/step.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "mixprec/nn/loss.h"
#include "mixprec/ops/ops.h"
#include "mixprec/rng.h"

namespace mixprec::amp {
namespace {

// loss_fn(fp32(network(data)), fp32(label)) — MindSpore's _add_loss_network for O1-O3/auto.
class CastWithLossCell : public nn::Cell {
 public:
  // Like nn::WithLossCell, the backbone is not registered as a child (it keeps its own paths).
  CastWithLossCell(nn::Cell& net, nn::Cell& loss) : net_(net), loss_(loss) {}
  Tensor construct(const Tensor& data, const Tensor& label) override {
    Tensor out = net_(data);
    if (is_low_precision(out.dtype())) out = ops::amp_cast(out, DType::f32);
    const Tensor l = is_low_precision(label.dtype()) ? ops::amp_cast(label, DType::f32) : label;
    return loss_(out, l);
  }
  std::string type_name() const override { return "WithLossCell"; }

 private:
  nn::Cell& net_;
  nn::Cell& loss_;
};

}  // namespace

TrainOneStepCell::TrainOneStepCell(nn::Cell& net, optim::Optimizer& opt,
                                   Handle<LossScaleManager> manager, TrainStepOptions options)
    : core_(std::make_unique<detail::StepCore>(net, opt, std::move(manager), options)) {
  MIXPREC_CHECK(options.accumulation_steps >= 1,
                "TrainOneStepCell: accumulation_steps must be >= 1, got ",
                options.accumulation_steps);
  MIXPREC_CHECK(options.max_grad_norm >= 0, "TrainOneStepCell: max_grad_norm must be >= 0");
  if (is_data_parallel()) {
    core_->reducer =
        std::make_unique<nn::DistributedGradReducer>(opt.parameters());  // broadcasts them
    opt.refresh_working_copies();
  }
}

TrainOneStepCell::~TrainOneStepCell() = default;

Tensor TrainOneStepCell::construct(const Tensor& data, const Tensor& label) {
  return detail::run_step(*core_, data, label);
}

const StepInfo& TrainOneStepCell::last_step() const {
  sync();
  return core_->last;
}
LossScaleManager* TrainOneStepCell::loss_scale_manager() const { return core_->manager.get(); }
optim::Optimizer& TrainOneStepCell::optimizer() const { return core_->optimizer; }
nn::Cell& TrainOneStepCell::network() const { return core_->network; }
int64_t TrainOneStepCell::skipped_steps() const {
  sync();
  return core_->skipped;
}
int64_t TrainOneStepCell::attempted_steps() const { return core_->attempted; }
void TrainOneStepCell::set_counters(int64_t attempted, int64_t skipped) {
  core_->attempted = attempted;
  core_->skipped = skipped;
}
void TrainOneStepCell::take_ownership(std::shared_ptr<nn::Cell> cell) {
  core_->owned.push_back(std::move(cell));
}
TrainStepOptions& TrainOneStepCell::options() { return core_->options; }
nn::DistributedGradReducer* TrainOneStepCell::grad_reducer() const { return core_->reducer.get(); }
const GraphModeInfo& TrainOneStepCell::graph_mode_info() const {
  return detail::graph_mode_info(*core_);
}
Device TrainOneStepCell::device() const { return core_->where(); }
bool TrainOneStepCell::steps_complete_later() const { return detail::decides_on_device(*core_); }
void TrainOneStepCell::sync() const { detail::device_sync(*core_); }
int64_t TrainOneStepCell::poll_steps() const { return detail::device_poll(*core_); }

const StepInfo& TrainOneStepCell::completed_step(int64_t k) const {
  if (!core_->device || !detail::decides_on_device(*core_)) {
    MIXPREC_CHECK(k == core_->attempted, "TrainOneStepCell::completed_step: only the last step (",
                  core_->attempted, ") is kept on the host, asked for ", k);
    return core_->last;
  }
  const StepInfo* s = detail::device_completed_step(*core_, k);
  MIXPREC_CHECK(s != nullptr, "TrainOneStepCell::completed_step: step ", k,
                " is not among the completed steps kept (", kKeptOutcomes, " at most)");
  return *s;
}

TrainOneStepCell& TrainOneStepCell::to(Device device) {
  sync();
  detail::StepCore& c = *core_;
  c.network.to(device);
  if (c.backbone) c.backbone->to(device);  // WithLossCell does not register the backbone
  c.optimizer.to(device);
  if (c.manager) detail::ScaleAccess::to(*c.manager, device);
  if (c.device && c.where() != device) detail::device_forget(c);  // remade at the next step
  return *this;
}

void TrainOneStepCell::set_backbone(nn::Cell& backbone) {
  detail::StepCore& c = *core_;
  c.backbone = &backbone;
  c.param_names.clear();
  std::map<const TensorImpl*, std::string> names;
  for (auto& [n, t] : backbone.parameters_and_names()) names.emplace(t.impl(), n);
  for (const Tensor& p : c.optimizer.parameters()) {
    auto it = names.find(p.impl());
    c.param_names.push_back(it == names.end() ? "param" + std::to_string(c.param_names.size())
                                              : it->second);
  }
  if (c.reducer) {  // every rank starts from rank 0's weights and statistics
    nn::broadcast_cell(backbone);
    c.optimizer.refresh_working_copies();
  }
}

std::vector<comm::RankCheckEntry> TrainOneStepCell::rank_check_entries() const {
  sync();  // device steps in flight complete first: the counters and the scale are then current
  std::vector<comm::RankCheckEntry> e;
  const detail::StepCore& c = *core_;
  const std::vector<Tensor>& params = c.optimizer.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    e.push_back(comm::tensor_entry(
        "parameter " + (i < c.param_names.size() ? c.param_names[i] : std::to_string(i)),
        params[i].detach()));
  if (c.backbone)
    for (auto& [name, b] : c.backbone->buffers_and_names())
      e.push_back(comm::tensor_entry("buffer " + name, b.detach()));
  for (const optim::NamedState& st : c.optimizer.state())
    e.push_back(comm::tensor_entry("optimizer state " + st.name, st.tensor));
  if (c.manager) {
    const LossScaleState ls = c.manager->state();
    e.push_back(comm::number_entry("loss scale", ls.scale));
    e.push_back(comm::number_entry("loss scale good steps", static_cast<double>(ls.good_steps)));
    e.push_back(comm::number_entry("loss scale consecutive overflows",
                                   static_cast<double>(ls.consecutive_overflows)));
    e.push_back(
        comm::number_entry("loss scale total overflows", static_cast<double>(ls.total_overflows)));
  }
  e.push_back(comm::number_entry("optimizer step", static_cast<double>(c.optimizer.global_step())));
  e.push_back(comm::number_entry("attempted steps", static_cast<double>(c.attempted)));
  e.push_back(comm::number_entry("skipped steps", static_cast<double>(c.skipped)));
  return e;
}

void TrainOneStepCell::check_ranks(const std::string& when) const {
  comm::check_same_on_all_ranks(rank_check_entries(), when);
}

namespace detail {
AppliedLevel apply_level(nn::Cell& network, std::string_view level_name,
                         std::optional<DType> cast_model_type,
                         std::optional<bool> keep_batchnorm_fp32, std::string_view what) {
  const Level level = parse_amp_level(level_name);
  const DType low = cast_model_type.value_or(default_low_dtype());
  MIXPREC_CHECK(is_low_precision(low) || low == DType::f32, what, " must be f16, bf16 or f32, got ",
                dtype_name(low));
  if (level != Level::O0)
    auto_mixed_precision(network, level, low, keep_batchnorm_fp32.value_or(level == Level::O2));
  return {level, low};
}
}  // namespace detail

std::shared_ptr<TrainOneStepCell> build_train_network(nn::Cell& network,
                                                      optim::Optimizer& optimizer,
                                                      nn::Cell& loss_fn,
                                                      std::string_view level_name,
                                                      BuildOptions options) {
  const auto [level, low] =
      detail::apply_level(network, level_name, options.cast_model_type, options.keep_batchnorm_fp32,
                          "build_train_network: cast_model_type");

  Handle<LossScaleManager> manager;
  if (options.loss_scale_manager)
    manager = *options.loss_scale_manager;
  else if (level == Level::O2 && low != DType::f32)
    manager = DynamicLossScaleManager();

  // O2/O3: fp32 masters stay with the optimizer; the low working copies it refreshes in its
  // update pass are what the forward pass uses (persistent cast-cache entries).
  nn::AmpConfig* config = network.mutable_amp_config();
  if (config && (level == Level::O2 || level == Level::O3))
    optimizer.attach_working_copies(config->cache.get(), low);
  else
    optimizer.detach_working_copies();

  std::shared_ptr<nn::Cell> with_loss;
  if (!network.amp_config())
    with_loss = std::make_shared<nn::WithLossCell>(network, loss_fn);
  else
    with_loss = std::make_shared<CastWithLossCell>(network, loss_fn);
  auto step = std::make_shared<TrainOneStepCell>(*with_loss, optimizer, manager, options.step);
  step->take_ownership(with_loss);
  step->set_backbone(network);
  return step;
}

}  // namespace mixprec::amp
