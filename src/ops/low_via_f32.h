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

#include <string>

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
}  // namespace detail

// The kernel (Declines, Run) wrapped: it accepts p when WhyNot(p's dtype) is "" and the kernel
// accepts the widened problem. WhyNot: std::string (*)(DType).
template <auto WhyNot, auto Declines, auto Run> auto low_via_f32(Device::Type device) {
  using P = typename detail::problem_of<decltype(Run)>::type;
  return Impl<P>{"low_via_f32", device, detail::low_via_f32_declines<WhyNot, Declines, P>,
                 detail::low_via_f32_run<Run, P>};
}

}  // namespace mixprec::ops
