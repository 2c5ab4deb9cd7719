// oneDNN matmul kernels (see kernels.h). Memory descriptors carry the tensors' own strides; dims
// of size 1 get the stride a packed layout would give them, so oneDNN recognises plain
// row-major / transposed formats. A primitive descriptor that fails to build is cached as a
// decline reason, so an unsupported shape costs one attempt per thread, not one per call.
#include "ops/onednn/kernels.h"
#include "mixprec/ops/ops.h"

#include <algorithm>
#include <vector>

#include "mixprec/convert.h"
#include "ops/onednn/context.h"

namespace mixprec::ops::onednn {

namespace {

// Strides with size-1 dims set to the span of the dims inside them.
Strides normalised_strides(const Shape& shape, Strides strides) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1) continue;
    int64_t span = 1;
    for (size_t j = d + 1; j < shape.size(); ++j) span = std::max(span, strides[j] * shape[j]);
    strides[d] = span;
  }
  return strides;
}

dnnl::memory::desc operand_md(const Tensor& t) {
  return md(t.shape(), normalised_strides(t.shape(), t.strides()), t.dtype());
}

// Bias [N] as [1, ..., 1, N] of the output's rank.
dnnl::memory::desc bias_md(const Tensor& bias, size_t rank) {
  Shape shape(rank, 1);
  shape.back() = bias.size(0);
  Strides strides(rank, 0);
  strides.back() = bias.strides()[0];
  return md(shape, normalised_strides(shape, strides), bias.dtype());
}

struct MatmulEntry {
  std::string error;  // non-empty: oneDNN cannot do this problem
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

std::shared_ptr<MatmulEntry> entry_for(const MatmulProblem& p) {
  std::string key = "matmul;";
  key_add(key, p.a);
  key_add(key, p.b);
  key_add(key, p.bias);
  key_add(key, p.out);
  key_add(key, p.relu ? 1 : 0);
  return cache().get_or_create<MatmulEntry>(key, [&] {
    MatmulEntry e;
    try {
      const dnnl::memory::desc a = operand_md(p.a), b = operand_md(p.b), o = operand_md(p.out);
      dnnl::primitive_attr attr;
      if (p.relu) {
        dnnl::post_ops po;
        po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
        attr.set_post_ops(po);
      }
      const auto desc = p.bias.defined()
                            ? dnnl::matmul::desc(a, b, bias_md(p.bias, p.out.shape().size()), o)
                            : dnnl::matmul::desc(a, b, o);
      e.pd = dnnl::matmul::primitive_desc(desc, attr, engine());
      e.prim = dnnl::matmul(e.pd);
    } catch (const dnnl::error& err) {
      e.error = describe_error(err);
    }
    return e;
  });
}

std::string dtype_reason(const MatmulProblem& p) {
  const DType d = p.a.dtype();
  if (std::string why = why_not_computes_in(d); !why.empty()) return why;
  if (p.out.dtype() != d && p.out.dtype() != DType::f32)
    return "dst must be the operands' dtype or f32, got " + std::string(dtype_name(p.out.dtype()));
  if (p.bias.defined() && p.bias.dtype() != d && p.bias.dtype() != DType::f32)
    return "bias must be the operands' dtype or f32";
  return "";
}

bool empty_problem(const MatmulProblem& p) { return p.out.numel() == 0 || p.a.shape().back() == 0; }

}  // namespace

std::string matmul_declines(const MatmulProblem& p) {
  if (std::string why = dtype_reason(p); !why.empty()) return why;
  if (empty_problem(p)) return "empty problem";
  return entry_for(p)->error;
}

void matmul(const MatmulProblem& p) {
  const std::shared_ptr<MatmulEntry> e = entry_for(p);
  MIXPREC_ASSERT(e->error.empty(), "oneDNN matmul run after it declined: ", e->error);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, mem(e->pd.src_desc(), p.a.data_ptr())},
      {DNNL_ARG_WEIGHTS, mem(e->pd.weights_desc(), p.b.data_ptr())},
      {DNNL_ARG_DST, mem(e->pd.dst_desc(), p.out.data_ptr())}};
  if (p.bias.defined()) args.emplace(DNNL_ARG_BIAS, mem(e->pd.bias_desc(), p.bias.data_ptr()));
  execute(e->prim, args);
}

std::string matmul_impl_name(const MatmulProblem& p) {
  if (std::string why = dtype_reason(p); !why.empty()) return "declined: " + why;
  if (empty_problem(p)) return "declined: empty problem";
  const std::shared_ptr<MatmulEntry> e = entry_for(p);
  return e->error.empty() ? e->pd.impl_info_str() : "declined: " + e->error;
}

}  // namespace mixprec::ops::onednn
