// Checkpoints, in the seed's vocabulary: save_checkpoint writes a network's fp32 master weights
// (and buffers such as BatchNorm running statistics) as safetensors, even from an O2/O3
// network; load_checkpoint reads name -> tensor; load_param_into_net copies them into a
// network, casting as needed (an fp32 file into any network), and reports what did not match.
#pragma once

#include <filesystem>
#include <map>
#include <string>
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
  // Strict: any missing or unexpected name, or shape mismatch, is an error; so is a dtype
  // downcast (e.g. f32 file into an f16 parameter) unless allow_downcast.
  bool strict = false;
  bool allow_downcast = false;
};

struct LoadReport {
  std::vector<std::string> missing;     // in the network, not in the file (MindSpore: param_not_load)
  std::vector<std::string> unexpected;  // in the file, not in the network (ckpt_not_load)
  std::vector<std::string> mismatched;  // same name, different shape ("name: file [..] vs net [..]")
  int64_t loaded = 0;
};

LoadReport load_param_into_net(nn::Cell& network, const std::map<std::string, Tensor>& params,
                               LoadOptions options = {});

}  // namespace mixprec::io
