// Training-state checkpoints (see include/mixprec/train/checkpoint.h). Scalars are stored as
// decimal strings in the metadata; doubles with 17 significant digits, so they round-trip.
#include "mixprec/train/checkpoint.h"

#include <cstdio>
#include <map>

#include "mixprec/error.h"
#include "mixprec/graph.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/rng.h"
#include "mixprec/version.h"

namespace mixprec::train {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

int64_t get_int(const io::Metadata& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  MIXPREC_CHECK(it != m.end(), file, ": training state field '", key, "' is missing",
                Hint{"was this file written by `mixprec train --checkpoint` / save_training_state?"});
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    MIXPREC_CHECK(used == it->second.size(), "");
    return v;
  } catch (...) {
    MIXPREC_CHECK(false, file, ": training state field '", key, "' is not an integer: '", it->second, "'");
  }
  return 0;
}

double get_double(const io::Metadata& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  MIXPREC_CHECK(it != m.end(), file, ": training state field '", key, "' is missing");
  try {
    return std::stod(it->second);
  } catch (...) {
    MIXPREC_CHECK(false, file, ": training state field '", key, "' is not a number: '", it->second, "'");
  }
  return 0;
}

}  // namespace

void save_training_state(const std::filesystem::path& path, Model& model, const io::Metadata& extra) {
  amp::TrainOneStepCell& step = model.train_network();
  NoGradGuard ng;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.network().state_and_names()) tensors.emplace_back(name, t.detach());
  for (const auto& s : step.optimizer().state())
    tensors.emplace_back(std::string(kTrainStatePrefix) + "optimizer/" + s.name, s.tensor.detach());
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
  if (const amp::LossScaleManager* lsm = step.loss_scale_manager()) {
    const amp::LossScaleState& s = lsm->state();
    m["loss_scale"] = num(s.scale);
    m["loss_scale_good_steps"] = std::to_string(s.good_steps);
    m["loss_scale_consecutive_overflows"] = std::to_string(s.consecutive_overflows);
    m["loss_scale_total_overflows"] = std::to_string(s.total_overflows);
    m["loss_scale_manager"] = lsm->description();
  }
  io::write_safetensors(path, tensors, m);
}

ResumeInfo load_training_state(const std::filesystem::path& path, Model& model) {
  const std::string file = path.string();
  io::SafetensorsFile f = io::read_safetensors(path);
  const io::Metadata& m = f.metadata;
  auto fmt = m.find("format");
  MIXPREC_CHECK(fmt != m.end() && fmt->second == "mixprec-training-state", file,
                ": not a training-state checkpoint (metadata 'format' is '",
                fmt == m.end() ? std::string("missing") : fmt->second, "')",
                Hint{"resume needs a file written by `mixprec train --checkpoint`; plain weights load "
                     "with load_param_into_net"});
  MIXPREC_CHECK(m.count("amp_level") && m.at("amp_level") == model.options().amp_level, file,
                ": saved at amp_level ", m.count("amp_level") ? m.at("amp_level") : "?",
                " but resuming at ", model.options().amp_level, Hint{"resume with the same --amp-level"});
  amp::TrainOneStepCell& step = model.train_network();
  optim::Optimizer& opt = step.optimizer();
  MIXPREC_CHECK(m.count("optimizer") && m.at("optimizer") == opt.name(), file, ": saved with optimizer ",
                m.count("optimizer") ? m.at("optimizer") : "?", " but resuming with ", opt.name());

  std::map<std::string, Tensor> weights, state;
  for (auto& [name, t] : f.tensors) {
    if (name.rfind(kTrainStatePrefix, 0) == 0) state.emplace(name.substr(std::string(kTrainStatePrefix).size()), t);
    else weights.emplace(name, t);
  }
  io::load_param_into_net(model.network(), weights, {.strict = true});
  NoGradGuard ng;
  for (const auto& s : opt.state()) {
    auto it = state.find("optimizer/" + s.name);
    MIXPREC_CHECK(it != state.end(), file, ": optimizer state '", s.name, "' is missing");
    MIXPREC_CHECK(it->second.shape() == s.tensor.shape() && it->second.dtype() == DType::f32, file,
                  ": optimizer state '", s.name, "' has ", shape_str(it->second.shape()), " ",
                  dtype_name(it->second.dtype()), ", expected f32 ", shape_str(s.tensor.shape()));
    Tensor dst = s.tensor.detach();
    dst.copy_(it->second);
  }
  opt.set_global_step(get_int(m, "optimizer_step", file));
  opt.refresh_working_copies();
  if (amp::LossScaleManager* lsm = step.loss_scale_manager()) {
    MIXPREC_CHECK(m.count("loss_scale"), file, ": no loss-scaler state, but this run uses ", lsm->description());
    lsm->set_state({.scale = get_double(m, "loss_scale", file),
                    .good_steps = get_int(m, "loss_scale_good_steps", file),
                    .consecutive_overflows = get_int(m, "loss_scale_consecutive_overflows", file),
                    .total_overflows = get_int(m, "loss_scale_total_overflows", file)});
  }
  step.set_counters(get_int(m, "attempted_steps", file), get_int(m, "skipped_steps", file));
  default_generator().set_state(static_cast<uint64_t>(get_int(m, "rng_seed", file)),
                                static_cast<uint64_t>(get_int(m, "rng_offset", file)));
  ResumeInfo info{get_int(m, "epoch", file), get_int(m, "batch", file), get_int(m, "global_step", file), m};
  model.set_position(info.epoch, info.batch, info.global_step);
  return info;
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
