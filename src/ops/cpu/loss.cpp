// Sparse softmax cross-entropy on f32 rows with simd.h's vectors (the language models' loss: 4096
// rows of 256 logits a gpt-tiny step, where the scalar reference's libm exp took 4% of the step).
// Same formulas as ref::cross_entropy_fwd/bwd (loss_problem.h): the row's max m and its first
// index, s = log1p(sum over the other classes of exp(x - m)), loss = (m - x[label]) + s, and the
// gradient exp((x - m) - s) g less g at the label; rows without a finite max give NaN. Only the
// exp (simd_math.inc's, within 1.01 ulp) and the order of the sum (16 partial sums,
// loss_rows.inc) differ from the reference; the three ISAs give the same bits. One-hot or soft
// labels and f64 stay with the reference.
#include <cmath>
#include <limits>

#include "ops/cpu/kernels.h"
#include "ops/cpu/simd.h"
#include "ops/loss_problem.h"

namespace mixprec::ops::cpu {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
namespace rows_avx512 {
using namespace simd::avx512;
#include "ops/cpu/loss_rows.inc"
}  // namespace rows_avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace rows_avx2 {
using namespace simd::avx2;
#include "ops/cpu/loss_rows.inc"
}  // namespace rows_avx2
#pragma GCC pop_options

namespace rows_scalar {
using namespace simd::scalar;
#include "ops/cpu/loss_rows.inc"
}  // namespace rows_scalar

std::string declines(const Tensor& logits, bool sparse) {
  if (logits.dtype() != DType::f32) return "computes in f64";
  if (!sparse) return "one-hot or soft labels";
  return "";
}

}  // namespace

std::string cross_entropy_rows_fwd_declines(const CrossEntropyFwdProblem& p) {
  return declines(p.logits, p.sparse);
}
std::string cross_entropy_rows_bwd_declines(const CrossEntropyBwdProblem& p) {
  return declines(p.logits, p.sparse);
}

void cross_entropy_rows_fwd_isa(const CrossEntropyFwdProblem& p, simd::Isa isa) {
  switch (isa) {
    case simd::Isa::avx512: return rows_avx512::forward(p);
    case simd::Isa::avx2: return rows_avx2::forward(p);
    case simd::Isa::scalar: return rows_scalar::forward(p);
  }
}
void cross_entropy_rows_bwd_isa(const CrossEntropyBwdProblem& p, simd::Isa isa) {
  switch (isa) {
    case simd::Isa::avx512: return rows_avx512::backward(p);
    case simd::Isa::avx2: return rows_avx2::backward(p);
    case simd::Isa::scalar: return rows_scalar::backward(p);
  }
}
void cross_entropy_rows_fwd(const CrossEntropyFwdProblem& p) {
  cross_entropy_rows_fwd_isa(p, simd::best_isa());
}
void cross_entropy_rows_bwd(const CrossEntropyBwdProblem& p) {
  cross_entropy_rows_bwd_isa(p, simd::best_isa());
}

}  // namespace mixprec::ops::cpu
