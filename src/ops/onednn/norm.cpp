// oneDNN batch normalisation (batch_normalization_forward/backward, use_scale | use_shift; the
// forward always with use_global_stats: training passes the batch statistics of
// batch_norm_statistics) and layer normalisation over [rows, M]; f32 and bf16 data, f32
// parameters and statistics. x, y, dy, dx share one dense layout (NCHW or channels-last), so
// the memory descriptors come straight from the tensors' strides and nothing is reordered.
#include "ops/onednn/kernels.h"

#include <bit>

#include "ops/onednn/context.h"
#include "ops/layout.h"

namespace mixprec::ops::onednn {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;
using Args = std::unordered_map<int, dnnl::memory>;

std::string norm_key(const char* what, const Shape& shape, const Strides& strides, DType dt,
                     bool training, double eps) {
  std::string k = what;
  k += ';';
  for (int64_t v : shape) key_add(k, v);
  k += '|';
  for (int64_t v : strides) key_add(k, v);
  key_add(k, std::string(dtype_name(dt)));
  key_add(k, static_cast<int64_t>(training));
  key_add(k, static_cast<int64_t>(std::bit_cast<uint32_t>(static_cast<float>(eps))));
  return k;
}

template <class Fn> std::string try_create(Fn&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    return describe_error(e);
  }
  return "";
}

std::string data_declines(const Tensor& x) {
  if (x.numel() == 0) return "empty tensor";
  return why_not_computes_in(x.dtype());
}

// ---------------------------------------------------------------- batch norm primitives

normalization_flags bn_flags(bool training) {
  const auto f = normalization_flags::use_scale | normalization_flags::use_shift;
  return training ? f : f | normalization_flags::use_global_stats;
}

dnnl::batch_normalization_forward::primitive_desc bn_fwd_pd(const dnnl::memory::desc& data,
                                                            prop_kind prop, bool training,
                                                            double eps) {
  const dnnl::batch_normalization_forward::desc d(prop, data, static_cast<float>(eps),
                                                  bn_flags(training));
  return {d, engine()};
}

struct BnFwd {
  dnnl::batch_normalization_forward::primitive_desc pd;
  dnnl::batch_normalization_forward prim;
};
struct BnBwd {
  dnnl::batch_normalization_backward::primitive_desc pd;
  dnnl::batch_normalization_backward prim;
};

// The forward always normalises with given statistics (use_global_stats): the running ones in
// eval, the batch ones from batch_norm_statistics in training.
std::shared_ptr<BnFwd> bn_fwd(const Shape& s, const Strides& st, DType dt, double eps) {
  return cache().get_or_create<BnFwd>(norm_key("bn_fwd", s, st, dt, false, eps), [&] {
    auto pd = bn_fwd_pd(md(s, st, dt), prop_kind::forward_inference, false, eps);
    MIXPREC_ASSERT(pd.workspace_desc().get_size() == 0, "batch norm: unexpected workspace");
    return BnFwd{pd, dnnl::batch_normalization_forward(pd)};
  });
}

std::shared_ptr<BnBwd> bn_bwd(const Shape& s, const Strides& st, DType dt, bool training,
                              double eps) {
  return cache().get_or_create<BnBwd>(norm_key("bn_bwd", s, st, dt, training, eps), [&] {
    const dnnl::memory::desc data = md(s, st, dt);
    const auto hint = bn_fwd_pd(data, prop_kind::forward_training, training, eps);
    const dnnl::batch_normalization_backward::desc d(prop_kind::backward, data, data,
                                                     static_cast<float>(eps), bn_flags(training));
    dnnl::batch_normalization_backward::primitive_desc pd(d, engine(), hint);
    return BnBwd{pd, dnnl::batch_normalization_backward(pd)};
  });
}

// ---------------------------------------------------------------- layer norm primitives

const auto kLnFlags = normalization_flags::use_scale | normalization_flags::use_shift;

dnnl::layer_normalization_forward::primitive_desc ln_fwd_pd(int64_t rows, int64_t m, DType dt,
                                                            double eps) {
  const dnnl::layer_normalization_forward::desc d(
      prop_kind::forward_training, md({rows, m}, {m, 1}, dt), md({rows}, {1}, DType::f32),
      static_cast<float>(eps), kLnFlags);
  return {d, engine()};
}

struct LnFwd {
  dnnl::layer_normalization_forward::primitive_desc pd;
  dnnl::layer_normalization_forward prim;
};
struct LnBwd {
  dnnl::layer_normalization_backward::primitive_desc pd;
  dnnl::layer_normalization_backward prim;
};

std::shared_ptr<LnFwd> ln_fwd(int64_t rows, int64_t m, DType dt, double eps) {
  return cache().get_or_create<LnFwd>(norm_key("ln_fwd", {rows, m}, {}, dt, true, eps), [&] {
    auto pd = ln_fwd_pd(rows, m, dt, eps);
    return LnFwd{pd, dnnl::layer_normalization_forward(pd)};
  });
}

std::shared_ptr<LnBwd> ln_bwd(int64_t rows, int64_t m, DType dt, double eps) {
  return cache().get_or_create<LnBwd>(norm_key("ln_bwd", {rows, m}, {}, dt, true, eps), [&] {
    const auto hint = ln_fwd_pd(rows, m, dt, eps);
    const dnnl::memory::desc data = md({rows, m}, {m, 1}, dt);
    const dnnl::layer_normalization_backward::desc d(prop_kind::backward, data, data,
                                                     md({rows}, {1}, DType::f32),
                                                     static_cast<float>(eps), kLnFlags);
    dnnl::layer_normalization_backward::primitive_desc pd(d, engine(), hint);
    return LnBwd{pd, dnnl::layer_normalization_backward(pd)};
  });
}

// oneDNN 2.6 counts DNNL_ARG_SHIFT among the inputs of a normalisation backward with
// use_shift (execution fails without it) although the gradients never read the shift: gamma's
// buffer stands in, rather than carrying beta into the backward.
dnnl::memory shift_placeholder(const Tensor& gamma) { return mem(gamma); }

}  // namespace

// ---------------------------------------------------------------- batch norm

// Training computes the batch statistics first (batch_norm_statistics: shifted, summed in
// f64) and then normalises with them through the use_global_stats primitive: oneDNN's own f32
// sums drift (|y - beta| up to 0.3 on a constant channel of 50176 values, channels-last).
std::string batch_norm_fwd_declines(const BatchNormFwdProblem& p) {
  if (p.relu) return "a fused relu (oneDNN's fuse_norm_relu needs a workspace; not used)";
  if (std::string why = data_declines(p.x); !why.empty()) return why;
  return try_create([&] { bn_fwd(p.x.shape(), p.x.strides(), p.x.dtype(), p.eps); });
}

void batch_norm_fwd(const BatchNormFwdProblem& p) {
  if (p.training) batch_norm_statistics(p.x, p.mean, p.var);
  const auto k = bn_fwd(p.x.shape(), p.x.strides(), p.x.dtype(), p.eps);
  execute(k->prim, Args{{DNNL_ARG_SRC, mem(k->pd.src_desc(), p.x.data_ptr())},
                        {DNNL_ARG_DST, mem(k->pd.dst_desc(), p.y.data_ptr())},
                        {DNNL_ARG_SCALE, mem(p.gamma)},
                        {DNNL_ARG_SHIFT, mem(p.beta)},
                        {DNNL_ARG_MEAN, mem(k->pd.mean_desc(), p.mean.data_ptr())},
                        {DNNL_ARG_VARIANCE, mem(k->pd.variance_desc(), p.var.data_ptr())}});
}

std::string batch_norm_bwd_declines(const BatchNormBwdProblem& p) {
  if (p.relu_y.defined()) return "a fused relu mask";
  if (std::string why = data_declines(p.x); !why.empty()) return why;
  return try_create([&] { bn_bwd(p.x.shape(), p.x.strides(), p.x.dtype(), p.training, p.eps); });
}

void batch_norm_bwd(const BatchNormBwdProblem& p) {
  const auto k = bn_bwd(p.x.shape(), p.x.strides(), p.x.dtype(), p.training, p.eps);
  execute(k->prim, Args{{DNNL_ARG_SRC, mem(k->pd.src_desc(), p.x.data_ptr())},
                        {DNNL_ARG_MEAN, mem(k->pd.mean_desc(), p.mean.data_ptr())},
                        {DNNL_ARG_VARIANCE, mem(k->pd.variance_desc(), p.var.data_ptr())},
                        {DNNL_ARG_DIFF_DST, mem(k->pd.diff_dst_desc(), p.dy.data_ptr())},
                        {DNNL_ARG_SCALE, mem(p.gamma)},
                        {DNNL_ARG_SHIFT, shift_placeholder(p.gamma)},
                        {DNNL_ARG_DIFF_SRC, mem(k->pd.diff_src_desc(), p.dx.data_ptr())},
                        {DNNL_ARG_DIFF_SCALE, mem(p.dgamma)},
                        {DNNL_ARG_DIFF_SHIFT, mem(p.dbeta)}});
}

// ---------------------------------------------------------------- layer norm

std::string layer_norm_fwd_declines(const LayerNormFwdProblem& p) {
  if (std::string why = data_declines(p.x); !why.empty()) return why;
  return try_create([&] { ln_fwd(p.x.shape()[0], p.x.shape()[1], p.x.dtype(), p.eps); });
}

void layer_norm_fwd(const LayerNormFwdProblem& p) {
  const auto k = ln_fwd(p.x.shape()[0], p.x.shape()[1], p.x.dtype(), p.eps);
  execute(k->prim, Args{{DNNL_ARG_SRC, mem(k->pd.src_desc(), p.x.data_ptr())},
                        {DNNL_ARG_DST, mem(k->pd.dst_desc(), p.y.data_ptr())},
                        {DNNL_ARG_SCALE, mem(p.gamma)},
                        {DNNL_ARG_SHIFT, mem(p.beta)},
                        {DNNL_ARG_MEAN, mem(k->pd.mean_desc(), p.mean.data_ptr())},
                        {DNNL_ARG_VARIANCE, mem(k->pd.variance_desc(), p.var.data_ptr())}});
}

std::string layer_norm_bwd_declines(const LayerNormBwdProblem& p) {
  if (std::string why = data_declines(p.x); !why.empty()) return why;
  return try_create([&] { ln_bwd(p.x.shape()[0], p.x.shape()[1], p.x.dtype(), p.eps); });
}

void layer_norm_bwd(const LayerNormBwdProblem& p) {
  const auto k = ln_bwd(p.x.shape()[0], p.x.shape()[1], p.x.dtype(), p.eps);
  execute(k->prim, Args{{DNNL_ARG_SRC, mem(k->pd.src_desc(), p.x.data_ptr())},
                        {DNNL_ARG_MEAN, mem(k->pd.mean_desc(), p.mean.data_ptr())},
                        {DNNL_ARG_VARIANCE, mem(k->pd.variance_desc(), p.var.data_ptr())},
                        {DNNL_ARG_DIFF_DST, mem(k->pd.diff_dst_desc(), p.dy.data_ptr())},
                        {DNNL_ARG_SCALE, mem(p.gamma)},
                        {DNNL_ARG_SHIFT, shift_placeholder(p.gamma)},
                        {DNNL_ARG_DIFF_SRC, mem(k->pd.diff_src_desc(), p.dx.data_ptr())},
                        {DNNL_ARG_DIFF_SCALE, mem(p.dgamma)},
                        {DNNL_ARG_DIFF_SHIFT, mem(p.dbeta)}});
}

}  // namespace mixprec::ops::onednn
