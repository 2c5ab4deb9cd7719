// The train step (TrainOneStepCell) and build_train_network. A step: forward in the network's
// AMP configuration, loss in fp32, backward of loss * scale into captured gradients, one fused
// unscale-and-check pass, optional global-norm clipping, then the optimizer unless the step is
// skipped; the manager then adapts the scale. A skipped step touches nothing else: weights,
// optimizer state, step count and learning-rate schedule stay as they were. Data parallel: the
// gradients are reduced across ranks during backward and the ranks decide together (amp.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

#include "mixprec/amp/amp.h"
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

// Global L2 norm of the gradients times `scale` (the unscaling is applied before squaring, so a
// large loss scale cannot overflow the sum of squares). Squares are summed in f64 over fixed
// chunks combined in order, so every rank (whatever its thread count) gets the same norm from the
// same reduced gradients.
double global_norm(const std::vector<Tensor>& grads, double scale) {
  constexpr int64_t kChunk = 4096;
  double sq = 0.0;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    const Tensor g32 = ops::amp_cast(g, DType::f32).contiguous();
    const float* p = g32.data<float>();
    const int64_t n = g32.numel(), chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> part(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < chunks; ++c) {
      double acc = 0.0;
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        const double v = static_cast<double>(p[i]) * scale;
        acc += v * v;
      }
      part[static_cast<size_t>(c)] = acc;
    }
    for (double v : part) sq += v;
  }
  return std::sqrt(sq);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// NonFiniteEvent <-> text, to hand one rank's event to the others.
constexpr char kSep = '\x1f';
std::string serialize(const NonFiniteEvent& e) {
  std::ostringstream o;
  o.precision(17);
  o << static_cast<int>(e.op) << kSep << e.op_name << kSep << e.cell << kSep << e.phase << kSep << e.detail << kSep
    << static_cast<int>(e.dtype) << kSep << e.input_max_abs << kSep << e.nonfinite_count << kSep << e.has_nan;
  return o.str();
}

NonFiniteEvent deserialize(const std::string& s) {
  std::vector<std::string> f;
  std::string cur;
  for (char c : s) {
    if (c == kSep) f.push_back(std::exchange(cur, {}));
    else cur += c;
  }
  f.push_back(cur);
  MIXPREC_ASSERT(f.size() == 9, "an overflow event from another rank has ", f.size(), " fields");
  return NonFiniteEvent{static_cast<OpId>(std::stoi(f[0])), f[1], f[2], f[3], f[4], static_cast<DType>(std::stoi(f[5])),
                        std::stod(f[6]), std::stoll(f[7]), f[8] == "1"};
}

// Data parallel: this rank's flags become every rank's (one MAX all-reduce, before the manager,
// clipping or the optimizer sees them) and the loss becomes the mean over the ranks.
void agree_across_ranks(nn::DistributedGradReducer& reducer, bool& finite, bool& loss_finite, double& loss_value) {
  const auto start = std::chrono::steady_clock::now();
  double flags[2] = {finite ? 0.0 : 1.0, loss_finite ? 0.0 : 1.0};
  detail::agree_on_flags(flags);
  finite = flags[0] == 0.0;
  loss_finite = flags[1] == 0.0;
  double mean_loss = loss_value / communication::get_group_size();
  comm::all_reduce_sum({&mean_loss, 1});
  loss_value = mean_loss;
  reducer.add_sync_seconds(seconds_since(start));
}

}  // namespace

void detail::check_scalar_loss(const Tensor& loss) {
  MIXPREC_CHECK(loss.numel() == 1, "train step: the loss must be a scalar, got shape ", shape_str(loss.shape()),
                Hint{"use a reduction (mean or sum) in the loss function"});
}

TrainOneStepCell::TrainOneStepCell(nn::Cell& net, optim::Optimizer& opt, Ref<LossScaleManager> manager,
                                   TrainStepOptions options)
    : network_(net), optimizer_(opt), manager_(std::move(manager)), options_(options) {
  MIXPREC_CHECK(options.accumulation_steps >= 1, "TrainOneStepCell: accumulation_steps must be >= 1, got ",
                options.accumulation_steps);
  MIXPREC_CHECK(options.max_grad_norm >= 0, "TrainOneStepCell: max_grad_norm must be >= 0");
  if (is_data_parallel()) {
    reducer_ = std::make_unique<nn::DistributedGradReducer>(optimizer_.parameters());  // broadcasts them
    optimizer_.refresh_working_copies();
  }
}

void TrainOneStepCell::set_backbone(nn::Cell& backbone) {
  backbone_ = &backbone;
  param_names_.clear();
  std::map<const TensorImpl*, std::string> names;
  for (auto& [n, t] : backbone.parameters_and_names()) names.emplace(t.impl(), n);
  for (const Tensor& p : optimizer_.parameters()) {
    auto it = names.find(p.impl());
    param_names_.push_back(it == names.end() ? "param" + std::to_string(param_names_.size()) : it->second);
  }
  if (reducer_) {  // every rank starts from rank 0's weights and statistics
    nn::broadcast_cell(backbone);
    optimizer_.refresh_working_copies();
  }
}

// Forward + backward of loss * scale; returns the captured (scaled) gradients. With a reducer
// (begun by the caller), each gradient goes to it as soon as it is final, plus what earlier
// micro-batches accumulated, and the reduced gradients are returned.
std::vector<Tensor> TrainOneStepCell::forward_backward(const Tensor& data, const Tensor& label, double scale,
                                                       double* loss_value, nn::DistributedGradReducer* reducer) {
  const std::vector<Tensor>& params = optimizer_.parameters();
  Tensor loss = network_(data, label);
  detail::check_scalar_loss(loss);
  if (loss_value) *loss_value = loss.item();
  const Tensor scaled = scale != 1.0 ? ops::mul(loss, scale) : loss;
  if (!reducer) return run_backward({scaled}, {Tensor()}, {.capture = &params});
  auto with_accumulated = [&](size_t i, const Tensor& g) {
    if (i >= accumulated_.size() || !accumulated_[i].defined()) return g;
    return g.defined() ? ops::add(accumulated_[i], g) : accumulated_[i];
  };
  std::vector<char> reported(params.size(), 0);
  std::vector<Tensor> grads =
      run_backward({scaled}, {Tensor()}, {.capture = &params, .on_capture_ready = [&](size_t i, const Tensor& g) {
                                            reported[i] = 1;
                                            reducer->ready(i, with_accumulated(i, g));
                                          }});
  for (size_t i = 0; i < grads.size(); ++i)
    if (!reported[i]) grads[i] = with_accumulated(i, grads[i]);
  return reducer->finish(grads);
}

// Data parallel: every rank takes the event of the lowest rank that has one (or none at all), so
// that what callbacks do with it (the guard's stop or promotion) is the same everywhere.
void TrainOneStepCell::agree_on_event(std::optional<NonFiniteEvent>& event) const {
  const int n = communication::get_group_size();
  double lowest = event ? static_cast<double>(n - communication::get_rank()) : 0.0;  // max = lowest rank
  comm::all_reduce_max({&lowest, 1});
  if (lowest == 0.0) {
    event.reset();
    return;
  }
  const int root = n - static_cast<int>(lowest);
  std::string text = root == communication::get_rank() ? serialize(*event) : std::string();
  comm::broadcast(text, root);
  event = deserialize(text);
}

std::vector<comm::RankCheckEntry> TrainOneStepCell::rank_check_entries() const {
  sync();  // device steps in flight complete first: the counters and the scale are then current
  std::vector<comm::RankCheckEntry> e;
  const std::vector<Tensor>& params = optimizer_.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    e.push_back(comm::tensor_entry("parameter " + (i < param_names_.size() ? param_names_[i] : std::to_string(i)),
                                   params[i].detach()));
  if (backbone_)
    for (auto& [name, b] : backbone_->buffers_and_names()) e.push_back(comm::tensor_entry("buffer " + name, b.detach()));
  for (const optim::NamedState& st : optimizer_.state()) e.push_back(comm::tensor_entry("optimizer state " + st.name, st.tensor));
  if (manager_) {
    const LossScaleState& ls = manager_->state();
    e.push_back(comm::number_entry("loss scale", ls.scale));
    e.push_back(comm::number_entry("loss scale good steps", static_cast<double>(ls.good_steps)));
    e.push_back(comm::number_entry("loss scale consecutive overflows", static_cast<double>(ls.consecutive_overflows)));
    e.push_back(comm::number_entry("loss scale total overflows", static_cast<double>(ls.total_overflows)));
  }
  e.push_back(comm::number_entry("optimizer step", static_cast<double>(optimizer_.global_step())));
  e.push_back(comm::number_entry("attempted steps", static_cast<double>(attempted_)));
  e.push_back(comm::number_entry("skipped steps", static_cast<double>(skipped_)));
  return e;
}

void TrainOneStepCell::check_ranks(const std::string& when) const {
  comm::check_same_on_all_ranks(rank_check_entries(), when);
}

// Replays the step's forward and backward with the non-finite checker on, to name the first op
// that produced inf/NaN. The RNG is rewound so dropout draws the same masks, and the backbone's
// buffers (BatchNorm running statistics) are restored afterwards, so the replay changes nothing.
std::optional<NonFiniteEvent> TrainOneStepCell::replay_with_checks(const Tensor& data, const Tensor& label,
                                                                   double scale,
                                                                   const std::pair<uint64_t, uint64_t>& rng_before) {
  Generator& gen = default_generator();
  const std::pair<uint64_t, uint64_t> rng_after{gen.seed(), gen.offset()};
  std::vector<std::pair<Tensor, Tensor>> saved;
  if (backbone_) {
    NoGradGuard ng;
    for (auto& [n, b] : backbone_->buffers_and_names()) saved.emplace_back(b, b.detach().clone());
  }
  gen.set_state(rng_before.first, rng_before.second);
  NumericsCheckScope check;
  {
    AmpCounters keep = amp_counters();
    (void)forward_backward(data, label, scale, nullptr);
    amp_counters() = keep;
  }
  gen.set_state(rng_after.first, rng_after.second);
  NoGradGuard ng;
  for (auto& [live, copy] : saved) live.detach().copy_(copy);
  return check.first();
}

void TrainOneStepCell::fill_telemetry(const AmpCounters& before) {
  const AmpCounters& now = amp_counters();
  last_.casts = now.casts - before.casts;
  last_.cast_bytes = now.cast_bytes - before.cast_bytes;
  const int64_t flops = now.flops - before.flops;
  last_.low_flops_fraction = flops > 0 ? static_cast<double>(now.low_flops - before.low_flops) / static_cast<double>(flops) : 0.0;
}

Tensor TrainOneStepCell::construct(const Tensor& data, const Tensor& label) {
  if (device_step_applies()) return device_construct(data, label);  // train_step_device.cpp
  const double scale = manager_ ? manager_->get_loss_scale() : 1.0;
  const Generator& gen = default_generator();
  const std::pair<uint64_t, uint64_t> rng_before{gen.seed(), gen.offset()};
  const AmpCounters counters_before = amp_counters();
  double loss_value = 0.0;
  std::optional<NumericsCheckScope> always;
  if (options_.check_numerics) always.emplace();
  // Data parallel: gradients are reduced at the last micro-batch of an accumulation only.
  const bool boundary = micro_ + 1 >= options_.accumulation_steps;
  nn::DistributedGradReducer* reducer = boundary ? reducer_.get() : nullptr;
  if (reducer) reducer->begin();
  std::vector<Tensor> grads = graph_mode_applies(reducer) ? graph_forward_backward(data, label, scale, &loss_value)
                                                           : forward_backward(data, label, scale, &loss_value, reducer);

  // Gradient accumulation: sum the (still scaled) micro-batch gradients (the reducer already
  // added the earlier ones to the last).
  if (options_.accumulation_steps > 1) {
    if (!reducer) {
      if (accumulated_.empty()) accumulated_ = grads;
      else
        for (size_t i = 0; i < grads.size(); ++i)
          if (grads[i].defined())
            accumulated_[i] = accumulated_[i].defined() ? ops::add(accumulated_[i], grads[i]) : grads[i];
    }
    if (++micro_ < options_.accumulation_steps) {
      last_ = StepInfo{.step = attempted_, .loss = loss_value, .loss_finite = std::isfinite(loss_value),
                       .loss_scale = scale, .lr = optimizer_.learning_rate()};
      fill_telemetry(counters_before);
      return full({}, loss_value);
    }
    if (!reducer) grads = std::move(accumulated_);
    accumulated_.clear();
    micro_ = 0;
  }

  // One read-only pass checks for inf/NaN (data parallel: done while packing the buckets, then
  // combined over the ranks before anything decides); the unscaling (by the scale times the
  // number of micro-batches, 1/x computed in f64) happens inside the optimizer's fused update pass.
  const double divisor = scale * options_.accumulation_steps;
  double grad_scale = 1.0 / divisor;
  bool finite = reducer ? reducer->local_finite() : unscale_and_check(grads, 1.0);  // skips undefined entries
  bool loss_finite = std::isfinite(loss_value);
  const bool local_overflow = !finite || !loss_finite;
  if (reducer) agree_across_ranks(*reducer, finite, loss_finite, loss_value);
  double norm = -1.0;
  if (finite && options_.max_grad_norm > 0) {
    norm = global_norm(grads, 1.0 / divisor);
    if (!std::isfinite(norm)) finite = false;
    else if (norm > options_.max_grad_norm) grad_scale *= options_.max_grad_norm / norm;
  }
  const bool overflow = !finite || !loss_finite;
  const bool skip = overflow && (manager_ ? manager_->get_drop_overflow_update() : false);
  ++attempted_;
  last_ = StepInfo{.step = attempted_, .loss = loss_value, .loss_finite = loss_finite, .overflow = overflow,
                   .local_overflow = reducer ? local_overflow : overflow, .skipped = skip, .loss_scale = scale,
                   .lr = optimizer_.learning_rate(), .grad_norm = norm};
  fill_telemetry(counters_before);
  if (always) last_.event = always->first();
  else if (local_overflow && options_.provenance && options_.accumulation_steps == 1)
    last_.event = replay_with_checks(data, label, scale, rng_before);
  if (reducer && detail::ranks_agree() && (always || (overflow && options_.provenance && options_.accumulation_steps == 1)))
    agree_on_event(last_.event);
  if (options_.grad_stats_every > 0 && finite && attempted_ % options_.grad_stats_every == 0)
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined())
        last_.grad_stats.push_back(gradient_stats(i < param_names_.size() ? param_names_[i] : "param" + std::to_string(i),
                                                  grads[i], 1.0 / divisor));
  apply_update(grads, grad_scale, overflow, skip, reducer);
  if (manager_) manager_->update_loss_scale(overflow, loss_finite);
  return full({}, loss_value);
}

// The optimizer step (or the skip) and, data parallel, the BatchNorm statistics averaged over
// the ranks, so that every rank holds the same ones.
void TrainOneStepCell::apply_update(std::vector<Tensor>& grads, double grad_scale, bool overflow, bool skip,
                                    nn::DistributedGradReducer* reducer) {
  if (!skip) {
    if (overflow && communication::get_rank() == 0)
      std::fprintf(stderr, "mixprec: warning: step %lld applied an update with non-finite gradients "
                   "(drop_overflow_update is false)\n", static_cast<long long>(attempted_));
    const std::vector<Tensor>& params = optimizer_.parameters();
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros(params[i].shape());
    optimizer_.step(grads, grad_scale);
  } else {
    ++skipped_;
  }
  if (reducer && backbone_) {
    const auto t = std::chrono::steady_clock::now();
    nn::all_reduce_buffers(*backbone_);
    reducer->add_sync_seconds(seconds_since(t));
  }
}

GradStats gradient_stats(const std::string& name, const Tensor& grad, double scale) {
  GradStats st;
  st.param = name;
  Tensor g = ops::amp_cast(grad, DType::f32).contiguous();
  if (scale != 1.0) g = ops::mul(g, scale);  // statistics of the unscaled gradient
  const float* p = g.data<float>();
  const int64_t n = g.numel();
  int64_t under = 0, zero = 0;
  double mx = 0.0;
#pragma omp parallel for reduction(+ : under, zero) reduction(max : mx) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    if (v == 0.0f) {
      ++zero;
      continue;
    }
    if (to_f16(v).bits == 0 || to_f16(v).bits == 0x8000) ++under;
    mx = std::max(mx, static_cast<double>(std::fabs(v)));
  }
  st.max_abs = mx;
  st.underflow_fraction = n ? static_cast<double>(under) / static_cast<double>(n) : 0.0;
  st.zero_fraction = n ? static_cast<double>(zero) / static_cast<double>(n) : 0.0;
  st.recommended_scale = mx > 0 && std::isfinite(mx) ? std::exp2(std::floor(std::log2(32768.0 / mx))) : 1.0;
  return st;
}

std::shared_ptr<TrainOneStepCell> build_train_network(nn::Cell& network, optim::Optimizer& optimizer,
                                                      nn::Cell& loss_fn, std::string_view level_name,
                                                      BuildOptions options) {
  const Level level = parse_amp_level(level_name);
  const DType low = options.cast_model_type.value_or(default_low_dtype());
  MIXPREC_CHECK(is_low_precision(low) || low == DType::f32, "build_train_network: cast_model_type must be "
                "f16, bf16 or f32, got ", dtype_name(low));
  const bool keep_bn = options.keep_batchnorm_fp32.value_or(level == Level::O2);
  if (level != Level::O0) auto_mixed_precision(network, level, low, keep_bn);

  Ref<LossScaleManager> manager;
  if (options.loss_scale_manager) manager = *options.loss_scale_manager;
  else if (level == Level::O2 && low != DType::f32) manager = DynamicLossScaleManager();

  // O2/O3: fp32 masters stay with the optimizer; the low working copies it refreshes in its
  // update pass are what the forward pass uses (persistent cast-cache entries).
  nn::AmpConfig* config = network.mutable_amp_config();
  if (config && (level == Level::O2 || level == Level::O3))
    optimizer.attach_working_copies(config->cache.get(), low);
  else
    optimizer.detach_working_copies();

  std::shared_ptr<nn::Cell> with_loss;
  if (!network.amp_config()) with_loss = std::make_shared<nn::WithLossCell>(network, loss_fn);
  else with_loss = std::make_shared<CastWithLossCell>(network, loss_fn);
  auto step = std::make_shared<TrainOneStepCell>(*with_loss, optimizer, manager, options.step);
  step->take_ownership(with_loss);
  step->set_backbone(network);
  return step;
}

}  // namespace mixprec::amp
