// low_via_f32: the one adapter that runs a 16-bit float problem through an f32 kernel. It widens
// the problem's 16-bit inputs to f32, runs the kernel on the widened problem and rounds each
// 16-bit output once (so f16 overflows to inf where a 16-bit accelerator would): an exact
// emulation of f16 (or bf16) arithmetic with f32 accumulation, not faster than f32.
// A backend registers it next to the kernel it wraps, with the predicate saying for which dtypes
// it wants the emulation (onednn: f16 always, bf16 where it cannot compute in bf16). It needs of
// the problem type P: static inputs() and outputs(), arrays of its Tensor members (the first
// input's dtype is the problem's); tensors that are not 16-bit floats (an f32 bias, f32 weight
// gradients, statistics) are passed through untouched.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ops/dispatch.h"
#include "ops/layout.h"

namespace mixprec::ops {

namespace detail {
template <class F> struct problem_of;
template <class P> struct problem_of<void (*)(const P&)> { using type = P; };

inline bool widens(const Tensor& t) { return t.defined() && is_low_precision(t.dtype()); }

// p with its 16-bit inputs widened (with their data, or only allocated when `with_data` is
// false, enough for a kernel's `declines`) and f32 tensors in place of its 16-bit outputs.
template <class P> P widened(const P& p, bool with_data) {
  P q = p;
  for (Tensor P::*m : P::inputs())
    if (widens(p.*m)) q.*m = with_data ? widen_to_f32(p.*m) : empty_f32_like(p.*m);
  for (Tensor P::*m : P::outputs())
    if (widens(p.*m)) q.*m = empty_f32_like(p.*m);
  return q;
}

template <auto WhyNot, auto Declines, class P> std::string low_via_f32_declines(const P& p) {
  if (std::string why = WhyNot((p.*P::inputs()[0]).dtype()); !why.empty()) return why;
  return Declines(widened(p, /*with_data=*/false));
}

template <auto Run, class P> void low_via_f32_run(const P& p) {
  const P q = widened(p, /*with_data=*/true);
  Run(q);
  for (Tensor P::*m : P::outputs())
    if (widens(p.*m)) round_into(q.*m, p.*m);
}
// Images per chunk for low_via_f32_batched: the f32 copies of a chunk's 16-bit tensors within
// kChunkBytes (so they stay in cache between widening, kernel and rounding), at least one image.
constexpr int64_t kChunkBytes = int64_t{2} << 20;
template <class P> int64_t images_per_chunk(const P& p) {
  int64_t bytes = 0;
  for (Tensor P::*m : P::inputs())
    if (widens(p.*m)) bytes += (p.*m).numel() * 4;
  for (Tensor P::*m : P::outputs())
    if (widens(p.*m)) bytes += (p.*m).numel() * 4;
  const int64_t n = batch_size(p);
  return std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, bytes / std::max<int64_t>(n, 1)));
}

// sum += part, both dense f32 with one layout (a weight gradient and a chunk's share of it).
inline void add_into(const Tensor& sum, const Tensor& part) {
  MIXPREC_ASSERT(sum.dtype() == DType::f32 && part.dtype() == DType::f32 && sum.is_contiguous() &&
                     part.is_contiguous() && sum.numel() == part.numel(),
                 "low_via_f32_batched: batch sums must be packed f32");
  float* s = static_cast<float*>(sum.data_ptr());
  const float* a = static_cast<const float*>(part.data_ptr());
  for (int64_t i = 0; i < sum.numel(); ++i) s[i] += a[i];
}

template <auto Run, class P> void low_via_f32_batched_run(const P& p) {
  const int64_t n = batch_size(p), step = images_per_chunk(p);
  if (step >= n) return low_via_f32_run<Run>(p);
  for (int64_t n0 = 0; n0 < n; n0 += step) {
    P part = slice_batch(p, n0, std::min(n, n0 + step));
    std::vector<std::pair<Tensor, Tensor>> later;  // (batch sum, this chunk's part of it)
    if (n0 > 0)
      for (Tensor P::*m : P::batch_sums())
        if ((p.*m).defined()) {
          part.*m =
              Tensor::empty((p.*m).shape(), {.dtype = (p.*m).dtype(), .device = (p.*m).device()});
          later.emplace_back(p.*m, part.*m);
        }
    low_via_f32_run<Run>(part);
    for (auto& [sum, add] : later) add_into(sum, add);
  }
}
}  // namespace detail

// The kernel (Declines, Run) wrapped: it accepts p when WhyNot(p's dtype) is "" and the kernel
// accepts the widened problem. WhyNot: std::string (*)(DType).
template <auto WhyNot, auto Declines, auto Run> auto low_via_f32(Device::Type device) {
  using P = typename detail::problem_of<decltype(Run)>::type;
  return Impl<P>{"low_via_f32", device, detail::low_via_f32_declines<WhyNot, Declines, P>,
                 detail::low_via_f32_run<Run, P>};
}

}  // namespace mixprec::ops

namespace mixprec::ops {

// low_via_f32 chunk by chunk of the batch, for problems whose images are independent: the f32
// copies are chunk-sized (in cache) instead of tensor-sized, and the peak memory is the 16-bit
// problem's. Outputs summed over the batch (P::batch_sums(): weight gradients, f32) take chunk
// 0's sums and then each later chunk's, added in chunk order. P also needs batch_size(p) and
// slice_batch(p, n0, n1).
// `name` tells the wrapped kernel apart where a backend wraps several for one problem.
template <auto WhyNot, auto Declines, auto Run>
auto low_via_f32_batched(Device::Type device, std::string_view name = "low_via_f32_batched") {
  using P = typename detail::problem_of<decltype(Run)>::type;
  return Impl<P>{name, device, detail::low_via_f32_declines<WhyNot, Declines, P>,
                 detail::low_via_f32_batched_run<Run, P>};
}

}  // namespace mixprec::ops
