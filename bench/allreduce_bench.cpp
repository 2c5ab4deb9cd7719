// What a gradient all-reduce costs on this machine, apart from waiting for a slower rank:
// `mpirun -np N ./build/bench/allreduce_bench [MB]` sums a bucket of MB megabytes of f32 (default
// 1.69, convnet-bn's gradients) and the same values as bf16 (half the bytes, the user-defined
// MPI operation) over the ranks, through the reducer's path (start_all_reduce_sum, then wait).
// Each sample starts after a barrier, so rank skew is left out; every rank runs the same fixed
// number of samples (a benchmark library's adaptive iteration count could differ per rank and
// hang a collective). Prints rank 0's median and minimum in ms and the f32/bf16 ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/tensor.h"

namespace {
using namespace mixprec;

struct Timing {
  double median_ms, min_ms;
};

Timing time_all_reduce(const Tensor& buffer, int samples) {
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    comm::barrier();
    const auto t0 = std::chrono::steady_clock::now();
    comm::start_all_reduce_sum(buffer).wait();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  communication::init();
  const double mb = argc > 1 ? std::atof(argv[1]) : 1.69;
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(mb * 1e6 / 4));
  const Tensor f32 = full({n}, 1e-3, {.dtype = DType::f32});
  const Tensor bf16 = full({n}, 1e-3, {.dtype = DType::bf16});
  constexpr int kSamples = 200;
  (void)time_all_reduce(f32, 10);  // warm-up: connections, buffers
  const Timing a = time_all_reduce(f32, kSamples), b = time_all_reduce(bf16, kSamples);
  if (communication::get_rank() == 0)
    std::printf("%d ranks, %lld elements: f32 (%.2f MB) median %.3f ms (min %.3f); bf16 (%.2f MB) median %.3f ms "
                "(min %.3f); f32 / bf16 %.2fx\n", communication::get_group_size(), static_cast<long long>(n),
                static_cast<double>(n) * 4 / 1e6, a.median_ms, a.min_ms, static_cast<double>(n) * 2 / 1e6, b.median_ms,
                b.min_ms, a.median_ms / b.median_ms);
  communication::release();
  return 0;
}
