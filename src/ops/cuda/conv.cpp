// The conv2d problems on CUDA through cuDNN 9's convolution API (forward, backward-data,
// backward-weights). cuDNN works in one layout per call: NHWC for f16/bf16 (tensor cores, f32
// accumulation), the problem's own layout for f32 (TF32 only after cuda::set_allow_tf32(true)),
// NCHW for f64; operands in another layout are copied into it, results copied back. The
// algorithm is chosen once per direction, shape, dtype, layout, math mode and determinism, and
// cached (the rule: conv_algo.h; with cuda::deterministic() only algorithms cuDNN reports as
// deterministic); workspaces come from the device's caching allocator. Bias and ReLU: conv_fwd.
#include <cudnn.h>

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/cuda_stream.h"
#include "mixprec/cuda.h"
#include "ops/conv_problem.h"
#include "ops/cuda/conv_algo.h"
#include "ops/cuda/kernels.h"
#include "ops/layout.h"

namespace mixprec::ops::cuda {
namespace {

using detail::empty_image;
using detail::ImageLayout;
using detail::to_image;

void check_dnn(cudnnStatus_t st, const char* call) {
  MIXPREC_CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN call ", call,
                " failed: ", cudnnGetErrorString(st));
}
#define DNN_CHECK(expr) check_dnn((expr), #expr)

// The most workspace an algorithm may ask for: algorithms that want more are passed over.
constexpr size_t kMaxWorkspace = size_t{256} << 20;

enum class Dir { fwd, bwd_data, bwd_weights };

// A chosen algorithm: cuDNN's enum value for the direction, its math type and workspace.
struct Choice {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

struct PerDevice {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;  // guards choices
  std::map<std::string, Choice> choices;
};

// The device's handle, created on first use (the caller has made `device` current).
PerDevice& per_device(Device device) {
  static std::mutex mu;
  static auto* const table = new std::map<int, PerDevice>();  // never destroyed (see matmul)
  std::lock_guard<std::mutex> lock(mu);
  PerDevice& pd = (*table)[device.index];
  if (!pd.handle) DNN_CHECK(cudnnCreate(&pd.handle));
  return pd;
}

cudnnDataType_t dnn_type(DType d) {
  switch (d) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  MIXPREC_ASSERT(false, "cuda conv: no cuDNN type for ", dtype_name(d));
  return CUDNN_DATA_FLOAT;
}

// The layout cuDNN computes in for operands of dtype d whose output is in `given`.
ImageLayout work_layout(DType d, ImageLayout given) {
  if (d == DType::f16 || d == DType::bf16) return ImageLayout::nhwc;
  if (d == DType::f64) return ImageLayout::nchw;
  return given;
}

// The descriptors of one call (RAII). The data dtype `dt` is what cuDNN reads and writes; the
// convolution computes in f64 for f64, else f32.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // y: the output side (y or dy)
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t wanted = CUDNN_DEFAULT_MATH;
  bool exact_f32 = false;  // f32 without TF32: only FMA algorithms
  bool deterministic = mixprec::cuda::deterministic();
  std::string key;

  Descs(const ConvGeometry& g, DType dt, ImageLayout l, Dir dir, bool low_widened) {
    DNN_CHECK(cudnnCreateTensorDescriptor(&x));
    DNN_CHECK(cudnnCreateTensorDescriptor(&y));
    DNN_CHECK(cudnnCreateFilterDescriptor(&w));
    DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    const cudnnDataType_t t = dnn_type(dt);
    const cudnnTensorFormat_t f = l == ImageLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    DNN_CHECK(cudnnSetTensor4dDescriptor(x, f, t, i(g.n), i(g.cin), i(g.h), i(g.w)));
    DNN_CHECK(cudnnSetTensor4dDescriptor(y, f, t, i(g.n), i(g.cout), i(g.oh), i(g.ow)));
    DNN_CHECK(cudnnSetFilter4dDescriptor(w, t, f, i(g.cout), i(g.cin_g()), i(g.kh), i(g.kw)));
    DNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, i(g.pad_t), i(g.pad_l), i(g.stride_h), i(g.stride_w), i(g.dil_h), i(g.dil_w),
        CUDNN_CROSS_CORRELATION, dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    DNN_CHECK(cudnnSetConvolutionGroupCount(conv, i(g.groups)));
    // f16/bf16: tensor cores. f32 widened from f16/bf16 (backward-weights): TF32 rounds nothing
    // (their significands fit in TF32's 10 bits). Plain f32: TF32 only when asked. f64: FMA.
    if (dt == DType::f16 || dt == DType::bf16 || (dt == DType::f32 && low_widened))
      wanted = CUDNN_TENSOR_OP_MATH;
    else if (dt == DType::f32 && mixprec::cuda::allow_tf32())
      wanted = CUDNN_TENSOR_OP_MATH;
    else if (dt == DType::f32)
      wanted = CUDNN_FMA_MATH, exact_f32 = true;
    DNN_CHECK(cudnnSetConvolutionMathType(conv, wanted));
    for (int64_t v : {int64_t(dir), int64_t(dt), int64_t(l), int64_t(wanted), g.n,
                      g.cin,        g.h,         g.w,        g.cout,          g.kh,
                      g.kw,         g.oh,        g.ow,       g.groups,        g.stride_h,
                      g.stride_w,   g.dil_h,     g.dil_w,    g.pad_t,         g.pad_l})
      key += std::to_string(v) + ',';
    key += deterministic ? "deterministic" : "any";
  }
  ~Descs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;

  // cuDNN's ranking (the first n perf results) through pick_algorithm's rules (conv_algo.h):
  // the first that succeeds, fits kMaxWorkspace, never converts operands down
  // (TENSOR_OP_MATH_ALLOW_CONVERSION may run f32 or bf16 data as f16), for exact f32 uses no
  // tensor cores and, with determinism asked for, is one cuDNN reports as deterministic.
  template <class Perf>
  AlgoPick pick(const std::vector<Perf>& perfs, int n, std::optional<Choice>& out) const {
    std::vector<AlgoCandidate> ranked;
    for (int k = 0; k < n; ++k) {
      const Perf& pf = perfs[static_cast<size_t>(k)];
      ranked.push_back({.algo = static_cast<int>(pf.algo),
                        .ok = pf.status == CUDNN_STATUS_SUCCESS,
                        .workspace = pf.memory,
                        .math = pf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                                    ? AlgoMath::tensor_op_converting
                                : pf.mathType == CUDNN_TENSOR_OP_MATH ? AlgoMath::tensor_op
                                                                      : AlgoMath::fma,
                        .deterministic = pf.determinism == CUDNN_DETERMINISTIC});
    }
    const AlgoPick p = pick_algorithm(
        ranked,
        {.max_workspace = kMaxWorkspace, .exact_f32 = exact_f32, .deterministic = deterministic});
    if (p.index >= 0) {
      const Perf& pf = perfs[static_cast<size_t>(p.index)];
      out = Choice{static_cast<int>(pf.algo), exact_f32 ? CUDNN_FMA_MATH : pf.mathType, pf.memory};
    }
    return p;
  }
};

// The cached choice for d's key, or cuDNN's heuristics (cudnnGet*Algorithm_v7) run once.
Choice choose(PerDevice& pd, Descs& d, Dir dir, const std::string& what) {
  std::lock_guard<std::mutex> lock(pd.mu);
  if (auto it = pd.choices.find(d.key); it != pd.choices.end()) return it->second;
  std::optional<Choice> c;
  AlgoPick pick;
  int n = 0;
  if (dir == Dir::fwd) {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    DNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        pd.handle, d.x, d.w, d.conv, d.y, static_cast<int>(perfs.size()), &n, perfs.data()));
    pick = d.pick(perfs, n, c);
  } else if (dir == Dir::bwd_data) {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    DNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        pd.handle, d.w, d.y, d.conv, d.x, static_cast<int>(perfs.size()), &n, perfs.data()));
    pick = d.pick(perfs, n, c);
  } else {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    DNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        pd.handle, d.x, d.y, d.conv, d.w, static_cast<int>(perfs.size()), &n, perfs.data()));
    pick = d.pick(perfs, n, c);
  }
  static const char* const kDir[] = {"forward", "backward-data", "backward-weights"};
  MIXPREC_CHECK(
      !d.deterministic || c.has_value() || pick.nondeterministic == 0,
      "cuda conv2d: determinism is asked for (cuda::set_deterministic or "
      "MIXPREC_DETERMINISTIC=1), but cuDNN offers no deterministic ",
      kDir[static_cast<int>(dir)], " algorithm for ", what, " (", pick.passed_over(), ")",
      Hint{"allow non-deterministic algorithms (cuda::set_deterministic(false), or unset "
           "MIXPREC_DETERMINISTIC), or train on the CPU (--device cpu), whose convolutions are "
           "deterministic"});
  MIXPREC_CHECK(c.has_value(), "cuda conv2d: cuDNN offers no usable ", kDir[static_cast<int>(dir)],
                " algorithm for ", what, " (", pick.passed_over(), "; workspace limit ",
                kMaxWorkspace >> 20, " MiB)");
  // The workspace the chosen algorithm needs under its math type (the ranking's figure is an
  // estimate): the larger of the two.
  DNN_CHECK(cudnnSetConvolutionMathType(d.conv, c->math));
  size_t ws = 0;
  if (dir == Dir::fwd)
    DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        pd.handle, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(c->algo), &ws));
  else if (dir == Dir::bwd_data)
    DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        pd.handle, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(c->algo),
        &ws));
  else
    DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        pd.handle, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c->algo),
        &ws));
  c->workspace = std::max(c->workspace, ws);
  pd.choices.emplace(d.key, *c);
  return *c;
}

// One cuDNN call's setup: descriptors, the (cached) algorithm, the device's handle on its
// compute stream with the algorithm's math type, and a workspace from the caching allocator
// (freed after the call is queued: safe in stream order).
struct Call {
  Descs d;
  Choice c;
  cudnnHandle_t h;
  Tensor ws;
  bool f64;
  Call(const ConvGeometry& g, DType dt, ImageLayout l, Dir dir, bool low_widened, Device dev,
       const std::string& what)
      : d(g, dt, l, dir, low_widened), f64(dt == DType::f64) {
    const cudaStream_t stream = cuda_detail::activate(dev);  // first: cudnnCreate binds to it
    PerDevice& pd = per_device(dev);
    c = choose(pd, d, dir, what);
    DNN_CHECK(cudnnSetStream(pd.handle, stream));
    DNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
    h = pd.handle;
    ws = Tensor::empty({static_cast<int64_t>(std::max<size_t>(c.workspace, 1))},
                       {.dtype = DType::u8, .device = dev});
  }
};

// cuDNN's alpha and beta: a double for f64 data, else a float.
struct Scalar {
  double d;
  float f;
  const void* ptr(bool f64) const { return f64 ? static_cast<const void*>(&d) : &f; }
};
constexpr Scalar kOne{1.0, 1.0f}, kZero{0.0, 0.0f};

// t in layout l and dtype dt at a 16-byte-aligned address (what cuDNN's vectorised kernels may
// assume; the heuristics never see the pointers): t itself when it is, else a fresh copy (a view
// into a larger tensor can start anywhere).
Tensor operand(const Tensor& t, ImageLayout l, DType dt) {
  Tensor r = to_image(t, l, dt);
  if (reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0) return r;
  Tensor fresh = empty_image(r.shape(), dt, l, r.device());
  fresh.copy_(r);
  return fresh;
}

// `out` itself when it is in layout l (and aligned as above), else a fresh tensor in l to be
// copied into out after.
Tensor output_in(const Tensor& out, ImageLayout l) {
  const bool aligned = reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
  return detail::has_layout(out, l) && aligned
             ? out
             : empty_image(out.shape(), out.dtype(), l, out.device());
}

template <class A> std::string declines_common(const ConvGeometry& g, DType d, const A&) {
  if (d != DType::f32 && d != DType::f64 && d != DType::f16 && d != DType::bf16)
    return "no cuDNN convolution for " + std::string(dtype_name(d));
  if (g.pad_t != g.pad_b || g.pad_l != g.pad_r)
    return "asymmetric padding (cuDNN pads both sides alike)";
  for (int64_t v :
       {g.n * g.cin * g.h * g.w, g.n * g.cout * g.oh * g.ow, g.cout * g.cin_g() * g.kh * g.kw})
    if (v > INT_MAX) return "a tensor of more than 2^31 - 1 elements";
  return {};
}

}  // namespace

std::string conv_fwd_declines(const ConvFwdProblem& p) {
  return declines_common(p.g, p.x.dtype(), p);
}
std::string conv_bwd_data_declines(const ConvBwdDataProblem& p) {
  return declines_common(p.g, p.dy.dtype(), p);
}
std::string conv_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  return declines_common(p.g, p.dy.dtype(), p);
}

// y = relu(conv(x, w) + b). The bias is written into y first and cuDNN blends the convolution
// onto it (beta = 1; for f16/bf16 data the blend is in its f32 compute type, so y is rounded
// once, as the reference's); the ReLU then runs in place (exact: rounding commutes with
// max(v, 0); NaN propagates as in ops::relu).
void conv_fwd(const ConvFwdProblem& p) {
  if (p.y.numel() == 0) return;
  const Device dev = p.y.device();
  const DType dt = p.x.dtype();
  const ImageLayout l = work_layout(dt, detail::layout_of(p.y));
  const Tensor x = operand(p.x, l, dt), w = operand(p.w, l, dt);
  Tensor y = output_in(p.y, l);
  if (p.g.cin_g() * p.g.kh * p.g.kw == 0) {  // an empty sum: y is the bias (or 0)
    if (p.b.defined())
      channel_bias_relu(y, p.b, /*fill=*/true, false);
    else
      y.fill_(0.0);
  } else {
    const Call k(p.g, dt, l, Dir::fwd, false, dev, p.describe());
    if (p.b.defined()) channel_bias_relu(y, p.b, /*fill=*/true, false);
    DNN_CHECK(cudnnConvolutionForward(
        k.h, kOne.ptr(k.f64), k.d.x, x.data_ptr(), k.d.w, w.data_ptr(), k.d.conv,
        static_cast<cudnnConvolutionFwdAlgo_t>(k.c.algo), k.ws.data_ptr(), k.c.workspace,
        (p.b.defined() ? kOne : kZero).ptr(k.f64), k.d.y, y.data_ptr()));
  }
  if (p.relu) channel_bias_relu(y, Tensor(), false, true);
  if (!y.same(p.y)) Tensor(p.y).copy_(y);
}

void conv_bwd_data(const ConvBwdDataProblem& p) {
  if (p.dx.numel() == 0) return;
  const Device dev = p.dx.device();
  const DType dt = p.dy.dtype();
  const ImageLayout l = work_layout(dt, detail::layout_of(p.dx));
  Tensor dx = output_in(p.dx, l);
  if (p.g.n * p.g.cout_g() * p.g.oh * p.g.ow == 0) {
    dx.fill_(0.0);
  } else {
    const Tensor dy = operand(p.dy, l, dt), w = operand(p.w, l, dt);
    const Call k(p.g, dt, l, Dir::bwd_data, false, dev, p.describe());
    DNN_CHECK(cudnnConvolutionBackwardData(
        k.h, kOne.ptr(k.f64), k.d.w, w.data_ptr(), k.d.y, dy.data_ptr(), k.d.conv,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(k.c.algo), k.ws.data_ptr(), k.c.workspace,
        kZero.ptr(k.f64), k.d.x, dx.data_ptr()));
  }
  if (!dx.same(p.dx)) Tensor(p.dx).copy_(dx);
}

// dw in acc_dtype (f32, f64 for f64): f16/bf16 operands are widened to f32 first, because cuDNN
// writes dw in the operands' dtype and an f16 dw would round (and overflow under loss scaling)
// where the reference's f32 dw does not. db: our per-channel sum (channel_sum).
void conv_bwd_weights(const ConvBwdWeightsProblem& p) {
  const Device dev = p.dy.device();
  if (p.db.defined()) channel_sum(p.dy, p.db);
  if (!p.dw.defined() || p.dw.numel() == 0) return;
  const DType in = p.dy.dtype(), dt = acc_dtype(in);
  const bool widened = dt != in;
  const ImageLayout l = work_layout(in, detail::layout_of(p.dy));
  Tensor dw = l == ImageLayout::nchw ? p.dw : empty_image(p.dw.shape(), dt, l, dev);
  if (p.g.n * p.g.oh * p.g.ow == 0) {
    dw.fill_(0.0);
  } else {
    const Tensor x = operand(p.x, l, dt), dy = operand(p.dy, l, dt);
    const Call k(p.g, dt, l, Dir::bwd_weights, widened, dev, p.describe());
    DNN_CHECK(cudnnConvolutionBackwardFilter(
        k.h, kOne.ptr(k.f64), k.d.x, x.data_ptr(), k.d.y, dy.data_ptr(), k.d.conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(k.c.algo), k.ws.data_ptr(), k.c.workspace,
        kZero.ptr(k.f64), k.d.w, dw.data_ptr()));
  }
  if (!dw.same(p.dw)) Tensor(p.dw).copy_(dw);
}

}  // namespace mixprec::ops::cuda
