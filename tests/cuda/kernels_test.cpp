// Every CUDA kernel against the reference kernel on the same inputs (uploaded), with the
// tolerance table of test_util.h (GEMMs: the GEMM error model of ops/gemm_test_util.h), in every
// dtype the kernel takes, with broadcast and non-contiguous operands where the problem allows.
// Attention has its own file (attention_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "ops/gemm_test_util.h"
#include "ops/elementwise_problem.h"
#include "ops/embedding_problem.h"
#include "ops/loss_problem.h"
#include "ops/matmul_problem.h"
#include "ops/norm_problem.h"
#include "ops/reduce_problem.h"
#include "ops/softmax_problem.h"

namespace mixprec {
namespace {

using namespace testing;
constexpr DType kFloats[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

// The operand of a formula that is read as a condition or mask (0 or not), or -1.
int mask_operand(ops::PointwiseFn fn) {
  using F = ops::PointwiseFn;
  switch (fn) {
    case F::where: case F::where_grad_a: case F::where_grad_b: return 0;
    case F::masked_fill: case F::masked_fill_grad: case F::dropout: return 1;
    default: return -1;
  }
}

TEST(CudaPointwise, EveryFormulaMatchesTheReferenceWithBroadcastAndStrides) {
  const int last = static_cast<int>(ops::PointwiseFn::add_relu);
  for (DType d : kFloats) {
    for (int f = 0; f <= last; ++f) {
      const auto fn = static_cast<ops::PointwiseFn>(f);
      ops::PointwiseProblem probe{.fn = fn, .a = 0.7, .b = 1.3, .in = {}, .out = {}};
      const int arity = ops::visit_pointwise(probe, [](const auto& fo) {
        return std::remove_cvref_t<decltype(fo)>::arity;
      });
      // Operands in [0.1, 2] (log, sqrt, pow defined); operand 0 a transposed view, operand 1
      // broadcast along the rows; a mask operand holds zeros and ones.
      std::array<Tensor, 3> in;
      for (int k = 0; k < arity; ++k) {
        Tensor t = random({4, 6}, 50 + k, DType::f64, 0.1, 2.0);
        if (k == mask_operand(fn)) {
          std::vector<uint8_t> bits;
          for (int i = 0; i < 24; ++i) bits.push_back(static_cast<uint8_t>((i * 5) % 3 == 0));
          t = Tensor::from_vector(bits, {4, 6});
        }
        if (k == 1) t = t.slice(0, 0, 1);  // [1, 6]
        in[static_cast<size_t>(k)] = t.astype(k == mask_operand(fn) ? DType::u8 : d);
      }
      in[0] = in[0].transpose(0, 1).contiguous().transpose(0, 1);  // same values, strides {1, 4}
      ops::PointwiseProblem cpu = probe, dev = probe;
      cpu.out = zeros({4, 6}, {.dtype = d});
      dev.out = zeros({4, 6}, {.dtype = d, .device = kGpu});
      for (int k = 0; k < arity; ++k) {
        cpu.in[static_cast<size_t>(k)] = in[static_cast<size_t>(k)];
        Tensor g = gpu(in[static_cast<size_t>(k)]);
        if (k == 0) g = g.transpose(0, 1).contiguous().transpose(0, 1);  // strided on the GPU too
        dev.in[static_cast<size_t>(k)] = g;
      }
      run_ref(cpu);
      run_cuda(dev);
      EXPECT_TRUE(gpu_close(dev.out, cpu.out, d, 2.0))
          << ops::pointwise_fn_name(fn) << " in " << dtype_name(d);
    }
  }
}

TEST(CudaPointwise, NanAndInfPropagateAsOnTheCpu) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector<double>({-1.0, 0.0, std::nan(""), inf, -inf, 70000.0}, {6});
  for (DType d : {DType::f32, DType::f16}) {
    for (auto fn : {ops::PointwiseFn::relu, ops::PointwiseFn::exp, ops::PointwiseFn::mul_scalar}) {
      ops::PointwiseProblem cpu{.fn = fn, .a = 2.0, .b = 0, .in = {}, .out = {}}, dev = cpu;
      cpu.in[0] = x.astype(d);
      dev.in[0] = gpu(cpu.in[0]);
      cpu.out = zeros({6}, {.dtype = d});
      dev.out = zeros({6}, {.dtype = d, .device = kGpu});
      run_ref(cpu);
      run_cuda(dev);
      const auto a = dev.out.to(Device::cpu()).to_vector<double>();
      const auto e = cpu.out.to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(e[i])) {
          EXPECT_TRUE(std::isnan(a[i])) << i;
        } else if (std::isinf(e[i])) {
          EXPECT_EQ(a[i], e[i]) << i;  // f16 overflow at 65504 too
        }
      }
    }
  }
}

TEST(CudaPointwise, DropoutOnTheGpuDropsTheSameElementsAsOnTheCpu) {
  // The mask is drawn on the host from the generator and uploaded: the same elements dropped as
  // on the CPU (a wrong mask is off by all of x / 0.7), forward and backward.
  for (DType d : {DType::f32, DType::bf16}) {
    auto run = [&](Device dev) {
      Generator gen(5);
      const Tensor x = random({37, 11}, 55, DType::f32).astype(d).to(dev).set_requires_grad(true);
      const Tensor y = ops::dropout(x, 0.3, true, gen);
      const std::vector<Tensor> g = grad(ops::sum(ops::mul(y, full({37, 11}, 2.0, {.dtype = d,
                                                                                   .device = dev}))),
                                         {x});
      return std::pair{y.detach().to(Device::cpu()), g[0].to(Device::cpu())};
    };
    const auto [yc, gc] = run(Device::cpu());
    const auto [yg, gg] = run(kGpu);
    EXPECT_TRUE(all_close(yg, yc, tolerance_for(d))) << dtype_name(d);  // a dropped element: 0
    EXPECT_TRUE(all_close(gg, gc, tolerance_for(d))) << dtype_name(d);
  }
}

// out = relu?(a @ b + bias) for a layout: a row-major or a transposed view, b the same.
void check_matmul(DType d, DType od, Tensor a, Tensor b, Tensor bias, bool relu, bool a_t,
                  bool b_t) {
  a = a.astype(d);
  b = b.astype(d);
  Shape out_shape = a.dim() >= b.dim() ? a.shape() : b.shape();
  for (size_t i = 0; i + 2 < out_shape.size(); ++i)
    out_shape[i] = std::max(a.dim() > static_cast<int64_t>(i) ? a.shape()[i] : 1,
                            b.dim() > static_cast<int64_t>(i) ? b.shape()[i] : 1);
  out_shape[out_shape.size() - 2] = a.size(-2);
  out_shape[out_shape.size() - 1] = b.size(-1);
  auto view = [](const Tensor& t, bool trans) {  // same values, column-major strides if trans
    return trans ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t;
  };
  ops::MatmulProblem cpu{view(a, a_t), view(b, b_t), bias, zeros(out_shape, {.dtype = od}), relu};
  ops::MatmulProblem dev{view(gpu(a), a_t), view(gpu(b), b_t), gpu(bias),
                         zeros(out_shape, {.dtype = od, .device = kGpu}), relu};
  run_ref(cpu);
  run_cuda(dev);
  EXPECT_TRUE(gemm_close(dev.out.to(Device::cpu()), cpu.out, a.size(-1), d))
      << dtype_name(d) << "->" << dtype_name(od) << " bias " << bias.defined() << " relu " << relu
      << " a^T " << a_t << " b^T " << b_t << " " << dev.describe();
}

TEST(CudaMatmul, CublasLtMatchesTheReferenceInEveryDtypeLayoutAndEpilogue) {
  const Tensor a = random({37, 64}, 1), b = random({64, 29}, 2);
  const Tensor bias = random({29}, 3, DType::f32);
  for (DType d : kFloats)
    for (DType od : {d, DType::f32}) {
      if (d == DType::f64 && od == DType::f32) continue;
      for (bool with_bias : {false, true})
        for (bool relu : {false, true})
          for (int layout = 0; layout < 4; ++layout)
            check_matmul(d, od, a, b, with_bias ? bias.astype(od) : Tensor(), relu, layout & 1,
                         layout & 2);
    }
}

TEST(CudaMatmul, BatchedAndBroadcastBatchesMatchTheReference) {
  for (DType d : {DType::f32, DType::bf16}) {
    check_matmul(d, d, random({3, 17, 32}, 4), random({32, 9}, 5), {}, false, false, false);
    check_matmul(d, d, random({3, 17, 32}, 4), random({3, 32, 9}, 6), {}, false, true, false);
    check_matmul(d, d, random({2, 1, 17, 32}, 7), random({1, 3, 32, 9}, 8), {}, true, false, true);
  }
}

TEST(CudaMatmul, Tf32OnlyWhenAsked) {
  EXPECT_FALSE(cuda::allow_tf32());  // the default: f32 GEMMs are exact-f32 (checked above)
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  // TF32 keeps 10 mantissa bits: the result is within the f16-like tolerance of the reference.
  const Tensor a = random({33, 128}, 9, DType::f32), b = random({128, 21}, 10, DType::f32);
  ops::MatmulProblem cpu{a, b, {}, zeros({33, 21}), false};
  ops::MatmulProblem dev{gpu(a), gpu(b), {}, zeros({33, 21}, {.device = kGpu}), false};
  run_ref(cpu);
  run_cuda(dev);
  cuda::set_allow_tf32(false);
  EXPECT_TRUE(gemm_close(dev.out.to(Device::cpu()), cpu.out, 128, DType::f16));
}

TEST(CudaSoftmax, ForwardAndBackwardMatchTheReferenceOnEveryAxisAndDtype) {
  for (DType d : kFloats)
    for (bool log : {false, true})
      for (int64_t axis : {1, 2}) {
        Tensor x = random({3, 40, 7}, 20, DType::f64, -6, 6).astype(d);
        ops::SoftmaxFwdProblem fc{x, zeros(x.shape(), {.dtype = d}), axis, log};
        ops::SoftmaxFwdProblem fg{gpu(x), zeros(x.shape(), {.dtype = d, .device = kGpu}), axis, log};
        run_ref(fc);
        run_cuda(fg);
        EXPECT_TRUE(gpu_close(fg.y, fc.y, d, 2.0)) << dtype_name(d) << " axis " << axis << " log " << log;
        const Tensor dy = random(x.shape(), 21).astype(d);
        ops::SoftmaxBwdProblem bc{fc.y, dy, zeros(x.shape(), {.dtype = d}), axis, log};
        ops::SoftmaxBwdProblem bg{fc.y.to(kGpu), gpu(dy), zeros(x.shape(), {.dtype = d, .device = kGpu}),
                                  axis, log};
        run_ref(bc);
        run_cuda(bg);
        EXPECT_TRUE(gpu_close(bg.dx, bc.dx, d, 2.0)) << dtype_name(d) << " axis " << axis;
      }
}

TEST(CudaSoftmax, RowsWithoutAFiniteMaximumAreNanAsInTheReference) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector<double>({-inf, -inf, -inf, 1, inf, 2, 1, std::nan(""), 3}, {3, 3})
                       .astype(DType::f32);
  ops::SoftmaxFwdProblem g{gpu(x), zeros({3, 3}, {.device = kGpu}), 1, false};
  run_cuda(g);
  const auto y = g.y.to(Device::cpu()).to_vector<float>();
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheReference) {
  for (DType d : kFloats) {
    const DType c = acc_dtype(d);
    const Tensor x = random({19, 100}, 30, DType::f64, -3, 3).astype(d);
    const Tensor gamma = random({100}, 31, c), beta = random({100}, 32, c);
    auto fwd = [&](Device dev) {
      auto on = [&](const Tensor& t) { return t.to(dev); };
      return ops::LayerNormFwdProblem{on(x), on(gamma), on(beta), zeros_like_on(x, dev),
                                      zeros({19}, {.dtype = c, .device = dev}),
                                      zeros({19}, {.dtype = c, .device = dev}), 1e-5};
    };
    ops::LayerNormFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
    run_ref(fc);
    run_cuda(fg);
    EXPECT_TRUE(gpu_close(fg.y, fc.y, d, 2.0)) << dtype_name(d);
    EXPECT_TRUE(gpu_close(fg.mean, fc.mean, c)) << dtype_name(d);
    EXPECT_TRUE(gpu_close(fg.var, fc.var, c, 2.0)) << dtype_name(d);
    const Tensor dy = random({19, 100}, 33).astype(d);
    auto bwd = [&](Device dev, const ops::LayerNormFwdProblem& f) {
      auto on = [&](const Tensor& t) { return t.to(dev); };
      return ops::LayerNormBwdProblem{on(x), on(dy), on(gamma), on(fc.mean), on(fc.var),
                                      zeros_like_on(x, dev), zeros({100}, {.dtype = c, .device = dev}),
                                      zeros({100}, {.dtype = c, .device = dev}), f.eps};
    };
    ops::LayerNormBwdProblem bc = bwd(Device::cpu(), fc), bg = bwd(kGpu, fc);
    run_ref(bc);
    run_cuda(bg);
    EXPECT_TRUE(gpu_close(bg.dx, bc.dx, d, 4.0)) << dtype_name(d);
    EXPECT_TRUE(gpu_close(bg.dgamma, bc.dgamma, c, 4.0)) << dtype_name(d);
    EXPECT_TRUE(gpu_close(bg.dbeta, bc.dbeta, c)) << dtype_name(d);
  }
}

TEST(CudaCrossEntropy, SparseAndDenseForwardAndBackwardMatchTheReference) {
  for (DType c : {DType::f32, DType::f64})
    for (bool sparse : {true, false}) {
      const int64_t n = 37, k = 10;
      const Tensor logits = random({n, k}, 40, DType::f64, -5, 5).astype(c);
      std::vector<int64_t> lab;
      for (int64_t i = 0; i < n; ++i) lab.push_back((i * 7) % k);
      const Tensor labels = sparse ? Tensor::from_vector(lab, {n})
                                   : ops::softmax(random({n, k}, 41, c), -1);
      auto fwd = [&](Device dev) {
        return ops::CrossEntropyFwdProblem{logits.to(dev), labels.to(dev), sparse,
                                           zeros({n}, {.dtype = c, .device = dev}),
                                           zeros({n}, {.dtype = c, .device = dev}),
                                           zeros({n}, {.dtype = c, .device = dev})};
      };
      ops::CrossEntropyFwdProblem fc = fwd(Device::cpu()), fg = fwd(kGpu);
      run_ref(fc);
      run_cuda(fg);
      EXPECT_TRUE(gpu_close(fg.loss, fc.loss, c, 2.0)) << dtype_name(c) << " sparse " << sparse;
      EXPECT_TRUE(gpu_close(fg.row_max, fc.row_max, c));
      EXPECT_TRUE(gpu_close(fg.row_logsum, fc.row_logsum, c, 2.0));
      for (int64_t gn : {int64_t{1}, n}) {
        const Tensor g = random({gn}, 42, c);
        auto bwd = [&](Device dev) {
          return ops::CrossEntropyBwdProblem{logits.to(dev), labels.to(dev), sparse,
                                             fc.row_max.to(dev), fc.row_logsum.to(dev), g.to(dev),
                                             1.0 / n, zeros({n, k}, {.dtype = c, .device = dev})};
        };
        ops::CrossEntropyBwdProblem bc = bwd(Device::cpu()), bg = bwd(kGpu);
        run_ref(bc);
        run_cuda(bg);
        EXPECT_TRUE(gpu_close(bg.dlogits, bc.dlogits, c, 2.0)) << dtype_name(c) << " g " << gn;
      }
    }
}

TEST(CudaEmbedding, ForwardGathersAndBackwardSumsRepeatedRowsInOrder) {
  for (DType d : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor w = random({11, 24}, 50).astype(d);
    const Tensor idx = Tensor::from_vector<int64_t>({3, 0, 10, 3, 3, 7, 0}, {7});
    ops::EmbeddingFwdProblem fc{w, idx, zeros({7, 24}, {.dtype = d})};
    ops::EmbeddingFwdProblem fg{gpu(w), gpu(idx), zeros({7, 24}, {.dtype = d, .device = kGpu})};
    run_ref(fc);
    run_cuda(fg);
    EXPECT_TRUE(gpu_close(fg.out, fc.out, d, 0.0));  // a gather is exact
    const Tensor g = random({7, 24}, 51).astype(d);
    const DType c = acc_dtype(d);
    ops::EmbeddingBwdProblem bc{g, idx, zeros({11, 24}, {.dtype = c})};
    ops::EmbeddingBwdProblem bg{gpu(g), gpu(idx), zeros({11, 24}, {.dtype = c, .device = kGpu})};
    run_ref(bc);
    run_cuda(bg);
    EXPECT_TRUE(gpu_close(bg.dweight, bc.dweight, c, 0.0));  // same additions, same order
  }
}

// A plan reducing `axes` of x (ops/reduce.cpp's plan_reduce, spelled out).
ops::ReducePlan plan_for(const Tensor& x, const std::vector<int64_t>& axes) {
  ops::ReducePlan p;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool red = std::find(axes.begin(), axes.end(), d) != axes.end();
    const size_t i = static_cast<size_t>(d);
    if (red) {
      p.axes.push_back(d);
      p.red_sizes.push_back(x.shape()[i]);
      p.red_strides.push_back(x.strides()[i]);
      p.red_count *= x.shape()[i];
    } else {
      p.kept_sizes.push_back(x.shape()[i]);
      p.kept_strides.push_back(x.strides()[i]);
      p.out_shape.push_back(x.shape()[i]);
    }
  }
  return p;
}

TEST(CudaReduce, SumOverAnyAxesMatchesTheReference) {
  for (DType d : kFloats) {
    const Tensor x = random({6, 50, 9}, 60).astype(d).permute({0, 2, 1});  // strided [6, 9, 50]
    for (const auto& axes : std::vector<std::vector<int64_t>>{{2}, {0, 2}, {1}, {0, 1, 2}}) {
      const ops::ReducePlan plan = plan_for(x, axes);
      ops::ReduceSumProblem cpu{x, zeros(plan.out_shape, {.dtype = d}), plan, 0.5};
      const Tensor xg = gpu(x.permute({0, 2, 1})).permute({0, 2, 1});  // the same strides
      ops::ReduceSumProblem dev{xg, zeros(plan.out_shape, {.dtype = d, .device = kGpu}), plan_for(xg, axes), 0.5};
      run_ref(cpu);
      run_cuda(dev);
      EXPECT_TRUE(gpu_close(dev.out, cpu.out, d, 4.0)) << dtype_name(d) << " axes " << axes.size();
    }
  }
  // A long reduction: one block sums 300000 elements (the shared-memory tree).
  const Tensor big = random({300000}, 61, DType::f32);
  const ops::ReducePlan plan = plan_for(big, {0});
  ops::ReduceSumProblem cpu{big, zeros({}, {}), plan, 1.0};
  ops::ReduceSumProblem dev{gpu(big), zeros({}, {.device = kGpu}), plan, 1.0};
  run_ref(cpu);
  run_cuda(dev);
  EXPECT_NEAR(dev.out.to(Device::cpu()).item(), cpu.out.item(), 1e-3);
}

TEST(CudaLoss, NllAndMseForwardAndBackwardMatchTheReferenceBitForBit) {
  for (DType c : {DType::f32, DType::f64}) {
    const int64_t n = 37, k = 10;
    const Tensor lp = random({n, k}, 70, c, -5, 0);
    std::vector<int64_t> lab;
    for (int64_t i = 0; i < n; ++i) lab.push_back((i * 7) % k);
    const Tensor labels = Tensor::from_vector(lab, {n});
    ops::NllFwdProblem nc{lp, labels, zeros({n}, {.dtype = c})};
    ops::NllFwdProblem ng{gpu(lp), gpu(labels), zeros({n}, {.dtype = c, .device = kGpu})};
    run_ref(nc);
    run_cuda(ng);
    EXPECT_TRUE(gpu_close(ng.loss, nc.loss, c, 0.0)) << dtype_name(c);
    const Tensor p = random({5, 13}, 72, c), t = random({5, 13}, 73, c);
    ops::MseFwdProblem mc{p, t, zeros({5, 13}, {.dtype = c})};
    ops::MseFwdProblem mg{gpu(p), gpu(t), zeros({5, 13}, {.dtype = c, .device = kGpu})};
    run_ref(mc);
    run_cuda(mg);
    EXPECT_TRUE(gpu_close(mg.loss, mc.loss, c, 0.0)) << dtype_name(c);
    for (int64_t gn : {int64_t{1}, n}) {
      const Tensor g = random({gn}, 71, c);
      ops::NllBwdProblem bc{labels, g, 1.0 / n, zeros({n, k}, {.dtype = c})};
      ops::NllBwdProblem bg{gpu(labels), gpu(g), 1.0 / n, full({n, k}, 5.0, {.dtype = c, .device = kGpu})};
      run_ref(bc);
      run_cuda(bg);  // every element written: the 5s are overwritten
      EXPECT_TRUE(gpu_close(bg.dlog_probs, bc.dlog_probs, c, 0.0)) << dtype_name(c) << " g " << gn;
    }
    for (int64_t gn : {int64_t{1}, int64_t{65}}) {
      const Tensor g = random({gn}, 74, c).reshape(gn == 1 ? Shape{1} : Shape{5, 13});
      ops::MseBwdProblem bc{p, t, g, 1.0 / 65, zeros({5, 13}, {.dtype = c})};
      ops::MseBwdProblem bg{gpu(p), gpu(t), gpu(g), 1.0 / 65, zeros({5, 13}, {.dtype = c, .device = kGpu})};
      run_ref(bc);
      run_cuda(bg);
      EXPECT_TRUE(gpu_close(bg.dpred, bc.dpred, c, 0.0)) << dtype_name(c) << " g " << gn;
    }
  }
}

TEST(CudaLoss, AnNllLabelOutOfRangeGivesANanLossAndNoGradientInsteadOfAReadOutsideTheRow) {
  const Tensor lp = random({3, 4}, 75, DType::f32, -3, 0);
  const Tensor labels = Tensor::from_vector<int64_t>({2, 4, -1}, {3});
  ops::NllFwdProblem f{gpu(lp), gpu(labels), zeros({3}, {.device = kGpu})};
  run_cuda(f);
  const auto loss = f.loss.to(Device::cpu()).to_vector<float>();
  EXPECT_EQ(loss[0], -lp.at({0, 2}));
  EXPECT_TRUE(std::isnan(loss[1]) && std::isnan(loss[2]));
  ops::NllBwdProblem b{gpu(labels), full({1}, 1.0, {.device = kGpu}), 1.0,
                       full({3, 4}, 5.0, {.device = kGpu})};
  run_cuda(b);
  const auto d = b.dlog_probs.to(Device::cpu()).to_vector<float>();
  for (size_t e = 0; e < d.size(); ++e) EXPECT_EQ(d[e], e == 2 ? -1.0f : 0.0f) << e;
}

// Values in steps of 0.25 (ties), NaN at two positions.
Tensor with_ties_and_nans(const Shape& shape, uint64_t seed) {
  std::vector<double> v = random(shape, seed, DType::f64, -2, 2).to_vector<double>();
  for (double& x : v) x = std::floor(x * 4) / 4;
  v[17] = v[205] = std::nan("");
  return Tensor::from_vector(v, shape);
}

TEST(CudaReduce, MaxFindsTheReferencesIndexFirstMaximumAndNanWinningAndScattersItsGradient) {
  for (DType d : kFloats) {
    const Tensor x = with_ties_and_nans({6, 50, 9}, 62).astype(d).permute({0, 2, 1});  // [6, 9, 50]
    for (const auto& axes : std::vector<std::vector<int64_t>>{{2}, {0, 2}, {1}, {0, 1, 2}}) {
      const ops::ReducePlan plan = plan_for(x, axes);
      const Tensor xg = gpu(x.permute({0, 2, 1})).permute({0, 2, 1});  // the same strides
      const ops::ReducePlan plan_g = plan_for(xg, axes);
      ops::ReduceMaxProblem cpu{x, zeros(plan.out_shape, {.dtype = d}),
                                zeros(plan.out_shape, {.dtype = DType::i64}), plan};
      ops::ReduceMaxProblem dev{xg, zeros(plan.out_shape, {.dtype = d, .device = kGpu}),
                                zeros(plan.out_shape, {.dtype = DType::i64, .device = kGpu}), plan_g};
      run_ref(cpu);
      run_cuda(dev);
      EXPECT_EQ(dev.index.to(Device::cpu()).to_vector<int64_t>(), cpu.index.to_vector<int64_t>())
          << dtype_name(d) << " axes " << axes.size();
      EXPECT_TRUE(gpu_close(dev.values, cpu.values, d, 0.0)) << dtype_name(d);
      const Tensor g = random(plan.out_shape, 63).astype(d);
      ops::ReduceMaxBwdProblem bc{g, cpu.index, plan, zeros(x.shape(), {.dtype = d})};
      ops::ReduceMaxBwdProblem bg{gpu(g), dev.index, plan_g,
                                  zeros(x.shape(), {.dtype = d, .device = kGpu})};
      run_ref(bc);
      run_cuda(bg);
      EXPECT_TRUE(gpu_close(bg.gx, bc.gx, d, 0.0)) << dtype_name(d) << " axes " << axes.size();
    }
  }
  // One block scans 300000 elements: the maximum's first occurrence is late, a tie after it.
  std::vector<float> big(300000, 0.5f);
  big[123457] = big[299999] = 2.0f;
  const Tensor b = Tensor::from_vector(big, {300000});
  const ops::ReducePlan plan = plan_for(b, {0});
  ops::ReduceMaxProblem dev{gpu(b), Tensor(), zeros({}, {.dtype = DType::i64, .device = kGpu}), plan};
  run_cuda(dev);  // argmax: no values tensor
  EXPECT_EQ(dev.index.to(Device::cpu()).to_vector<int64_t>(), std::vector<int64_t>{123457});
}

}  // namespace
}  // namespace mixprec
