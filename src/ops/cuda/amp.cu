// CUDA kernels of the AMP multi-tensor family (ops/amp_problem.h), one launch each, reading the
// flag and scale tensors on the device: nothing here waits for the GPU or reads it from the host.
// The tensor lists travel as one small table of (pointer, start, count, dtype) rows per chunk,
// uploaded with one host-to-device copy queued on the same stream.
#include <vector>

#include "core/cuda_dtype.cuh"
#include "core/cuda_stream.h"
#include "ops/amp_problem.h"
#include "ops/cuda/kernels.h"

namespace mixprec::ops::cuda {
namespace {

using cuda_detail::load_elem;
using cuda_detail::store_elem;

constexpr int64_t kChunk = 16384;  // elements per block
constexpr unsigned kThreads = 256;

// One chunk of one tensor (or of one parameter's tensors): its pointers, the chunk's first
// element, the tensor's element count and the dtypes. Plain int64 fields so the table is one i64
// tensor.
struct ChunkRow {
  int64_t ptr[5];  // unscale: grad. update: param, grad, working (0: none), state slots 0 and 1
  int64_t start, n, dtype0, dtype1;
};
constexpr int64_t kRowWords = 9;
static_assert(sizeof(ChunkRow) == kRowWords * sizeof(int64_t));

// Splits each tensor into chunks of kChunk elements and uploads the rows (queued on the stream;
// the pageable source is staged before cudaMemcpyAsync returns, so `rows` may die).
Tensor upload_rows(const std::vector<ChunkRow>& rows, Device device) {
  return Tensor::from_data(rows.data(), DType::i64, {static_cast<int64_t>(rows.size()) * kRowWords},
                           {.dtype = DType::i64, .device = device});
}

// Grid: one block of 256 threads per chunk row; threads take elements start + t, + 256, ... of
// the chunk (coalesced). Each writes its gradient element scaled (one rounding into the dtype)
// and, if any of its stored values is not finite, stores 1 into found_inf: every writer stores the
// same value, so the race is benign and the flag ends 1 iff some element was not finite.
__global__ void unscale_kernel(const ChunkRow* rows, float* found_inf, const float* inv_scale) {
  const ChunkRow r = rows[blockIdx.x];
  const float inv = *inv_scale;
  const DType dt = static_cast<DType>(r.dtype0);
  void* g = reinterpret_cast<void*>(r.ptr[0]);
  const int64_t end = min(r.start + kChunk, r.n);
  bool bad = false;
  for (int64_t i = r.start + threadIdx.x; i < end; i += kThreads) {
    const float v = load_elem<float>(g, dt, i) * inv;
    bad = bad || !stores_finite(v, dt);  // the stored value
    store_elem<float>(g, dt, i, v);
  }
  if (bad) *found_inf = 1.0f;
}

// One thread: the scale update of AmpUpdateScaleProblem (its rule, in f32 on the device).
__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found_inf,
                                    DynamicScaleRule rule) {
  rule(*scale, *tracker, *found_inf != 0.0f);
}

// Grid: one block of 256 threads per chunk row, threads striding the chunk (coalesced). Every
// thread reads found_inf first and returns when it is set, so a skipped step writes nothing.
// Invariant: each element of params/state/working belongs to exactly one chunk and thread.
// scalars (nullable): the step's learning rate (and corrections) read on the device
// (amp_advance_step_'s output), else step's own. The same Step as the cpu and reference kernels,
// compiled without contraction (-fmad=false), so the same bits.
template <class Step>
__global__ void fused_update_kernel(const ChunkRow* rows, const float* found_inf,
                                    const float* inv_scale, const float* scalars, Step step) {
  if (found_inf && *found_inf != 0.0f) return;
  const ChunkRow r = rows[blockIdx.x];
  const float inv = inv_scale ? *inv_scale : 1.0f;
  if (scalars) step.read_scalars(scalars);
  float* p = reinterpret_cast<float*>(r.ptr[0]);
  const void* g = reinterpret_cast<const void*>(r.ptr[1]);
  void* low = reinterpret_cast<void*>(r.ptr[2]);
  float* s0 = reinterpret_cast<float*>(r.ptr[3]);
  float* s1 = reinterpret_cast<float*>(r.ptr[4]);
  const DType gdt = static_cast<DType>(r.dtype0), ldt = static_cast<DType>(r.dtype1);
  const int64_t end = min(r.start + kChunk, r.n);
  for (int64_t i = r.start + threadIdx.x; i < end; i += kThreads) {
    step_at(step, i, p, s0, s1, load_elem<float>(g, gdt, i) * inv);
    if (low) store_elem<float>(low, ldt, i, p[i]);
  }
}

// One thread: AmpAdvanceStepProblem. Reads count and found_inf, writes `width` floats of out and
// count; the table is read-only. Queued on the stream after the finite check that set found_inf
// and before the update that reads out, so stream order is the only synchronisation it needs.
__global__ void advance_step_kernel(int32_t* count, const float* found_inf, const float* table,
                                    int64_t rows, int64_t width, int64_t base, float* out) {
  const int64_t row = int64_t{*count} - base;
  for (int64_t k = 0; k < width; ++k)
    out[k] = row >= 0 && row < rows ? table[row * width + k] : __int_as_float(0x7fc00000);
  if (!found_inf || *found_inf == 0.0f) *count += 1;
}

int64_t as_int(const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); }

// The typed device pointer of a flag, scale or table tensor (Tensor::data<T>() is the host's
// access and refuses a GPU tensor).
template <class T> T* dev(const Tensor& t) {
  MIXPREC_CHECK(t.dtype() == dtype_of<T>(), "amp kernel: expected ", dtype_name(dtype_of<T>()),
                ", got ", dtype_name(t.dtype()));
  return static_cast<T*>(t.data_ptr());
}
template <class T> T* dev_or_null(const Tensor& t) { return t.defined() ? dev<T>(t) : nullptr; }

}  // namespace

void amp_unscale(const AmpUnscaleProblem& p) {
  std::vector<ChunkRow> rows;
  for (const Tensor& g : p.grads)
    for (int64_t s = 0; s < g.numel(); s += kChunk)
      rows.push_back({{as_int(g.data_ptr()), 0, 0, 0, 0}, s, g.numel(), int64_t(g.dtype()), 0});
  if (rows.empty()) return;
  cudaStream_t st = cuda_detail::activate(p.device());
  const Tensor table = upload_rows(rows, p.device());
  unscale_kernel<<<static_cast<unsigned>(rows.size()), kThreads, 0, st>>>(
      static_cast<const ChunkRow*>(table.data_ptr()), dev<float>(p.found_inf),
      dev<float>(p.inv_scale));
  MIXPREC_CUDA_LAUNCHED();
}

void amp_update_scale(const AmpUpdateScaleProblem& p) {
  cudaStream_t st = cuda_detail::activate(p.device());
  update_scale_kernel<<<1, 1, 0, st>>>(dev<float>(p.scale), dev<int32_t>(p.growth_tracker),
                                       dev<float>(p.found_inf), p.rule);
  MIXPREC_CUDA_LAUNCHED();
}

template <class Step> void fused_update(const FusedUpdateProblem<Step>& p) {
  std::vector<ChunkRow> rows;
  for (size_t t = 0; t < p.params.size(); ++t) {
    const int64_t n = p.params[t].numel();
    const Tensor* low = p.working.empty() ? nullptr : &p.working[t];
    int64_t slot[2] = {0, 0};
    for (int k = 0; k < Step::kSlots; ++k) slot[k] = as_int(p.state[k][t].data_ptr());
    for (int64_t s = 0; s < n; s += kChunk)
      rows.push_back({{as_int(p.params[t].data_ptr()), as_int(p.grads[t].data_ptr()),
                       low ? as_int(low->data_ptr()) : 0, slot[0], slot[1]},
                      s,
                      n,
                      int64_t(p.grads[t].dtype()),
                      low ? int64_t(low->dtype()) : 0});
  }
  if (rows.empty()) return;
  cudaStream_t st = cuda_detail::activate(p.device());
  const Tensor table = upload_rows(rows, p.device());
  fused_update_kernel<Step><<<static_cast<unsigned>(rows.size()), kThreads, 0, st>>>(
      static_cast<const ChunkRow*>(table.data_ptr()), dev_or_null<float>(p.found_inf),
      dev_or_null<float>(p.inv_scale), dev_or_null<float>(p.scalars), p.step);
  MIXPREC_CUDA_LAUNCHED();
}
template void fused_update(const FusedSgdProblem&);
template void fused_update(const FusedMomentumProblem&);
template void fused_update(const FusedAdamProblem&);

void amp_advance_step(const AmpAdvanceStepProblem& p) {
  cudaStream_t st = cuda_detail::activate(p.device());
  advance_step_kernel<<<1, 1, 0, st>>>(dev<int32_t>(p.count), dev_or_null<float>(p.found_inf),
                                       dev<float>(p.table), p.table.size(0), p.table.size(1),
                                       p.base, dev<float>(p.out));
  MIXPREC_CUDA_LAUNCHED();
}

namespace {
// One thread per chunk of kClipChunk elements: its sum of squares in f64, in element order (the
// reference's order, so the bits match it). Rows use ptr[0] (the gradient), start, n, dtype0.
__global__ void clip_partial_kernel(const ChunkRow* rows, int64_t count, const float* scale,
                                    int64_t micro, const float* found_inf, double* part) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= count || *found_inf != 0.0f) return;
  const ChunkRow row = rows[r];
  const double unscale = clip_unscale(scale ? *scale : 1.0f, micro);
  const DType dt = static_cast<DType>(row.dtype0);
  const void* g = reinterpret_cast<const void*>(row.ptr[0]);
  const int64_t end = min(row.start + kClipChunk, row.n);
  double acc = 0.0;
  for (int64_t i = row.start; i < end; ++i) {
    const double v = static_cast<double>(load_elem<float>(g, dt, i)) * unscale;
    acc += v * v;
  }
  part[r] = acc;
}

// One thread: the chunk sums added in order, then the decision (clip_decide).
__global__ void clip_decide_kernel(const double* part, int64_t count, const float* scale,
                                   int64_t micro, double max_norm, float* found_inf,
                                   float* inv_scale, double* norm) {
  if (*found_inf != 0.0f) {
    *norm = -1.0;
    return;
  }
  double sq = 0.0;
  for (int64_t r = 0; r < count; ++r) sq += part[r];
  clip_decide(sq, clip_unscale(scale ? *scale : 1.0f, micro), max_norm, found_inf, inv_scale,
              norm);
}
}  // namespace

void amp_clip(const AmpClipProblem& p) {
  std::vector<ChunkRow> rows;
  for (const Tensor& g : p.grads)
    for (int64_t s = 0; s < g.numel(); s += kClipChunk)
      rows.push_back({{as_int(g.data_ptr()), 0, 0, 0, 0}, s, g.numel(), int64_t(g.dtype()), 0});
  cudaStream_t st = cuda_detail::activate(p.device());
  const int64_t count = static_cast<int64_t>(rows.size());
  Tensor table, part;
  if (count > 0) {
    table = upload_rows(rows, p.device());
    part = Tensor::empty({count}, {.dtype = DType::f64, .device = p.device()});
    const unsigned blocks = static_cast<unsigned>((count + kThreads - 1) / kThreads);
    clip_partial_kernel<<<blocks, kThreads, 0, st>>>(
        static_cast<const ChunkRow*>(table.data_ptr()), count, dev_or_null<float>(p.scale),
        p.micro_batches, dev<float>(p.found_inf), dev<double>(part));
    MIXPREC_CUDA_LAUNCHED();
  }
  clip_decide_kernel<<<1, 1, 0, st>>>(count > 0 ? dev<double>(part) : nullptr, count,
                                      dev_or_null<float>(p.scale), p.micro_batches, p.max_norm,
                                      dev<float>(p.found_inf), dev<float>(p.inv_scale),
                                      dev<double>(p.norm));
  MIXPREC_CUDA_LAUNCHED();
}

}  // namespace mixprec::ops::cuda
