// save_checkpoint / load_checkpoint / load_param_into_net over the safetensors format. Loading
// matches names (removing a checkpoint prefix as MindSpore's non-strict load does), checks every
// match's shape and dtype kind, and only then copies, so a refused load changes nothing.
#include "mixprec/io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/version.h"

namespace mixprec::io {

void save_checkpoint(const nn::Cell& network, const std::filesystem::path& path, SaveOptions options) {
  MIXPREC_CHECK(is_floating(options.dtype), "save_checkpoint: dtype must be floating, got ", dtype_name(options.dtype));
  std::vector<std::pair<std::string, Tensor>> tensors;
  NoGradGuard ng;
  for (auto& [name, t] : network.state_and_names()) {
    const Tensor host = t.detach().to(Device::cpu());  // itself on the CPU
    const Tensor w = is_floating(t.dtype()) ? host.astype(options.dtype) : host;
    tensors.emplace_back(name, w);
  }
  Metadata meta = options.metadata;
  meta.emplace("format", "mixprec");
  meta.emplace("mixprec_version", MIXPREC_VERSION);
  write_safetensors(path, tensors, meta);
}

std::map<std::string, Tensor> load_checkpoint(const std::filesystem::path& path) {
  SafetensorsFile f = read_safetensors(path);
  for (const auto& w : f.warnings) std::fprintf(stderr, "mixprec: warning: %s: %s\n", path.string().c_str(), w.c_str());
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : f.tensors) out.emplace(n, t);
  return out;
}

namespace {

// Dtypes convert within a kind only (MindSpore converts float<->float and int<->int).
int dtype_kind(DType d) {
  if (is_floating(d)) return 0;
  if (d == DType::i32 || d == DType::i64) return 1;
  return d == DType::u8 ? 2 : 3;
}

std::string join(const std::vector<std::string>& v, size_t max = 10) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > max) s += ", ... (" + std::to_string(v.size() - max) + " more)";
  return s;
}

bool is_train_state(const std::string& n) { return n.rfind("train_state/", 0) == 0; }

// MindSpore's _load_dismatch_prefix_params, limited to whole-cell prefixes: the first missing
// network name `m` that an unused given name ends with (as ".m") yields that name's prefix.
std::string find_checkpoint_prefix(const std::vector<std::string>& missing,
                                   const std::map<std::string, Tensor>& params, const std::set<std::string>& used) {
  for (const auto& m : missing)
    for (const auto& [g, t] : params)
      if (!used.count(g) && !is_train_state(g) && g.size() > m.size() + 1 &&
          g.compare(g.size() - m.size() - 1, m.size() + 1, "." + m) == 0)
        return g.substr(0, g.size() - m.size());
  return "";
}

// The reverse: the network's names carry a prefix the given names lack (a wrapper was loaded).
std::string find_network_prefix(const std::vector<std::string>& missing, const std::map<std::string, Tensor>& params) {
  for (const auto& [g, t] : params)
    for (const auto& m : missing)
      if (m.size() > g.size() + 1 && m.compare(m.size() - g.size() - 1, g.size() + 1, "." + g) == 0)
        return m.substr(0, m.size() - g.size());
  return "";
}

struct Match {
  std::string name;  // in the network
  Tensor dst;
  const Tensor* src;
};

// Shape and dtype-kind errors of every match, and (strict) downcasts; throws listing them all.
void check_matches(const std::vector<Match>& matches, const LoadOptions& options) {
  std::vector<std::string> shape, kind, down;
  for (const Match& m : matches) {
    const DType s = m.src->dtype(), d = m.dst.dtype();
    if (m.src->shape() != m.dst.shape())
      shape.push_back(m.name + ": given " + shape_str(m.src->shape()) + ", network " + shape_str(m.dst.shape()));
    if (dtype_kind(s) != dtype_kind(d))
      kind.push_back(m.name + ": given " + std::string(dtype_name(s)) + ", network expects " + std::string(dtype_name(d)));
    else if (options.strict && !options.allow_downcast && dtype_size(d) < dtype_size(s))
      down.push_back(m.name + ": " + std::string(dtype_name(s)) + " to " + std::string(dtype_name(d)));
  }
  MIXPREC_CHECK(shape.empty(), "load_param_into_net: shape mismatch, nothing loaded: ", join(shape),
                Hint{"is this a checkpoint of the same network, built with the same sizes?"});
  MIXPREC_CHECK(kind.empty(), "load_param_into_net: dtype of another kind, nothing loaded: ", join(kind),
                Hint{"an integer tensor cannot become a float parameter (or the reverse); check the checkpoint"});
  MIXPREC_CHECK(down.empty(), "load_param_into_net (strict): would downcast, nothing loaded: ", join(down),
                Hint{"set allow_downcast, or keep parameters in fp32 and let AMP cast at use"});
}

void warn_report(const LoadReport& r, size_t network_size, const std::string& network_prefix) {
  for (const auto& p : r.prefixes_removed)
    std::fprintf(stderr, "mixprec: warning: load_param_into_net: removed the prefix '%s' from the given names to match the network\n",
                 p.c_str());
  if (r.param_not_load.empty() && r.ckpt_not_load.empty()) return;
  std::string msg = "loaded " + std::to_string(r.loaded) + " of " + std::to_string(network_size) +
                    " network parameters and buffers";
  if (!r.param_not_load.empty())
    msg += "; " + std::to_string(r.param_not_load.size()) + " not given (param_not_load): " + join(r.param_not_load);
  if (!r.ckpt_not_load.empty())
    msg += "; " + std::to_string(r.ckpt_not_load.size()) + " given but not in the network (ckpt_not_load): " +
           join(r.ckpt_not_load);
  std::fprintf(stderr, "mixprec: warning: load_param_into_net: %s\n", msg.c_str());
  if (r.loaded == 0 && !network_prefix.empty())
    std::fprintf(stderr, "  hint: the network's names start with '%s' and the given names do not: load into that sub-cell\n",
                 network_prefix.c_str());
}

}  // namespace

LoadReport load_param_into_net(nn::Cell& network, const std::map<std::string, Tensor>& params, LoadOptions options) {
  LoadReport report;
  std::set<std::string> used;
  std::vector<Match> matches;
  const auto state = network.state_and_names();
  for (const auto& [name, dst] : state) {
    auto it = params.find(name);
    if (it == params.end()) {
      report.param_not_load.push_back(name);
      continue;
    }
    used.insert(name);
    matches.push_back({name, dst, &it->second});
  }
  // Non-strict, as MindSpore: remove prefixes the given names carry until no missing name gains.
  for (std::string prefix; !options.strict && !(prefix = find_checkpoint_prefix(report.param_not_load, params, used)).empty();) {
    report.prefixes_removed.push_back(prefix);
    std::erase_if(report.param_not_load, [&](const std::string& name) {
      auto it = params.find(prefix + name);
      if (it == params.end() || used.count(it->first)) return false;
      used.insert(it->first);
      const auto dst = std::find_if(state.begin(), state.end(), [&](const nn::NamedTensor& e) { return e.first == name; });
      matches.push_back({name, dst->second, &it->second});
      return true;
    });
  }
  for (const auto& [n, t] : params)  // training-state payload ("train_state/...") is not a parameter
    if (!used.count(n) && !is_train_state(n)) report.ckpt_not_load.push_back(n);
  check_matches(matches, options);
  if (options.strict) {
    const std::string prefix = find_checkpoint_prefix(report.param_not_load, params, used);
    const Hint hint{prefix.empty() ? "" : "the given names carry the prefix '" + prefix +
                                              "'; a non-strict load removes it (as MindSpore does)"};
    MIXPREC_CHECK(report.param_not_load.empty(), "load_param_into_net (strict): missing from the parameters given: ",
                  join(report.param_not_load), hint);
    MIXPREC_CHECK(report.ckpt_not_load.empty(), "load_param_into_net (strict): not in the network: ",
                  join(report.ckpt_not_load), hint);
  }
  NoGradGuard ng;
  for (const Match& m : matches) {
    Tensor target = m.dst.detach();
    target.copy_(*m.src);  // converts dtype; bumps the version, so stale casts of it are dropped
  }
  report.loaded = static_cast<int64_t>(matches.size());
  if (options.warn)
    warn_report(report, state.size(),
                report.loaded == 0 ? find_network_prefix(report.param_not_load, params) : std::string());
  return report;
}

}  // namespace mixprec::io
