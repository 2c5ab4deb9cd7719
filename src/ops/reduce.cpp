// Reductions: sum, mean, max (with the first maximal element taking the gradient) and argmax,
// over any set of axes with keepdims. Kernels walk the input through its strides (no copy):
// each output element is reduced by one thread in a fixed order, accumulating in acc_dtype
// (f32 for f32/f16/bf16, f64 for f64). Large reductions into few outputs split the reduced
// space into fixed-size blocks whose partial sums are combined in block order, so results do
// not depend on the thread count.
#include <cmath>
#include <limits>

#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

namespace {

struct ReducePlan {
  std::vector<int64_t> axes;       // sorted, unique, wrapped
  Shape out_shape;                 // without the reduced dims
  Shape keep_shape;                // with size-1 reduced dims (keepdims)
  Shape kept_sizes, red_sizes;     // sizes of kept / reduced dims (input order)
  Strides kept_strides, red_strides;
  int64_t red_count = 1;
};

ReducePlan plan_reduce(const Tensor& x, std::vector<int64_t> axes, std::string_view op) {
  const int64_t nd = x.dim();
  ReducePlan p;
  std::vector<bool> is_red(static_cast<size_t>(nd), axes.empty());
  for (int64_t a : axes) {
    const int64_t d = wrap_dim(a, nd, "reduction axis");
    MIXPREC_CHECK(!is_red[static_cast<size_t>(d)], op, ": axis ", a, " given twice");
    is_red[static_cast<size_t>(d)] = true;
  }
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(d);
    if (is_red[i]) {
      p.axes.push_back(d);
      p.red_sizes.push_back(x.shape()[i]);
      p.red_strides.push_back(x.strides()[i]);
      p.red_count *= x.shape()[i];
      p.keep_shape.push_back(1);
    } else {
      p.kept_sizes.push_back(x.shape()[i]);
      p.kept_strides.push_back(x.strides()[i]);
      p.out_shape.push_back(x.shape()[i]);
      p.keep_shape.push_back(x.shape()[i]);
    }
  }
  return p;
}

int64_t offset_of(int64_t flat, const Shape& sizes, const Strides& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    off += (flat % sizes[d]) * strides[d];
    flat /= sizes[d];
  }
  return off;
}

// Calls body(start, end, base_offset_of_output) ... through a generic walker: for output o,
// reduce elements r in [r0, r1) of the reduced index space with `step(acc, value, r)`.
template <class T, class Acc, class Step>
Acc reduce_range(const T* base, const ReducePlan& p, int64_t r0, int64_t r1, Acc acc, Step step) {
  // Innermost reduced dim runs contiguously in r; the rest is recomputed per run.
  const size_t nr = p.red_sizes.size();
  const int64_t inner = nr ? p.red_sizes[nr - 1] : 1;
  const int64_t inner_stride = nr ? p.red_strides[nr - 1] : 0;
  int64_t r = r0;
  while (r < r1) {
    const int64_t in_pos = r % inner;
    const int64_t run = std::min(inner - in_pos, r1 - r);
    int64_t off = in_pos * inner_stride;
    int64_t rest = r / inner;
    for (size_t d = nr > 0 ? nr - 1 : 0; d-- > 0;) {
      off += (rest % p.red_sizes[d]) * p.red_strides[d];
      rest /= p.red_sizes[d];
    }
    const T* q = base + off;
    for (int64_t i = 0; i < run; ++i) acc = step(acc, load(q[i * inner_stride]), r + i);
    r += run;
  }
  return acc;
}

constexpr int64_t kBlock = 1 << 16;

// out[o] = sum over the reduced space, in acc dtype, stored as out's dtype.
Tensor sum_kernel(const Tensor& x, const ReducePlan& p, double scale) {
  Tensor out = Tensor::empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  const int64_t n_out = out.numel();
  visit_float(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    const T* xb = static_cast<const T*>(x.data_ptr());
    T* ob = out.data<T>();
    auto add = [](A acc, A v, int64_t) { return acc + v; };
    const int64_t blocks = (p.red_count + kBlock - 1) / kBlock;
    if (blocks > 1) {  // never depends on the thread count
      std::vector<A> partial(static_cast<size_t>(n_out * blocks));
#pragma omp parallel for collapse(2) schedule(static)
      for (int64_t o = 0; o < n_out; ++o)
        for (int64_t b = 0; b < blocks; ++b)
          partial[static_cast<size_t>(o * blocks + b)] = reduce_range<T, A>(
              xb + offset_of(o, p.kept_sizes, p.kept_strides), p, b * kBlock,
              std::min(p.red_count, (b + 1) * kBlock), A(0), add);
      for (int64_t o = 0; o < n_out; ++o) {
        A acc = 0;
        for (int64_t b = 0; b < blocks; ++b) acc += partial[static_cast<size_t>(o * blocks + b)];
        ob[o] = store<T>(acc * static_cast<A>(scale));
      }
    } else {
#pragma omp parallel for schedule(static) if (n_out * p.red_count > 32768)
      for (int64_t o = 0; o < n_out; ++o) {
        const A acc = reduce_range<T, A>(xb + offset_of(o, p.kept_sizes, p.kept_strides), p, 0,
                                         p.red_count, A(0), add);
        ob[o] = store<T>(acc * static_cast<A>(scale));
      }
    }
  });
  return out;
}

// Max value and the flat index (in the reduced space) of its first occurrence. NaN wins.
void max_kernel(const Tensor& x, const ReducePlan& p, Tensor* values, Tensor& index) {
  index = Tensor::empty(p.out_shape, {.dtype = DType::i64, .device = x.device()});
  if (values) *values = Tensor::empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  const int64_t n_out = index.numel();
  visit_float(x.dtype(), [&]<class T>() {
    using A = compute_t<T>;
    struct Best { A v; int64_t i; };
    const T* xb = static_cast<const T*>(x.data_ptr());
    int64_t* ib = index.data<int64_t>();
    T* vb = values ? values->data<T>() : nullptr;
#pragma omp parallel for schedule(static) if (n_out * p.red_count > 32768)
    for (int64_t o = 0; o < n_out; ++o) {
      const Best b = reduce_range<T, Best>(
          xb + offset_of(o, p.kept_sizes, p.kept_strides), p, 0, p.red_count,
          Best{-std::numeric_limits<A>::infinity(), -1}, [](Best acc, A v, int64_t r) {
            if (acc.i < 0 || v > acc.v || (std::isnan(v) && !std::isnan(acc.v))) return Best{v, r};
            return acc;
          });
      ib[o] = b.i;
      if (vb) vb[o] = store<T>(b.v);
    }
  });
}

// grad of max: g[o] goes to element index[o] of the reduced space of output o.
Tensor max_backward(const Tensor& g, const Tensor& index, const ReducePlan& p, const Shape& x_shape,
                    DType dtype) {
  Tensor gx = zeros(x_shape, {.dtype = dtype, .device = g.device()});
  const Tensor gc = amp_cast(g, dtype).contiguous();
  // Strides of the (contiguous) gx for kept and reduced dims.
  const Strides st = contiguous_strides(x_shape);
  Strides kst, rst;
  size_t a = 0;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    if (a < p.axes.size() && p.axes[a] == static_cast<int64_t>(d)) {
      rst.push_back(st[d]);
      ++a;
    } else {
      kst.push_back(st[d]);
    }
  }
  const int64_t* ib = index.data<int64_t>();
  const int64_t n_out = index.numel();
  visit_float(dtype, [&]<class T>() {
    T* gb = gx.data<T>();
    const T* go = gc.data<T>();
    for (int64_t o = 0; o < n_out; ++o)
      gb[offset_of(o, p.kept_sizes, kst) + offset_of(ib[o], p.red_sizes, rst)] = go[o];
  });
  return gx;
}

// The gradient of a sum/mean: g broadcast back over the reduced dims, as a stride-0 view (no
// copy: consumers read it through their strides; the engine packs leaf gradients).
Tensor expand_back(const Tensor& g, const ReducePlan& p, const Shape& x_shape) {
  return broadcast_to(reshape(g, p.keep_shape), x_shape);
}

Tensor finish_keepdims(const Tensor& out, const ReducePlan& p, bool keepdims) {
  return keepdims ? reshape(out, p.keep_shape) : out;
}

}  // namespace

Tensor sum(const Tensor& x0, std::vector<int64_t> axes, bool keepdims) {
  Prepared pr = autocast_inputs(OpId::sum, {x0});
  const Tensor& x = pr.in[0];
  check_floating("sum", x, "input");
  const ReducePlan p = plan_reduce(x, axes, "sum");
  Tensor out = sum_kernel(x, p, 1.0);
  if (graph::needs_grad({&x})) {
    const Shape xs = x.shape();
    record(OpId::sum, {x}, out, [p, xs](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{expand_back(g[0], p, xs)};
    });
  }
  return finish(OpId::sum, pr, finish_keepdims(out, p, keepdims), acc_dtype(x.dtype()));
}

Tensor mean(const Tensor& x0, std::vector<int64_t> axes, bool keepdims) {
  Prepared pr = autocast_inputs(OpId::mean, {x0});
  const Tensor& x = pr.in[0];
  check_floating("mean", x, "input");
  const ReducePlan p = plan_reduce(x, axes, "mean");
  MIXPREC_CHECK(p.red_count > 0, "mean: cannot average over an empty set of elements");
  const double scale = 1.0 / static_cast<double>(p.red_count);
  Tensor out = sum_kernel(x, p, scale);
  if (graph::needs_grad({&x})) {
    const Shape xs = x.shape();
    record(OpId::mean, {x}, out, [p, xs, scale](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{expand_back(mul(g[0], scale), p, xs)};
    });
  }
  return finish(OpId::mean, pr, finish_keepdims(out, p, keepdims), acc_dtype(x.dtype()));
}

Tensor max(const Tensor& x0, std::vector<int64_t> axes, bool keepdims) {
  Prepared pr = autocast_inputs(OpId::max, {x0});
  const Tensor& x = pr.in[0];
  check_floating("max", x, "input");
  const ReducePlan p = plan_reduce(x, axes, "max");
  MIXPREC_CHECK(p.red_count > 0, "max: cannot reduce an empty set of elements");
  Tensor out, index;
  max_kernel(x, p, &out, index);
  if (graph::needs_grad({&x})) {
    const Shape xs = x.shape();
    const DType dt = x.dtype();
    record(OpId::max, {x}, out, [p, xs, index, dt](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{max_backward(g[0], index, p, xs, dt)};
    });
  }
  return finish(OpId::max, pr, finish_keepdims(out, p, keepdims), x.dtype());
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  check_floating("argmax", x, "input");
  const ReducePlan p = plan_reduce(x, {axis}, "argmax");
  MIXPREC_CHECK(p.red_count > 0, "argmax: the axis has size 0");
  Tensor index;
  max_kernel(x, p, nullptr, index);
  return keepdims ? reshape(index, p.keep_shape) : index;
}

}  // namespace mixprec::ops
