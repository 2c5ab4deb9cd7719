// Bulk converter throughput in GB/s (bytes read + bytes written), per instruction-set path,
// beside a memcpy of the same output size measured in the same run: f32->bf16 should approach
// the memcpy rate once the data no longer fits in cache.
// Run: ./build/bench/convert_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "mixprec/convert.h"

namespace {
using namespace mixprec;

std::vector<float> random_floats(size_t n) {
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 100.0f);
  for (auto& x : v) x = d(rng);
  return v;
}

void set_rate(benchmark::State& state, size_t bytes_per_iter) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes_per_iter) * state.iterations(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> src = random_floats(n), dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_rate(state, 2 * n * sizeof(float));
}

template <int Which>
void BM_convert(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const ConvertIsa isa = static_cast<ConvertIsa>(state.range(1));
  bool ok = false;
  for (ConvertIsa a : available_convert_isas()) ok |= a == isa;
  if (!ok) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const ConvertKernels& k = convert_kernels(isa);
  state.SetLabel(std::string(isa_name(isa)));
  std::vector<float> f = random_floats(n), back(n);
  std::vector<uint16_t> h(n);
  k.f32_to_f16(f.data(), reinterpret_cast<f16*>(h.data()), static_cast<int64_t>(n));
  for (auto _ : state) {
    if constexpr (Which == 0) k.f32_to_bf16(f.data(), reinterpret_cast<bf16*>(h.data()), static_cast<int64_t>(n));
    if constexpr (Which == 1) k.bf16_to_f32(reinterpret_cast<const bf16*>(h.data()), back.data(), static_cast<int64_t>(n));
    if constexpr (Which == 2) k.f32_to_f16(f.data(), reinterpret_cast<f16*>(h.data()), static_cast<int64_t>(n));
    if constexpr (Which == 3) k.f16_to_f32(reinterpret_cast<const f16*>(h.data()), back.data(), static_cast<int64_t>(n));
    benchmark::ClobberMemory();
  }
  set_rate(state, n * (sizeof(float) + sizeof(uint16_t)));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1} << 14, int64_t{1} << 24})
    for (int isa = 0; isa < 3; ++isa) b->Args({n, isa});
}

BENCHMARK(BM_memcpy)->Arg(1 << 14)->Arg(1 << 24);
BENCHMARK_TEMPLATE(BM_convert, 0)->Name("f32_to_bf16")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_convert, 1)->Name("bf16_to_f32")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_convert, 2)->Name("f32_to_f16")->Apply(sizes);
BENCHMARK_TEMPLATE(BM_convert, 3)->Name("f16_to_f32")->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
