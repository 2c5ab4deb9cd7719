// matmul and linear, forward and backward side by side. Both reduce to MatmulProblem
// (matmul_problem.h) and dispatch it; gemm_into is the same dispatch for other kernels, and
// sum_rows the column sum that kernels and linear's backward share (the bias gradient).
// Transposed operands (W^T in linear, b^T and a^T in backward) are strided views, never copies.
// Accumulation is f32 for f32/f16/bf16 (f64 for f64); linear's weight and bias gradients are
// produced directly in acc_dtype (f32 for bf16/f16), unrounded, for the fp32 master weights.
#include <immintrin.h>

#include <algorithm>

#include "mixprec/convert.h"
#include "mixprec/cpu_features.h"
#include "ops/dispatch.h"
#include "ops/matmul_problem.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

std::string MatmulProblem::describe() const {
  return desc_with_strides(a) + " x " + desc_with_strides(b) +
         (bias.defined() ? " + " + desc_with_strides(bias) : "") + " -> " + desc_with_strides(out) +
         (relu ? " relu" : "");
}

namespace {

// A matrix operand every implementation takes: one of the two matrix dims has unit stride and
// the other steps over it (row- or column-major), batch dims have positive strides. Anything
// else (a broadcast stride 0, overlapping rows) is packed first.
Tensor as_operand(const Tensor& t) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  const size_t r = s.size() - 2, c = s.size() - 1;
  const bool row_major = (s[c] == 1 || st[c] == 1) && (s[r] == 1 || st[r] >= s[c]);
  const bool col_major = (s[r] == 1 || st[r] == 1) && (s[c] == 1 || st[c] >= s[r]);
  bool ok = row_major || col_major;
  for (size_t d = 0; d < r; ++d) ok = ok && (s[d] == 1 || st[d] > 0);
  return ok ? t : t.contiguous();
}

// out = relu?(a @ b + bias) for a, b of equal rank >= 2 whose batch dims broadcast.
Tensor run_matmul(OpId op, std::string_view phase, const Tensor& a, const Tensor& b,
                  const Tensor& bias, bool relu, DType out_dtype) {
  const size_t nd = a.shape().size();
  MIXPREC_ASSERT(nd >= 2 && b.shape().size() == nd, "run_matmul: ranks ", nd, " and ", b.dim());
  Shape out_shape(nd);
  for (size_t d = 0; d + 2 < nd; ++d)
    out_shape[d] = a.shape()[d] == 1 ? b.shape()[d] : a.shape()[d];
  out_shape[nd - 2] = a.shape()[nd - 2];
  out_shape[nd - 1] = b.shape()[nd - 1];
  MatmulProblem p{as_operand(a), as_operand(b), bias,
                  Tensor::empty(out_shape, {.dtype = out_dtype, .device = a.device()}), relu};
  dispatch(op, phase, p);
  return p.out;
}

// True if t's batch dims and its row dim merge into one dim (a [B.., M, K] -> [B..*M, K] view).
bool rows_merge(const Tensor& t) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  const size_t r = s.size() - 2;
  int64_t expect = st[r] * s[r];
  for (size_t d = r; d-- > 0;) {
    if (s[d] == 1) continue;
    if (st[d] != expect) return false;
    expect = st[d] * s[d];
  }
  return true;
}

int64_t batch_numel(const Shape& s) { return shape_numel(Shape(s.begin(), s.end() - 2)); }

// [B.., M, K] -> [B..*M, K] (a view; rows_merge(t) must hold).
Tensor merge_rows(const Tensor& t) {
  const Shape& s = t.shape();
  return t.view({shape_numel(s) / s.back(), s.back()});
}

// a @ b with a, b of equal rank; when b has no batch (all 1) a's rows merge into one GEMM.
Tensor mm(OpId op, std::string_view phase, const Tensor& a, const Tensor& b, DType out_dtype) {
  const size_t nd = a.shape().size();
  if (nd > 2 && batch_numel(b.shape()) == 1 && batch_numel(a.shape()) > 1 && rows_merge(a)) {
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.shape().back());
    const Tensor b2 = b.view({b.shape()[nd - 2], b.shape()[nd - 1]});
    return run_matmul(op, phase, merge_rows(a), b2, {}, false, out_dtype).view(out_shape);
  }
  return run_matmul(op, phase, a, b, {}, false, out_dtype);
}

Tensor transposed(const Tensor& t) { return t.transpose(-2, -1); }

struct MatmulPlan {
  Shape a_full, b_full, out_full;  // rank nb + 2; 1-D operands promoted, batch padded with 1
  Shape out_shape;                 // numpy.matmul's result shape (promoted dims removed)
};

MatmulPlan plan_matmul(const Shape& a, const Shape& b) {
  MIXPREC_CHECK(!a.empty() && !b.empty(), "matmul: expected operands with at least 1 dim, got ",
                shape_str(a), " and ", shape_str(b), Hint{"use mul for scalars"});
  const Shape A = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape B = b.size() == 1 ? Shape{b[0], 1} : b;
  const int64_t K = A.back(), Kb = B[B.size() - 2];
  MIXPREC_CHECK(K == Kb, "matmul: the inner dims do not match: ", shape_str(a), " x ", shape_str(b),
                " (", K, " vs ", Kb, ")",
                Hint{"a's last dim must equal b's second-to-last dim (b's only dim if it is 1-D)"});
  const Shape batch =
      broadcast_shapes(Shape(A.begin(), A.end() - 2), Shape(B.begin(), B.end() - 2), "matmul");
  MatmulPlan pl;
  auto pad = [&](const Shape& s) {
    Shape full(batch.size() + 2 - s.size(), 1);
    full.insert(full.end(), s.begin(), s.end());
    return full;
  };
  pl.a_full = pad(A);
  pl.b_full = pad(B);
  pl.out_full = batch;
  pl.out_full.push_back(A[A.size() - 2]);
  pl.out_full.push_back(B.back());
  pl.out_shape = batch;
  if (a.size() > 1) pl.out_shape.push_back(A[A.size() - 2]);
  if (b.size() > 1) pl.out_shape.push_back(B.back());
  return pl;
}

// The gradient for an operand whose full shape is `full`: computed in acc dtype when it must
// still be summed over broadcast batch dims, then summed and shaped like the operand.
template <class F> Tensor operand_grad(const MatmulPlan& pl, const Shape& full, const Shape& shape,
                                       DType dt, F product) {
  const bool reduce =
      Shape(full.begin(), full.end() - 2) != Shape(pl.out_full.begin(), pl.out_full.end() - 2);
  Tensor g = product(reduce ? acc_dtype(dt) : dt);
  if (reduce) g = reduce_to_shape(g, full);
  return g.reshape(shape);
}

}  // namespace

// ---------------------------------------------------------------- matmul

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  Prepared p = autocast_inputs(OpId::matmul, {a0, b0});
  const Tensor& a = p.in[0];
  const Tensor& b = p.in[1];
  check_floating("matmul", a, "first operand");
  check_floating("matmul", b, "second operand");
  check_same_device("matmul", {&a, &b});
  const DType dt = promote(a.dtype(), b.dtype());
  const MatmulPlan pl = plan_matmul(a.shape(), b.shape());
  const Tensor av = amp_cast(a.detach(), dt).reshape(pl.a_full);
  const Tensor bv = amp_cast(b.detach(), dt).reshape(pl.b_full);
  Tensor out = mm(OpId::matmul, "forward", av, bv, dt).reshape(pl.out_shape);
  if (autograd::needs_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    SavedTensor sa(av), sb(bv);
    const Shape ash = a.shape(), bsh = b.shape();
    record(OpId::matmul, {a, b}, out, [=](const std::vector<Tensor>& g) {
      const Tensor gf = g[0].reshape(pl.out_full);
      const Tensor A = sa.unpack("matmul"), B = sb.unpack("matmul");
      Tensor da, db;
      if (ga)  // da = g b^T
        da = operand_grad(pl, pl.a_full, ash, dt, [&](DType od) {
          return mm(OpId::matmul, "backward_a", gf, transposed(B), od);
        });
      if (gb) {  // db = a^T g; with b unbatched and a's rows mergeable that is one GEMM
        if (pl.a_full.size() > 2 && batch_numel(pl.b_full) == 1 && rows_merge(A) && rows_merge(gf))
          db = run_matmul(OpId::matmul, "backward_b", transposed(merge_rows(A)), merge_rows(gf), {},
                          false, dt)
                   .reshape(bsh);
        else
          db = operand_grad(pl, pl.b_full, bsh, dt, [&](DType od) {
            return run_matmul(OpId::matmul, "backward_b", transposed(A), gf, {}, false, od);
          });
      }
      return std::vector<Tensor>{da, db};
    });
  }
  return finish(OpId::matmul, p, out, dt, 2 * out.numel() * a.size(-1));
}

// ---------------------------------------------------------------- linear

namespace {

void check_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_floating("linear", x, "input");
  check_floating("linear", w, "weight");
  if (bias.defined()) check_floating("linear", bias, "bias");
  check_same_device("linear", {&x, &w, &bias});
  MIXPREC_CHECK(w.dim() == 2,
                "linear: expected a weight of shape [out_features, in_features], got ",
                shape_str(w.shape()));
  MIXPREC_CHECK(x.dim() >= 1 && x.shape().back() == w.size(1), "linear: the input ",
                shape_str(x.shape()), " does not end in in_features = ", w.size(1), " (weight ",
                shape_str(w.shape()), ")", Hint{"the weight is [out_features, in_features]"});
  if (bias.defined())
    MIXPREC_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0),
                  "linear: expected a bias of shape [", w.size(0), "], got ",
                  shape_str(bias.shape()));
}

}  // namespace

Tensor linear(const Tensor& x0, const Tensor& w0, const Tensor& bias0, Activation activation) {
  Prepared p = autocast_inputs(OpId::linear, {x0, w0, bias0});
  const Tensor& x = p.in[0];
  const Tensor& w = p.in[1];
  const Tensor& bias = p.in[2];
  check_linear(x, w, bias);
  DType dt = promote(x.dtype(), w.dtype());
  if (bias.defined()) dt = promote(dt, bias.dtype());
  const bool relu = activation == Activation::relu;
  const int64_t in = w.size(1), out_features = w.size(0);
  Shape y_shape(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = shape_numel(y_shape);
  y_shape.push_back(out_features);
  const Tensor x2 = amp_cast(x.detach(), dt).reshape({rows, in});  // a view when x allows
  const Tensor wd = amp_cast(w.detach(), dt);
  const Tensor bd = bias.defined() ? amp_cast(bias.detach(), dt) : Tensor();
  const Tensor y2 = run_matmul(OpId::linear, "forward", x2, wd.transpose(0, 1), bd, relu, dt);
  Tensor y = y2.view(y_shape);
  if (autograd::needs_grad({&x, &w, &bias})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    SavedTensor sx(x2), sw(wd), sy(relu ? y2 : Tensor());
    const Shape x_shape = x.shape();
    record(OpId::linear, {x, w, bias}, y, [=](const std::vector<Tensor>& g) {
      Tensor g2 = g[0].reshape({rows, out_features});
      if (relu) g2 = relu_backward(g2, sy.unpack("linear"));  // the fused relu's gradient
      const DType acc = acc_dtype(dt);
      Tensor dx, dw, db;
      if (gx)
        dx = run_matmul(OpId::linear, "backward_data", g2, sw.unpack("linear"), {}, false, dt)
                 .reshape(x_shape);
      if (gw)
        dw = run_matmul(OpId::linear, "backward_weights", g2.transpose(0, 1), sx.unpack("linear"),
                        {}, false, acc);
      if (gb) {
        db = Tensor::empty({out_features}, {.dtype = acc, .device = g2.device()});
        sum_rows(g2, db);
      }
      return std::vector<Tensor>{dx, dw, db};
    });
  }
  return finish(OpId::linear, p, y, dt, 2 * y.numel() * w.size(-1));
}

void gemm_into(OpId op, std::string_view phase, const Tensor& a, const Tensor& b,
               const Tensor& bias, bool relu, const Tensor& out) {
  MatmulProblem p{as_operand(a), as_operand(b), bias, out, relu};
  // The GEMM inside another kernel takes the best implementation, whatever the caller forced.
  ForceImpl unforced("");
  dispatch(op, phase, p);
}

// Column sums of g [R, C] in its accumulation dtype: blocks of kRows rows x kCols columns, each
// summed in row order into its own partials (16-bit rows widened as they are read: the AVX2 +
// F16C clone converts f16 with vcvtph2ps), then the row blocks added in order. The blocks depend
// on the shape alone, so the bits do not depend on the thread count.
namespace {
constexpr int64_t kSumRows = 1024, kSumCols = 256;

template <class T, class A>
[[gnu::always_inline]] inline void sum_block(const T* gb, int64_t sr, int64_t sc, int64_t r0,
                                             int64_t r1, int64_t c0, int64_t n, A* acc) {
  for (int64_t j = 0; j < n; ++j) acc[j] = A(0);
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = gb + r * sr + c0 * sc;
#ifdef __FLT16_MAX__  // GCC has _Float16 on x86; clang 14 (the fuzz build) does not
    if constexpr (std::is_same_v<T, f16>) {
      if (sc == 1) {  // a plain _Float16 load: the vectoriser converts eight at once
        const _Float16* h = reinterpret_cast<const _Float16*>(row);
        for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<A>(h[j]);
        continue;
      }
    }
#endif
    for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<A>(load(row[j * sc]));
  }
}
// Eight values of row as f32 (16-bit widened exactly).
template <class T> __attribute__((target("avx2,f16c"))) inline __m256 load8(const T* row) {
  if constexpr (std::is_same_v<T, float>)
    return _mm256_loadu_ps(row);
  else if constexpr (std::is_same_v<T, f16>)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
  else  // bf16: its bits are the high half of the f32's
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row))), 16));
}

// sum_block on AVX2: with unit-stride columns, 32 (then 8) columns at a time summed in registers
// over the rows, each column still one chain from 0 over the rows in order (the same bits as
// sum_block, which had turned into scalar f16 loads and stores of acc at every row).
template <class T, class A>
__attribute__((target("avx2,f16c"))) void sum_block_avx2(const T* gb, int64_t sr, int64_t sc,
                                                         int64_t r0, int64_t r1, int64_t c0,
                                                         int64_t n, A* acc) {
  if constexpr (std::is_same_v<A, float>) {
    if (sc == 1) {
      const T* base = gb + c0;
      int64_t j = 0;
      for (; j + 32 <= n; j += 32) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int64_t r = r0; r < r1; ++r) {
          const T* row = base + r * sr + j;
          s0 = _mm256_add_ps(s0, load8(row));
          s1 = _mm256_add_ps(s1, load8(row + 8));
          s2 = _mm256_add_ps(s2, load8(row + 16));
          s3 = _mm256_add_ps(s3, load8(row + 24));
        }
        _mm256_storeu_ps(acc + j, s0);
        _mm256_storeu_ps(acc + j + 8, s1);
        _mm256_storeu_ps(acc + j + 16, s2);
        _mm256_storeu_ps(acc + j + 24, s3);
      }
      for (; j + 8 <= n; j += 8) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t r = r0; r < r1; ++r) s = _mm256_add_ps(s, load8(base + r * sr + j));
        _mm256_storeu_ps(acc + j, s);
      }
      if (j < n) sum_block(gb, sr, sc, r0, r1, c0 + j, n - j, acc + j);
      return;
    }
  }
  sum_block(gb, sr, sc, r0, r1, c0, n, acc);
}
template <class T, class A> void sum_block_base(const T* gb, int64_t sr, int64_t sc, int64_t r0,
                                                int64_t r1, int64_t c0, int64_t n, A* acc) {
  sum_block(gb, sr, sc, r0, r1, c0, n, acc);
}
}  // namespace

static void sum_rows_now(const Tensor& g, const Tensor& out) {
  MIXPREC_ASSERT(g.dim() == 2 && out.dim() == 1 && out.size(0) == g.size(1) && out.is_contiguous(),
                 "sum_rows: expected g [R, C] and a contiguous out [C]");
  const int64_t R = g.size(0), C = g.size(1);
  const int64_t sr = g.strides()[0], sc = g.strides()[1];
  const int64_t col_tasks = (C + kSumCols - 1) / kSumCols,
                row_blocks = std::max<int64_t>(1, (R + kSumRows - 1) / kSumRows);
  visit_float(g.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    constexpr DType adt = std::is_same_v<A, double> ? DType::f64 : DType::f32;
    const T* gb = static_cast<const T*>(g.data_ptr());
    std::vector<A> part(static_cast<size_t>(row_blocks * C));
    const bool avx2 = cpu_features().avx2 && cpu_features().f16c;
#pragma omp parallel for collapse(2) schedule(static) if (R * C > 32768)
    for (int64_t b = 0; b < row_blocks; ++b)
      for (int64_t t = 0; t < col_tasks; ++t) {
        const int64_t c0 = t * kSumCols, n = std::min(kSumCols, C - c0);
        const int64_t r0 = b * kSumRows, r1 = std::min(R, r0 + kSumRows);
        A* acc = part.data() + b * C + c0;
        (avx2 ? sum_block_avx2<T, A> : sum_block_base<T, A>)(gb, sr, sc, r0, r1, c0, n, acc);
      }
    for (int64_t b = 1; b < row_blocks; ++b)
      for (int64_t j = 0; j < C; ++j)
        part[static_cast<size_t>(j)] += part[static_cast<size_t>(b * C + j)];
    convert_row(part.data(), adt, out.data_ptr(), out.dtype(), C);
  });
}

// On a GPU: the sum op's kernel over the rows, queued (the host reads nothing).
void sum_rows(const Tensor& g, Tensor& out) {
  if (!g.device().is_cpu()) {
    NoGradGuard no_grad;
    AutocastScope as_is(AutocastState{});  // the sum in g's accumulation dtype, never cast back
    out.copy_(sum(g.detach(), {0}));
    return;
  }
  mixprec::detail::run_kernel([g, out] { sum_rows_now(g, out); });
}

}  // namespace mixprec::ops
