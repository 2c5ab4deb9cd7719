// The attention family's problems (ops::scaled_dot_product_attention, ops/attention.cpp).
// Kernels: ref::attention_* (the oracle: the unfused composition of the matmul and softmax
// reference kernels, all in compute_t, each output rounded once) and cpu::flash_attention_*
// (blockwise with online softmax; never holds the [Lq x Lk] probabilities).
// Invariants the op establishes: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], o
// [B, H, Lq, Dv] share one float dtype and have unit stride in their last dim (other strides are
// free); lse [B, H, Lq] is contiguous f32 (f64 for f64); Lk, D, Dv >= 1; mask is undefined or a
// u8 (bool) view broadcast to [B, H, Lq, Lk] (stride 0 on broadcast dims), nonzero = attend.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "mixprec/tensor.h"

namespace mixprec::ops {

// What the attention kernels share. Causal masking is aligned to the bottom right: query i
// attends to key j when j <= i + (Lk - Lq) (so Lq = 1 with a KV cache sees every key). A row with
// no key left to attend to has no distribution: its output and log-sum-exp are NaN, and in the
// backward its gradient row of q, and the gradients of k and v for its whole (b, h), are NaN, as
// the unfused composition gives (softmax_problem.h: a row without a finite max is NaN).
struct AttentionParams {
  double scale = 1.0;  // multiplies q.k (1 / sqrt(D) by default, chosen by the op)
  bool causal = false;
  Tensor mask;  // see the top of this file
  // The dtype the softmax runs in. f32 (f64 for f64 inputs) always, unless a custom list put
  // attention_softmax on its white list: then f16 or bf16, rounding the scores, the
  // probabilities and their gradients to it (the overflow the seed's pitfall is about).
  DType softmax_dtype = DType::f32;
  // When softmax_dtype is 16-bit, kernels add here how many values rounded to it came out
  // non-finite (forward: scores; backward: dP and dS), so the op can name the phase.
  int64_t* softmax_nonfinite = nullptr;
};

// o = softmax(scale * q k^T, masked) v; lse = the log-sum-exp of each row of the masked,
// scaled scores (what the backward needs to recompute the probabilities).
struct AttentionFwdProblem {
  Tensor q, k, v, o, lse;
  AttentionParams params;
  Device device() const { return q.device(); }
  std::string describe() const;
};

// dq, dk, dv from the forward's inputs, its output o, its lse and the output gradient dout.
struct AttentionBwdProblem {
  Tensor q, k, v, o, lse, dout, dq, dk, dv;
  AttentionParams params;
  Device device() const { return q.device(); }
  std::string describe() const;
};

// Query-key pairs that take part (the causal triangle counted exactly), for the FLOP counts.
inline int64_t attention_pairs(int64_t lq, int64_t lk, bool causal) {
  if (!causal) return lq * lk;
  int64_t n = 0;
  for (int64_t i = 0; i < lq; ++i) n += std::clamp<int64_t>(i + lk - lq + 1, 0, lk);
  return n;
}

// The kernel profile's work of a call (ops/dispatch.h, profile_work): the forward's products
// 2 B H pairs (D + Dv) (what the op counts), the backward's twice that (as the bench's floor
// counts every op's backward); every tensor the kernel reads and writes.
inline double attention_flops(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  return 2.0 * static_cast<double>(q.size(0) * q.size(1)) *
         static_cast<double>(attention_pairs(q.size(2), k.size(2), causal)) *
         static_cast<double>(q.size(3) + v.size(3));
}
inline double profile_flops(const AttentionFwdProblem& p) {
  return attention_flops(p.q, p.k, p.v, p.params.causal);
}
inline double profile_flops(const AttentionBwdProblem& p) {
  return 2 * attention_flops(p.q, p.k, p.v, p.params.causal);
}
inline auto profile_tensors(const AttentionFwdProblem& p) {
  return std::array<const Tensor*, 5>{&p.q, &p.k, &p.v, &p.o, &p.lse};
}
inline auto profile_tensors(const AttentionBwdProblem& p) {
  return std::array<const Tensor*, 9>{&p.q, &p.k, &p.v, &p.o, &p.lse, &p.dout, &p.dq, &p.dk, &p.dv};
}

}  // namespace mixprec::ops
