// oneDNN pooling kernels: max (forward_training leaves oneDNN's argmax workspace for the
// backward) and average (include/exclude padding) in f32 and bf16, any dense NCHW or
// channels-last layout. Declines adaptive bins that are not uniform and ceil-mode average
// windows whose divisor oneDNN would compute differently from PyTorch; the reference runs those.
// Ties go to the first maximum as in the reference; a NaN is skipped here (the reference
// propagates it), the one known difference.
#pragma once

#include <string>

#include "ops/pool_problem.h"

namespace mixprec::ops::onednn {

std::string pool_fwd_declines(const detail::PoolFwdProblem& p);
void pool_fwd(const detail::PoolFwdProblem& p);
std::string pool_bwd_declines(const detail::PoolBwdProblem& p);
void pool_bwd(const detail::PoolBwdProblem& p);

}  // namespace mixprec::ops::onednn
