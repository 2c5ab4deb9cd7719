// The convolution output layout the library chooses when the caller leaves it open
// (Conv2dOptions::output_format = MemoryFormat::any, the default): channels-last, the layout the
// fast convolution kernels and the ops after them take, unless that output ends in a Flatten (or
// another reshape) that must transpose it back to row-major order, once forward and once backward.
// Such a convolution writes row-major (NCHW) from then on, and the Flatten is a free view.
//
// How it is found: a convolution whose input is already row-major (or has one channel, where the
// layouts coincide) marks its channels-last output with a site (the convolution's signature:
// threads, input, weight and geometry); element-wise ops and casts carry the mark to their
// outputs when they keep the layout (relu, bias or residual adds, O1's cast to fp32); a reshape
// that has to copy a marked channels-last tensor records "contiguous" for the site in the
// kernel-choice table (ops/kernel_choice.h), so that checkpoints record it and a resumed run pins
// it. A convolution with a channels-last input is never switched: its output in row-major order
// would need its input transposed too.
// This is a rule, not a race: what channels-last costs here is the transposing copy after the
// convolution (forward, and again for the gradient), which timing the convolution alone cannot
// see. It depends on the network, never on the machine, so it holds under
// MIXPREC_KERNEL_CHOICE=first too (data-parallel ranks choose alike), and it is never written to
// the cache file: every run takes its first step channels-last and the rest row-major, whatever
// an earlier run left in the cache.
// Values: in the fixed kernel order, SimpleNet's conv1 gives bitwise the same output and weight
// gradient in both layouts (f32, bf16 and f16; tests/ops/layout_choice_test.cpp), its bias
// gradient summed in another order; under the measured choice each layout runs the kernel
// measured fastest for it, within the AMP contract like any kernel choice.
#pragma once

#include <cstdint>
#include <string>

#include "mixprec/ops/ops.h"
#include "ops/conv_problem.h"
#include "ops/layout.h"

namespace mixprec::ops::detail {

// The layout a convolution with `output_format` writes for input x, weight w and geometry g.
// For MemoryFormat::any also sets *site to the site to mark its output with (0: none).
ImageLayout conv_output_layout(MemoryFormat output_format, const Tensor& x, const Tensor& w,
                               const ConvGeometry& g, uint32_t* site);

// Marks `out` as derived from site (0: leaves it unmarked).
void mark_layout_site(const Tensor& out, uint32_t site);
// The site `t` derives from (0: none).
uint32_t layout_site(const Tensor& t);

// Called by reshape (Flatten's, a view's) before it copies x into row-major order: if x is a
// marked channels-last image, the site's convolution writes row-major from its next call on.
// Not by contiguous(), which the library's own checks call on any tensor.
void note_row_major_copy(const Tensor& x);

}  // namespace mixprec::ops::detail
