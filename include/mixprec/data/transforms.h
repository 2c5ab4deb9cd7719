// Dataset transforms for Dataset::map (MindSpore's vision.Rescale / Normalize / TypeCast).
// A transform receives one column of a whole batch (images [B, C, H, W] or labels [B]) and
// returns the transformed batch. Transforms must act per sample (elementwise or per channel),
// so applying them to a batch equals applying them sample by sample; they run on the prefetch
// thread and must be pure (no shared mutable state). Plain loops on core tensors, no ops layer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mixprec/dtype.h"
#include "mixprec/tensor.h"

namespace mixprec::dataset {

struct Transform {
  std::string name;                            // e.g. "rescale(0.00392157, 0)", for messages
  std::function<Tensor(const Tensor&)> apply;  // batch column in, batch column out
};

namespace transforms {

// out = in * scale + shift, as f32 (computed in f64, rounded once). Any input dtype.
Transform rescale(double scale, double shift);
// out = (in - mean[c]) / std[c] as f32, c the channel (dim 1 of [B, C, ...]; a single value
// applies to every channel, and to inputs without a channel dim). Every std must be > 0.
Transform normalize(double mean, double std);
Transform normalize(std::vector<double> mean, std::vector<double> std);
// Tensor::astype(dtype) (float -> integer truncates toward zero).
Transform type_cast(DType dtype);

}  // namespace transforms
}  // namespace mixprec::dataset
