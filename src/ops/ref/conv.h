// Reference 2-D convolution kernels (direct loops): the test oracle and the fallback for every
// case the fast kernels decline (f64, layouts or shapes oneDNN refuses). Every float dtype;
// loads widen to f32 (f64 for f64), each output element accumulates in one fixed order on one
// thread, and is rounded once. Problems and geometry: conv_problem.h.
#pragma once

#include "ops/conv_problem.h"

namespace mixprec::ops::ref {

void conv_fwd(const detail::ConvFwdProblem& p);
void conv_bwd_data(const detail::ConvBwdDataProblem& p);
void conv_bwd_weights(const detail::ConvBwdWeightsProblem& p);

}  // namespace mixprec::ops::ref
