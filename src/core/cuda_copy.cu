// The strided copy-convert kernel behind contiguous(), astype(), copy_() and fill_() for tensors
// on a CUDA device (strided_copy's contract: same shape, any dtypes, one rounding).
#include "cuda_dtype.cuh"
#include "cuda_stream.h"
#include "mixprec/error.h"
#include "strided_copy.h"

namespace mixprec::cuda_detail {
namespace {

struct CopyArgs {
  int nd;
  int64_t sizes[kMaxDims];
  int64_t ss[kMaxDims], ds[kMaxDims];  // element strides of src and dst per merged dim
  const void* src;                      // element 0 (offset applied)
  void* dst;
  DType sdt, ddt;
  int64_t n;
};

// Grid: grid_for(n, 256) blocks of 256 threads, a grid-stride loop over the n elements in
// row-major order of the merged index space. Each thread decomposes its linear index into
// per-dim indices (innermost first) and reads/writes one element through each side's strides:
// consecutive threads touch consecutive elements of the innermost dim, so accesses coalesce when
// that dim has unit stride. Invariant: every dst element is written by exactly one thread (dst
// never overlaps itself: the op allocates it or copy_ writes a non-aliasing view). C is int64_t
// when both dtypes are integers (exact), else double (exact for every float dtype; one rounding
// into the destination).
template <class C> __global__ void copy_kernel(CopyArgs a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rem = i, so = 0, dof = 0;
    for (int d = a.nd - 1; d >= 0; --d) {
      const int64_t idx = rem % a.sizes[d];
      rem /= a.sizes[d];
      so += idx * a.ss[d];
      dof += idx * a.ds[d];
    }
    store_elem<C>(a.dst, a.ddt, dof, load_elem<C>(a.src, a.sdt, so));
  }
}

}  // namespace

void strided_copy_kernel(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (n == 0) return;
  cudaStream_t s = activate(dst.device());
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    MIXPREC_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                       cudaMemcpyDeviceToDevice, s));
    return;
  }
  const detail::CopyLayout l = detail::coalesce(src.shape(), src.strides(), dst.strides());
  MIXPREC_CHECK(l.sizes.size() <= static_cast<size_t>(kMaxDims), "copy on ", dst.device().str(),
                ": at most ", kMaxDims, " non-mergeable dims, got ", l.sizes.size());
  CopyArgs a{};
  a.nd = static_cast<int>(l.sizes.size());
  for (int d = 0; d < a.nd; ++d) {
    a.sizes[d] = l.sizes[static_cast<size_t>(d)];
    a.ss[d] = l.src[static_cast<size_t>(d)];
    a.ds[d] = l.dst[static_cast<size_t>(d)];
  }
  a.src = src.data_ptr();
  a.dst = dst.data_ptr();
  a.sdt = src.dtype();
  a.ddt = dst.dtype();
  a.n = n;
  const bool ints = !is_floating(a.sdt) && !is_floating(a.ddt);
  if (ints)
    copy_kernel<int64_t><<<grid_for(n, 256), 256, 0, s>>>(a);
  else
    copy_kernel<double><<<grid_for(n, 256), 256, 0, s>>>(a);
  MIXPREC_CUDA_LAUNCHED();
}

}  // namespace mixprec::cuda_detail
