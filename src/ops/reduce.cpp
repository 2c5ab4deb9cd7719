// Reductions, forward and backward side by side: sum, mean, max (with the first maximal element
// taking the gradient) and argmax, over any set of axes with keepdims. The plan (which dims are
// kept, which reduced, through the input's own strides) is made here; the kernels
// (reduce_problem.h) accumulate in acc_dtype and round once.
#include "ops/dispatch.h"
#include "ops/op_common.h"
#include "ops/reduce_problem.h"

namespace mixprec::ops {
using namespace detail;

std::string ReduceSumProblem::describe() const {
  return desc_with_strides(x) + " axes " + shape_str(plan.axes) + " -> " + desc(out);
}
std::string ReduceMaxProblem::describe() const {
  return desc_with_strides(x) + " axes " + shape_str(plan.axes) +
         (values.defined() ? " -> values, index" : " -> index");
}
std::string ReduceMaxBwdProblem::describe() const {
  return "g " + desc(g) + " axes " + shape_str(plan.axes) + " -> " + desc(gx);
}

namespace {

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

Tensor run_sum(OpId op, const Tensor& x, const ReducePlan& p, double scale) {
  const ReduceSumProblem pr{
      x, Tensor::empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()}), p, scale};
  dispatch(op, "forward", pr);
  return pr.out;
}

// Max values (unless `with_values` is false: argmax) and the flat index of each first maximum.
ReduceMaxProblem run_max(OpId op, const Tensor& x, const ReducePlan& p, bool with_values) {
  const TensorOptions o{.dtype = x.dtype(), .device = x.device()};
  const ReduceMaxProblem pr{x, with_values ? Tensor::empty(p.out_shape, o) : Tensor(),
                            Tensor::empty(p.out_shape, {.dtype = DType::i64, .device = x.device()}),
                            p};
  dispatch(op, "forward", pr);
  return pr;
}

// grad of max: g[o] goes to element index[o] of the reduced space of output o.
Tensor max_backward(const Tensor& g, const Tensor& index, const ReducePlan& p, const Shape& x_shape,
                    DType dtype) {
  const ReduceMaxBwdProblem pr{amp_cast(g, dtype).contiguous(), index, p,
                               zeros(x_shape, {.dtype = dtype, .device = g.device()})};
  dispatch(OpId::max, "backward", pr);
  return pr.gx;
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
  Tensor out = run_sum(OpId::sum, x, p, 1.0);
  if (autograd::needs_grad({&x})) {
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
  Tensor out = run_sum(OpId::mean, x, p, scale);
  if (autograd::needs_grad({&x})) {
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
  const ReduceMaxProblem r = run_max(OpId::max, x, p, true);
  Tensor out = r.values;
  const Tensor index = r.index;
  if (autograd::needs_grad({&x})) {
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
  const Tensor index = run_max(OpId::argmax, x, p, false).index;
  return keepdims ? reshape(index, p.keep_shape) : index;
}

}  // namespace mixprec::ops
