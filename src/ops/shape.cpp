// Shape ops and copies, differentiable: view/reshape/flatten/squeeze/unsqueeze, permute,
// transpose, slice, concat, broadcast_to, contiguous/clone and cast. Views alias storage; their
// backward maps the gradient back (reshape back, inverse permute, scatter into zeros, sum over
// broadcast dims). Tensor's view methods are defined here so that they record history too.
#include <numeric>

#include "core/tensor_raw.h"
#include "mixprec/ops/numerics.h"
#include "ops/cast_cache.h"
#include "ops/layout.h"
#include "ops/layout_choice.h"
#include "ops/op_common.h"

namespace mixprec {
namespace ops {
using namespace detail;

// ---------------------------------------------------------------- view / reshape

Tensor reshape(const Tensor& x, const Shape& shape) {
  const Shape target = mixprec::detail::infer_reshape(shape, x.numel());
  std::optional<Tensor> v = mixprec::detail::raw_try_view(x, target);
  if (!v) note_row_major_copy(x);
  Tensor out = v ? *v : mixprec::detail::raw_view(mixprec::detail::raw_copy(x, x.dtype()), target);
  carry_explicit_dtype({&x}, out);
  if (autograd::needs_grad({&x})) {
    const Shape in_shape = x.shape();
    record(OpId::view, {x}, out, [in_shape](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{reshape(g[0], in_shape)};
    });
  }
  return out;
}

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  const int64_t nd = x.dim();
  if (nd == 0) return reshape(x, {1});
  start = wrap_dim(start, nd, "flatten start");
  end = wrap_dim(end, nd, "flatten end");
  MIXPREC_CHECK(start <= end, "flatten: start dim ", start, " is after end dim ", end);
  Shape s(x.shape().begin(), x.shape().begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= x.shape()[static_cast<size_t>(i)];
  s.push_back(m);
  s.insert(s.end(), x.shape().begin() + end + 1, x.shape().end());
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  Shape s;
  if (dim) {
    const int64_t d = wrap_dim(*dim, x.dim(), "squeeze dim");
    s = x.shape();
    if (s[static_cast<size_t>(d)] == 1) s.erase(s.begin() + d);
  } else {
    for (int64_t v : x.shape())
      if (v != 1) s.push_back(v);
  }
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze dim");
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}

// ---------------------------------------------------------------- permute / transpose / slice

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor out = mixprec::detail::raw_permute(x, dims);
  carry_explicit_dtype({&x}, out);
  if (autograd::needs_grad({&x})) {
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
      inverse[static_cast<size_t>(wrap_dim(dims[i], x.dim()))] = static_cast<int64_t>(i);
    record(OpId::permute, {x}, out, [inverse](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{permute(g[0], inverse)};
    });
  }
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  std::vector<int64_t> p(static_cast<size_t>(x.dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[static_cast<size_t>(wrap_dim(dim0, x.dim()))],
            p[static_cast<size_t>(wrap_dim(dim1, x.dim()))]);
  return permute(x, p);
}

// Writes g into the slice of a zero tensor of `shape` (the adjoint of slicing).
static Tensor scatter_slice(const Tensor& g, const Shape& shape, int64_t dim, int64_t start,
                            int64_t end, int64_t step) {
  Tensor full = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
  NoGradGuard no_grad;
  mixprec::detail::raw_slice(full, dim, start, end, step).copy_(g);
  return full;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor out = mixprec::detail::raw_slice(x, dim, start, end, step);
  carry_explicit_dtype({&x}, out);
  if (autograd::needs_grad({&x})) {
    const Shape in_shape = x.shape();
    record(OpId::slice, {x}, out, [=](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{scatter_slice(g[0], in_shape, dim, start, end, step)};
    });
  }
  return out;
}

// ---------------------------------------------------------------- unbind

// One autograd node for all the parts (recorded as a slice): its backward writes each part's
// gradient into one tensor laid out like x (a missing one arrives as zeros from the engine),
// where a slice per part would make a zero tensor of x's whole shape each, sum them, and
// leave a permuted x's gradient in row-major order for its view to copy.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  MIXPREC_CHECK(x.dim() > 0, "unbind: cannot unbind a scalar", Hint{"unsqueeze it first"});
  const int64_t d = wrap_dim(dim, x.dim(), "unbind dim");
  Shape part = x.shape();
  part.erase(part.begin() + d);
  std::vector<Tensor> outs;
  for (int64_t i = 0; i < x.size(d); ++i) {
    outs.push_back(mixprec::detail::raw_view(mixprec::detail::raw_slice(x, d, i, i + 1, 1), part));
    carry_explicit_dtype({&x}, outs.back());
  }
  if (autograd::needs_grad({&x}) && !outs.empty()) {
    const Shape in_shape = x.shape();
    const Strides layout = dense_strides_like(x);
    Strides part_strides = layout;
    part_strides.erase(part_strides.begin() + d);
    record(OpId::slice, {x}, outs, [=](const std::vector<Tensor>& g) {
      // Parts that already are x's layout over one storage (the attention's dq, dk, dv written
      // interleaved): that storage is the gradient.
      bool whole = true;
      for (size_t i = 0; i < g.size() && whole; ++i)
        whole = g[i].storage() == g[0].storage() && g[i].strides() == part_strides &&
                g[i].offset() == g[0].offset() + static_cast<int64_t>(i) * layout[d];
      if (whole)
        return std::vector<Tensor>{
            Tensor::from_storage(g[0].storage(), in_shape, layout, g[0].offset(), g[0].dtype())};
      Tensor full = empty_strided(in_shape, layout, g[0].dtype(), g[0].device());
      NoGradGuard no_grad;
      for (size_t i = 0; i < g.size(); ++i) {
        const auto at = static_cast<int64_t>(i);
        mixprec::detail::raw_view(mixprec::detail::raw_slice(full, d, at, at + 1, 1), part)
            .copy_(g[i]);
      }
      return std::vector<Tensor>{full};
    });
  }
  return outs;
}

// ---------------------------------------------------------------- concat

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  MIXPREC_CHECK(!xs.empty(), "concat: expected at least one tensor");
  const int64_t nd = xs[0].dim();
  MIXPREC_CHECK(nd > 0, "concat: cannot concatenate scalars", Hint{"unsqueeze them first"});
  axis = wrap_dim(axis, nd, "concat axis");
  DType dt = xs[0].dtype();
  Shape out_shape = xs[0].shape();
  out_shape[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    MIXPREC_CHECK(t.dim() == nd, "concat: tensor ", i, " has ", t.dim(), " dims, expected ", nd);
    for (int64_t d = 0; d < nd; ++d)
      MIXPREC_CHECK(
          d == axis || t.shape()[static_cast<size_t>(d)] == xs[0].shape()[static_cast<size_t>(d)],
          "concat: tensor ", i, " has shape ", shape_str(t.shape()), ", expected ",
          shape_str(xs[0].shape()), " except along axis ", axis);
    out_shape[static_cast<size_t>(axis)] += t.shape()[static_cast<size_t>(axis)];
    dt = promote(dt, t.dtype());
  }
  Tensor out = Tensor::empty(out_shape, {.dtype = dt, .device = xs[0].device()});
  std::vector<int64_t> sizes;
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& t : xs) {
      const int64_t n = t.shape()[static_cast<size_t>(axis)];
      mixprec::detail::raw_slice(out, axis, at, at + n, 1).copy_(t);
      sizes.push_back(n);
      at += n;
    }
  }
  uint64_t mark = 0;
  for (const Tensor& t : xs) mark = outer_explicit_dtype_mark(mark, explicit_dtype_mark(t));
  if (mark != 0) mark_explicit_dtype(out, mark);
  if (autograd::needs_grad(xs)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : xs) dtypes.push_back(t.dtype());
    record(OpId::concat, xs, out, [sizes, dtypes, axis](const std::vector<Tensor>& g) {
      std::vector<Tensor> grads;
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(amp_cast(slice(g[0], axis, at, at + sizes[i]), dtypes[i]));
        at += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

// ---------------------------------------------------------------- broadcast_to

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  MIXPREC_CHECK(shape.size() >= x.shape().size(), "broadcast_to: cannot broadcast ",
                shape_str(x.shape()), " to fewer dims ", shape_str(shape));
  const size_t lead = shape.size() - x.shape().size();
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < x.shape().size(); ++i) {
    const int64_t from = x.shape()[i], to = shape[lead + i];
    MIXPREC_CHECK(from == to || from == 1, "broadcast_to: cannot broadcast ", shape_str(x.shape()),
                  " to ", shape_str(shape), " (dim ", lead + i, ": ", from, " vs ", to, ")");
    st[lead + i] = from == 1 ? 0 : x.strides()[i];
  }
  Tensor out = Tensor::from_storage(x.storage(), shape, st, x.offset(), x.dtype());
  carry_explicit_dtype({&x}, out);
  if (autograd::needs_grad({&x})) {
    const Shape in_shape = x.shape();
    record(OpId::broadcast_to, {x}, out, [in_shape](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{reduce_to_shape(g[0], in_shape)};
    });
  }
  return out;
}

// ---------------------------------------------------------------- copies and casts

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = mixprec::detail::raw_copy(x, x.dtype());
  carry_explicit_dtype({&x}, out);
  if (autograd::needs_grad({&x})) {
    record(OpId::contiguous, {x}, out,
           [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return out;
}

namespace {
Tensor convert(const Tensor& x, DType dtype) {
  MIXPREC_CHECK(!x.requires_grad() || is_floating(dtype),
                "cast: cannot cast a tensor that requires grad to the non-floating dtype ",
                dtype_name(dtype), Hint{"detach() it first"});
  // Leaves that require grad (weights) under autocast go through the weight cast cache.
  CastCache* cache = autocast_state().cache;
  const bool cacheable = cache && x.is_leaf() && x.requires_grad();
  Tensor out;
  if (cacheable) {
    Tensor hit = cache->lookup(x, dtype);
    if (hit.defined()) out = hit.detach();
  }
  if (!out.defined()) {
    out = mixprec::detail::raw_convert(x, dtype);
    if (cacheable) cache->store(x, out.detach());
    AmpCounters& c = amp_counters();
    ++c.casts;
    c.cast_bytes += static_cast<int64_t>(out.nbytes());
    if (NumericsCheckScope* check = numerics_check();
        check && !check->first() && is_floating(dtype)) {
      const FiniteSummary f = summarize_finite(out);
      if (f.nonfinite > 0)  // a finite input that overflows the narrower dtype
        check->record(NonFiniteEvent{OpId::cast, "cast", current_cell_path(), "forward",
                                     std::string("cast ") + std::string(dtype_name(x.dtype())) +
                                         " -> " + std::string(dtype_name(dtype)),
                                     dtype, summarize_finite(x).max_abs, f.nonfinite, f.has_nan});
    }
  }
  // A convolution's channels-last output cast to another dtype (O1's fp32 ops after a bf16
  // convolution) keeps its layout, and its layout-choice mark with it (ops/layout_choice.h).
  if (const uint32_t site = layout_site(x); site != 0 && out.strides() == x.strides())
    mark_layout_site(out, site);
  if (autograd::needs_grad({&x})) {
    const DType src = x.dtype();
    record(
        OpId::cast, {x}, out,
        [src](const std::vector<Tensor>& g) { return std::vector<Tensor>{amp_cast(g[0], src)}; },
        /*accepts_any_grad_dtype=*/true);
  }
  if (op_recording())
    record_op(OpRecord{OpId::cast, current_cell_path(), {x.dtype()}, {}, dtype, dtype, 0, false});
  return out;
}
}  // namespace

Tensor amp_cast(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : convert(x, dtype); }

// The user's cast: converts, and marks the result as an explicit dtype choice. Casting to the
// dtype x already has still marks it, on an alias, so that x's other uses are not affected.
Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() != dtype) {
    Tensor out = convert(x, dtype);
    mark_explicit_dtype(out);
    return out;
  }
  if (has_explicit_dtype(x)) return x;
  Tensor out = Tensor::from_storage(x.storage(), x.shape(), x.strides(), x.offset(), x.dtype());
  if (autograd::needs_grad({&x})) {
    record(
        OpId::cast, {x}, out,
        [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; },
        /*accepts_any_grad_dtype=*/true);
  }
  mark_explicit_dtype(out);
  return out;
}

}  // namespace ops

// ---------------------------------------------------------------- Tensor's view methods

Tensor Tensor::view(const Shape& shape) const {
  const Shape target = detail::infer_reshape(shape, numel());
  detail::raw_view(*this, target);  // throws with a hint if a copy would be needed
  return ops::reshape(*this, target);
}
Tensor Tensor::reshape(const Shape& shape) const { return ops::reshape(*this, shape); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return ops::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ops::transpose(*this, d0, d1); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return ops::slice(*this, dim, start, end, step);
}
Tensor Tensor::contiguous() const { return ops::contiguous(*this); }
Tensor Tensor::clone() const {
  Tensor out = detail::raw_copy(*this, dtype());
  ops::detail::carry_explicit_dtype({this}, out);
  if (autograd::needs_grad({this})) {
    ops::detail::record(OpId::contiguous, {*this}, out,
                        [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return out;
}
Tensor Tensor::astype(DType dtype) const { return ops::cast(*this, dtype); }

}  // namespace mixprec
