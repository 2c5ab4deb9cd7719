// oneDNN pooling (see pool.h). Tensors are described with the canonical strides of their
// layout (all of them are dense in it), so the forward's primitive, which the backward takes as
// its hint, is found again in the cache by the backward. Primitives and refusals are cached
// per thread.
#include "ops/onednn/kernels.h"

#include "ops/onednn/context.h"

namespace mixprec::ops::onednn {
using dnnl::memory;

namespace {

dnnl::algorithm algorithm_of(const PoolGeometry& g) {
  if (g.kind == PoolKind::max) return dnnl::algorithm::pooling_max;
  // Without padding, PyTorch's count_include_pad divisor is the in-image count as well.
  if (!g.count_include_pad || (g.pad_t == 0 && g.pad_l == 0))
    return dnnl::algorithm::pooling_avg_exclude_padding;
  return dnnl::algorithm::pooling_avg_include_padding;
}

std::string geometry_reason(const PoolGeometry& g) {
  if (g.adaptive) return "adaptive bins that are not uniform";
  if (algorithm_of(g) == dnnl::algorithm::pooling_avg_include_padding &&
      (g.pad_b > g.pad_t || g.pad_r > g.pad_l))
    return "a ceil_mode window reaches past the padding (PyTorch's divisor differs from oneDNN's)";
  return "";
}

std::string dtype_reason(DType d) {
  return d == DType::f16 ? "f16 pooling runs in the reference kernel" : why_not_computes_in(d);
}

memory::desc canonical_md(const Shape& s, DType d, const PoolGeometry& g) {
  return md(s, detail::image_strides(s, g.layout), d);
}

struct Geo {
  memory::dims strides, kernel, pad_l, pad_r;
};
Geo geo(const PoolGeometry& g) {
  return {{g.stride_h, g.stride_w}, {g.kh, g.kw}, {g.pad_t, g.pad_l}, {g.pad_b, g.pad_r}};
}

std::string key_of(const char* what, DType d, const PoolGeometry& g, bool training) {
  std::string k = what;
  key_add(k, std::string(dtype_name(d)));
  for (int64_t v : {g.n, g.c, g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_t,
                    g.pad_l, g.pad_b, g.pad_r})
    key_add(k, v);
  key_add(k, static_cast<int64_t>(algorithm_of(g)));
  key_add(k, g.layout == ImageLayout::nhwc ? 1 : 0);
  key_add(k, training ? 1 : 0);
  return k;
}

struct FwdEntry {
  std::string error;
  dnnl::pooling_forward::primitive_desc pd;
  dnnl::pooling_forward prim;
};

std::shared_ptr<FwdEntry> fwd_entry(DType d, const PoolGeometry& g, bool training) {
  return cache().get_or_create<FwdEntry>(key_of("pool_fwd", d, g, training), [&] {
    FwdEntry e;
    try {
      const Geo q = geo(g);
      const dnnl::pooling_forward::desc desc(
          training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
          algorithm_of(g), canonical_md(g.in_shape(), d, g), canonical_md(g.out_shape(), d, g),
          q.strides, q.kernel, q.pad_l, q.pad_r);
      e.pd = dnnl::pooling_forward::primitive_desc(desc, engine());
      e.prim = dnnl::pooling_forward(e.pd);
    } catch (const dnnl::error& err) {
      e.error = describe_error(err);
    }
    return e;
  });
}

struct BwdEntry {
  std::string error;
  dnnl::pooling_backward::primitive_desc pd;
  dnnl::pooling_backward prim;
};

std::shared_ptr<BwdEntry> bwd_entry(DType d, const PoolGeometry& g) {
  return cache().get_or_create<BwdEntry>(key_of("pool_bwd", d, g, true), [&] {
    BwdEntry e;
    const auto hint = fwd_entry(d, g, true);
    if (!hint->error.empty()) {
      e.error = hint->error;
      return e;
    }
    try {
      const Geo q = geo(g);
      const dnnl::pooling_backward::desc desc(algorithm_of(g), canonical_md(g.in_shape(), d, g),
                                              canonical_md(g.out_shape(), d, g), q.strides,
                                              q.kernel, q.pad_l, q.pad_r);
      e.pd = dnnl::pooling_backward::primitive_desc(desc, engine(), hint->pd);
      e.prim = dnnl::pooling_backward(e.pd);
    } catch (const dnnl::error& err) {
      e.error = describe_error(err);
    }
    return e;
  });
}

bool keeps_workspace(const PoolFwdProblem& p) {
  return p.workspace != nullptr && p.g.kind == PoolKind::max;
}

}  // namespace

std::string pool_fwd_declines(const PoolFwdProblem& p) {
  if (auto why = dtype_reason(p.x.dtype()); !why.empty()) return why;
  if (auto why = geometry_reason(p.g); !why.empty()) return why;
  return fwd_entry(p.x.dtype(), p.g, keeps_workspace(p))->error;
}

void pool_fwd(const PoolFwdProblem& p) {
  const bool training = keeps_workspace(p);
  const auto e = fwd_entry(p.x.dtype(), p.g, training);
  MIXPREC_ASSERT(e->error.empty(), "pooling: running a declined oneDNN primitive: ", e->error);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(e->pd.src_desc(), p.x.data_ptr())},
                                       {DNNL_ARG_DST, mem(e->pd.dst_desc(), p.y.data_ptr())}};
  if (training) {
    const memory::desc ws = e->pd.workspace_desc();
    const Shape s{static_cast<int64_t>(ws.get_size())};
    // A replayed call (GRAPH_MODE) hands back the workspace it made before.
    if (!p.workspace->defined() || p.workspace->shape() != s || p.workspace->dtype() != DType::u8)
      *p.workspace = Tensor::empty(s, {.dtype = DType::u8});
    args[DNNL_ARG_WORKSPACE] = mem(ws, p.workspace->data_ptr());
  }
  execute(e->prim, args);
}

std::string pool_bwd_declines(const PoolBwdProblem& p) {
  if (auto why = dtype_reason(p.dy.dtype()); !why.empty()) return why;
  if (auto why = geometry_reason(p.g); !why.empty()) return why;
  if (p.g.kind == PoolKind::max && (!p.workspace.defined() || p.workspace.dim() != 1))
    return "no oneDNN workspace (the forward ran in another implementation)";
  return bwd_entry(p.dy.dtype(), p.g)->error;
}

void pool_bwd(const PoolBwdProblem& p) {
  const auto e = bwd_entry(p.dy.dtype(), p.g);
  MIXPREC_ASSERT(e->error.empty(), "pooling: running a declined oneDNN primitive: ", e->error);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_DIFF_DST, mem(e->pd.diff_dst_desc(), p.dy.data_ptr())},
      {DNNL_ARG_DIFF_SRC, mem(e->pd.diff_src_desc(), p.dx.data_ptr())}};
  if (p.g.kind == PoolKind::max) {
    const memory::desc ws = e->pd.workspace_desc();
    MIXPREC_ASSERT(p.workspace.nbytes() == ws.get_size(), "max_pool2d: workspace size mismatch");
    args[DNNL_ARG_WORKSPACE] = mem(ws, p.workspace.data_ptr());
  }
  execute(e->prim, args);
}

}  // namespace mixprec::ops::onednn
