// Fused attention against the reference composition (DESIGN.md, Performance: ratios measured in
// one run): forward + backward time, and the activation memory each keeps for the backward, at
// L = 128 and 512 with B * H = 16 (4 x 4), D = 32, f32 and bf16, plain and causal.
//   composition: matmul(q, k^T) * scale (-> masked_fill) -> softmax -> matmul(p, v), the public
//                ops with autograd, as a user writes attention without the fused op (baseline);
//   fused:       ops::scaled_dot_product_attention (its cpu "flash" kernel);
//   ref_kernel:  the op forced to its reference kernel (the test oracle, for the record).
// BM_attention times one of them per row; saved_MB = allocator bytes still held after the
// forward pass (graph alive) less the output, i.e. what the graph keeps for the backward.
// BM_fused_vs_composition alternates the two in every iteration (the machines are shared and
// noisy) and reports each one's median and minimum and their ratios, x_median and x_min
// (composition time / fused time).
// Run: ./build/bench/attention_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
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

// q, k, v (requiring grad), the output gradient and the causal mask of one shape.
struct Inputs {
  std::vector<Tensor> qkv;
  Tensor dout, mask;
  bool causal;
};

// Args: L, dtype (0 f32, 1 bf16), causal.
Inputs make_inputs(const benchmark::State& state) {
  const int64_t B = 4, H = 4, L = state.range(0), D = 32;
  const DType dt = state.range(1) ? DType::bf16 : DType::f32;
  Generator gen(1);
  auto input = [&] {
    return randn({B, H, L, D}, gen, {.dtype = DType::f32}).astype(dt).set_requires_grad(true);
  };
  Inputs in{{input(), input(), input()},
            randn({B, H, L, D}, gen, {.dtype = DType::f32}).astype(dt),
            Tensor(),
            state.range(2) != 0};
  // masked_fill's mask: true above the diagonal (the keys a query may not see).
  std::vector<uint8_t> upper(static_cast<size_t>(L * L));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) upper[static_cast<size_t>(i * L + j)] = j > i;
  in.mask = Tensor::from_vector<uint8_t>(upper, {L, L}, DType::boolean);
  return in;
}

// One forward + backward; returns the bytes the graph held for the backward.
int64_t step(Impl impl, const Inputs& in) {
  const int64_t before = memory_stats().live_bytes;
  const Tensor o = attention(impl, in.qkv[0], in.qkv[1], in.qkv[2], in.causal, in.mask);
  const int64_t saved = memory_stats().live_bytes - before - static_cast<int64_t>(o.nbytes());
  const std::vector<Tensor> g = run_backward({o}, {in.dout}, {.capture = &in.qkv});
  benchmark::DoNotOptimize(g.data());
  return saved;
}

void BM_attention(benchmark::State& state, Impl impl) {
  const Inputs in = make_inputs(state);
  int64_t saved = 0;
  for (auto _ : state) saved = step(impl, in);
  state.counters["saved_MB"] = static_cast<double>(saved) / (1 << 20);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void BM_fused_vs_composition(benchmark::State& state) {
  const Inputs in = make_inputs(state);
  std::vector<double> t[2];
  for (auto _ : state)
    for (Impl impl : {Impl::composition, Impl::fused}) {
      const auto t0 = Clock::now();
      step(impl, in);
      t[impl == Impl::fused].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  const double mc = median(t[0]), mf = median(t[1]);
  const double nc = *std::min_element(t[0].begin(), t[0].end());
  const double nf = *std::min_element(t[1].begin(), t[1].end());
  state.counters["comp_ms"] = mc * 1e3;
  state.counters["fused_ms"] = mf * 1e3;
  state.counters["comp_min_ms"] = nc * 1e3;
  state.counters["fused_min_ms"] = nf * 1e3;
  state.counters["x_median"] = mc / mf;
  state.counters["x_min"] = nc / nf;
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t causal : {0, 1})
    for (int64_t L : {128, 512})
      for (int64_t dt : {0, 1}) b->Args({L, dt, causal});
  b->ArgNames({"L", "bf16", "causal"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_fused_vs_composition)->Apply(shapes)->Iterations(25);
BENCHMARK_CAPTURE(BM_attention, composition, Impl::composition)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, fused, Impl::fused)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, ref_kernel, Impl::ref_kernel)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
