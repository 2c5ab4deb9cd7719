// oneDNN convolution: forward (bias and ReLU fused as a post-op), backward-data and
// backward-weights (f32 diff weights/bias for bf16 inputs).
// Activations (x, y, dy, dx) are described with their exact strides, so NCHW and channels-last
// tensors go in without a reorder. Weights are handed over as format `any`: oneDNN's fast
// kernels (brgconv, jit, AMX) want them blocked, and with plain weights it falls back to its
// reference kernel for channels-last; the one reorder per call is of the (small) weights.
// Primitives (or the reason oneDNN refuses) are cached per thread, keyed by shapes, strides,
// dtypes and geometry; a oneDNN "ref:" choice is declined in favour of our reference kernel.
#include "ops/onednn/kernels.h"
#include "mixprec/ops/ops.h"

#include <optional>

#include "ops/layout.h"
#include "ops/onednn/context.h"
#include "core/strided_copy.h"

namespace mixprec::ops::onednn {
using dnnl::memory;

namespace {

// What a primitive needs to know of a tensor (its key and memory descriptor).
struct Spec {
  Shape shape;
  Strides strides;
  DType dtype = DType::f32;
  bool defined = false;
};

Spec spec(const Tensor& t) {
  return t.defined() ? Spec{t.shape(), t.strides(), t.dtype(), true} : Spec{};
}

void key_spec(std::string& k, const Spec& s) {
  if (!s.defined) return key_add(k, std::string("none"));
  k += dtype_name(s.dtype);
  for (int64_t v : s.shape) k += ',' + std::to_string(v);
  k += '/';
  for (int64_t v : s.strides) k += ',' + std::to_string(v);
  k += ';';
}

memory::desc md_of(const Spec& s) {
  return s.defined ? md(s.shape, s.strides, s.dtype) : memory::desc();
}
memory::desc any_like(const memory::desc& d) {
  return memory::desc(d.dims(), d.data_type(), memory::format_tag::any);
}
// [cout, cin/g, kh, kw], or for groups > 1 the 5-D view [g, cout/g, cin/g, kh, kw] oneDNN wants.
memory::desc weights_md(const Spec& w, int64_t groups) {
  if (groups == 1) return md_of(w);
  const Shape& s = w.shape;
  const Strides& st = w.strides;
  return md({groups, s[0] / groups, s[1], s[2], s[3]},
            {st[0] * (s[0] / groups), st[0], st[1], st[2], st[3]}, w.dtype);
}

struct Geo {
  memory::dims strides, dilates, pad_l, pad_r;
};
Geo geo(const ConvGeometry& g) {  // oneDNN counts dilation from 0
  return {
      {g.stride_h, g.stride_w}, {g.dil_h - 1, g.dil_w - 1}, {g.pad_t, g.pad_l}, {g.pad_b, g.pad_r}};
}

template <class PD> std::string ref_kernel_reason(const PD& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("ref", 0) == 0 ? "oneDNN would run its reference kernel (" + impl + ")" : "";
}

// A reorder between the plain weights and the format the primitive chose, if they differ.
std::optional<dnnl::reorder> reorder_between(const memory::desc& from, const memory::desc& to) {
  if (from == to) return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

// Memory for `want` backed by a scratch tensor (our allocator, so peak memory counts it).
memory scratch(const memory::desc& want, Tensor& holder) {
  holder = Tensor::empty({static_cast<int64_t>(want.get_size())}, {.dtype = DType::u8});
  return mem(want, holder.data_ptr());
}

// Reorder #1 (weights only): plain weights into the primitive's format, when they differ.
memory weights_in(const std::optional<dnnl::reorder>& r, const memory::desc& plain,
                  const memory::desc& want, const Tensor& w, Tensor& holder) {
  memory user = mem(plain, w.data_ptr());
  if (!r) return user;
  memory m = scratch(want, holder);
  execute(*r, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
  return m;
}

// ---------------------------------------------------------------- forward

struct FwdEntry {
  std::string error;  // why oneDNN declines; empty if usable
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  memory::desc w_plain;
  std::optional<dnnl::reorder> w_reorder;
};

FwdEntry make_fwd(const Spec& x, const Spec& w, const Spec& b, const Spec& y, const ConvGeometry& g,
                  bool relu) {
  FwdEntry e;
  try {
    const Geo q = geo(g);
    e.w_plain = weights_md(w, g.groups);
    const dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, md_of(x),
        any_like(e.w_plain), md_of(b), md_of(y), q.strides, q.dilates, q.pad_l, q.pad_r);
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops po;
      // Same as ops::relu on finite values. Non-finite outputs (only from non-finite inputs)
      // differ: oneDNN's f32 kernels give NaN for NaN and for -inf (0 * -inf), ops::relu 0.
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    e.pd = dnnl::convolution_forward::primitive_desc(d, attr, engine());
    e.error = ref_kernel_reason(e.pd);
    if (!e.error.empty()) return e;
    e.prim = dnnl::convolution_forward(e.pd);
    e.w_reorder = reorder_between(e.w_plain, e.pd.weights_desc());
  } catch (const dnnl::error& err) {
    e.error = describe_error(err);
  }
  return e;
}

std::shared_ptr<FwdEntry> fwd_entry(const Spec& x, const Spec& w, const Spec& b, const Spec& y,
                                    const ConvGeometry& g, bool relu) {
  std::string k = "conv_fwd;";
  for (const Spec* s : {&x, &w, &b, &y}) key_spec(k, *s);
  key_add(k, g.str());
  key_add(k, relu ? 1 : 0);
  return cache().get_or_create<FwdEntry>(k, [&] { return make_fwd(x, w, b, y, g, relu); });
}

void run_fwd(const FwdEntry& e, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  MIXPREC_ASSERT(e.error.empty(), "conv2d: running a declined oneDNN primitive: ", e.error);
  Tensor holder;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, mem(e.pd.src_desc(), x.data_ptr())},
      {DNNL_ARG_WEIGHTS, weights_in(e.w_reorder, e.w_plain, e.pd.weights_desc(), w, holder)},
      {DNNL_ARG_DST, mem(e.pd.dst_desc(), y.data_ptr())}};
  if (b.defined()) args[DNNL_ARG_BIAS] = mem(e.pd.bias_desc(), b.data_ptr());
  execute(e.prim, args);
}

// ---------------------------------------------------------------- backward data

struct BwdDataEntry {
  std::string error;
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  memory::desc w_plain;
  std::optional<dnnl::reorder> w_reorder;
};

BwdDataEntry make_bwd_data(const Spec& dx, const Spec& w, const Spec& dy, const ConvGeometry& g) {
  BwdDataEntry e;
  try {
    const Geo q = geo(g);
    e.w_plain = weights_md(w, g.groups);
    const dnnl::convolution_forward::desc hint_d(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, md_of(dx),
        any_like(e.w_plain), memory::desc(), md_of(dy), q.strides, q.dilates, q.pad_l, q.pad_r);
    const dnnl::convolution_forward::primitive_desc hint(hint_d, engine());
    const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, md_of(dx),
                                                  any_like(e.w_plain), md_of(dy), q.strides,
                                                  q.dilates, q.pad_l, q.pad_r);
    e.pd = dnnl::convolution_backward_data::primitive_desc(d, engine(), hint);
    e.error = ref_kernel_reason(e.pd);
    if (!e.error.empty()) return e;
    e.prim = dnnl::convolution_backward_data(e.pd);
    e.w_reorder = reorder_between(e.w_plain, e.pd.weights_desc());
  } catch (const dnnl::error& err) {
    e.error = describe_error(err);
  }
  return e;
}

std::shared_ptr<BwdDataEntry> bwd_data_entry(const Spec& dx, const Spec& w, const Spec& dy,
                                             const ConvGeometry& g) {
  std::string k = "conv_bwd_data;";
  for (const Spec* s : {&dx, &w, &dy}) key_spec(k, *s);
  key_add(k, g.str());
  return cache().get_or_create<BwdDataEntry>(k, [&] { return make_bwd_data(dx, w, dy, g); });
}

void run_bwd_data(const BwdDataEntry& e, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  MIXPREC_ASSERT(e.error.empty(), "conv2d: running a declined oneDNN primitive: ", e.error);
  Tensor holder;
  execute(e.prim,
          {{DNNL_ARG_DIFF_DST, mem(e.pd.diff_dst_desc(), dy.data_ptr())},
           {DNNL_ARG_WEIGHTS, weights_in(e.w_reorder, e.w_plain, e.pd.weights_desc(), w, holder)},
           {DNNL_ARG_DIFF_SRC, mem(e.pd.diff_src_desc(), dx.data_ptr())}});
}

// ---------------------------------------------------------------- backward weights

struct BwdWeightsEntry {
  std::string error;
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  memory::desc dw_plain;
  std::optional<dnnl::reorder> dw_reorder;  // primitive's format -> plain
};

BwdWeightsEntry make_bwd_weights(const Spec& x, const Spec& dy, const Spec& dw, const Spec& db,
                                 const ConvGeometry& g) {
  BwdWeightsEntry e;
  try {
    const Geo q = geo(g);
    e.dw_plain = weights_md(dw, g.groups);
    const memory::desc w_any(e.dw_plain.dims(), data_type(x.dtype), memory::format_tag::any);
    const dnnl::convolution_forward::desc hint_d(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, md_of(x), w_any,
        memory::desc(), md_of(dy), q.strides, q.dilates, q.pad_l, q.pad_r);
    const dnnl::convolution_forward::primitive_desc hint(hint_d, engine());
    const dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, md_of(x),
                                                     any_like(e.dw_plain), md_of(db), md_of(dy),
                                                     q.strides, q.dilates, q.pad_l, q.pad_r);
    e.pd = dnnl::convolution_backward_weights::primitive_desc(d, engine(), hint);
    e.error = ref_kernel_reason(e.pd);
    if (!e.error.empty()) return e;
    e.prim = dnnl::convolution_backward_weights(e.pd);
    e.dw_reorder = reorder_between(e.pd.diff_weights_desc(), e.dw_plain);
  } catch (const dnnl::error& err) {
    e.error = describe_error(err);
  }
  return e;
}

std::shared_ptr<BwdWeightsEntry> bwd_weights_entry(const Spec& x, const Spec& dy, const Spec& dw,
                                                   const Spec& db, const ConvGeometry& g) {
  std::string k = "conv_bwd_weights;";
  for (const Spec* s : {&x, &dy, &dw, &db}) key_spec(k, *s);
  key_add(k, g.str());
  return cache().get_or_create<BwdWeightsEntry>(k,
                                                [&] { return make_bwd_weights(x, dy, dw, db, g); });
}

void run_bwd_weights(const BwdWeightsEntry& e, const Tensor& x, const Tensor& dy, const Tensor& dw,
                     const Tensor& db) {
  MIXPREC_ASSERT(e.error.empty(), "conv2d: running a declined oneDNN primitive: ", e.error);
  Tensor holder;
  const memory user_dw = mem(e.dw_plain, dw.data_ptr());
  const memory out_dw = e.dw_reorder ? scratch(e.pd.diff_weights_desc(), holder) : user_dw;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, mem(e.pd.src_desc(), x.data_ptr())},
      {DNNL_ARG_DIFF_DST, mem(e.pd.diff_dst_desc(), dy.data_ptr())},
      {DNNL_ARG_DIFF_WEIGHTS, out_dw}};
  if (db.defined()) args[DNNL_ARG_DIFF_BIAS] = mem(e.pd.diff_bias_desc(), db.data_ptr());
  execute(e.prim, args);
  // Reorder #2 (weight gradient only): the primitive's format back to plain [O, I, kh, kw].
  if (e.dw_reorder) execute(*e.dw_reorder, {{DNNL_ARG_FROM, out_dw}, {DNNL_ARG_TO, user_dw}});
}

// What the primitive computes in is the CPU's (computes_in), whether or not the f32 route is a
// candidate too (measured kernel choice times both).
std::string dtype_reason(DType d) {
  if (computes_in(d)) return "";
  return why_not_via_f32(d).empty() ? std::string(dtype_name(d)) + " runs through low_via_f32"
                                    : why_not_computes_in(d);
}

}  // namespace

// ---------------------------------------------------------------- the impls

std::string conv_fwd_declines(const ConvFwdProblem& p) {
  if (auto why = dtype_reason(p.x.dtype()); !why.empty()) return why;
  return fwd_entry(spec(p.x), spec(p.w), spec(p.b), spec(p.y), p.g, p.relu)->error;
}
void conv_fwd(const ConvFwdProblem& p) {
  run_fwd(*fwd_entry(spec(p.x), spec(p.w), spec(p.b), spec(p.y), p.g, p.relu), p.x, p.w, p.b, p.y);
}

std::string conv_bwd_data_declines(const ConvBwdDataProblem& p) {
  if (auto why = dtype_reason(p.dy.dtype()); !why.empty()) return why;
  return bwd_data_entry(spec(p.dx), spec(p.w), spec(p.dy), p.g)->error;
}
void conv_bwd_data(const ConvBwdDataProblem& p) {
  run_bwd_data(*bwd_data_entry(spec(p.dx), spec(p.w), spec(p.dy), p.g), p.dy, p.w, p.dx);
}

std::string conv_bwd_weights_declines(const ConvBwdWeightsProblem& p) {
  if (auto why = dtype_reason(p.x.dtype()); !why.empty()) return why;
  if (!p.dw.defined()) return "only the bias gradient is needed";
  return bwd_weights_entry(spec(p.x), spec(p.dy), spec(p.dw), spec(p.db), p.g)->error;
}
void conv_bwd_weights(const ConvBwdWeightsProblem& p) {
  run_bwd_weights(*bwd_weights_entry(spec(p.x), spec(p.dy), spec(p.dw), spec(p.db), p.g), p.x, p.dy,
                  p.dw, p.db);
}

}  // namespace mixprec::ops::onednn
