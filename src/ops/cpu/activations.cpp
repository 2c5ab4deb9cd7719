// Row kernels for the activations whose scalar formulas call libm (gelu's erf and tanh forms and
// their gradients; erf and exp themselves), and for the arithmetic of two operands: f32 rows in,
// f32 rows out, on the vector math of simd.h. The elementwise engine (cpu/elementwise.h) hands
// them its chunks, already widened from any dtype and layout, and rounds what they return once to
// the output dtype. When every operand and the output share one dtype and one dense layout, the
// rows run straight on the tensors' memory instead: a 16-bit value is widened in a register and
// the result rounded once as it is stored (the same bits as the engine's chunks, without their
// passes through memory; bf16 gelu ran at half the speed of f32 gelu through them). The three
// ISAs share one source (simd_math.inc): the same bits on every machine. vector_rows is the
// pointwise kernel that runs them (f32 compute: every operand and the output f32, f16 or bf16);
// f64 problems keep the scalar formulas of cpu::pointwise.
#include "ops/cpu/simd.h"

#include "mixprec/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

namespace mixprec::ops::cpu {
namespace {

// The elementwise engine's RowFormula for act, on N operands.
template <size_t N> struct ActivationRows {
  static constexpr bool kRows = true;
  simd::Activation act;
  simd::Isa isa;
  void rows(const std::array<const float*, 3>& in, float* out, int64_t n) const {
    activation_rows(act, isa, in[0], N > 1 ? in[1] : nullptr, out, n);
  }
};

template <size_t N> void run_rows(const PointwiseProblem& p, simd::Activation act) {
  std::array<const Tensor*, N> ins;
  for (size_t k = 0; k < N; ++k) ins[k] = &p.in[k];
  run_elementwise<float>(p.out, ins, ActivationRows<N>{act, simd::best_isa()});
}

template <simd::Activation act, class T>
void typed_rows_on(simd::Isa isa, const T* a, const T* b, T* out, int64_t n) {
  switch (isa) {
    case simd::Isa::avx512: return simd::avx512::activation_rows<act>(a, b, out, n);
    case simd::Isa::avx2: return simd::avx2::activation_rows<act>(a, b, out, n);
    case simd::Isa::scalar: return simd::scalar::activation_rows<act>(a, b, out, n);
  }
}

template <class T>
void typed_rows(simd::Activation act, simd::Isa isa, const T* a, const T* b, T* out, int64_t n) {
  using simd::Activation;
  switch (act) {
    case Activation::erf: return typed_rows_on<Activation::erf>(isa, a, b, out, n);
    case Activation::exp: return typed_rows_on<Activation::exp>(isa, a, b, out, n);
    case Activation::gelu_erf: return typed_rows_on<Activation::gelu_erf>(isa, a, b, out, n);
    case Activation::gelu_tanh: return typed_rows_on<Activation::gelu_tanh>(isa, a, b, out, n);
    case Activation::gelu_erf_grad:
      return typed_rows_on<Activation::gelu_erf_grad>(isa, a, b, out, n);
    case Activation::gelu_tanh_grad:
      return typed_rows_on<Activation::gelu_tanh_grad>(isa, a, b, out, n);
    case Activation::add: return typed_rows_on<Activation::add>(isa, a, b, out, n);
    case Activation::sub: return typed_rows_on<Activation::sub>(isa, a, b, out, n);
    case Activation::mul: return typed_rows_on<Activation::mul>(isa, a, b, out, n);
    case Activation::add_relu: return typed_rows_on<Activation::add_relu>(isa, a, b, out, n);
  }
  MIXPREC_ASSERT(false, "activation_rows: unknown activation ", static_cast<int>(act));
}

// Every operand and the output: one dtype, one dense layout (the same strides), no broadcasting.
bool one_dense_layout(const PointwiseProblem& p) {
  const Tensor& o = p.out;
  if (!is_dense(o.shape(), o.strides())) return false;
  for (int k = 0; k < p.arity(); ++k) {
    const Tensor& t = p.in[static_cast<size_t>(k)];
    if (t.dtype() != o.dtype() || t.shape() != o.shape()) return false;
    if (t.strides() != o.strides() && !(t.is_contiguous() && o.is_contiguous())) return false;
  }
  return true;
}

// The direct path: rows of 4096 elements split over the threads, each row in the vector code.
template <class T> void run_dense(const PointwiseProblem& p, simd::Activation act, simd::Isa isa) {
  const T* a = static_cast<const T*>(p.in[0].data_ptr());
  const T* b = p.arity() > 1 ? static_cast<const T*>(p.in[1].data_ptr()) : nullptr;
  T* out = static_cast<T*>(p.out.data_ptr());
  const int64_t n = p.out.numel();
  constexpr int64_t kRow = 4096;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < (n + kRow - 1) / kRow; ++c) {
    const int64_t lo = c * kRow, len = std::min(kRow, n - lo);
    typed_rows<T>(act, isa, a + lo, b ? b + lo : nullptr, out + lo, len);
  }
}

}  // namespace

bool vector_rows_direct(const PointwiseProblem& p, simd::Isa isa) {
  const std::optional<simd::Activation> act = row_kernel_of(p.fn);
  if (!act || !one_dense_layout(p)) return false;
  if (verbose_level() > 0) log_elementwise(static_cast<size_t>(p.arity()), p.out, p.out.dtype());
  switch (p.out.dtype()) {
    case DType::f32: run_dense<float>(p, *act, isa); return true;
    case DType::bf16: run_dense<bf16>(p, *act, isa); return true;
    case DType::f16: run_dense<f16>(p, *act, isa); return true;
    default: return false;
  }
}

std::string vector_rows_declines(const PointwiseProblem& p) {
  if (!row_kernel_of(p.fn)) return "no vector row kernel for this formula";
  if (computes_in_f64(p, p.arity())) return "computes in f64";
  return "";
}

void vector_rows(const PointwiseProblem& p) {
  if (vector_rows_direct(p, simd::best_isa())) return;
  const simd::Activation act = *row_kernel_of(p.fn);
  if (p.arity() == 1)
    run_rows<1>(p, act);
  else
    run_rows<2>(p, act);
}

std::optional<simd::Activation> row_kernel_of(PointwiseFn fn) {
  switch (fn) {
    case PointwiseFn::gelu_erf: return simd::Activation::gelu_erf;
    case PointwiseFn::gelu_tanh: return simd::Activation::gelu_tanh;
    case PointwiseFn::gelu_erf_grad: return simd::Activation::gelu_erf_grad;
    case PointwiseFn::gelu_tanh_grad: return simd::Activation::gelu_tanh_grad;
    case PointwiseFn::add: return simd::Activation::add;
    case PointwiseFn::sub: return simd::Activation::sub;
    case PointwiseFn::mul: return simd::Activation::mul;
    case PointwiseFn::add_relu: return simd::Activation::add_relu;
    default: return std::nullopt;
  }
}

void activation_rows(simd::Activation act, simd::Isa isa, const float* a, const float* b,
                     float* out, int64_t n) {
  typed_rows<float>(act, isa, a, b, out, n);
}

}  // namespace mixprec::ops::cpu
