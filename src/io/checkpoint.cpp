// save_checkpoint / load_checkpoint / load_param_into_net over the safetensors format.
#include "mixprec/io/checkpoint.h"

#include <cstdio>

#include "mixprec/error.h"
#include "mixprec/graph.h"
#include "mixprec/version.h"

namespace mixprec::io {

void save_checkpoint(const nn::Cell& network, const std::filesystem::path& path, SaveOptions options) {
  MIXPREC_CHECK(is_floating(options.dtype), "save_checkpoint: dtype must be floating, got ", dtype_name(options.dtype));
  std::vector<std::pair<std::string, Tensor>> tensors;
  NoGradGuard ng;
  for (auto& [name, t] : network.state_and_names()) {
    const Tensor w = is_floating(t.dtype()) ? t.detach().astype(options.dtype) : t.detach();
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

LoadReport load_param_into_net(nn::Cell& network, const std::map<std::string, Tensor>& params, LoadOptions options) {
  LoadReport report;
  std::map<std::string, bool> used;
  for (const auto& [n, t] : params) used[n] = false;
  NoGradGuard ng;
  for (auto& [name, dst] : network.state_and_names()) {
    auto it = params.find(name);
    if (it == params.end()) {
      report.missing.push_back(name);
      continue;
    }
    used[name] = true;
    const Tensor& src = it->second;
    if (src.shape() != dst.shape()) {
      report.mismatched.push_back(name + ": file " + shape_str(src.shape()) + " vs network " + shape_str(dst.shape()));
      continue;
    }
    const bool downcast = is_floating(src.dtype()) && is_floating(dst.dtype()) &&
                          dtype_size(dst.dtype()) < dtype_size(src.dtype());
    MIXPREC_CHECK(!(options.strict && downcast && !options.allow_downcast), "load_param_into_net: '", name,
                  "' would be downcast from ", dtype_name(src.dtype()), " to ", dtype_name(dst.dtype()),
                  Hint{"set allow_downcast, or keep parameters in fp32 and let AMP cast at use"});
    Tensor target = dst.detach();
    target.copy_(src);  // converts dtype; bumps the version, so stale casts of it are dropped
    ++report.loaded;
  }
  for (const auto& [n, u] : used)  // training-state payload ("train_state/...") is not a parameter
    if (!u && n.rfind("train_state/", 0) != 0) report.unexpected.push_back(n);
  if (options.strict) {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    MIXPREC_CHECK(report.missing.empty(), "load_param_into_net (strict): missing from the checkpoint: ", list(report.missing));
    MIXPREC_CHECK(report.unexpected.empty(), "load_param_into_net (strict): not in the network: ", list(report.unexpected));
    MIXPREC_CHECK(report.mismatched.empty(), "load_param_into_net (strict): shape mismatches: ", list(report.mismatched));
  }
  return report;
}

}  // namespace mixprec::io
