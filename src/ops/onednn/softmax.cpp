// oneDNN softmax / log-softmax over one axis of a contiguous tensor (softmax_v2: the accurate
// algorithm subtracts the max; bf16 accumulates in f32 inside oneDNN). Primitives are cached
// per shape, dtype, axis and algorithm. Rows without a distribution are made NaN throughout, as
// the reference does (softmax_problem.h).
#include "ops/onednn/kernels.h"

#include "ops/onednn/context.h"

namespace mixprec::ops::onednn {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using Args = std::unordered_map<int, dnnl::memory>;

std::string softmax_key(const char* what, const Shape& s, DType dt, int64_t axis, bool log) {
  std::string k = what;
  k += ';';
  for (int64_t v : s) key_add(k, v);
  key_add(k, std::string(dtype_name(dt)));
  key_add(k, axis);
  key_add(k, static_cast<int64_t>(log));
  return k;
}

algorithm algo(bool log) { return log ? algorithm::softmax_log : algorithm::softmax_accurate; }

dnnl::softmax_v2_forward::primitive_desc fwd_pd(const Shape& s, DType dt, int64_t axis, bool log) {
  const dnnl::memory::desc d = md(s, contiguous_strides(s), dt);
  const dnnl::softmax_v2_forward::desc desc(prop_kind::forward_training, algo(log), d, d,
                                            static_cast<int>(axis));
  return {desc, engine()};
}

struct Fwd {
  dnnl::softmax_v2_forward::primitive_desc pd;
  dnnl::softmax_v2_forward prim;
};
struct Bwd {
  dnnl::softmax_v2_backward::primitive_desc pd;
  dnnl::softmax_v2_backward prim;
};

std::shared_ptr<Fwd> fwd(const Shape& s, DType dt, int64_t axis, bool log) {
  return cache().get_or_create<Fwd>(softmax_key("softmax_fwd", s, dt, axis, log), [&] {
    auto pd = fwd_pd(s, dt, axis, log);
    return Fwd{pd, dnnl::softmax_v2_forward(pd)};
  });
}

std::shared_ptr<Bwd> bwd(const Shape& s, DType dt, int64_t axis, bool log) {
  return cache().get_or_create<Bwd>(softmax_key("softmax_bwd", s, dt, axis, log), [&] {
    const auto hint = fwd_pd(s, dt, axis, log);
    const dnnl::memory::desc d = md(s, contiguous_strides(s), dt);
    const dnnl::softmax_v2_backward::desc desc(algo(log), d, d, d, static_cast<int>(axis));
    dnnl::softmax_v2_backward::primitive_desc pd(desc, engine(), hint);
    return Bwd{pd, dnnl::softmax_v2_backward(pd)};
  });
}

template <class Fn> std::string try_create(Fn&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    return describe_error(e);
  }
  return "";
}

}  // namespace

std::string softmax_fwd_declines(const SoftmaxFwdProblem& p) {
  if (p.x.numel() == 0) return "empty tensor";
  if (std::string why = why_not_computes_in(p.x.dtype()); !why.empty()) return why;
  return try_create([&] { fwd(p.x.shape(), p.x.dtype(), p.axis, p.log); });
}

void softmax_fwd(const SoftmaxFwdProblem& p) {
  const auto k = fwd(p.x.shape(), p.x.dtype(), p.axis, p.log);
  execute(k->prim, Args{{DNNL_ARG_SRC, mem(k->pd.src_desc(), p.x.data_ptr())},
                        {DNNL_ARG_DST, mem(k->pd.dst_desc(), p.y.data_ptr())}});
  fill_nan_rows(p.y, p.axis);  // a NaN or +inf in x leaves the rest of its row finite
}

std::string softmax_bwd_declines(const SoftmaxBwdProblem& p) {
  if (p.y.numel() == 0) return "empty tensor";
  if (std::string why = why_not_computes_in(p.y.dtype()); !why.empty()) return why;
  return try_create([&] { bwd(p.y.shape(), p.y.dtype(), p.axis, p.log); });
}

void softmax_bwd(const SoftmaxBwdProblem& p) {
  const auto k = bwd(p.y.shape(), p.y.dtype(), p.axis, p.log);
  execute(k->prim, Args{{DNNL_ARG_DST, mem(k->pd.dst_desc(), p.y.data_ptr())},
                        {DNNL_ARG_DIFF_DST, mem(k->pd.diff_dst_desc(), p.dy.data_ptr())},
                        {DNNL_ARG_DIFF_SRC, mem(k->pd.diff_src_desc(), p.dx.data_ptr())}});
  if (p.log) nan_where_nan(p.y, p.dx);  // the jit backward's exp(NaN) is 3.4e38
}

}  // namespace mixprec::ops::onednn
