// Fused attention against the reference composition (DESIGN.md, Performance: ratios measured in
// one run): forward + backward time, and the activation memory each keeps for the backward.
// Shapes: the issue's, L = 128 and 512 with B * H = 16 (4 x 4), D = 32, f32 and bf16, plain and
// causal, q, k, v packed [B, H, L, D]; and the zoo's, q, k, v as head views of one [B, L, 3, H, D]
// projection as nn::MultiheadAttention makes them: gpt-tiny (B 32, H 4, L 128, D 32, causal) and
// vit-tiny (B 128, H 4, L 50, D 16).
//   composition: matmul(q, k^T) * scale (-> masked_fill) -> softmax -> matmul(p, v), the public
//                ops with autograd, as a user writes attention without the fused op (baseline);
//   fused:       ops::scaled_dot_product_attention (its cpu "flash" kernel);
//   ref_kernel:  the op forced to its reference kernel (the test oracle, for the record).
// BM_attention times one of them per row (min_ms, med_ms: over its iterations); saved_MB =
// allocator bytes still held after the forward pass (graph alive) less the output, i.e. what the
// graph keeps for the backward.
// BM_fused_vs_composition alternates the two in every iteration (the machines are shared and
// noisy) and reports each one's median and minimum and their ratios, x_median and x_min
// (composition time / fused time). BM_kernel times the fused kernel's forward and backward alone
// (dispatched directly: no autograd, no allocation). bench/attention_vs_torch.py sets
// BM_attention/fused and BM_kernel against PyTorch's scaled_dot_product_attention.
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
#include "ops/attention_problem.h"
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

// The leaves that require grad (q, k, v; or the one projection they are views of), the output
// gradient and the causal mask of one shape.
struct Inputs {
  std::vector<Tensor> leaves;
  Tensor dout, mask;
  bool causal, qkv;
  int64_t B, H, L, D;
};

// Args: L, dtype (0 f32, 1 bf16), causal, B, H, D, qkv (1: views of one [B, L, 3, H, D]).
Inputs make_inputs(const benchmark::State& state) {
  Inputs in{{},
            {},
            {},
            state.range(2) != 0,
            state.range(6) != 0,
            state.range(3),
            state.range(4),
            state.range(0),
            state.range(5)};
  const DType dt = state.range(1) ? DType::bf16 : DType::f32;
  Generator gen(1);
  auto input = [&](const Shape& s) {
    return randn(s, gen, {.dtype = DType::f32}).astype(dt).set_requires_grad(true);
  };
  if (in.qkv)
    in.leaves = {input({in.B, in.L, 3, in.H, in.D})};
  else
    for (int i = 0; i < 3; ++i) in.leaves.push_back(input({in.B, in.H, in.L, in.D}));
  in.dout = randn({in.B, in.H, in.L, in.D}, gen, {.dtype = DType::f32}).astype(dt);
  // masked_fill's mask: true above the diagonal (the keys a query may not see).
  std::vector<uint8_t> upper(static_cast<size_t>(in.L * in.L));
  for (int64_t i = 0; i < in.L; ++i)
    for (int64_t j = 0; j < in.L; ++j) upper[static_cast<size_t>(i * in.L + j)] = j > i;
  in.mask = Tensor::from_vector<uint8_t>(upper, {in.L, in.L}, DType::boolean);
  return in;
}

// q, k, v: the leaves, or the head views of the projection ([3, B, H, L, D] by a permute).
std::array<Tensor, 3> qkv_of(const Inputs& in) {
  if (!in.qkv) return {in.leaves[0], in.leaves[1], in.leaves[2]};
  const Tensor p = ops::permute(in.leaves[0], {2, 0, 3, 1, 4});
  std::array<Tensor, 3> out;
  for (int64_t i = 0; i < 3; ++i) out[i] = ops::squeeze(ops::slice(p, 0, i, i + 1), 0);
  return out;
}

// One forward + backward; returns the bytes the graph held for the backward.
int64_t step(Impl impl, const Inputs& in) {
  const auto [q, k, v] = qkv_of(in);
  const int64_t before = memory_stats().live_bytes;
  const Tensor o = attention(impl, q, k, v, in.causal, in.mask);
  const int64_t saved = memory_stats().live_bytes - before - static_cast<int64_t>(o.nbytes());
  const std::vector<Tensor> g = run_backward({o}, {in.dout}, {.capture = &in.leaves});
  benchmark::DoNotOptimize(g.data());
  return saved;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times fn() in each iteration: counters min_ms and med_ms.
template <class F> void time_each(benchmark::State& state, F&& fn) {
  std::vector<double> t;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.counters["min_ms"] = *std::min_element(t.begin(), t.end()) * 1e3;
  state.counters["med_ms"] = median(t) * 1e3;
}

void BM_attention(benchmark::State& state, Impl impl) {
  const Inputs in = make_inputs(state);
  int64_t saved = 0;
  time_each(state, [&] { saved = step(impl, in); });
  state.counters["saved_MB"] = static_cast<double>(saved) / (1 << 20);
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

// The fused kernel's forward and backward problems, dispatched as the op does (o and the
// gradients laid out as the op lays them out), without autograd.
void BM_kernel(benchmark::State& state) {
  const Inputs in = make_inputs(state);
  const auto [q0, k0, v0] = qkv_of(in);
  const Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
  const int64_t B = in.B, H = in.H, L = in.L, D = in.D;
  const ops::AttentionParams prm{
      .scale = 1.0 / std::sqrt(static_cast<double>(D)), .causal = in.causal, .mask = {}};
  const Tensor o = Tensor::empty({B, L, H, D}, {.dtype = q.dtype()}).permute({0, 2, 1, 3});
  const ops::AttentionFwdProblem fwd{q, k, v, o, Tensor::empty({B, H, L}), prm};
  auto grad = [&] { return Tensor::empty({B, H, L, D}, {.dtype = q.dtype()}); };
  const ops::AttentionBwdProblem bwd{q, k, v, o, fwd.lse, in.dout, grad(), grad(), grad(), prm};
  time_each(state, [&] {
    ops::dispatch(OpId::scaled_dot_product_attention, "forward", fwd);
    ops::dispatch(OpId::scaled_dot_product_attention, "backward", bwd);
  });
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t causal : {0, 1})
    for (int64_t L : {128, 512})
      for (int64_t dt : {0, 1}) b->Args({L, dt, causal, 4, 4, 32, 0});
  for (int64_t dt : {0, 1}) {
    b->Args({128, dt, 1, 32, 4, 32, 1});  // gpt-tiny
    b->Args({50, dt, 0, 128, 4, 16, 1});  // vit-tiny
  }
  b->ArgNames({"L", "bf16", "causal", "B", "H", "D", "qkv"})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_fused_vs_composition)->Apply(shapes)->Iterations(25);
BENCHMARK(BM_kernel)->Apply(shapes)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_attention, composition, Impl::composition)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, fused, Impl::fused)->Apply(shapes);
BENCHMARK_CAPTURE(BM_attention, ref_kernel, Impl::ref_kernel)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
