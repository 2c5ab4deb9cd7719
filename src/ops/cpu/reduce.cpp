// Sum over the leading axes of a row-major tensor: out[j] = scale * sum over i of x[i, j], with x
// seen as [R, C] (R the product of the reduced leading dims, C of the kept trailing ones). The
// language models' position-table gradient is this (bf16 [32, 128, 128] over axis 0): the
// reference walks each output's R elements through the strides, one output at a time (0.64 ms a
// gpt-tiny step). Here a task takes a block of columns and adds the rows into f32 (f64 for f64)
// accumulators row by row: every output is the same chain as the reference's (zero, then i in
// order, then the scale, rounded once), so the bits are the reference's, on any thread count.
// Declined where the reference would split the chain into blocks (R > 65536).
#include <algorithm>

#include "mixprec/convert.h"
#include "ops/cpu/kernels.h"

namespace mixprec::ops::cpu {
namespace {

constexpr int64_t kMaxRows = int64_t{1} << 16;  // the reference's block: one chain per output
constexpr int64_t kCols = 2048;                 // columns per task (8 KB of f32 accumulators)

}  // namespace

std::string reduce_sum_leading_declines(const ReduceSumProblem& p) {
  const ReducePlan& plan = p.plan;
  if (!p.x.is_contiguous() || !p.out.is_contiguous()) return "not row-major";
  if (!is_floating(p.x.dtype())) return "not a floating dtype";
  if (plan.axes.empty() || plan.kept_sizes.empty()) return "no kept dims";
  for (size_t i = 0; i < plan.axes.size(); ++i)
    if (plan.axes[i] != static_cast<int64_t>(i)) return "the reduced axes are not the leading ones";
  if (plan.red_count > kMaxRows) return "more than 65536 rows (the reference sums in blocks)";
  if (p.out.numel() == 0 || plan.red_count == 0) return "empty";
  return "";
}

void reduce_sum_leading(const ReduceSumProblem& p) {
  const int64_t rows = p.plan.red_count, cols = p.out.numel();
  const int64_t tasks = (cols + kCols - 1) / kCols;
  visit_float(p.x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T* x = static_cast<const T*>(p.x.data_ptr());
    T* out = static_cast<T*>(p.out.data_ptr());
    const A scale = static_cast<A>(p.scale);
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t c0 = t * kCols, n = std::min(kCols, cols - c0);
      A acc[kCols];  // on the stack: no allocation per task
      std::fill(acc, acc + n, A(0));
      for (int64_t i = 0; i < rows; ++i) {
        const T* row = x + i * cols + c0;
        for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<A>(load(row[j]));
      }
      for (int64_t j = 0; j < n; ++j) out[c0 + j] = store<T>(acc[j] * scale);
    }
  });
}

}  // namespace mixprec::ops::cpu
