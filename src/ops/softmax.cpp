// softmax and log_softmax along one axis, forward and backward side by side: autocast, a
// contiguous input, kernel dispatch, and the node (its backward needs only the saved output).
// Problems and the kernels that take them: softmax_problem.h.
// Invariant: the max is subtracted first; arithmetic in acc_dtype(x); output in x's dtype.
#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/op_common.h"
#include "ops/softmax_problem.h"

namespace mixprec::ops {
using namespace detail;

namespace {
std::string describe_softmax(const Tensor& t, int64_t axis, bool log) {
  return std::string(log ? "log_softmax " : "softmax ") + desc(t) + " axis " + std::to_string(axis);
}
}  // namespace

std::string SoftmaxFwdProblem::describe() const { return describe_softmax(x, axis, log); }
std::string SoftmaxBwdProblem::describe() const { return describe_softmax(y, axis, log); }

namespace {

Tensor softmax_op(OpId id, const Tensor& x0, int64_t axis, bool log) {
  Prepared p = autocast_inputs(id, {x0});
  const std::string_view name = op_name(id);
  check_floating(name, p.in[0], "input");
  MIXPREC_CHECK(p.in[0].dim() >= 1, name, ": expected a tensor with at least one dim, got ",
                desc(p.in[0]));
  const int64_t ax = wrap_dim(axis, p.in[0].dim(), "softmax axis");
  const Tensor x = contiguous(p.in[0]);
  Tensor y = Tensor::empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dispatch(id, "forward", SoftmaxFwdProblem{.x = x, .y = y, .axis = ax, .log = log});
  if (autograd::needs_grad({&x})) {
    SavedTensor sy(y.detach());
    record(id, {x}, y, [sy, id, ax, log](const std::vector<Tensor>& g) {
      const Tensor ys = sy.unpack(op_name(id));
      const SoftmaxBwdProblem b{
          .y = ys,
          .dy = packed(g[0], ys.dtype()),
          .dx = Tensor::empty(ys.shape(), {.dtype = ys.dtype(), .device = ys.device()}),
          .axis = ax,
          .log = log};
      dispatch(id, "backward", b);
      return std::vector<Tensor>{b.dx};
    });
  }
  return finish(id, p, y, acc_dtype(x.dtype()));
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_op(OpId::softmax, x, axis, false); }
Tensor log_softmax(const Tensor& x, int64_t axis) {
  return softmax_op(OpId::log_softmax, x, axis, true);
}

}  // namespace mixprec::ops
