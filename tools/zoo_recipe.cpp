// The registry's rows as train's settings, and the optimizer and Model options train and bench
// both build their step from (see zoo_recipe.h).
#include "zoo_recipe.h"

#include <cmath>
#include <cstdio>

#include "mixprec/data/dataset.h"
#include "mixprec/data/text.h"
#include "mixprec/error.h"

namespace mixprec::cli {

std::string default_data(nn::ZooData data) {
  return data == nn::ZooData::fortunes ? dataset::kFortunesDir : dataset::kFashionMnistDir;
}

void apply_model_defaults(TrainArgs& a, const std::function<bool(const char*)>& given) {
  const nn::ZooTraining& t = nn::zoo_model(a.model).training;
  if (!given("--optimizer")) a.opt.name = t.optimizer;
  if (!given("--lr")) a.opt.lr = t.lr;
  if (!given("--momentum")) a.opt.momentum = t.momentum;
  if (!given("--weight-decay")) a.opt.weight_decay = t.weight_decay;
  if (!given("--lr-schedule")) a.opt.schedule = t.lr_schedule;
  a.warmup_fraction = given("--warmup-steps") ? 0.0 : t.warmup_fraction;
  if (!given("--max-grad-norm")) a.max_grad_norm = t.max_grad_norm;
  if (!given("--batch-size")) a.batch_size = t.batch_size;
  if (!given("--amp-level")) a.amp_level = t.amp_level;
  if (!given("--data")) a.data = default_data(t.data);
}

TrainArgs model_defaults(const std::string& model) {
  TrainArgs a;
  a.model = model;
  apply_model_defaults(a, [](const char*) { return false; });
  return a;
}

std::string models_differing(const std::function<std::string(const nn::ZooTraining&)>& field) {
  const std::string base = field(nn::zoo_model(TrainArgs{}.model).training);
  std::string out;
  for (const nn::ZooModel& m : nn::zoo()) {
    const std::string v = field(m.training);
    if (v != base) out += (out.empty() ? "" : ", ") + std::string(m.name) + " " + v;
  }
  return out;
}

std::string language_models() {
  std::string out;
  for (const nn::ZooModel& m : nn::zoo())
    if (m.language_model) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

std::unique_ptr<optim::Optimizer> make_training_optimizer(const TrainArgs& a,
                                                          std::vector<Tensor> params,
                                                          int64_t updates) {
  OptimizerSpec spec = a.opt;
  spec.total_steps = updates;
  if (a.warmup_fraction > 0)
    spec.warmup_steps = std::llround(a.warmup_fraction * static_cast<double>(updates));
  return make_optimizer(spec, std::move(params));
}

train::ModelOptions training_model_options(const TrainArgs& a,
                                           std::map<std::string, train::MetricHandle> metrics) {
  std::optional<bool> keep_bn;
  if (a.keep_bn != "default") keep_bn = a.keep_bn == "true";
  train::ModelOptions mo{.metrics = std::move(metrics),
                         .amp_level = a.custom_lists() ? "O0" : a.amp_level,
                         .keep_batchnorm_fp32 = keep_bn,
                         .dtype = parse_low_dtype(a.dtype),
                         .step = {.max_grad_norm = a.max_grad_norm,
                                  .accumulation_steps = static_cast<int>(a.accumulation_steps),
                                  .check_numerics = a.check_numerics,
                                  .grad_stats_every = a.grad_stats_every}};
  if (const auto manager = parse_loss_scale(a.loss_scale)) mo.loss_scale_manager = *manager;
  return mo;
}

namespace {
nlohmann::json sample_json(const Tensor& t) {
  const Shape& s = t.shape();
  return {{"shape", Shape(s.begin() + 1, s.end())}, {"dtype", std::string(dtype_name(t.dtype()))}};
}
}  // namespace

nlohmann::json recipe_json(const TrainArgs& a, amp::TrainOneStepCell& step, const Tensor& x,
                           const Tensor& y) {
  const amp::TrainStepOptions& o = step.options();
  const bool fp32 = !a.custom_lists() && parse_amp_level(a.amp_level) == AmpLevel::O0;
  nlohmann::json j;
  j["optimizer"] = step.optimizer().name();
  j["lr"] = a.opt.lr;
  j["momentum"] =
      a.opt.name == "momentum" ? nlohmann::json(a.opt.momentum) : nlohmann::json(nullptr);
  j["weight_decay"] = a.opt.weight_decay;
  j["lr_schedule"] = a.opt.schedule;
  // A warm-up is a share of the updates (a model's default) or a number of them (--warmup-steps).
  const bool share = a.warmup_fraction > 0;
  j["warmup_share"] = share ? nlohmann::json(a.warmup_fraction) : nlohmann::json(nullptr);
  j["warmup_updates"] = share ? nlohmann::json(nullptr) : nlohmann::json(a.opt.warmup_steps);
  j["max_grad_norm"] = o.max_grad_norm;
  j["accumulation_steps"] = o.accumulation_steps;
  j["check_numerics"] = o.check_numerics;
  j["amp_level"] =
      a.custom_lists() ? "custom" : std::string(amp_level_name(parse_amp_level(a.amp_level)));
  j["dtype"] = fp32 ? "f32" : a.dtype;
  j["keep_batchnorm_fp32"] = a.keep_bn;
  j["loss_scale"] = step.loss_scale_manager() ? step.loss_scale_manager()->description() : "none";
  j["input"] = sample_json(x);
  j["label"] = sample_json(y);
  return j;
}

std::string describe_recipe(const nlohmann::json& r) {
  const auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const std::string warmup =
      r["warmup_share"].is_null()
          ? std::to_string(r["warmup_updates"].get<int64_t>()) + " updates"
          : number(100 * r["warmup_share"].get<double>()) + "% of the updates";
  std::string out = r["optimizer"].get<std::string>() + " lr " + number(r["lr"].get<double>()) +
                    " (" + r["lr_schedule"].get<std::string>() + ", warm-up " + warmup + ")";
  if (!r["momentum"].is_null()) out += ", momentum " + number(r["momentum"].get<double>());
  out += ", weight decay " + number(r["weight_decay"].get<double>());
  const double clip = r["max_grad_norm"].get<double>();
  out += clip > 0 ? ", clipping at global norm " + number(clip) : ", no clipping";
  return out + ", loss scale " + r["loss_scale"].get<std::string>();
}

}  // namespace mixprec::cli
