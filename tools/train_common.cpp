// Parsing helpers shared by the CLI commands (see train_common.h).
#include "train_common.h"

#include <omp.h>

#include <charconv>
#include <sstream>

#include "cli_error.h"
#include "mixprec/context.h"
#include "mixprec/error.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::cli {

static double parse_number(const std::string& s, const std::string& what) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    MIXPREC_CHECK(used == s.size(), "");
    return v;
  } catch (...) {
    MIXPREC_CHECK(false, what, ": '", s, "' is not a number");
  }
  return 0;
}

std::optional<std::shared_ptr<amp::LossScaleManager>> parse_loss_scale(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const char* valid =
      "none, fixed:S, fixed-drop:S, dynamic, dynamic:INIT,FACTOR,WINDOW, dynamic-torch, default";
  if (kind == "default" && arg.empty()) return std::nullopt;
  if (kind == "none" && arg.empty()) return std::shared_ptr<amp::LossScaleManager>();
  if (kind == "fixed" || kind == "fixed-drop") {
    MIXPREC_CHECK(!arg.empty(), "--loss-scale ", spec, ": expected a scale, e.g. ", kind, ":1024");
    const double scale = parse_number(arg, "--loss-scale");
    return with_prefix("--loss-scale " + spec + ": ", [&] {
      return std::make_shared<amp::FixedLossScaleManager>(
          scale, amp::FixedLossScaleOptions{.drop_overflow_update = kind == "fixed-drop"});
    });
  }
  if (kind == "dynamic-torch" && arg.empty())
    return amp::DynamicLossScaleManager::pytorch_defaults();
  if (kind == "dynamic") {
    if (arg.empty()) return std::make_shared<amp::DynamicLossScaleManager>();
    std::vector<std::string> parts;
    std::stringstream ss(arg);
    for (std::string p; std::getline(ss, p, ',');) parts.push_back(p);
    MIXPREC_CHECK(parts.size() == 3, "--loss-scale ", spec,
                  ": expected dynamic:INIT,FACTOR,WINDOW, e.g. dynamic:65536,2,2000");
    const double init = parse_number(parts[0], "--loss-scale init"),
                 factor = parse_number(parts[1], "--loss-scale factor");
    const int64_t window =
        parse_integer_in(parts[2], "--loss-scale " + spec + ": WINDOW", 1, int64_t{1} << 53);
    return with_prefix("--loss-scale " + spec + ": ", [&] {
      return std::make_shared<amp::DynamicLossScaleManager>(init, factor, window);
    });
  }
  MIXPREC_CHECK(false, "--loss-scale: unknown value '", spec, "'; valid: ", valid);
  return std::nullopt;
}

namespace {

// `v` parsed whole as a decimal integer of type T (std::from_chars: no spaces, no '+', no hex,
// no exponent, in T's range); nullopt otherwise.
template <class T> std::optional<T> whole_integer(const std::string& v) {
  T x{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return x;
}

// "" when `v` is an integer in range, else what was expected and what came.
std::string integer_refusal(const std::string& v, int64_t min, int64_t max,
                            std::optional<int64_t> also, const std::string& note) {
  const std::optional<int64_t> x = whole_integer<int64_t>(v);
  if (x && ((*x >= min && *x <= max) || (also && *x == *also))) return "";
  std::string range = max == kNoMax
                          ? "at least " + std::to_string(min)
                          : "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (also)
    range += " (or " + std::to_string(*also) + (note.empty() ? "" : ": " + note) + ")";
  else if (!note.empty())
    range += " (" + note + ")";
  return "expected " + std::string(max == kNoMax && !x ? "an integer, " : "") + range + ", got " +
         v;
}

}  // namespace

CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& v) {
        if (v.empty()) return std::string();  // main's check of empty values words that case
        return whole_integer<uint64_t>(v)
                   ? std::string()
                   : "expected an integer from 0 to 18446744073709551615 (2^64-1), got " + v;
      },
      "", "Seed");
}

CLI::Validator integer_range(int64_t min, int64_t max, std::optional<int64_t> also,
                             const std::string& note) {
  return CLI::Validator(
      [=](std::string& v) {
        return v.empty() ? std::string() : integer_refusal(v, min, max, also, note);
      },
      "", "IntegerRange");
}

int64_t parse_integer_in(const std::string& text, const std::string& what, int64_t min,
                         int64_t max) {
  const std::string why = integer_refusal(text, min, max, std::nullopt, "");
  MIXPREC_CHECK(why.empty(), what, ": ", why);
  return *whole_integer<int64_t>(text);
}

void check_checkpoint_model(const std::string& checkpoint, const std::string& model,
                            const std::string& flag) {
  const io::Metadata meta = io::read_safetensors_metadata(checkpoint);
  const auto it = meta.find("cli.model");
  MIXPREC_CHECK(it == meta.end() || it->second == model, "--checkpoint ", checkpoint,
                ": saved by a `mixprec train "
                "--model ",
                it == meta.end() ? "" : it->second, "` run, but ", flag, " is ", model,
                Hint{flag == "--model"
                         ? "pass --model " + (it == meta.end() ? "" : it->second)
                         : "pass the checkpoint of a `mixprec train --model " + model + "` run"});
}

DType parse_low_dtype(const std::string& s) {
  const auto d = parse_dtype(s);
  MIXPREC_CHECK(d && (*d == DType::f16 || *d == DType::bf16), "--dtype: unknown value '", s,
                "'; valid: f16, bf16",
                Hint{"`mixprec info` measures which of the two is faster on this machine"});
  return *d;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& s,
                                                 std::vector<Tensor> params) {
  optim::LearningRate lr = s.lr;
  if (s.schedule == "cosine") {
    MIXPREC_CHECK(s.total_steps > 0, "--lr-schedule cosine needs the total number of steps");
    lr = optim::LearningRate::cosine(s.lr, std::max<int64_t>(1, s.total_steps - s.warmup_steps));
  } else if (s.schedule == "step") {
    lr = optim::LearningRate::step_decay(s.lr, std::max<int64_t>(1, s.total_steps / 3), 0.1);
  } else {
    MIXPREC_CHECK(s.schedule == "constant", "--lr-schedule: unknown value '", s.schedule,
                  "'; valid: constant, cosine, step");
  }
  if (s.warmup_steps > 0) lr = lr.with_warmup(s.warmup_steps);
  if (s.name == "momentum")
    return std::make_unique<optim::Momentum>(std::move(params), lr, s.momentum, s.weight_decay);
  if (s.name == "sgd") return std::make_unique<optim::SGD>(std::move(params), lr, s.weight_decay);
  if (s.name == "adam")
    return std::make_unique<optim::Adam>(std::move(params), lr, 0.9, 0.999, 1e-8, s.weight_decay);
  if (s.name == "adamw")
    return std::make_unique<optim::AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, s.weight_decay);
  MIXPREC_CHECK(false, "--optimizer: unknown value '", s.name,
                "'; valid: momentum, sgd, adam, adamw");
  return nullptr;
}

dataset::Dataset standard_pipeline(dataset::Dataset ds) {
  return ds.map(dataset::transforms::rescale(1.0 / 255.0, 0.0))
      .map(dataset::transforms::normalize(0.2860, 0.3530));
}

void set_mode(const std::string& mode) {
  ContextOptions c = get_context();
  c.mode = parse_mode(mode);
  set_context(c);
}

int set_threads(int threads) {
  MIXPREC_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  if (threads > 0) omp_set_num_threads(threads);
  return omp_get_max_threads();
}

void use_device(const std::string& device) {
  Device d = Device::cpu();
  as_usage_error([&] {
    const bool cuda = device.rfind("cuda", 0) == 0;
    MIXPREC_CHECK(
        device == "cpu" || device == "cuda" ||
            (cuda && device.size() > 5 && device[4] == ':' &&
             device.find_first_not_of("0123456789", 5) == std::string::npos && device.size() < 8),
        "--device: expected cpu, cuda or cuda:N, got '", device, "'");
    if (cuda) d = Device::cuda(device.size() > 5 ? std::stoi(device.substr(5)) : 0);
  });
  if (d.is_cpu()) return;
  ContextOptions c = get_context();
  c.device = d;
  try {
    set_context(c);           // throws: no CUDA backend in this build, or no GPU visible
  } catch (const Error& e) {  // the library's hint names its C++ API; this one the flag
    if (e.internal()) throw;
    throw Error("--device " + device + ": " + e.message(),
                "leave --device out (or pass --device cpu) to run on the CPU; CUDA needs a "
                "-DMIXPREC_CUDA=ON build "
                "and a visible GPU (docs/cuda.md)",
                e.where(), false);
  }
}

}  // namespace mixprec::cli
