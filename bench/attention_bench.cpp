// Fused attention against the reference composition (DESIGN.md, Performance: ratios measured in
// one run): forward + backward time, and the activation memory each keeps for the backward, at
// L = 128 and 512 with B * H = 16 (4 x 4), D = 32, f32 and bf16, plain and causal.
//   composition: matmul(q, k^T) * scale (-> masked_fill) -> softmax -> matmul(p, v), the public
//                ops with autograd, as a user writes attention without the fused op (baseline);
//   fused:       ops::scaled_dot_product_attention (its cpu "flash" kernel);
//   ref_kernel:  the op forced to its reference kernel (the test oracle, for the record).
// Counters: saved_MB = allocator bytes still held after the forward pass (graph alive) less
// the output itself and the inputs, i.e. what the graph keeps for the backward;
// x_composition = composition time / this row's time (rows after the composition row).
// Run: ./build/bench/attention_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "mixprec/allocator.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/ops/ops.h"
#include "mixprec/rng.h"
#include "ops/dispatch.h"

namespace {
using namespace mixprec;
using Clock = std::chrono::steady_clock;

enum class Impl { composition, fused, ref_kernel };

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& causal_mask) {
  Tensor s =
      ops::mul(ops::matmul(q, k.transpose(2, 3)), 1.0 / std::sqrt(static_cast<double>(q.size(3))));
  if (causal_mask.defined())
    s = ops::masked_fill(s, causal_mask, -std::numeric_limits<double>::infinity());
  return ops::matmul(ops::softmax(s, -1), v);
}

Tensor attention(Impl impl, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                 const Tensor& mask) {
  if (impl == Impl::composition) return composed(q, k, v, causal ? mask : Tensor());
  ops::ForceImpl force(impl == Impl::ref_kernel ? "ref" : "");
  return ops::scaled_dot_product_attention(q, k, v, {.causal = causal});
}

std::map<std::string, double>& baseline_seconds() {
  static std::map<std::string, double> m;
  return m;
}

// Args: L, dtype (0 f32, 1 bf16), causal.
void BM_attention(benchmark::State& state, Impl impl) {
  const int64_t B = 4, H = 4, L = state.range(0), D = 32;
  const DType dt = state.range(1) ? DType::bf16 : DType::f32;
  const bool causal = state.range(2) != 0;
  Generator gen(1);
  auto input = [&] {
    return randn({B, H, L, D}, gen, {.dtype = DType::f32}).astype(dt).set_requires_grad(true);
  };
  const std::vector<Tensor> in{input(), input(), input()};
  const Tensor dout = randn({B, H, L, D}, gen, {.dtype = DType::f32}).astype(dt);
  // masked_fill's mask: true above the diagonal (the keys a query may not see).
  std::vector<uint8_t> upper(static_cast<size_t>(L * L));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) upper[static_cast<size_t>(i * L + j)] = j > i;
  const Tensor mask = Tensor::from_vector<uint8_t>(upper, {L, L}, DType::boolean);
  const BackwardOptions capture{.capture = &in};
  int64_t saved = 0;
  const auto t0 = Clock::now();
  for (auto _ : state) {
    const int64_t before = memory_stats().live_bytes;
    const Tensor o = attention(impl, in[0], in[1], in[2], causal, mask);
    saved = memory_stats().live_bytes - before - static_cast<int64_t>(o.nbytes());
    const std::vector<Tensor> g = run_backward({o}, {dout}, capture);
    benchmark::DoNotOptimize(g.data());
  }
  const double per_iter = std::chrono::duration<double>(Clock::now() - t0).count() /
                          static_cast<double>(state.iterations());
  state.counters["saved_MB"] = static_cast<double>(saved) / (1 << 20);
  const std::string key =
      std::to_string(L) + "/" + std::to_string(state.range(1)) + "/" + std::to_string(causal);
  if (impl == Impl::composition) baseline_seconds()[key] = per_iter;
  else if (auto it = baseline_seconds().find(key); it != baseline_seconds().end())
    state.counters["x_composition"] = it->second / per_iter;
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t causal : {0, 1})
    for (int64_t L : {128, 512})
      for (int64_t dt : {0, 1}) b->Args({L, dt, causal});
  b->ArgNames({"L", "bf16", "causal"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_attention, composition, Impl::composition)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, fused, Impl::fused)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, ref_kernel, Impl::ref_kernel)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
