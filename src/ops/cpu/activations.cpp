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

#include <mutex>
#include <vector>

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

// n elements as rows of 4096 split over the threads: row(lo, len) for each.
template <class F> void over_rows(int64_t n, const F& row) {
  constexpr int64_t kRow = 4096;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < (n + kRow - 1) / kRow; ++c) {
    const int64_t lo = c * kRow;
    row(lo, std::min(kRow, n - lo));
  }
}

// The direct path: each row in the vector code.
template <class T> void run_dense(const PointwiseProblem& p, simd::Activation act, simd::Isa isa) {
  const T* a = static_cast<const T*>(p.in[0].data_ptr());
  const T* b = p.arity() > 1 ? static_cast<const T*>(p.in[1].data_ptr()) : nullptr;
  T* out = static_cast<T*>(p.out.data_ptr());
  over_rows(p.out.numel(), [&](int64_t lo, int64_t len) {
    typed_rows<T>(act, isa, a + lo, b ? b + lo : nullptr, out + lo, len);
  });
}

// ---------------------------------------------------------------- table16

bool is_grad(simd::Activation act) {
  return act == simd::Activation::gelu_erf_grad || act == simd::Activation::gelu_tanh_grad;
}

// tab[bits] over all 65536 values of T: the forward's result widened (exact), or a gradient's
// factor d(x), as the f32 row kernel gives 1 * d(x) for x widened from T (exact: the T rows
// widen x the same way before the same arithmetic, and 1 * d is d, NaN payload included).
template <class T> std::vector<float> make_table(simd::Activation act) {
  constexpr int64_t kN = 65536;
  std::vector<T> x(kN);
  for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)].bits = static_cast<uint16_t>(i);
  std::vector<float> tab(kN);
  if (is_grad(act)) {
    std::vector<float> xf(kN), one(kN, 1.0f);
    for (int64_t i = 0; i < kN; ++i)
      xf[static_cast<size_t>(i)] = mixprec::load(x[static_cast<size_t>(i)]);
    typed_rows<float>(act, simd::best_isa(), one.data(), xf.data(), tab.data(), kN);
  } else {
    std::vector<T> y(kN);
    typed_rows<T>(act, simd::best_isa(), x.data(), nullptr, y.data(), kN);
    for (int64_t i = 0; i < kN; ++i)
      tab[static_cast<size_t>(i)] = mixprec::load(y[static_cast<size_t>(i)]);
  }
  return tab;
}

// The table of (act, T), made on first use (256 KB; at most the four forms of two dtypes).
template <class T> const float* table_of(simd::Activation act) {
  static constexpr simd::Activation kForms[] = {
      simd::Activation::gelu_erf, simd::Activation::gelu_tanh, simd::Activation::gelu_erf_grad,
      simd::Activation::gelu_tanh_grad};
  static std::once_flag once[4];
  static std::vector<float> tables[4];
  for (size_t f = 0; f < 4; ++f)
    if (kForms[f] == act) {
      std::call_once(once[f], [&] { tables[f] = make_table<T>(act); });
      return tables[f].data();
    }
  MIXPREC_ASSERT(false, "table16: not one of gelu's forms");
  return nullptr;
}

template <bool kGrad, class T>
void table_rows_on(simd::Isa isa, const T* x, const T* g, T* out, int64_t n, const float* tab) {
  switch (isa) {
    case simd::Isa::avx512: return simd::avx512::table_rows<kGrad>(x, g, out, n, tab);
    case simd::Isa::avx2: return simd::avx2::table_rows<kGrad>(x, g, out, n, tab);
    case simd::Isa::scalar: return simd::scalar::table_rows<kGrad>(x, g, out, n, tab);
  }
}

// The rows as run_dense's. A gradient's operands are (g, x).
template <class T> void run_table(const PointwiseProblem& p, simd::Activation act, simd::Isa isa) {
  const float* tab = table_of<T>(act);
  const bool grad = is_grad(act);
  const T* x = static_cast<const T*>(p.in[grad ? 1 : 0].data_ptr());
  const T* g = grad ? static_cast<const T*>(p.in[0].data_ptr()) : nullptr;
  T* out = static_cast<T*>(p.out.data_ptr());
  over_rows(p.out.numel(), [&](int64_t lo, int64_t len) {
    if (grad)
      table_rows_on<true>(isa, x + lo, g + lo, out + lo, len, tab);
    else
      table_rows_on<false>(isa, x + lo, static_cast<const T*>(nullptr), out + lo, len, tab);
  });
}

}  // namespace

std::string table16_declines(const PointwiseProblem& p) {
  if (simd::best_isa() == simd::Isa::scalar) return "needs AVX2's gathers";
  switch (p.fn) {
    case PointwiseFn::gelu_erf:
    case PointwiseFn::gelu_tanh:
    case PointwiseFn::gelu_erf_grad:
    case PointwiseFn::gelu_tanh_grad: break;
    default: return "not one of gelu's forms";
  }
  if (!is_low_precision(p.out.dtype())) return "not bf16 or f16 (a table holds every 16-bit input)";
  if (!one_dense_layout(p)) return "operands not all in the output's dtype and dense layout";
  return "";
}

void table16_on(const PointwiseProblem& p, simd::Isa isa) {
  const simd::Activation act = *row_kernel_of(p.fn);
  if (p.out.dtype() == DType::bf16)
    run_table<bf16>(p, act, isa);
  else
    run_table<f16>(p, act, isa);
}

void table16(const PointwiseProblem& p) { table16_on(p, simd::best_isa()); }

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
