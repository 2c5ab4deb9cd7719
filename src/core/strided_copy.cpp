// Strided copy: merge dims, then walk the outer index space and convert the innermost run.
// Runs with unit stride on both sides go straight to convert_row; other runs are gathered into
// a small buffer, converted there, and scattered. Large copies split the outer loop over OpenMP
// threads; each element is written by exactly one thread, so results never depend on threads.
#include "strided_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"
#include "capture.h"
#include "mixprec/convert.h"

namespace mixprec::detail {

CopyLayout coalesce(const Shape& shape, const Strides& ss, const Strides& ds) {
  // Walk the dims in the destination's memory order (largest stride first; the source's stride
  // breaks ties), not in index order: a channels-last tensor copied into channels-last memory then
  // merges into one contiguous run instead of a run of stride C. A copy writes each element once,
  // so the order of the walk changes nothing but speed.
  std::vector<size_t> order;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ds[a] != ds[b] ? ds[a] > ds[b] : ss[a] > ss[b];
  });
  CopyLayout l;
  for (const size_t i : order) {
    if (!l.sizes.empty() && l.src.back() == ss[i] * shape[i] && l.dst.back() == ds[i] * shape[i]) {
      l.sizes.back() *= shape[i];
      l.src.back() = ss[i];
      l.dst.back() = ds[i];
    } else {
      l.sizes.push_back(shape[i]);
      l.src.push_back(ss[i]);
      l.dst.push_back(ds[i]);
    }
  }
  if (l.sizes.empty()) {
    l.sizes = {1};
    l.src = {1};
    l.dst = {1};
  }
  return l;
}

namespace {

template <class E>
void copy_typed(const char* s, int64_t s_stride, char* d, int64_t d_stride, int64_t n) {
  const E* sp = reinterpret_cast<const E*>(s);
  E* dp = reinterpret_cast<E*>(d);
  if (s_stride == 0) {
    const E v = *sp;
    for (int64_t i = 0; i < n; ++i) dp[i * d_stride] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dp[i * d_stride] = sp[i * s_stride];
  }
}

// Element copies by size (typed loads and stores, not a memcpy call per element).
void copy_elems(const char* s, int64_t s_stride, char* d, int64_t d_stride, int64_t n, size_t es) {
  switch (es) {
    case 1: return copy_typed<uint8_t>(s, s_stride, d, d_stride, n);
    case 2: return copy_typed<uint16_t>(s, s_stride, d, d_stride, n);
    case 4: return copy_typed<uint32_t>(s, s_stride, d, d_stride, n);
    case 8: return copy_typed<uint64_t>(s, s_stride, d, d_stride, n);
    default:
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(d + i * d_stride * static_cast<int64_t>(es), s + i * s_stride * static_cast<int64_t>(es), es);
  }
}

void copy_run(const char* s, DType sdt, int64_t s_stride, char* d, DType ddt, int64_t d_stride,
              int64_t n) {
  if (s_stride == 1 && d_stride == 1) {
    convert_row(s, sdt, d, ddt, n);
    return;
  }
  const size_t ses = dtype_size(sdt), des = dtype_size(ddt);
  if (sdt == ddt) {
    copy_elems(s, s_stride, d, d_stride, n, ses);
    return;
  }
  constexpr int64_t kChunk = 256;
  alignas(64) char sbuf[kChunk * 8];
  alignas(64) char dbuf[kChunk * 8];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    copy_elems(s + i * s_stride * static_cast<int64_t>(ses), s_stride, sbuf, 1, m, ses);
    convert_row(sbuf, sdt, dbuf, ddt, m);
    copy_elems(dbuf, 1, d + i * d_stride * static_cast<int64_t>(des), d_stride, m, des);
  }
}

}  // namespace

static void strided_copy_now(const Tensor& src, const Tensor& dst) {
  MIXPREC_ASSERT(src.shape() == dst.shape(), "strided_copy shapes ", shape_str(src.shape()),
                 " vs ", shape_str(dst.shape()));
  if (!src.device().is_cpu() || !dst.device().is_cpu()) {
    cuda_copy(src, dst);  // within a GPU, or between devices (Tensor::to, copy_)
    return;
  }
  const int64_t numel = src.numel();
  if (numel == 0) return;
  const CopyLayout l = coalesce(src.shape(), src.strides(), dst.strides());
  const int64_t nd = static_cast<int64_t>(l.sizes.size());
  const int64_t inner = l.sizes[nd - 1];
  const int64_t outer = numel / inner;
  const char* sbase = static_cast<const char*>(src.data_ptr());
  char* dbase = static_cast<char*>(dst.data_ptr());
  const int64_t ses = static_cast<int64_t>(src.itemsize());
  const int64_t des = static_cast<int64_t>(dst.itemsize());
  const DType sdt = src.dtype(), ddt = dst.dtype();

  auto do_outer = [&](int64_t o) {
    int64_t soff = 0, doff = 0, rem = o;
    for (int64_t k = nd - 2; k >= 0; --k) {
      const int64_t idx = rem % l.sizes[k];
      rem /= l.sizes[k];
      soff += idx * l.src[k];
      doff += idx * l.dst[k];
    }
    copy_run(sbase + soff * ses, sdt, l.src[nd - 1], dbase + doff * des, ddt, l.dst[nd - 1], inner);
  };

  if (outer == 1 && inner >= (1 << 16) && l.src[0] == 1 && l.dst[0] == 1) {
    // One long row: split it across threads.
    constexpr int64_t kBlock = 1 << 14;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t start = b * kBlock, m = std::min(kBlock, inner - start);
      convert_row(sbase + start * ses, sdt, dbase + start * des, ddt, m);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (numel >= (1 << 16) && outer > 1)
  for (int64_t o = 0; o < outer; ++o) do_outer(o);
}

void CopyKernel::operator()() const {
  capture_writes(dst);  // while capturing: the one tensor this kernel writes
  strided_copy_now(src, dst);
}

// While a step is captured (core/capture.h), the copy is recorded for replay.
void strided_copy(const Tensor& src, const Tensor& dst) { run_kernel(CopyKernel{src, dst}); }

}  // namespace mixprec::detail
