// AMP levels and lists: the autocast rules of each level (amp/level.h), and what
// auto_mixed_precision and custom_mixed_precision set on a network.
// The lists are the registry's policy column (ops/registry.h); names accepted from users are op
// names or MindSpore cell names, and a name that could not change what runs is refused with the
// reason (every accepted name takes effect).
#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>

#include "mixprec/amp/amp.h"
#include "mixprec/amp/level.h"
#include "mixprec/error.h"
#include "mixprec/nn/config_generation.h"
#include "ops/cast_cache.h"

namespace mixprec {

std::string_view amp_level_name(AmpLevel level) {
  switch (level) {
    case AmpLevel::O0: return "O0";
    case AmpLevel::O1: return "O1";
    case AmpLevel::O2: return "O2";
    case AmpLevel::O3: return "O3";
    case AmpLevel::auto_: return "auto";
  }
  return "?";
}

AmpLevel parse_amp_level(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "o0") return AmpLevel::O0;
  if (l == "o1") return AmpLevel::O1;
  if (l == "o2") return AmpLevel::O2;
  if (l == "o3") return AmpLevel::O3;
  if (l == "auto") return AmpLevel::auto_;
  MIXPREC_CHECK(false, "unknown amp_level '", s, "'; valid levels: O0, O1, O2, O3, auto",
                Hint{"O0 is fp32; O2 (bf16/f16 except the black list, fp32 BatchNorm) is the "
                     "usual choice"});
  return AmpLevel::O0;
}

namespace amp {

AutocastState level_state(AmpLevel level, DType low, std::optional<bool> keep_norm_fp32) {
  AutocastState s;
  s.low = low;
  s.keep_norm_fp32 = keep_norm_fp32.value_or(level == AmpLevel::O2);
  auto rule = [&s](AmpPolicy p) -> CastRule& { return s.rules[static_cast<size_t>(p)]; };
  switch (level) {
    case AmpLevel::O0:
      break;
    case AmpLevel::O1:
      rule(AmpPolicy::to_low) = CastRule::low_out_f32;
      break;
    case AmpLevel::O2:
    case AmpLevel::O3:
      s.rules.fill(CastRule::low);
      if (level == AmpLevel::O2) rule(AmpPolicy::to_fp32) = CastRule::f32_out_low;
      s.norm_rule = CastRule::low;
      s.cast_every_cell = true;
      break;
    case AmpLevel::auto_:
      rule(AmpPolicy::to_low) = CastRule::low;
      rule(AmpPolicy::to_fp32) = CastRule::f32;
      rule(AmpPolicy::promote) = CastRule::widest;
      break;
  }
  return s;
}

DType default_low_dtype(Device device) { return device.is_cuda() ? DType::f16 : DType::bf16; }

static std::vector<std::string> names_with_policy(AmpPolicy policy) {
  std::vector<std::string> out;
  for (const OpInfo& info : kOps)
    if (info.policy == policy && info.kind != OpKind::layout) out.emplace_back(info.name);
  return out;
}

std::vector<std::string> get_white_list() { return names_with_policy(AmpPolicy::to_low); }
std::vector<std::string> get_black_list() { return names_with_policy(AmpPolicy::to_fp32); }

static void check_low(DType dtype, const char* who) {
  MIXPREC_CHECK(is_low_precision(dtype) || dtype == DType::f32, who,
                ": the low-precision dtype must be f16 or bf16 (or f32 to disable), got ", dtype_name(dtype));
}

void auto_mixed_precision(nn::Cell& network, Level level, DType dtype, std::optional<bool> keep_bn) {
  check_low(dtype, "auto_mixed_precision");
  if (level == Level::O0 || dtype == DType::f32) {
    network.set_amp_config(std::nullopt);
    nn::bump_config_generation();
    return;
  }
  nn::AmpConfig config;
  config.state = level_state(level, dtype, keep_bn);
  config.cache = std::make_shared<CastCache>();
  config.state.cache = config.cache.get();
  config.cast_output_to_fp32 = level != Level::auto_;
  config.level = std::string(amp_level_name(level));
  network.set_amp_config(std::move(config));
  nn::bump_config_generation();
}

void auto_mixed_precision(nn::Cell& network, std::string_view level, DType dtype) {
  auto_mixed_precision(network, parse_amp_level(level), dtype);
}

// The cell classes of nn/ (MindSpore's names; every one the zoo builds from) and the op each
// runs. Matched ignoring case and '_'.
constexpr std::pair<const char*, OpId> kCellNames[] = {
    {"Conv2d", OpId::conv2d},
    {"Dense", OpId::linear},
    {"BatchNorm1d", OpId::batch_norm},
    {"BatchNorm2d", OpId::batch_norm},
    {"BatchNorm", OpId::batch_norm},
    {"LayerNorm", OpId::layer_norm},
    {"Softmax", OpId::softmax},
    {"LogSoftmax", OpId::log_softmax},
    {"ReLU", OpId::relu},
    {"GELU", OpId::gelu},
    {"MaxPool2d", OpId::max_pool2d},
    {"AvgPool2d", OpId::avg_pool2d},
    {"AdaptiveAvgPool2d", OpId::adaptive_avg_pool2d},
    {"BatchMatMul", OpId::matmul},
    {"Sigmoid", OpId::sigmoid},
    {"Tanh", OpId::tanh},
    {"Embedding", OpId::embedding},
    {"HSwish", OpId::hardswish},
    {"Flatten", OpId::view},
    {"Dropout", OpId::dropout},
};

// The names a list accepts, for the hint: the cell classes, then the op names that users call.
static std::string accepted_names() {
  std::string cells, ops;
  for (const auto& [n, id] : kCellNames) cells += (cells.empty() ? "" : ", ") + std::string(n);
  for (const OpInfo& info : kOps)
    if (info.differentiable_inputs > 0) ops += (ops.empty() ? "" : ", ") + std::string(info.name);
  return "cell names " + cells + "; op names " + ops;
}

// Op or MindSpore cell name -> op id.
static OpId resolve_op(const std::string& name) {
  if (auto id = find_op(name)) return *id;
  const auto key = [](std::string_view n) {
    std::string k;
    for (char c : n)
      if (c != '_') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return k;
  };
  for (const auto& [n, id] : kCellNames)
    if (key(name) == key(n)) return id;
  MIXPREC_CHECK(
      false, "custom_mixed_precision: unknown op or cell name '", name, "'",
      Hint{"the accepted names (case and '_' ignored for cell names): " + accepted_names()});
  return OpId::add;
}

// Ops whose arithmetic is fp32 whatever their input dtype: ops/softmax.cpp and ops/reduce.cpp
// compute in acc_dtype(x) and record that as the compute dtype (levels_test checks this list
// against what runs). Only their input and output tensors follow the dtype.
constexpr OpId kFp32ArithmeticOps[] = {OpId::softmax, OpId::log_softmax, OpId::sum, OpId::mean};

// Why listing `id` could not change what runs, or "" when it can. `name` is what the user wrote.
static std::string list_refusal(OpId id, const std::string& name, bool white) {
  const std::string op(op_name(id));
  const std::string what = name == op ? "'" + op + "'" : "'" + name + "' (op " + op + ")";
  if (op_info(id).kind == OpKind::layout)
    return what + " moves or reinterprets data and is never autocast: it always runs in the dtype of its "
                  "input, so a list cannot change it";
  if (white && std::find(std::begin(kFp32ArithmeticOps), std::end(kFp32ArithmeticOps), id) !=
                   std::end(kFp32ArithmeticOps))
    return what + " always computes in fp32 (reductions and softmax accumulate in fp32 whatever the "
                  "input dtype), and the white list casts its output back to fp32, so listing it would "
                  "only round its input and output to the low dtype";
  return {};
}

// The op `name` stands for, refused (with the reason) if listing it could not take effect.
static OpId resolve_listed(const std::string& name, bool white) {
  const OpId id = resolve_op(name);
  const std::string why = list_refusal(id, name, white);
  MIXPREC_CHECK(
      why.empty(), "custom_mixed_precision: ", white ? "white_list" : "black_list", ": ", why,
      Hint{white ? "its tensors run in the low dtype when it is left off a black list (or at O2)"
                 : "leave '" + name +
                       "' off the list: it follows its input's dtype, so list the "
                       "compute ops around it instead"});
  return id;
}

void custom_mixed_precision(nn::Cell& network, const CustomLists& lists, DType dtype) {
  check_low(dtype, "custom_mixed_precision");
  MIXPREC_CHECK(lists.white_list.empty() != lists.black_list.empty(),
                "custom_mixed_precision: give exactly one of white_list and black_list");
  nn::AmpConfig config;
  config.state = level_state(lists.white_list.empty() ? Level::O2 : Level::O1, dtype, false);
  config.cache = std::make_shared<CastCache>();
  config.state.cache = config.cache.get();
  config.cast_output_to_fp32 = true;
  config.level = lists.white_list.empty() ? "custom_mixed_precision(black_list)" : "custom_mixed_precision(white_list)";
  auto& ov = config.state.policy_override;
  if (!lists.white_list.empty()) {
    for (const OpInfo& info : kOps) ov[static_cast<size_t>(info.id)] = AmpPolicy::keep;
    for (const auto& n : lists.white_list) ov[static_cast<size_t>(resolve_listed(n, true))] = AmpPolicy::to_low;
  } else {
    for (const OpInfo& info : kOps) ov[static_cast<size_t>(info.id)] = AmpPolicy::keep;
    for (const auto& n : lists.black_list) {
      const OpId id = resolve_listed(n, false);
      ov[static_cast<size_t>(id)] = AmpPolicy::to_fp32;
      if (op_info(id).kind == OpKind::norm) config.state.keep_norm_fp32 = true;
    }
  }
  network.set_amp_config(std::move(config));
  nn::bump_config_generation();
}

}  // namespace amp
}  // namespace mixprec
