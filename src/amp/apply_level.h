// The first step of amp::build_train_network (step/cell.cpp), shared with train::Model's
// eval-only constructor (train/model.cpp): the level's casts on a network, with the level's
// defaults (the low dtype, BatchNorm kept in fp32 at O2). O0 leaves the network's own AMP
// configuration as it is (MindSpore: "O0: do not change").
#pragma once

#include <optional>
#include <string_view>

#include "mixprec/amp/amp.h"

namespace mixprec::amp::detail {

struct AppliedLevel {
  Level level;
  DType low;  // the low dtype the level casts to (f32: no casts)
};

// `what` names the caller's option in the error for a dtype that is not f16, bf16 or f32
// ("build_train_network: cast_model_type").
AppliedLevel apply_level(nn::Cell& network, std::string_view level_name,
                         std::optional<DType> cast_model_type,
                         std::optional<bool> keep_batchnorm_fp32, std::string_view what);

}  // namespace mixprec::amp::detail
