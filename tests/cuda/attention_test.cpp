// The CUDA attention kernels (ops/cuda/attention.cu) against the reference composition
// (ops/ref/attention.cpp) on the same inputs, with the attention tests' tolerance table
// (ops/attention_test_util.h): f32, f16, bf16 and f64; causal (bottom-right, Lq < Lk and
// Lq > Lk) and not; boolean masks broadcast over heads; rows that see no key (NaN, spreading to
// their slice's dk and dv); odd lengths and head dims, several key tiles, head dim 256 (shared
// memory above 48 KiB); strided q/k/v and the op's [B, L, H, D] output layout; no queries; the
// op end to end through autograd on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test_util.h"
#include "ops/attention_problem.h"
#include "ops/attention_test_util.h"

namespace mixprec {
namespace {

using namespace testing;
constexpr DType kFloats[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

struct Case {
  int64_t B, H, Lq, Lk, D, Dv;
  bool causal = false;
  bool mask = false;     // a [B, 1, Lq, Lk] mask broadcast over heads, row 1 of batch 0 empty
  bool strided = false;  // q, k, v, o as [B, L, H, D] tensors viewed as [B, H, L, D]
};

std::string label(const Case& c, DType d) {
  return std::string(dtype_name(d)) + " B" + std::to_string(c.B) + " H" + std::to_string(c.H) +
         " Lq" + std::to_string(c.Lq) + " Lk" + std::to_string(c.Lk) + " D" + std::to_string(c.D) +
         " Dv" + std::to_string(c.Dv) + (c.causal ? " causal" : "") + (c.mask ? " mask" : "") +
         (c.strided ? " strided" : "");
}

// A [B, H, L, W] input in d, as a view of a [B, L, H, W] tensor when strided (same on both
// devices: the view is taken after the upload).
Tensor input(const Case& c, int64_t L, int64_t W, uint64_t seed, DType d, Device dev) {
  if (!c.strided) return random({c.B, c.H, L, W}, seed).astype(d).to(dev);
  return random({c.B, L, c.H, W}, seed).astype(d).to(dev).permute({0, 2, 1, 3});
}
Tensor output(const Case& c, int64_t L, int64_t W, DType d, Device dev) {
  if (!c.strided) return zeros({c.B, c.H, L, W}, {.dtype = d, .device = dev});
  return zeros({c.B, L, c.H, W}, {.dtype = d, .device = dev}).permute({0, 2, 1, 3});
}

ops::AttentionParams params(const Case& c, DType d, Device dev) {
  ops::AttentionParams p{.scale = 1.0 / std::sqrt(static_cast<double>(c.D)),
                         .causal = c.causal,
                         .mask = {},
                         .softmax_dtype = acc_dtype(d)};
  if (c.mask) {
    std::vector<uint8_t> bits(static_cast<size_t>(c.B * c.Lq * c.Lk));
    for (size_t x = 0; x < bits.size(); ++x) bits[x] = (x * 7 + x / 5) % 4 != 0;
    for (int64_t j = 0; j < c.Lk; ++j) bits[static_cast<size_t>(c.Lk + j)] = 0;  // b 0, row 1
    p.mask = ops::broadcast_to(Tensor::from_vector(bits, {c.B, 1, c.Lq, c.Lk}).to(dev),
                               {c.B, c.H, c.Lq, c.Lk});
  }
  return p;
}

// Forward and backward of one case in d: the reference on the CPU, the CUDA kernel on the GPU,
// the backward of both fed the reference forward's o and lse.
void check_case(const Case& c, DType d) {
  const DType cd = acc_dtype(d);
  const Tol t = fused_tol(d), ts = fused_tol(cd);
  auto fwd = [&](Device dev) {
    return ops::AttentionFwdProblem{input(c, c.Lq, c.D, 1, d, dev), input(c, c.Lk, c.D, 2, d, dev),
                                    input(c, c.Lk, c.Dv, 3, d, dev), output(c, c.Lq, c.Dv, d, dev),
                                    zeros({c.B, c.H, c.Lq}, {.dtype = cd, .device = dev}),
                                    params(c, d, dev)};
  };
  ops::AttentionFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
  run_ref(fc);
  run_cuda(fg);
  EXPECT_TRUE(close(fg.o.to(Device::cpu()), fc.o, t.rel, t.abs_frac)) << "o " << label(c, d);
  EXPECT_TRUE(close(fg.lse.to(Device::cpu()), fc.lse, ts.rel, ts.abs_frac))
      << "lse " << label(c, d);
  auto bwd = [&](Device dev) {
    const ops::AttentionFwdProblem f = fwd(dev);
    return ops::AttentionBwdProblem{f.q, f.k, f.v, fc.o.to(dev), fc.lse.to(dev),
                                    input(c, c.Lq, c.Dv, 4, d, dev), output(c, c.Lq, c.D, d, dev),
                                    output(c, c.Lk, c.D, d, dev), output(c, c.Lk, c.Dv, d, dev),
                                    f.params};
  };
  ops::AttentionBwdProblem bc = bwd(Device::cpu()), bg = bwd(kGpu);
  run_ref(bc);
  run_cuda(bg);
  for (auto [x, y, name] : {std::tuple{bg.dq, bc.dq, "dq"}, std::tuple{bg.dk, bc.dk, "dk"},
                            std::tuple{bg.dv, bc.dv, "dv"}})
    EXPECT_TRUE(close(x.to(Device::cpu()), y, t.rel, t.abs_frac)) << name << " " << label(c, d);
}

int64_t nan_count(const Tensor& t) {
  int64_t n = 0;
  for (double x : t.to(Device::cpu()).to_vector<double>()) n += std::isnan(x);
  return n;
}

TEST(CudaAttention, ForwardAndBackwardMatchTheReferenceInEveryDtype) {
  const Case cases[] = {
      {2, 3, 37, 45, 24, 20, false, false, true},  // odd sizes, two key tiles, strided
      {2, 3, 37, 45, 24, 20, true, false, true},   // causal with Lq < Lk (bottom right)
      {1, 2, 1, 40, 16, 16, true},                 // one query over a cache of keys
      {1, 1, 70, 9, 8, 40},                        // fewer keys than one tile, Dv > 32
      {1, 1, 33, 65, 256, 256, true},              // head dim 256: three key tiles, big smem
  };
  for (const Case& c : cases)
    for (DType d : kFloats) check_case(c, d);
}

TEST(CudaAttention, MasksAndRowsWithoutKeysGiveTheReferencesNans) {
  // Causal with Lq > Lk: rows 0..16 see no key. A mask with an empty row (batch 0, row 1).
  const Case causal{1, 2, 50, 33, 16, 16, true};
  const Case masked{2, 2, 40, 70, 32, 32, true, true};
  for (DType d : kFloats) {
    check_case(causal, d);
    check_case(masked, d);
  }
  // The NaNs themselves (close() matches NaN with NaN only): row 1 of batch 0's o in both heads,
  // and dk, dv of batch 0 entirely; batch 1 has none.
  ops::AttentionFwdProblem f{
      input(masked, 40, 32, 1, DType::f32, kGpu), input(masked, 70, 32, 2, DType::f32, kGpu),
      input(masked, 70, 32, 3, DType::f32, kGpu), output(masked, 40, 32, DType::f32, kGpu),
      zeros({2, 2, 40}, {.device = kGpu}), params(masked, DType::f32, kGpu)};
  run_cuda(f);
  EXPECT_EQ(nan_count(f.o), 2 * 32);
  EXPECT_EQ(nan_count(f.lse), 2);
  ops::AttentionBwdProblem b{f.q, f.k, f.v, f.o, f.lse, input(masked, 40, 32, 4, DType::f32, kGpu),
                             output(masked, 40, 32, DType::f32, kGpu),
                             output(masked, 70, 32, DType::f32, kGpu),
                             output(masked, 70, 32, DType::f32, kGpu), f.params};
  run_cuda(b);
  EXPECT_EQ(nan_count(b.dq), 2 * 32);
  EXPECT_EQ(nan_count(b.dk.slice(0, 0, 1)), 2 * 70 * 32);
  EXPECT_EQ(nan_count(b.dv.slice(0, 0, 1)), 2 * 70 * 32);
  EXPECT_EQ(nan_count(b.dk.slice(0, 1, 2)) + nan_count(b.dv.slice(0, 1, 2)), 0);
}

TEST(CudaAttention, NoQueriesGiveZeroKeyGradients) {
  const Case c{1, 2, 0, 5, 8, 8};
  ops::AttentionBwdProblem b{input(c, 0, 8, 1, DType::f32, kGpu), input(c, 5, 8, 2, DType::f32, kGpu),
                             input(c, 5, 8, 3, DType::f32, kGpu), output(c, 0, 8, DType::f32, kGpu),
                             zeros({1, 2, 0}, {.device = kGpu}), output(c, 0, 8, DType::f32, kGpu),
                             output(c, 0, 8, DType::f32, kGpu),
                             full({1, 2, 5, 8}, 3.0, {.device = kGpu}),
                             full({1, 2, 5, 8}, 3.0, {.device = kGpu}), params(c, DType::f32, kGpu)};
  run_cuda(b);
  EXPECT_TRUE(gpu_close(b.dk, zeros({1, 2, 5, 8}), DType::f32, 0.0));
  EXPECT_TRUE(gpu_close(b.dv, zeros({1, 2, 5, 8}), DType::f32, 0.0));
}

TEST(CudaAttention, ASoftmaxForcedIntoSixteenBitsIsDeclinedWithItsReason) {
  const Case c{1, 1, 4, 4, 8, 8};
  ops::AttentionParams p = params(c, DType::f16, kGpu);
  p.softmax_dtype = DType::f16;
  const ops::AttentionFwdProblem f{input(c, 4, 8, 1, DType::f16, kGpu),
                                   input(c, 4, 8, 2, DType::f16, kGpu),
                                   input(c, 4, 8, 3, DType::f16, kGpu),
                                   output(c, 4, 8, DType::f16, kGpu),
                                   zeros({1, 1, 4}, {.device = kGpu}), p};
  EXPECT_NE(cuda_declines(f).find("16 bits"), std::string::npos) << cuda_declines(f);
  EXPECT_EQ(cuda_declines(ops::AttentionFwdProblem{f.q, f.k, f.v, f.o, f.lse,
                                                   params(c, DType::f16, kGpu)}),
            "");
}

TEST(CudaAttention, TheOpWithAutogradOnTheGpuMatchesTheReferenceOnTheCpu) {
  // The op's own glue on the device: its [B, L, H, D] output, the saved lse, dout packed.
  for (bool causal : {false, true}) {
    auto run = [&](Device dev) {
      std::vector<Tensor> in;
      for (uint64_t s : {11, 12, 13})
        in.push_back(random({2, 4, 50, 16}, s, DType::f32).to(dev).set_requires_grad(true));
      const Tensor o = ops::scaled_dot_product_attention(in[0], in[1], in[2], {.causal = causal});
      const Tensor w = random(o.shape(), 14, DType::f32).to(dev);
      std::vector<Tensor> out = grad(ops::sum(ops::mul(o, w)), in);
      out.insert(out.begin(), o.detach());
      for (Tensor& x : out) x = x.to(Device::cpu());
      return out;
    };
    std::vector<Tensor> cpu;
    {
      ops::ForceImpl ref("ref");
      cpu = run(Device::cpu());
    }
    const std::vector<Tensor> dev = run(kGpu);
    const Tol t = fused_tol(DType::f32);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(close(dev[i], cpu[i], t.rel, t.abs_frac)) << "output " << i << " causal " << causal;
  }
}

}  // namespace
}  // namespace mixprec
