// Checkpoints, in the seed's vocabulary: save_checkpoint writes a network's fp32 master weights
// (and buffers such as BatchNorm running statistics) as safetensors, even from an O2/O3
// network; load_checkpoint reads name -> tensor; load_param_into_net copies them into a
// network, casting as needed (an fp32 file into any network), and returns and warns what did
// not load (MindSpore's param_not_load, ckpt_not_load). Files are written atomically (io/file.h).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mixprec/io/safetensors.h"
#include "mixprec/nn/cell.h"

namespace mixprec::io {

struct SaveOptions {
  DType dtype = DType::f32;  // the dtype weights are written in
  Metadata metadata;         // extra "__metadata__" fields
};

void save_checkpoint(const nn::Cell& network, const std::filesystem::path& path, SaveOptions options = {});

// Name -> tensor, in file order. Warnings (NaN/inf) are printed to stderr.
std::map<std::string, Tensor> load_checkpoint(const std::filesystem::path& path);

struct LoadOptions {
  // MindSpore's strict_load. Non-strict (default): names missing on either side are reported
  // (and warned about); when network names are missing, a prefix the checkpoint's names carry
  // (e.g. "network." from a saved wrapper cell) is removed to match, with a warning, as MindSpore
  // does. Strict: any missing or unexpected name is an error, no prefix is removed, and so is a
  // dtype downcast (e.g. f64 file into an f32 parameter) unless allow_downcast.
  bool strict = false;
  bool allow_downcast = false;
  // Print to stderr what did not load (both lists, how many loaded, a prefix removed).
  bool warn = true;
};

// What load_param_into_net did, under MindSpore's names. It unpacks like MindSpore's tuple:
//   auto [param_not_load, ckpt_not_load] = io::load_param_into_net(net, param_dict);
struct LoadReport {
  std::vector<std::string> param_not_load;  // in the network, not loaded (not in the parameters given)
  std::vector<std::string> ckpt_not_load;   // given, not loaded ("train_state/..." entries excepted)
  int64_t loaded = 0;                       // network parameters and buffers loaded
  std::vector<std::string> prefixes_removed;  // prefixes removed from given names to match (non-strict)

  template <std::size_t I> auto& get() & { return I == 0 ? param_not_load : ckpt_not_load; }
  template <std::size_t I> const auto& get() const& { return I == 0 ? param_not_load : ckpt_not_load; }
  template <std::size_t I> auto&& get() && { return std::move(I == 0 ? param_not_load : ckpt_not_load); }
};

// Copies `params` into the network's parameters and buffers, casting float dtypes as needed (an
// fp32 file into an AMP network; casts of the weights are refreshed). Every match is checked
// before anything is copied, so an error leaves the network unchanged. Always an error (as in
// MindSpore): a shape mismatch, or a dtype of another kind (an integer tensor into a float
// parameter, or the reverse), naming the parameter, what was found and what was expected.
LoadReport load_param_into_net(nn::Cell& network, const std::map<std::string, Tensor>& params,
                               LoadOptions options = {});

}  // namespace mixprec::io

// Tuple protocol for LoadReport: `auto [param_not_load, ckpt_not_load] = load_param_into_net(...)`.
template <>
struct std::tuple_size<mixprec::io::LoadReport> : std::integral_constant<std::size_t, 2> {};
template <std::size_t I>
struct std::tuple_element<I, mixprec::io::LoadReport> {
  using type = std::vector<std::string>;
};
