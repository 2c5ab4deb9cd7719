// Kernel throughput beside a baseline measured in the same run (DESIGN.md, Performance): the
// fused unscale-and-check and the fused Momentum step against a memcpy moving as many bytes, and
// mixprec's matmul / conv2d against oneDNN called directly on the same shapes (one primitive,
// weights reordered once, no dispatch), so overhead reads as a ratio ("x_memcpy", "x_onednn").
// A ratio needs its baseline row in the same run (registered first); without it, it is left out.
// Run: ./build/bench/kernels_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixprec/amp/loss_scale.h"
#include "mixprec/autograd/autograd.h"
#include "mixprec/cpu_features.h"
#include "mixprec/error.h"
#include "mixprec/grad_mode.h"
#include "mixprec/nn/zoo.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/ops.h"
#include "mixprec/optim/optimizer.h"
#include "mixprec/rng.h"
#include "mixprec/tensor.h"
#include "mixprec/version.h"
#include "ops/cast_cache.h"
#include "ops/dispatch.h"

#if MIXPREC_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {
using namespace mixprec;
using Clock = std::chrono::steady_clock;

// The mlp's parameters (784 -> 2048 -> 2048 -> 10), weights and biases.
const std::vector<Shape> kMlpShapes = {{2048, 784}, {2048}, {2048, 2048}, {2048}, {10, 2048}, {10}};

int64_t mlp_numel() {
  int64_t n = 0;
  for (const Shape& s : kMlpShapes) n += shape_numel(s);
  return n;
}

std::vector<Tensor> mlp_tensors(DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (const Shape& s : kMlpShapes) out.push_back(randn(s, gen, {.dtype = dtype}));
  return out;
}

void set_rate(benchmark::State& state, const char* name, double units_per_iter) {
  const double units = units_per_iter * static_cast<double>(state.iterations());
  state.counters[name] =
      benchmark::Counter(units, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Units per second of wall clock since t0 (the timing loop's start), for the ratio counters.
double rate_since(const benchmark::State& state, double units_per_iter, Clock::time_point t0) {
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return units_per_iter * static_cast<double>(state.iterations()) / seconds;
}

// Baseline rates (units per second, wall clock) by key, left by the baseline benchmarks' last
// (reported) run for the rows after them to divide by.
std::map<std::string, double>& baselines() {
  static std::map<std::string, double> m;
  return m;
}

void set_ratio(benchmark::State& state, const char* name, const std::string& key, double rate) {
  const auto it = baselines().find(key);
  if (it != baselines().end() && it->second > 0) state.counters[name] = rate / it->second;
}

// ---------------------------------------------------------------- memcpy baseline

// `moved` bytes of traffic: copies moved / 2 bytes (read + written, as every GB/s here counts).
void BM_memcpy(benchmark::State& state) {
  const size_t half = static_cast<size_t>(state.range(0)) / 2;
  std::vector<char> src(half, 1), dst(half);
  const auto t0 = Clock::now();
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), half);
    benchmark::ClobberMemory();
  }
  const double moved = 2.0 * static_cast<double>(half);
  baselines()["memcpy/" + std::to_string(state.range(0))] = rate_since(state, moved, t0);
  set_rate(state, "GB/s", moved);
}

// Bytes the fused Momentum pass must move per step: p read+write, g (f32) read, momentum
// read+write, and the bf16 working copy written when AMP copies are attached.
int64_t momentum_bytes(bool amp) { return mlp_numel() * (4 * 2 + 4 + 4 * 2 + (amp ? 2 : 0)); }

// ---------------------------------------------------------------- loss scaling

// Alternates scale 1024 and 1/1024 so the gradients stay where they started (repeated unscaling
// would drive them into subnormals and then to zero, which is not the case being measured).
void BM_unscale_and_check(benchmark::State& state, DType dtype) {
  const std::vector<Tensor> grads = mlp_tensors(dtype, 1);
  bool finite = true;
  int64_t i = 0;
  for (auto _ : state) {
    finite &= amp::unscale_and_check(grads, (i++ & 1) ? 1.0 / 1024.0 : 1024.0);
    benchmark::DoNotOptimize(finite);
  }
  if (!finite) state.SkipWithError("unscale_and_check reported a non-finite gradient");
  set_rate(state, "GB/s", 2.0 * static_cast<double>(mlp_numel() * dtype_size(dtype)));
}

void BM_all_finite(benchmark::State& state, DType dtype) {
  const std::vector<Tensor> grads = mlp_tensors(dtype, 1);
  bool finite = true;
  for (auto _ : state) {
    finite &= amp::all_finite(grads);
    benchmark::DoNotOptimize(finite);
  }
  if (!finite) state.SkipWithError("all_finite reported a non-finite value");
  set_rate(state, "GB/s", static_cast<double>(mlp_numel() * dtype_size(dtype)));
}

// ---------------------------------------------------------------- optimizer step

void BM_momentum_step(benchmark::State& state, bool amp_copies) {
  std::vector<Tensor> params = mlp_tensors(DType::f32, 2);
  for (Tensor& p : params) p.set_requires_grad(true);
  const std::vector<Tensor> grads = mlp_tensors(DType::f32, 3);
  optim::Momentum opt(params, 1e-3, 0.9);
  CastCache cache;
  if (amp_copies) opt.attach_working_copies(&cache, DType::bf16);
  opt.step(grads);  // creates the momentum buffers outside the timing
  const auto t0 = Clock::now();
  for (auto _ : state) {
    opt.step(grads);
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(momentum_bytes(amp_copies));
  set_rate(state, "GB/s", bytes);
  set_ratio(state, "x_memcpy", "memcpy/" + std::to_string(momentum_bytes(amp_copies)),
            rate_since(state, bytes, t0));
}

// The post-backward part of an O2-bf16 train step on a zoo model's real parameter list — the
// finite check over every gradient, then the fused Momentum update (unscale folded in) that
// also writes the bf16 working copies — against the same work on one flat tensor of the same
// total size. The gap is all that flat parameter and gradient buffers could save per step.
// Args: 1 = the model's own per-tensor layout, 0 = one flat tensor.
void BM_update_layout(benchmark::State& state, const char* model) {
  const bool per_tensor = state.range(0) != 0;
  std::vector<Shape> shapes;
  int64_t total = 0;
  for (const Tensor& p : nn::make_model(model)->trainable_params()) {
    shapes.push_back(p.shape());
    total += p.numel();
  }
  if (!per_tensor) shapes = {{total}};
  Generator gen(5);
  std::vector<Tensor> params, grads;
  for (const Shape& s : shapes) {
    params.push_back(randn(s, gen).set_requires_grad(true));
    grads.push_back(randn(s, gen));
  }
  optim::Momentum opt(params, 1e-3, 0.9);
  CastCache cache;
  opt.attach_working_copies(&cache, DType::bf16);
  opt.step(grads);
  bool finite = true;
  for (auto _ : state) {
    finite &= amp::all_finite(grads);
    opt.step(grads, 1.0 / 1024.0);
    benchmark::ClobberMemory();
  }
  if (!finite) state.SkipWithError("all_finite reported a non-finite gradient");
  state.counters["tensors"] = static_cast<double>(shapes.size());
  state.counters["params"] = static_cast<double>(total);
}

// ---------------------------------------------------------------- matmul

double matmul_flops(const benchmark::State& state) {
  return 2.0 * static_cast<double>(state.range(0) * state.range(1) * state.range(2));
}

std::string shape_key(const char* op, DType dtype, const benchmark::State& state, int nargs) {
  std::string k(op);
  k += '/';
  k += dtype_name(dtype);
  for (int i = 0; i < nargs; ++i) {
    k += '/';
    k += std::to_string(state.range(i));
  }
  return k;
}

// Args: M, K, N. mixprec::ops::matmul under NoGradGuard (f16 is emulated through f32).
void BM_matmul(benchmark::State& state, DType dtype) {
  NoGradGuard ng;
  Generator gen(4);
  const Tensor a = randn({state.range(0), state.range(1)}, gen, {.dtype = dtype});
  const Tensor b = randn({state.range(1), state.range(2)}, gen, {.dtype = dtype});
  try {
    benchmark::DoNotOptimize(ops::matmul(a, b));  // warm-up: primitive creation
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const auto t0 = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b));
  const double rate = rate_since(state, matmul_flops(state), t0);
  set_rate(state, "GFLOP/s", matmul_flops(state));
  set_ratio(state, "x_onednn", shape_key("matmul", dtype, state, 3), rate);
}

// ---------------------------------------------------------------- convolution

struct ConvShape {
  int64_t n, c, h, w, cout, k, pad, oh, ow;
};
ConvShape conv_shape(const benchmark::State& state) {
  ConvShape s{state.range(0), state.range(1), state.range(2), state.range(3),
              state.range(4), state.range(5), state.range(6), 0, 0};
  s.oh = s.h + 2 * s.pad - s.k + 1;
  s.ow = s.w + 2 * s.pad - s.k + 1;
  return s;
}
double conv_flops(const ConvShape& s) {
  return 2.0 * static_cast<double>(s.n * s.cout * s.oh * s.ow * s.c * s.k * s.k);
}

// Args: N, C, H, W, Cout, k, pad (stride 1). Channels-last input, plain [Cout, C, k, k] weights.
void BM_conv2d(benchmark::State& state, DType dtype) {
  NoGradGuard ng;
  const ConvShape s = conv_shape(state);
  Generator gen(5);
  const Tensor x = randn({s.n, s.h, s.w, s.c}, gen, {.dtype = dtype}).permute({0, 3, 1, 2});
  const Tensor w = randn({s.cout, s.c, s.k, s.k}, gen, {.dtype = dtype});
  const ops::Conv2dOptions opts{.pad_mode = ops::PadMode::pad,
                                .padding = {s.pad, s.pad, s.pad, s.pad}};
  try {
    benchmark::DoNotOptimize(ops::conv2d(x, w, {}, opts));
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const auto t0 = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(ops::conv2d(x, w, {}, opts));
  const double rate = rate_since(state, conv_flops(s), t0);
  set_rate(state, "GFLOP/s", conv_flops(s));
  set_ratio(state, "x_onednn", shape_key("conv", dtype, state, 7), rate);
}

// A first layer's training work (1 input channel, bf16 as at O2): forward with bias and ReLU,
// then the weight and bias gradients (the data needs none). Args: N, Cout, kernel, padding.
// impl "im2col_gemm" forces the im2col + GEMM path; "" lets dispatch choose (direct_c1).
void BM_first_conv(benchmark::State& state, const char* impl) {
  Generator gen(6);
  const int64_t n = state.range(0), cout = state.range(1), k = state.range(2), pad = state.range(3);
  const bool nchw = state.range(4) != 0;  // SimpleNet's contiguous output, else channels-last
  const Tensor x = randn({n, 1, 28, 28}, gen, {.dtype = DType::bf16});
  const Tensor w = randn({cout, 1, k, k}, gen, {.dtype = DType::bf16}).set_requires_grad(true);
  const Tensor b = randn({cout}, gen, {.dtype = DType::bf16}).set_requires_grad(true);
  const ops::Conv2dOptions opts{.pad_mode = ops::PadMode::pad, .padding = {pad, pad, pad, pad},
                                .activation = ops::Activation::relu,
                                .output_format = nchw ? ops::MemoryFormat::contiguous
                                                      : ops::MemoryFormat::channels_last};
  const int64_t o = 28 + 2 * pad - k + 1;
  const Tensor gy = nchw ? randn({n, cout, o, o}, gen, {.dtype = DType::bf16})
                         : randn({n, o, o, cout}, gen, {.dtype = DType::bf16}).permute({0, 3, 1, 2});
  const std::vector<Tensor> leaves{w, b};
  ops::ForceImpl force(impl);
  auto step = [&] {
    const Tensor y = ops::conv2d(x, w, b, opts);
    benchmark::DoNotOptimize(run_backward({y}, {gy}, {.capture = &leaves}));
  };
  step();
  const auto t0 = Clock::now();
  for (auto _ : state) step();
  const std::string key = "first_conv/" + std::to_string(n) + "/" + std::to_string(cout) + "/" +
                          std::to_string(k) + "/" + std::to_string(nchw);
  const double rate = rate_since(state, 1.0, t0);
  if (*impl) baselines()[key] = rate;
  else set_ratio(state, "x_im2col", key, rate);
}

// A conv with few input channels (LeNet's second: 6 -> 16 channels, 5x5 on 14x14, bf16,
// channels-last as at O2): forward with bias, then the weight and bias gradients, and the input's
// when the last arg is 1. impl "low_via_f32_batched" forces oneDNN's f32 kernels on widened
// chunks (what dispatch ran before direct_small); "" lets dispatch choose. Args: N, Cin, Cout,
// side, kernel, with input gradient.
void BM_small_conv(benchmark::State& state, const char* impl) {
  Generator gen(7);
  const int64_t n = state.range(0), cin = state.range(1), cout = state.range(2), side = state.range(3),
                k = state.range(4);
  const bool dx = state.range(5) != 0;
  const Tensor x = randn({n, side, side, cin}, gen, {.dtype = DType::bf16}).permute({0, 3, 1, 2}).set_requires_grad(dx);
  const Tensor w = randn({cout, cin, k, k}, gen, {.dtype = DType::bf16}).set_requires_grad(true);
  const Tensor b = randn({cout}, gen, {.dtype = DType::bf16}).set_requires_grad(true);
  const int64_t o = side - k + 1;
  const Tensor gy = randn({n, o, o, cout}, gen, {.dtype = DType::bf16}).permute({0, 3, 1, 2});
  const std::vector<Tensor> leaves = dx ? std::vector<Tensor>{w, b, x} : std::vector<Tensor>{w, b};
  ops::ForceImpl force(impl);
  auto step = [&] {
    const Tensor y = ops::conv2d(x, w, b, {});
    benchmark::DoNotOptimize(run_backward({y}, {gy}, {.capture = &leaves}));
  };
  step();
  const auto t0 = Clock::now();
  for (auto _ : state) step();
  const std::string key = "small_conv/" + std::to_string(cin) + "/" + std::to_string(cout) + "/" + std::to_string(dx);
  const double rate = rate_since(state, 1.0, t0);
  if (*impl) baselines()[key] = rate;
  else set_ratio(state, "x_onednn_f32", key, rate);
}

// Max pooling 2x2 forward on channels-last bf16 at batch 256: LeNet's two layers (6 channels 28x28,
// 16 channels 10x10) and convnet-bn's first (32 channels 28x28). Args: channels, side.
void BM_max_pool(benchmark::State& state) {
  Generator gen(9);
  const int64_t c = state.range(0), h = state.range(1);
  const Tensor x = randn({256, h, h, c}, gen, {.dtype = DType::bf16}).permute({0, 3, 1, 2});
  NoGradGuard ng;
  benchmark::DoNotOptimize(ops::max_pool2d(x, {}));
  for (auto _ : state) benchmark::DoNotOptimize(ops::max_pool2d(x, {}));
  set_rate(state, "bytes", 2.0 * static_cast<double>(x.numel()));
}

// SimpleNet's Dense layer (in 21632, out 10) at batch 256: the forward x W^T, backward-data
// dy W and backward-weights dy^T x as plain matmuls with the same operand layouts. Arg: 0
// forward, 1 backward-data, 2 backward-weights. The impl "" is dispatch's choice; the f32 row
// through oneDNN is the baseline ("x_f32": the rate against it).
void BM_skinny_gemm(benchmark::State& state, DType dtype, const char* impl) {
  Generator gen(8);
  const int64_t m = 256, k = 32 * 26 * 26, n = 10;
  const Tensor x = randn({m, k}, gen, {.dtype = dtype}), w = randn({n, k}, gen, {.dtype = dtype});
  const Tensor dy = randn({m, n}, gen, {.dtype = dtype});
  const int64_t which = state.range(0);
  ops::ForceImpl force(impl);
  auto run = [&] {
    if (which == 0) return ops::matmul(x, w.transpose(0, 1));
    if (which == 1) return ops::matmul(dy, w);
    return ops::matmul(dy.transpose(0, 1), x);
  };
  benchmark::DoNotOptimize(run());
  const auto t0 = Clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(run());
  const std::string key = "skinny/" + std::to_string(which);
  const double rate = rate_since(state, 2.0 * static_cast<double>(m * k * n), t0);
  if (dtype == DType::f32 && std::string_view(impl) == "onednn") baselines()[key] = rate;
  else set_ratio(state, "x_f32", key, rate);
  set_rate(state, "FLOPS", 2.0 * static_cast<double>(m * k * n));
}

// ---------------------------------------------------------------- oneDNN called directly

#if MIXPREC_WITH_ONEDNN
using dnnl::memory;

struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
};
Dnnl& dnnl_ctx() {
  static Dnnl d;
  return d;
}

memory::data_type dnnl_type(DType d) {
  return d == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// Plain row-major [M,K] x [K,N] -> [M,N]; the primitive is made once, outside the timing.
void BM_onednn_matmul(benchmark::State& state, DType dtype) {
  Dnnl& d = dnnl_ctx();
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(4);
  const Tensor a = randn({m, k}, gen, {.dtype = dtype}), b = randn({k, n}, gen, {.dtype = dtype});
  const Tensor c = Tensor::empty({m, n}, {.dtype = dtype});
  const memory::desc a_md({m, k}, dnnl_type(dtype), memory::format_tag::ab);
  const memory::desc b_md({k, n}, dnnl_type(dtype), memory::format_tag::ab);
  const memory::desc c_md({m, n}, dnnl_type(dtype), memory::format_tag::ab);
  dnnl::matmul prim;
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), d.eng);
    state.SetLabel(pd.impl_info_str());
    prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(a_md, d.eng, a.data_ptr())},
      {DNNL_ARG_WEIGHTS, memory(b_md, d.eng, b.data_ptr())},
      {DNNL_ARG_DST, memory(c_md, d.eng, c.data_ptr())}};
  const auto t0 = Clock::now();
  for (auto _ : state) {
    prim.execute(d.strm, args);
    d.strm.wait();
  }
  baselines()[shape_key("matmul", dtype, state, 3)] = rate_since(state, matmul_flops(state), t0);
  set_rate(state, "GFLOP/s", matmul_flops(state));
}

// src/dst nhwc, weights in the primitive's own format (format_tag::any) reordered once from
// plain oihw outside the timing; forward_training, as mixprec's conv2d asks for.
void BM_onednn_conv(benchmark::State& state, DType dtype) {
  Dnnl& d = dnnl_ctx();
  const ConvShape s = conv_shape(state);
  Generator gen(5);
  const Tensor x = randn({s.n, s.h, s.w, s.c}, gen, {.dtype = dtype});  // nhwc bytes
  const Tensor w = randn({s.cout, s.c, s.k, s.k}, gen, {.dtype = dtype});
  const Tensor y = Tensor::empty({s.n, s.oh, s.ow, s.cout}, {.dtype = dtype});
  const memory::desc x_md({s.n, s.c, s.h, s.w}, dnnl_type(dtype), memory::format_tag::nhwc);
  const memory::desc w_plain({s.cout, s.c, s.k, s.k}, dnnl_type(dtype), memory::format_tag::oihw);
  const memory::desc w_any({s.cout, s.c, s.k, s.k}, dnnl_type(dtype), memory::format_tag::any);
  const memory::desc y_md({s.n, s.cout, s.oh, s.ow}, dnnl_type(dtype), memory::format_tag::nhwc);
  dnnl::convolution_forward prim;
  memory w_mem;
  try {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_md, w_any, y_md,
        {1, 1}, {s.pad, s.pad}, {s.pad, s.pad});
    const dnnl::convolution_forward::primitive_desc pd(desc, d.eng);
    state.SetLabel(pd.impl_info_str());
    prim = dnnl::convolution_forward(pd);
    memory w_user(w_plain, d.eng, w.data_ptr());
    w_mem = memory(pd.weights_desc(), d.eng);
    dnnl::reorder(w_user, w_mem).execute(d.strm, w_user, w_mem);
    d.strm.wait();
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(x_md, d.eng, x.data_ptr())},
      {DNNL_ARG_WEIGHTS, w_mem},
      {DNNL_ARG_DST, memory(y_md, d.eng, y.data_ptr())}};
  const auto t0 = Clock::now();
  for (auto _ : state) {
    prim.execute(d.strm, args);
    d.strm.wait();
  }
  baselines()[shape_key("conv", dtype, state, 7)] = rate_since(state, conv_flops(s), t0);
  set_rate(state, "GFLOP/s", conv_flops(s));
}
#endif

// ---------------------------------------------------------------- registration
// Baselines first: the rows after them read their rates for the ratio counters.

// Wall-clock time: the kernels run on OpenMP threads, so the main thread's CPU time says little.
void timed(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
void matmul_shapes(benchmark::internal::Benchmark* b) {
  b->Args({256, 784, 2048})->Args({256, 2048, 2048})->Apply(timed);
}
void conv_shapes(benchmark::internal::Benchmark* b) {
  b->Args({256, 32, 14, 14, 64, 3, 1})   // convnet-bn, second conv
      ->Args({64, 64, 14, 14, 64, 3, 1})  // resnet-small
      ->Apply(timed);
}

BENCHMARK(BM_memcpy)->Arg(momentum_bytes(false))->Arg(momentum_bytes(true))->Apply(timed);
BENCHMARK_CAPTURE(BM_unscale_and_check, f32, DType::f32)->Apply(timed);
BENCHMARK_CAPTURE(BM_unscale_and_check, bf16, DType::bf16)->Apply(timed);
BENCHMARK_CAPTURE(BM_unscale_and_check, f16, DType::f16)->Apply(timed);
BENCHMARK_CAPTURE(BM_all_finite, f32, DType::f32)->Apply(timed);
BENCHMARK_CAPTURE(BM_all_finite, bf16, DType::bf16)->Apply(timed);
BENCHMARK_CAPTURE(BM_all_finite, f16, DType::f16)->Apply(timed);
BENCHMARK_CAPTURE(BM_momentum_step, fp32, false)->Apply(timed);
BENCHMARK_CAPTURE(BM_momentum_step, amp_bf16_copies, true)->Apply(timed);

#if MIXPREC_WITH_ONEDNN
// The baseline is im2col as dispatch would run it without the direct kernel: widened chunk by
// chunk to f32 where bf16 is emulated (no AVX-512), in bf16 through oneDNN where it is native.
BENCHMARK_CAPTURE(BM_first_conv, im2col, cpu_features().avx512f ? "im2col_gemm" : "im2col_gemm_via_f32")->Args({256, 6, 5, 2, 0})->Args({256, 32, 3, 0, 0})->Args({256, 32, 3, 1, 0})->Args({256, 32, 3, 0, 1})->Apply(timed);
BENCHMARK_CAPTURE(BM_first_conv, dispatch, "")->Args({256, 6, 5, 2, 0})->Args({256, 32, 3, 0, 0})->Args({256, 32, 3, 1, 0})->Args({256, 32, 3, 0, 1})->Apply(timed);
BENCHMARK_CAPTURE(BM_small_conv, onednn_f32, "low_via_f32_batched")->Args({256, 6, 16, 14, 5, 0})->Args({256, 6, 16, 14, 5, 1})->Apply(timed);
BENCHMARK_CAPTURE(BM_small_conv, dispatch, "")->Args({256, 6, 16, 14, 5, 0})->Args({256, 6, 16, 14, 5, 1})->Apply(timed);
BENCHMARK(BM_max_pool)->Args({6, 28})->Args({16, 10})->Args({32, 28})->Apply(timed);
BENCHMARK_CAPTURE(BM_skinny_gemm, f32_onednn, DType::f32, "onednn")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_CAPTURE(BM_skinny_gemm, f32, DType::f32, "")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_CAPTURE(BM_skinny_gemm, bf16_via_f32, DType::bf16, "low_via_f32")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_CAPTURE(BM_skinny_gemm, bf16, DType::bf16, "")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_CAPTURE(BM_skinny_gemm, f16, DType::f16, "")->DenseRange(0, 2)->Apply(timed);
BENCHMARK_CAPTURE(BM_update_layout, resnet_small, "resnet-small")->Arg(1)->Arg(0)->Apply(timed);
BENCHMARK_CAPTURE(BM_update_layout, convnet_bn, "convnet-bn")->Arg(1)->Arg(0)->Apply(timed);
BENCHMARK_CAPTURE(BM_update_layout, mlp, "mlp")->Arg(1)->Arg(0)->Apply(timed);

BENCHMARK_CAPTURE(BM_onednn_matmul, f32, DType::f32)->Apply(matmul_shapes);
BENCHMARK_CAPTURE(BM_onednn_matmul, bf16, DType::bf16)->Apply(matmul_shapes);
#endif
BENCHMARK_CAPTURE(BM_matmul, f32, DType::f32)->Apply(matmul_shapes);
BENCHMARK_CAPTURE(BM_matmul, bf16, DType::bf16)->Apply(matmul_shapes);
BENCHMARK_CAPTURE(BM_matmul, f16, DType::f16)->Apply(matmul_shapes);

#if MIXPREC_WITH_ONEDNN
BENCHMARK_CAPTURE(BM_onednn_conv, f32, DType::f32)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_onednn_conv, bf16, DType::bf16)->Apply(conv_shapes);
#endif
BENCHMARK_CAPTURE(BM_conv2d, f32, DType::f32)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv2d, bf16, DType::bf16)->Apply(conv_shapes);
BENCHMARK_CAPTURE(BM_conv2d, f16, DType::f16)->Apply(conv_shapes);

}  // namespace

BENCHMARK_MAIN();
