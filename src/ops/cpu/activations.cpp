// Row kernels for the activations whose scalar formulas call libm (gelu's erf and tanh forms and
// their gradients; erf and exp themselves): f32 rows in, f32 rows out, on the vector math of
// simd.h. The elementwise engine (cpu/elementwise.h) hands them its chunks, already widened from
// any dtype and layout, and rounds what they return once to the output dtype, so these see only
// dense f32. The three ISAs share one source (simd_math.inc): the same bits on every machine.
// vector_rows is the pointwise kernel that runs them (f32 compute: every operand and the output
// f32, f16 or bf16); f64 problems keep the scalar formulas of cpu::pointwise.
#include "ops/cpu/simd.h"

#include "mixprec/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

namespace mixprec::ops::cpu {
namespace {

template <simd::Activation act>
void rows_on(simd::Isa isa, const float* a, const float* b, float* out, int64_t n) {
  switch (isa) {
    case simd::Isa::avx512: return simd::avx512::activation_rows<act>(a, b, out, n);
    case simd::Isa::avx2: return simd::avx2::activation_rows<act>(a, b, out, n);
    case simd::Isa::scalar: return simd::scalar::activation_rows<act>(a, b, out, n);
  }
}

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

}  // namespace

std::string vector_rows_declines(const PointwiseProblem& p) {
  if (!row_kernel_of(p.fn)) return "no vector row kernel for this formula";
  if (computes_in_f64(p, p.arity())) return "computes in f64";
  return "";
}

void vector_rows(const PointwiseProblem& p) {
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
    default: return std::nullopt;
  }
}

void activation_rows(simd::Activation act, simd::Isa isa, const float* a, const float* b,
                     float* out, int64_t n) {
  using simd::Activation;
  switch (act) {
    case Activation::erf: return rows_on<Activation::erf>(isa, a, nullptr, out, n);
    case Activation::exp: return rows_on<Activation::exp>(isa, a, nullptr, out, n);
    case Activation::gelu_erf: return rows_on<Activation::gelu_erf>(isa, a, nullptr, out, n);
    case Activation::gelu_tanh: return rows_on<Activation::gelu_tanh>(isa, a, nullptr, out, n);
    case Activation::gelu_erf_grad: return rows_on<Activation::gelu_erf_grad>(isa, a, b, out, n);
    case Activation::gelu_tanh_grad: return rows_on<Activation::gelu_tanh_grad>(isa, a, b, out, n);
  }
  MIXPREC_ASSERT(false, "activation_rows: unknown activation ", static_cast<int>(act));
}

}  // namespace mixprec::ops::cpu
