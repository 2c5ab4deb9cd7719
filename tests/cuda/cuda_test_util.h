// Helpers for the CUDA kernel tests: run a problem with the reference kernel on the CPU and with
// the CUDA kernel dispatch would choose on the GPU, on the same inputs, and compare with the
// tolerance table (test_util.h) or the GEMM error model (ops/gemm_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include "op_test_util.h"
#include "ops/dispatch.h"
#include "ops/kernel_test_util.h"

namespace mixprec::testing {

inline const Device kGpu = Device::cuda(0);

// t on the GPU (undefined stays undefined).
inline Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : t; }
// A fresh tensor like t (shape, dtype) on `device`, zero-filled (outputs that kernels add into
// must start at zero; the others are overwritten).
inline Tensor zeros_like_on(const Tensor& t, Device device) {
  return t.defined() ? zeros(t.shape(), {.dtype = t.dtype(), .device = device}) : t;
}

// Runs p with the first CUDA kernel that accepts it; fails the test when none does.
template <class P> void run_cuda(const P& p) {
  for (const ops::Impl<P>& k : ops::kernels<P>())
    if (k.device == Device::Type::cuda && k.declines(p).empty()) {
      k.run(p);
      cuda::synchronize(kGpu);
      return;
    }
  ADD_FAILURE() << "no CUDA kernel accepts " << p.describe();
}

// Why each CUDA kernel declines p, joined ("" when one accepts it).
template <class P> std::string cuda_declines(const P& p) {
  std::string why;
  for (const ops::Impl<P>& k : ops::kernels<P>()) {
    if (k.device != Device::Type::cuda) continue;
    const std::string r = k.declines(p);
    if (r.empty()) return {};
    why += std::string(k.name) + ": " + r + "; ";
  }
  return why;
}

template <class P> void run_ref(const P& p) { kernel_named<P>("ref").run(p); }

// GPU result t against the CPU reference r, with the tolerance of dtype d scaled by `scale`.
inline ::testing::AssertionResult gpu_close(const Tensor& t, const Tensor& r, DType d,
                                            double scale = 1.0) {
  Tolerance tol = tolerance_for(d);
  tol.rel *= scale;
  tol.abs *= scale;
  return all_close(t.to(Device::cpu()), r, tol);
}

}  // namespace mixprec::testing
