// Reference matmul (see kernels.h): per batch, b is widened once into a transposed compute-type
// panel [N, K]; each output row then loads its a row and takes N sequential dot products in
// compute_t, adds the bias, applies relu and rounds once into out. Rows are spread over OpenMP
// threads; one thread owns each output element, so the result is thread-count independent.
#include "ops/ref/kernels.h"

#include <algorithm>
#include <vector>

#include "mixprec/convert.h"
#include "mixprec/error.h"

namespace mixprec::ops {

namespace {

// Offset (in elements) of batch `bi` of t, whose batch dims are out's or 1.
int64_t batch_offset(const Tensor& t, const Shape& out_shape, int64_t bi) {
  int64_t off = 0;
  const int64_t nb = static_cast<int64_t>(out_shape.size()) - 2;
  for (int64_t d = nb - 1; d >= 0; --d) {
    const size_t i = static_cast<size_t>(d);
    const int64_t idx = bi % out_shape[i];
    bi /= out_shape[i];
    if (t.shape()[i] != 1) off += idx * t.strides()[i];
  }
  return off;
}

template <class T> void matmul_typed(const MatmulProblem& p) {
  using C = compute_t<T>;
  constexpr DType cdt = std::is_same_v<C, double> ? DType::f64 : DType::f32;
  const Shape& os = p.out.shape();
  const size_t nd = os.size();
  const int64_t M = os[nd - 2], N = os[nd - 1], K = p.a.shape()[nd - 1];
  const int64_t batches = shape_numel(Shape(os.begin(), os.end() - 2));
  const int64_t sam = p.a.strides()[nd - 2], sak = p.a.strides()[nd - 1];
  const int64_t sbk = p.b.strides()[nd - 2], sbn = p.b.strides()[nd - 1];
  std::vector<C> bias(static_cast<size_t>(N), C(0));
  if (p.bias.defined()) bias = p.bias.to_vector<C>();
  const T* abase = static_cast<const T*>(p.a.data_ptr());
  const T* bbase = static_cast<const T*>(p.b.data_ptr());
  char* obase = static_cast<char*>(p.out.data_ptr());
  const size_t osize = p.out.itemsize();
  const DType odt = p.out.dtype();
  std::vector<C> panel(static_cast<size_t>(N * K));  // b^T of one batch, widened
  for (int64_t bi = 0; bi < batches; ++bi) {
    const T* a = abase + batch_offset(p.a, os, bi);
    const T* b = bbase + batch_offset(p.b, os, bi);
#pragma omp parallel for schedule(static) if (N * K > 16384)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        panel[static_cast<size_t>(n * K + k)] = static_cast<C>(load(b[k * sbk + n * sbn]));
#pragma omp parallel if (M * N * K > 32768)
    {
      std::vector<C> arow(static_cast<size_t>(K)), orow(static_cast<size_t>(N));
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < K; ++k)
          arow[static_cast<size_t>(k)] = static_cast<C>(load(a[m * sam + k * sak]));
        for (int64_t n = 0; n < N; ++n) {
          const C* col = panel.data() + n * K;
          C acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += arow[static_cast<size_t>(k)] * col[k];
          acc += bias[static_cast<size_t>(n)];
          if (p.relu && acc <= 0) acc = 0;  // NaN propagates, as ops::relu
          orow[static_cast<size_t>(n)] = acc;
        }
        convert_row(orow.data(), cdt, obase + static_cast<size_t>((bi * M + m) * N) * osize, odt,
                    N);
      }
    }
  }
}

}  // namespace

namespace ref {

void matmul(const MatmulProblem& p) {
  MIXPREC_ASSERT(p.a.dtype() == p.b.dtype(), "ref::matmul: operand dtypes differ");
  MIXPREC_ASSERT(p.out.is_contiguous(), "ref::matmul: out must be contiguous");
  if (p.out.numel() == 0) return;
  visit_float(p.a.dtype(), [&]<class T>() { matmul_typed<T>(p); });
}

}  // namespace ref

}  // namespace mixprec::ops
