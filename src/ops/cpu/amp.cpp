// The cpu backend's AMP multi-tensor kernels (ops/amp_problem.h): the unscale + finite check and
// the optimizers' fused updates, as one OpenMP loop over the chunks of 4096 elements of all the
// tensors. Each chunk is done whole while it is in cache (a 16-bit chunk widened, scaled, checked
// and rounded back; a chunk of weights updated, then rounded into its working copy), chunks are
// independent, and the flag is an OR reduction: no result depends on the thread count. Bit for bit
// the reference kernels (the same element formulas, no contraction: this file is compiled with
// -ffp-contract=off).
#include <algorithm>
#include <vector>

#include "mixprec/convert.h"
#include "ops/cpu/kernels.h"
#include "ops/tensor_chunks.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kChunk = 4096;
constexpr int64_t kParallelFrom = 65536;  // elements: a smaller tensor is not worth the fork

// Contiguous f32, chunk [lo, hi): scaled in place (do_scale), or only checked (no write pass).
// True if any value is not finite.
bool unscale_f32(float* p, int64_t lo, int64_t hi, float inv, bool do_scale) {
  int local = 0;
  if (do_scale) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = p[i] * inv;
      local |= !finite_bits(v);
      p[i] = v;
    }
  } else {
    for (int64_t i = lo; i < hi; ++i) local |= !finite_bits(p[i]);
  }
  return local != 0;
}

// Contiguous f16/bf16, chunk [lo, hi): widened, scaled, the value checked as it will be stored,
// rounded back (no write when only checking).
bool unscale_16(void* p, DType dt, int64_t lo, int64_t hi, float inv, bool do_scale) {
  alignas(64) float buf[kChunk];
  char* base = static_cast<char*>(p) + lo * 2;
  convert_row(base, dt, buf, DType::f32, hi - lo);
  int local = 0;
  for (int64_t i = 0; i < hi - lo; ++i) {
    const float v = do_scale ? buf[i] * inv : buf[i];
    local |= !stores_finite(v, dt);
    buf[i] = v;
  }
  if (do_scale) convert_row(buf, DType::f32, base, dt, hi - lo);
  return local != 0;
}

// Elements [lo, hi) of one parameter: the step on the weights w and state s0, s1 with the
// gradient g (of storage type G, widened as it is read: no extra pass) times inv.
template <class Step, class G> void update_chunk(const Step& step_in, float* w, float* s0,
                                                 float* s1, const G* g, int64_t lo, int64_t hi,
                                                 float inv) {
  const Step step = step_in;  // a local copy: no store to w can change it
  for (int64_t i = lo; i < hi; ++i) step_at(step, i, w, s0, s1, load(g[i]) * inv);
}

template <class Step> void update_chunk(const Step& step, float* w, float* s0, float* s1,
                                        const void* g, DType gdt, int64_t lo, int64_t hi,
                                        float inv) {
  switch (gdt) {
    case DType::bf16:
      return update_chunk(step, w, s0, s1, static_cast<const bf16*>(g), lo, hi, inv);
    case DType::f16: return update_chunk(step, w, s0, s1, static_cast<const f16*>(g), lo, hi, inv);
    default: return update_chunk(step, w, s0, s1, static_cast<const float*>(g), lo, hi, inv);
  }
}

}  // namespace

void amp_unscale(const AmpUnscaleProblem& p) {
  const float inv = *p.inv_scale.data<float>();
  const bool do_scale = inv != 1.0f;  // x * 1 is x: a scale of 1 is a pure check
  const TensorChunks all(p.grads, kChunk);
  const bool parallel = all.elements() > kParallelFrom && disjoint_tensors(p.grads);
  std::vector<void*> data(p.grads.size());
  for (size_t t = 0; t < p.grads.size(); ++t) data[t] = p.grads[t].data_ptr();
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (parallel)
  for (int64_t c = 0; c < all.total(); ++c) {
    size_t t;
    int64_t lo, hi;
    all.locate(c, t, lo, hi);
    const DType dt = p.grads[t].dtype();
    bad |= dt == DType::f32 ? unscale_f32(static_cast<float*>(data[t]), lo, hi, inv, do_scale)
                            : unscale_16(data[t], dt, lo, hi, inv, do_scale);
  }
  if (bad) *p.found_inf.data<float>() = 1.0f;
}

template <class Step> void fused_update(const FusedUpdateProblem<Step>& p) {
  if (p.skipped_on_host()) return;
  const Step step = p.step_on_host();
  const float inv = p.inv_scale_on_host();
  const TensorChunks all(p.params, kChunk);
  // A tensor listed twice would have its chunks updated by two threads at once: such a list runs
  // in order on one thread, as a loop per tensor would.
  const bool parallel = all.elements() > kParallelFrom && disjoint_tensors(p.params);
  struct Tensors {
    float* w;
    std::array<float*, 2> s;
    const void* g;
    DType gdt;
    char* low;
    DType ldt;
  };
  std::vector<Tensors> ts(p.params.size());
  for (size_t t = 0; t < ts.size(); ++t) {
    const bool low = !p.working.empty();
    ts[t] = {p.params[t].template data<float>(),
             p.state_of(t),
             p.grads[t].data_ptr(),
             p.grads[t].dtype(),
             low ? static_cast<char*>(p.working[t].data_ptr()) : nullptr,
             low ? p.working[t].dtype() : DType::f32};
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < all.total(); ++c) {
    size_t t;
    int64_t lo, hi;
    all.locate(c, t, lo, hi);
    const Tensors& x = ts[t];
    update_chunk(step, x.w, x.s[0], x.s[1], x.g, x.gdt, lo, hi, inv);
    if (x.low) convert_row(x.w + lo, DType::f32, x.low + lo * 2, x.ldt, hi - lo);
  }
}
template void fused_update(const FusedSgdProblem&);
template void fused_update(const FusedMomentumProblem&);
template void fused_update(const FusedAdamProblem&);

}  // namespace mixprec::ops::cpu
