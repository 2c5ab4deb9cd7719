// Warp-level reductions shared by the .cu kernels of ops/cuda/ (rows.cu, attention.cu). Every
// lane of the warp must call them (full mask) and every lane gets the result.
#pragma once

namespace mixprec::ops::cuda {

// The sum of v over the 32 lanes (a butterfly: each lane's additions happen in the same order).
template <class C> __device__ inline C warp_sum(C v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The largest v over the 32 lanes, NaN ignored (fmax); -inf when every lane holds -inf or NaN.
template <class C> __device__ inline C warp_max(C v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace mixprec::ops::cuda
