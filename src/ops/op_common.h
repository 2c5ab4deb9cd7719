// What every op wrapper does around its kernel: autocast the floating inputs (through the
// weight cast cache for parameters), cast and record the output, and record the autograd node.
// Op files use these so that AMP, tracing and autograd behave the same for every op.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "core/autograd_graph.h"
#include "mixprec/ops/autocast.h"
#include "mixprec/ops/ops.h"
#include "ops/dispatch.h"
#include "ops/elementwise_problem.h"

namespace mixprec::ops::detail {

struct Prepared {
  std::vector<Tensor> in;  // inputs after autocast (same order; undefined stay undefined)
  CastDecision decision;
  std::vector<bool> is_param;  // input i was a parameter (a leaf that requires grad)
  uint64_t explicit_mark =
      0;  // the outermost explicit-dtype mark of the inputs; finish() passes it on
};

// Applies autocast to the floating inputs (integer/bool inputs and undefined ones pass through),
// honouring inputs whose dtype the user chose (ops/autocast.h, the explicit-cast rule).
Prepared autocast_inputs(OpId op, std::vector<Tensor> inputs);

// Layout ops (views, copies, concat) carry the explicit-dtype mark of their inputs to `out`.
void carry_explicit_dtype(std::initializer_list<const Tensor*> inputs, const Tensor& out);

// Applies the decision's output cast and records the op if a recorder is installed; `flops`
// counts the forward multiply-adds x 2 of matmul/conv-like ops (0 for the others).
Tensor finish(OpId op, const Prepared& p, Tensor out, DType compute_dtype, int64_t flops = 0);

// Creates a node for `op` whose edges follow `diff_inputs` (undefined or non-requiring inputs
// give invalid edges, whose gradients are ignored), and attaches it to `out`.
void record(OpId op, const std::vector<Tensor>& diff_inputs, Tensor& out, BackwardFn backward,
            bool accepts_any_grad_dtype = false);
void record(OpId op, const std::vector<Tensor>& diff_inputs, std::vector<Tensor>& outs,
            BackwardFn backward);

// fn(operands...) through dispatch (elementwise_problem.h) into a new tensor of out_dtype, of the
// operands' broadcast shape and laid out like them (empty_output); logged as `op` `phase`.
// Defined in elementwise.cpp, with relu_backward: ReLU's gradient from its output, y > 0 ? g : +0,
// in g's dtype (the separate op and the ReLU fused into conv2d and linear all use it).
Tensor pointwise(OpId op, std::string_view phase, PointwiseFn fn,
                 std::initializer_list<Tensor> operands, DType out_dtype, double a = 0,
                 double b = 0);
Tensor relu_backward(const Tensor& g, const Tensor& y);

// The shape numpy broadcasting gives a and b; throws naming op if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);
// Sums `grad` over the broadcast dims so that it has `shape` (the reverse of broadcasting).
Tensor reduce_to_shape(const Tensor& grad, const Shape& shape);

void check_same_device(std::string_view op, std::initializer_list<const Tensor*> ts);
void check_floating(std::string_view op, const Tensor& t, std::string_view what);

}  // namespace mixprec::ops::detail
