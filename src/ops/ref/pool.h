// Reference 2-D pooling kernels (max, average, adaptive average): the test oracle and the
// fallback (f16, f64, adaptive bins that are not uniform, anything oneDNN declines). Every float
// dtype; values widen to f32 (f64 for f64) and each output is rounded once. Max pooling takes
// the first maximal element of a window in row-major order (a NaN wins); its backward recomputes
// that argmax from the saved input, so it needs no workspace. Also here: the global average
// pooling kernels (plain vectorisable loops, memory-bound; faster than oneDNN's pooling there).
#pragma once

#include <string>

#include "ops/pool_problem.h"

namespace mixprec::ops::ref {

void pool_fwd(const detail::PoolFwdProblem& p);
void pool_bwd(const detail::PoolBwdProblem& p);

// Global average pooling (kernel = the whole input, no padding): "" if it applies.
std::string global_avg_declines(const detail::PoolFwdProblem& p);
std::string global_avg_bwd_declines(const detail::PoolBwdProblem& p);
void global_avg_fwd(const detail::PoolFwdProblem& p);
void global_avg_bwd(const detail::PoolBwdProblem& p);

}  // namespace mixprec::ops::ref
