// MatmulProblem on CUDA through cuBLASLt: f32, f64, and f16/bf16 with f32 accumulation (TF32
// for f32 only when cuda::set_allow_tf32(true)), bias and ReLU (or GELU) applied by cuBLASLt's
// epilogue before the one rounding into out. Row-major operands are described to cuBLASLt
// (column-major) as their transposes: out^T = b^T a^T, so no copy is made for row- or
// column-major views; other strides are packed first. The algorithm is chosen once per shape,
// dtypes, layouts and alignments, and cached.
#include <cublasLt.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda_stream.h"
#include "core/tensor_raw.h"
#include "mixprec/cuda.h"
#include "ops/cuda/kernels.h"

namespace mixprec::ops::cuda {
namespace {

void check_lt(cublasStatus_t st, const char* call) {
  // (The status's name needs libcublas; cuBLASLt alone gives the number: cublas_api.h lists them.)
  MIXPREC_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt call ", call, " failed: cublasStatus_t ",
                static_cast<int>(st));
}
#define LT_CHECK(expr) check_lt((expr), #expr)

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  MIXPREC_ASSERT(false, "cuda matmul: no CUDA type for ", dtype_name(d));
  return CUDA_R_32F;
}

// One operand of a GEMM as cuBLASLt sees it: a column-major rows x cols matrix with leading
// dimension ld, used transposed or not, and the element stride between batches.
struct Operand {
  const void* ptr;
  int64_t rows, cols, ld;
  bool trans;
  int64_t batch_stride;
};

// The largest power of two (<= 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

struct PerDevice {
  cublasLtHandle_t handle = nullptr;
  Tensor workspace;     // 32 MiB, from the device's caching allocator
  std::mutex algos_mu;  // guards algos (the workspace is used in stream order)
  std::map<std::string, cublasLtMatmulAlgo_t> algos;
};
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

PerDevice& per_device(Device device) {
  static std::mutex mu;
  static auto* const table = new std::map<int, PerDevice>();  // never destroyed (see allocator)
  std::lock_guard<std::mutex> lock(mu);
  PerDevice& pd = (*table)[device.index];
  if (!pd.handle) {
    LT_CHECK(cublasLtCreate(&pd.handle));
    pd.workspace = Tensor::empty({static_cast<int64_t>(kWorkspaceBytes)},
                                 {.dtype = DType::u8, .device = device});
  }
  return pd;
}

// RAII for the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  std::array<cublasLtMatrixLayout_t, 3> layout{};  // A (b^T), B (a^T), C=D (out^T)
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : layout)
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void set_layout(cublasLtMatrixLayout_t& l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                int32_t batch, int64_t batch_stride) {
  LT_CHECK(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld));
  LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                            sizeof(batch)));
  LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &batch_stride, sizeof(batch_stride)));
}

// a [..., M, K] as cuBLASLt's B = a^T (K x M column-major), b [..., K, N] as its A = b^T
// (N x K): a row-major matrix is its transpose in column-major with the same ld; a column-major
// one is used with op T. Returns false when neither holds (the caller packs it).
bool describe_operand(const Tensor& t, bool is_a, Operand& o) {
  const int64_t r = t.size(-2), c = t.size(-1);  // a: M, K   b: K, N
  const int64_t sr = t.strides()[static_cast<size_t>(t.dim() - 2)];
  const int64_t sc = t.strides()[static_cast<size_t>(t.dim() - 1)];
  o.ptr = t.data_ptr();
  if (sc == 1 && sr >= std::max<int64_t>(c, 1)) {  // row-major r x c == column-major c x r
    o.rows = c;
    o.cols = r;
    o.ld = sr;
    o.trans = false;
  } else if (sr == 1 && sc >= std::max<int64_t>(r, 1)) {  // column-major r x c, used as T
    o.rows = r;
    o.cols = c;
    o.ld = sc;
    o.trans = true;
  } else {
    return false;
  }
  (void)is_a;
  return true;
}

// The element stride between consecutive batches of t, when its batch dims (all but the last
// two) are either all broadcast (0) or collapse into one stride over out's batch shape.
std::optional<int64_t> batch_stride(const Tensor& t, const Shape& out_batch) {
  const size_t nb = out_batch.size();
  bool all_one = true;
  for (size_t d = 0; d < nb; ++d) all_one = all_one && t.shape()[d] == 1;
  if (all_one) return 0;
  int64_t expect = -1;
  for (size_t d = nb; d-- > 0;) {
    if (t.shape()[d] != out_batch[d]) return std::nullopt;  // partly broadcast
    if (out_batch[d] == 1) continue;
    if (expect >= 0 && t.strides()[d] != expect) return std::nullopt;
    expect = t.strides()[d] * out_batch[d];
  }
  for (size_t d = nb; d-- > 0;)
    if (out_batch[d] != 1) return t.strides()[d];
  return 0;
}

}  // namespace

std::string matmul_declines(const MatmulProblem& p) {
  const DType d = p.a.dtype();
  if (d != DType::f32 && d != DType::f64 && d != DType::f16 && d != DType::bf16)
    return std::string("no cuBLASLt GEMM for ") + std::string(dtype_name(d));
  if (p.b.dtype() != d) return "a and b differ in dtype";
  if (p.out.dtype() != d && !(p.out.dtype() == DType::f32 && d != DType::f64))
    return "out must have a's dtype, or f32";
  if (p.a.size(-1) == 0) return "K == 0";
  if (p.bias.defined() && !is_floating(p.bias.dtype())) return "integer bias";
  return {};
}

// One cuBLASLt call (batch count `batch`) for out = epi(a @ b + bias).
void lt_gemm(const MatmulProblem& p, const Operand& A, const Operand& B, void* out, int64_t M,
             int64_t N, int32_t batch, int64_t out_stride, const void* bias, Epilogue epi) {
  const Device dev = p.out.device();
  cudaStream_t s = cuda_detail::activate(dev);
  PerDevice& pd = per_device(dev);
  const DType in = p.a.dtype(), od = p.out.dtype();
  const bool f64 = in == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (in == DType::f32 && mixprec::cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                             : CUBLAS_COMPUTE_32F);
  const cudaDataType_t scale_t = f64 ? CUDA_R_64F : CUDA_R_32F;
  Descs ds;
  LT_CHECK(cublasLtMatmulDescCreate(&ds.op, compute, scale_t));
  const cublasOperation_t ta = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DEFAULT;
  if (epi == Epilogue::relu)
    e = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (epi == Epilogue::gelu)
    e = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else if (bias)
    e = CUBLASLT_EPILOGUE_BIAS;
  LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
  if (bias)
    LT_CHECK(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias)));
  set_layout(ds.layout[0], cuda_type(in), A.rows, A.cols, A.ld, batch, A.batch_stride);
  set_layout(ds.layout[1], cuda_type(in), B.rows, B.cols, B.ld, batch, B.batch_stride);
  set_layout(ds.layout[2], cuda_type(od), N, M, N, batch, out_stride);

  // The algorithm for this exact description, chosen once.
  const uint32_t al[3] = {alignment(A.ptr), alignment(B.ptr), alignment(out)};
  std::string key;
  for (int64_t v : {int64_t(in),
                    int64_t(od),
                    int64_t(compute),
                    int64_t(e),
                    A.rows,
                    A.cols,
                    A.ld,
                    int64_t(A.trans),
                    B.rows,
                    B.cols,
                    B.ld,
                    int64_t(B.trans),
                    M,
                    N,
                    int64_t(batch),
                    A.batch_stride,
                    B.batch_stride,
                    out_stride,
                    int64_t(al[0]),
                    int64_t(al[1]),
                    int64_t(al[2])})
    key += std::to_string(v) + ',';
  cublasLtMatmulAlgo_t algo;
  std::unique_lock<std::mutex> algos_lock(pd.algos_mu);
  auto it = pd.algos.find(key);
  if (it != pd.algos.end()) {
    algo = it->second;
  } else {
    LT_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref));
    const uint64_t ws = kWorkspaceBytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws)));
    const cublasLtMatmulPreferenceAttributes_t align_attr[3] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int k = 0; k < 3; ++k)
      LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, align_attr[k], &al[k], sizeof(al[k])));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(pd.handle, ds.op, ds.layout[0], ds.layout[1],
                                            ds.layout[2], ds.layout[2], ds.pref, 1, &result,
                                            &found));
    MIXPREC_CHECK(found > 0, "cuda matmul: cuBLASLt has no algorithm for ", p.describe());
    algo = result.algo;
    pd.algos.emplace(key, algo);
  }
  algos_lock.unlock();
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  LT_CHECK(cublasLtMatmul(pd.handle, ds.op, alpha, A.ptr, ds.layout[0], B.ptr, ds.layout[1], beta,
                          out, ds.layout[2], out, ds.layout[2], &algo, pd.workspace.data_ptr(),
                          kWorkspaceBytes, s));
}

void matmul(const MatmulProblem& p) {
  const int64_t M = p.out.size(-2), N = p.out.size(-1);
  if (p.out.numel() == 0) return;
  // Operands cuBLASLt cannot describe are packed (row-major) first.
  const Tensor a = [&] {
    Operand o;
    return describe_operand(p.a, true, o) ? p.a : detail::raw_copy(p.a, p.a.dtype());
  }();
  const Tensor b = [&] {
    Operand o;
    return describe_operand(p.b, false, o) ? p.b : detail::raw_copy(p.b, p.b.dtype());
  }();
  // The epilogue adds a bias of out's dtype (cuBLASLt's default bias type).
  const Tensor bias = !p.bias.defined() ? Tensor()
                      : p.bias.dtype() == p.out.dtype() && p.bias.is_contiguous()
                          ? p.bias
                          : detail::raw_copy(p.bias, p.out.dtype());
  const void* bias_ptr = bias.defined() ? bias.data_ptr() : nullptr;
  const Epilogue epi = p.relu ? Epilogue::relu : Epilogue::none;
  Operand A, B;  // cuBLASLt's A is b^T, its B is a^T
  describe_operand(b, false, A);
  describe_operand(a, true, B);
  const Shape out_batch(p.out.shape().begin(), p.out.shape().end() - 2);
  const int64_t nbatch = shape_numel(out_batch);
  const auto sa = batch_stride(a, out_batch), sb = batch_stride(b, out_batch);
  if (sa && sb && nbatch <= INT32_MAX) {
    A.batch_stride = *sb;
    B.batch_stride = *sa;
    lt_gemm(p, A, B, p.out.data_ptr(), M, N, static_cast<int32_t>(nbatch), M * N, bias_ptr, epi);
    return;
  }
  // Partly broadcast batch dims: one call per output matrix.
  const size_t nb = out_batch.size();
  char* out_base = static_cast<char*>(p.out.data_ptr());
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (size_t d = nb; d-- > 0;) {
      const int64_t idx = rem % out_batch[d];
      rem /= out_batch[d];
      if (a.shape()[d] != 1) oa += idx * a.strides()[d];
      if (b.shape()[d] != 1) ob += idx * b.strides()[d];
    }
    Operand Ai = A, Bi = B;
    Ai.ptr = static_cast<const char*>(b.data_ptr()) + ob * static_cast<int64_t>(b.itemsize());
    Bi.ptr = static_cast<const char*>(a.data_ptr()) + oa * static_cast<int64_t>(a.itemsize());
    Ai.batch_stride = Bi.batch_stride = 0;
    lt_gemm(p, Ai, Bi, out_base + i * M * N * static_cast<int64_t>(p.out.itemsize()), M, N, 1,
            M * N, bias_ptr, epi);
  }
}

}  // namespace mixprec::ops::cuda
