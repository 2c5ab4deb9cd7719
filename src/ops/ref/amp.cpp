// Reference kernels of the AMP multi-tensor family (ops/amp_problem.h): plain loops over each
// tensor in order, element by element, the oracle of the cpu and CUDA kernels. The flag and scale
// tensors are read on the host here, as these kernels run on the CPU.
#include <algorithm>
#include <limits>
#include <vector>

#include "mixprec/convert.h"
#include "ops/amp_problem.h"
#include "ops/ref/kernels.h"
#include "ops/tensor_chunks.h"

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
  p.rule(*p.scale.data<float>(), *p.growth_tracker.data<int32_t>(),
         *p.found_inf.data<float>() != 0.0f);
}

template <class Step> void fused_update(const FusedUpdateProblem<Step>& p) {
  if (p.skipped_on_host()) return;
  const Step step = p.step_on_host();
  const float inv = p.inv_scale_on_host();
  for (size_t t = 0; t < p.params.size(); ++t) {
    const Tensor &param = p.params[t], &grad = p.grads[t];
    float* w = param.data<float>();
    const std::array<float*, 2> s = p.state_of(t);
    for (int64_t i = 0; i < param.numel(); ++i)
      step_at(step, i, w, s[0], s[1], load_f32(grad, i) * inv);
    if (!p.working.empty())
      convert_row(w, DType::f32, p.working[t].data_ptr(), p.working[t].dtype(), param.numel());
  }
}
template void fused_update(const FusedSgdProblem&);
template void fused_update(const FusedMomentumProblem&);
template void fused_update(const FusedAdamProblem&);

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

// Every tensor's chunks in one parallel loop (OpenMP; a 16-bit chunk widened in a local buffer),
// their sums then combined in order, tensor by tensor and chunk by chunk: the same bits for any
// thread count. This is the host's norm too (the train step's host strategy runs it). (A loop per
// tensor left a model's many tensors under 65536 elements to one thread: gpt-tiny's 54.)
void amp_clip(const AmpClipProblem& p) {
  if (*p.found_inf.data<float>() != 0.0f) {
    *p.norm.data<double>() = -1.0;
    return;
  }
  const double unscale =
      clip_unscale(p.scale.defined() ? *p.scale.data<float>() : 1.0f, p.micro_batches);
  const TensorChunks all(p.grads, kClipChunk);
  std::vector<const char*> data(p.grads.size());
  for (size_t t = 0; t < p.grads.size(); ++t)
    data[t] = static_cast<const char*>(p.grads[t].data_ptr());
  std::vector<double> part(static_cast<size_t>(all.total()));
#pragma omp parallel for schedule(static) if (all.elements() > 65536)
  for (int64_t c = 0; c < all.total(); ++c) {
    size_t t;
    int64_t lo, hi;
    all.locate(c, t, lo, hi);
    const DType dt = p.grads[t].dtype();
    float buf[kClipChunk];
    const float* x = buf;
    if (dt == DType::f32)
      x = reinterpret_cast<const float*>(data[t]) + lo;
    else  // exact widening
      convert_row(data[t] + lo * static_cast<int64_t>(dtype_size(dt)), dt, buf, DType::f32,
                  hi - lo);
    double acc = 0.0;
    for (int64_t i = 0; i < hi - lo; ++i) {
      const double v = static_cast<double>(x[i]) * unscale;
      acc += v * v;
    }
    part[static_cast<size_t>(c)] = acc;
  }
  double sq = 0.0;
  for (double v : part) sq += v;
  clip_decide(sq, unscale, p.max_norm, p.found_inf.data<float>(), p.inv_scale.data<float>(),
              p.norm.data<double>());
}

}  // namespace mixprec::ops::ref
