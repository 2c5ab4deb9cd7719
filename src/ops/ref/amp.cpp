// Reference kernels of the AMP multi-tensor family (ops/amp_problem.h): plain loops over each
// tensor in order, the oracle of the CUDA kernels. The flag and scale tensors are read on the
// host here, as these kernels run on the CPU.
#include <bit>
#include <cmath>
#include <limits>

#include "mixprec/convert.h"
#include "ops/amp_problem.h"
#include "ops/ref/kernels.h"

namespace mixprec::ops::ref {
namespace {

float load_f32(const Tensor& t, int64_t i) {
  float v;
  convert_row(static_cast<const char*>(t.data_ptr()) + i * static_cast<int64_t>(t.itemsize()),
              t.dtype(), &v, DType::f32, 1);
  return v;
}
void store_f32(const Tensor& t, int64_t i, float v) {
  convert_row(&v, DType::f32,
              static_cast<char*>(t.data_ptr()) + i * static_cast<int64_t>(t.itemsize()), t.dtype(),
              1);
}
}  // namespace

void amp_unscale(const AmpUnscaleProblem& p) {
  const float inv = *p.inv_scale.data<float>();
  bool bad = false;
  for (const Tensor& g : p.grads)
    for (int64_t i = 0; i < g.numel(); ++i) {
      const float v = load_f32(g, i) * inv;
      bad = bad || !stores_finite(v, g.dtype());  // the stored value
      store_f32(g, i, v);
    }
  if (bad) *p.found_inf.data<float>() = 1.0f;
}

void amp_update_scale(const AmpUpdateScaleProblem& p) {
  float& scale = *p.scale.data<float>();
  int32_t& tracker = *p.growth_tracker.data<int32_t>();
  if (*p.found_inf.data<float>() != 0.0f) {
    scale = std::max(scale * static_cast<float>(p.backoff_factor), static_cast<float>(p.min_scale));
    tracker = 0;
    return;
  }
  const int64_t successful = int64_t{tracker} + 1;
  if (successful >= p.growth_interval) {
    const float grown = scale * static_cast<float>(p.growth_factor);
    if (std::isfinite(grown)) scale = grown;
    tracker = 0;
  } else {
    tracker = static_cast<int32_t>(successful);
  }
}

void fused_momentum(const FusedMomentumProblem& p) {
  if (p.found_inf.defined() && *p.found_inf.data<float>() != 0.0f) return;
  const float inv = p.inv_scale.defined() ? *p.inv_scale.data<float>() : 1.0f;
  MomentumStep step = p.step;
  if (p.lr.defined()) step.lr = *p.lr.data<float>();
  for (size_t t = 0; t < p.params.size(); ++t) {
    float* w = p.params[t].data<float>();
    float* v = p.velocity[t].data<float>();
    for (int64_t i = 0; i < p.params[t].numel(); ++i)
      step(w[i], v[i], load_f32(p.grads[t], i) * inv);
    if (!p.working.empty())
      convert_row(w, DType::f32, p.working[t].data_ptr(), p.working[t].dtype(),
                  p.params[t].numel());
  }
}

void amp_advance_step(const AmpAdvanceStepProblem& p) {
  int32_t& count = *p.count.data<int32_t>();
  const int64_t rows = p.table.size(0), width = p.table.size(1);
  const int64_t row = int64_t{count} - p.base;
  float* out = p.out.data<float>();
  const float* table = p.table.data<float>();
  for (int64_t k = 0; k < width; ++k)
    out[k] =
        row >= 0 && row < rows ? table[row * width + k] : std::numeric_limits<float>::quiet_NaN();
  if (!p.found_inf.defined() || *p.found_inf.data<float>() == 0.0f) ++count;
}

}  // namespace mixprec::ops::ref
