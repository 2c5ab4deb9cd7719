// Training-state checkpoints (see include/mixprec/train/checkpoint.h). Scalars are stored as
// decimal strings in the metadata; doubles with 17 significant digits, so they round-trip.
#include "mixprec/train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "mixprec/amp/loss_scale.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/rng.h"
#include "mixprec/version.h"
#include "ops/kernel_choice.h"

namespace mixprec::train {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The text of metadata field `key`; missing is an error.
const std::string& field_text(const io::Metadata& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  MIXPREC_CHECK(it != m.end(), file, ": training state field '", key, "' is missing",
                Hint{"load_training_state reads files written by save_training_state (or CheckpointSaver)"});
  return it->second;
}

// Field `key` parsed whole as a T (std::from_chars: no spaces, no '+', no trailing junk, in
// range; an unsigned T takes no '-').
template <class T>
T parse_field(const io::Metadata& m, const std::string& key, const std::string& file) {
  const std::string& text = field_text(m, key, file);
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  MIXPREC_CHECK(ec == std::errc() && end == text.data() + text.size(), file, ": training state field '", key,
                "' is '", text, "', expected ",
                std::is_floating_point_v<T> ? "a number" : std::is_signed_v<T> ? "an integer" : "an unsigned integer");
  return v;
}

// Counters and positions stay <= 2^53: far beyond any real run (a step a nanosecond for 100
// days), far below the int64 limit, so that counting on from a loaded value cannot overflow, and
// exact as a double (JSON reports, metrics).
constexpr int64_t kMaxCount = int64_t{1} << 53;

// A counter or position: an integer in [0, kMaxCount].
int64_t get_count(const io::Metadata& m, const std::string& key, const std::string& file) {
  const int64_t v = parse_field<int64_t>(m, key, file);
  MIXPREC_CHECK(v >= 0 && v <= kMaxCount, file, ": training state field '", key, "' is ", v,
                v < 0 ? ", expected an integer >= 0" : ", expected an integer >= 0 and <= 2^53 (9007199254740992)");
  return v;
}

// Refuses counter `small` (field `small_key`) above `large` (field `large_key`).
void check_at_most(int64_t small, const char* small_key, int64_t large, const char* large_key, const std::string& file,
                   const char* why) {
  MIXPREC_CHECK(small <= large, file, ": training state field '", small_key, "' (", small, ") exceeds '", large_key,
                "' (", large, "); ", why);
}

// The loss scale: finite and > 0.
double get_scale(const io::Metadata& m, const std::string& key, const std::string& file) {
  const double v = parse_field<double>(m, key, file);
  MIXPREC_CHECK(std::isfinite(v) && v > 0 && v <= amp::kMaxLossScale, file,
                ": training state field '", key, "' is '", field_text(m, key, file),
                "', expected a finite number > 0 and at most ", amp::kMaxLossScale,
                " (a loss scale must be finite in f32)");
  return v;
}

// The number of ranks a run trains with: the group size in data-parallel mode, else 1.
int64_t run_ranks(Model& model) {
  return model.train_network().grad_reducer() ? communication::get_group_size() : 1;
}

}  // namespace

void save_training_state(const std::filesystem::path& path, Model& model, const io::Metadata& extra) {
  if (run_ranks(model) > 1 && communication::get_rank() != 0) return;  // every rank holds the same state
  amp::TrainOneStepCell& step = model.train_network();
  step.sync();  // device steps in flight complete first: the counters below match the weights
  NoGradGuard ng;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.network().state_and_names()) tensors.emplace_back(name, t.detach().to(Device::cpu()));
  for (const auto& s : step.optimizer().state())
    tensors.emplace_back(std::string(kTrainStatePrefix) + "optimizer/" + s.name, s.tensor.detach().to(Device::cpu()));
  io::Metadata m = extra;
  m["format"] = "mixprec-training-state";
  m["mixprec_version"] = MIXPREC_VERSION;
  m["amp_level"] = model.options().amp_level;
  m["optimizer"] = step.optimizer().name();
  m["optimizer_step"] = std::to_string(step.optimizer().global_step());
  m["epoch"] = std::to_string(model.next_epoch());
  m["batch"] = std::to_string(model.next_batch());
  m["global_step"] = std::to_string(model.global_step());
  m["skipped_steps"] = std::to_string(step.skipped_steps());
  m["attempted_steps"] = std::to_string(step.attempted_steps());
  const Generator& g = default_generator();
  m["rng_seed"] = std::to_string(g.seed());
  m["rng_offset"] = std::to_string(g.offset());
  m["data_parallel_ranks"] = std::to_string(run_ranks(model));
  if (const amp::LossScaleManager* lsm = step.loss_scale_manager()) {
    const amp::LossScaleState& s = lsm->state();
    m["loss_scale"] = num(s.scale);
    m["loss_scale_good_steps"] = std::to_string(s.good_steps);
    m["loss_scale_consecutive_overflows"] = std::to_string(s.consecutive_overflows);
    m["loss_scale_total_overflows"] = std::to_string(s.total_overflows);
    m["loss_scale_manager"] = lsm->description();
  }
  // The kernels measured (or pinned) for this run: a resumed run uses the same ones, whatever its
  // machine's cache holds by then, so that it stays bit-identical to a run that never stopped.
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& [sig, c] : ops::choice::used()) kernels[sig] = c.kernel;
  if (!kernels.empty()) m["kernel_choices"] = kernels.dump();
  io::write_safetensors(path, tensors, m);
}

namespace {

// Every scalar of a training state, parsed and checked before anything is restored.
struct SavedScalars {
  int64_t optimizer_step, attempted, skipped;
  uint64_t rng_seed, rng_offset;
  std::optional<amp::LossScaleState> scaler;
  ResumeInfo info;
};

SavedScalars read_scalars(const io::Metadata& m, const std::string& file, const amp::LossScaleManager* lsm) {
  SavedScalars v{.optimizer_step = get_count(m, "optimizer_step", file),
                 .attempted = get_count(m, "attempted_steps", file),
                 .skipped = get_count(m, "skipped_steps", file),
                 .rng_seed = parse_field<uint64_t>(m, "rng_seed", file),
                 .rng_offset = parse_field<uint64_t>(m, "rng_offset", file),
                 .scaler = std::nullopt,
                 .info = {get_count(m, "epoch", file), get_count(m, "batch", file), get_count(m, "global_step", file), m}};
  // Counters of the same steps must agree: a file where they do not was edited or damaged.
  check_at_most(v.skipped, "skipped_steps", v.attempted, "attempted_steps", file, "a skipped step is an attempted one");
  check_at_most(v.attempted, "attempted_steps", v.info.global_step, "global_step", file,
                "each attempted update takes at least one step (more with gradient accumulation)");
  check_at_most(v.info.batch, "batch", v.info.global_step, "global_step", file, "reaching batch k takes k steps");
  check_at_most(v.info.epoch, "epoch", v.info.global_step, "global_step", file, "each finished epoch took a step");
  if (lsm) {
    MIXPREC_CHECK(m.count("loss_scale"), file, ": training state field 'loss_scale' is missing, but this run uses ",
                  lsm->description(), Hint{"resume with the loss-scale manager of the saved run"});
    v.scaler = amp::LossScaleState{.scale = get_scale(m, "loss_scale", file),
                                   .good_steps = get_count(m, "loss_scale_good_steps", file),
                                   .consecutive_overflows = get_count(m, "loss_scale_consecutive_overflows", file),
                                   .total_overflows = get_count(m, "loss_scale_total_overflows", file)};
    check_at_most(v.scaler->consecutive_overflows, "loss_scale_consecutive_overflows", v.scaler->total_overflows,
                  "loss_scale_total_overflows", file, "consecutive overflows are among all overflows");
  }
  return v;
}

// The "kernel_choices" metadata field: a JSON object of signature -> kernel name.
std::map<std::string, std::string> saved_kernel_choices(const std::string& text, const std::string& file) {
  std::map<std::string, std::string> out;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& [sig, k] : j.items()) out[sig] = k.get<std::string>();
  } catch (const std::exception& e) {
    MIXPREC_CHECK(false, file, ": metadata 'kernel_choices' is not a JSON object of kernel names (", e.what(), ")");
  }
  return out;
}

}  // namespace

ResumeInfo load_training_state(const std::filesystem::path& path, Model& model) {
  const std::string file = path.string();
  io::SafetensorsFile f = io::read_safetensors(path);
  for (const auto& w : f.warnings)
    std::fprintf(stderr, "mixprec: warning: %s: %s\n", file.c_str(), w.c_str());
  const io::Metadata& m = f.metadata;
  auto fmt = m.find("format");
  MIXPREC_CHECK(fmt != m.end() && fmt->second == "mixprec-training-state", file,
                ": not a training-state checkpoint (metadata 'format' is '",
                fmt == m.end() ? std::string("missing") : fmt->second, "')",
                Hint{"load_training_state reads files written by save_training_state (or CheckpointSaver); "
                     "plain weights load with load_param_into_net"});
  const std::string& level = field_text(m, "amp_level", file);
  MIXPREC_CHECK(level == model.options().amp_level, file, ": saved at amp_level ", level,
                " but the Model's amp_level is ", model.options().amp_level,
                Hint{"build the Model with the amp_level of the saved run (ModelOptions::amp_level)"});
  if (const auto v = m.find("mixprec_version"); v != m.end() && v->second != MIXPREC_VERSION)
    std::fprintf(
        stderr,
        "mixprec: note: %s was saved by mixprec %s, this is %s: the continuation may differ in "
        "the last bits from a run that never stopped\n",
        file.c_str(), v->second.c_str(), MIXPREC_VERSION);
  amp::TrainOneStepCell& step = model.train_network();
  optim::Optimizer& opt = step.optimizer();
  const std::string& saved_opt = field_text(m, "optimizer", file);
  MIXPREC_CHECK(saved_opt == opt.name(), file, ": saved with optimizer ", saved_opt, " but the Model's is ", opt.name());
  const SavedScalars v = read_scalars(m, file, step.loss_scale_manager());
  const auto kc = m.find("kernel_choices");
  const std::map<std::string, std::string> pins =
      kc == m.end() ? std::map<std::string, std::string>{} : saved_kernel_choices(kc->second, file);
  // The global batch, and with it the trajectory and the data position, depend on the number of
  // ranks: a run continues with the number it was saved with.
  const int64_t saved_ranks = m.count("data_parallel_ranks") ? get_count(m, "data_parallel_ranks", file) : 1;
  MIXPREC_CHECK(saved_ranks == run_ranks(model), file, ": saved by a run of ", saved_ranks,
                saved_ranks == 1 ? " process" : " data-parallel ranks", ", but this run has ", run_ranks(model),
                run_ranks(model) == 1 ? " process (not data parallel)" : " ranks (communication::get_group_size())",
                Hint{"resume with as many ranks as the run that saved it (mpirun -np " + std::to_string(saved_ranks) +
                     "): the global batch, the learning-rate schedule and the position in the data depend on it"});

  std::map<std::string, Tensor> weights, state;
  for (auto& [name, t] : f.tensors) {
    if (name.rfind(kTrainStatePrefix, 0) == 0) state.emplace(name.substr(std::string(kTrainStatePrefix).size()), t);
    else weights.emplace(name, t);
  }
  for (const auto& s : opt.state()) {
    auto it = state.find("optimizer/" + s.name);
    MIXPREC_CHECK(it != state.end(), file, ": optimizer state '", s.name, "' is missing");
    MIXPREC_CHECK(it->second.shape() == s.tensor.shape() && it->second.dtype() == DType::f32, file,
                  ": optimizer state '", s.name, "' has ", shape_str(it->second.shape()), " ",
                  dtype_name(it->second.dtype()), ", expected f32 ", shape_str(s.tensor.shape()));
  }
  // Everything is checked (load_param_into_net checks before it copies): restore.
  io::load_param_into_net(model.network(), weights, {.strict = true});
  NoGradGuard ng;
  for (const auto& s : opt.state()) {
    Tensor dst = s.tensor.detach();
    dst.copy_(state.at("optimizer/" + s.name));
  }
  opt.set_global_step(v.optimizer_step);
  opt.refresh_working_copies();
  if (v.scaler) step.loss_scale_manager()->set_state(*v.scaler);
  step.set_counters(v.attempted, v.skipped);
  ops::choice::pin(pins);
  default_generator().set_state(v.rng_seed, v.rng_offset);
  model.set_position(v.info.epoch, v.info.batch, v.info.global_step);
  return v.info;
}

CheckpointSaver::CheckpointSaver(std::filesystem::path path, int64_t every, bool at_end, io::Metadata extra)
    : path_(std::move(path)), every_(every), at_end_(at_end), extra_(std::move(extra)) {
  MIXPREC_CHECK(every >= 0, "CheckpointSaver: every_steps must be >= 0, got ", every);
}

void CheckpointSaver::on_step_end(RunContext& ctx) {
  if (every_ > 0 && ctx.global_step % every_ == 0 && ctx.model) {
    save_training_state(path_, *ctx.model, extra_);
    last_saved_ = ctx.global_step;
  }
}

void CheckpointSaver::on_train_end(RunContext& ctx) {
  if (at_end_ && ctx.model && ctx.global_step != last_saved_) save_training_state(path_, *ctx.model, extra_);
}

}  // namespace mixprec::train
