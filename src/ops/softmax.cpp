// softmax and log_softmax along one axis, forward and backward side by side: autocast, a
// contiguous input, dispatch to oneDNN / f16-via-f32 / reference kernels, and the node (its
// backward needs only the saved output). Kernels: ops/ref/softmax.*, ops/onednn/softmax.*.
// Invariant: the max is subtracted first; arithmetic in acc_dtype(x); output in x's dtype.
#include "ops/softmax_problem.h"

#include "mixprec/version.h"
#include "ops/dispatch.h"
#include "ops/op_common.h"
#include "ops/ref/norm_layout.h"
#if MIXPREC_WITH_ONEDNN
#include "ops/onednn/softmax.h"
#endif

namespace mixprec::ops {
using namespace detail;

namespace {

constexpr Device::Type kCpu = Device::Type::cpu;

const Impl<SoftmaxForward> kForward[] = {
#if MIXPREC_WITH_ONEDNN
    {"onednn", kCpu, onednn::softmax_forward_declines, onednn::softmax_forward},
    {"f16_via_f32", kCpu, onednn::softmax_forward_f16_declines, onednn::softmax_forward_f16},
#endif
    {"ref", kCpu, accept_all<SoftmaxForward>, ref::softmax_forward},
};
const Impl<SoftmaxBackward> kBackward[] = {
#if MIXPREC_WITH_ONEDNN
    {"onednn", kCpu, onednn::softmax_backward_declines, onednn::softmax_backward},
    {"f16_via_f32", kCpu, onednn::softmax_backward_f16_declines, onednn::softmax_backward_f16},
#endif
    {"ref", kCpu, accept_all<SoftmaxBackward>, ref::softmax_backward},
};

Tensor softmax_op(OpId id, const Tensor& x0, int64_t axis, bool log) {
  Prepared p = autocast_inputs(id, {x0});
  const std::string_view name = op_name(id);
  check_floating(name, p.in[0], "input");
  MIXPREC_CHECK(p.in[0].dim() >= 1, name, ": expected a tensor with at least one dim, got ",
                desc(p.in[0]));
  const int64_t ax = wrap_dim(axis, p.in[0].dim(), "softmax axis");
  const Tensor x = contiguous(p.in[0]);
  Tensor y = Tensor::empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dispatch(id, "forward", std::span<const Impl<SoftmaxForward>>(kForward),
           SoftmaxForward{.x = x, .y = y, .axis = ax, .log = log});
  if (graph::needs_grad({&x})) {
    SavedTensor sy(y.detach());
    record(id, {x}, y, [sy, id, ax, log](const std::vector<Tensor>& g) {
      const Tensor ys = sy.unpack(op_name(id));
      const SoftmaxBackward b{.y = ys,
                              .dy = packed(g[0], ys.dtype()),
                              .dx = Tensor::empty(ys.shape(), {.dtype = ys.dtype(), .device = ys.device()}),
                              .axis = ax,
                              .log = log};
      dispatch(id, "backward", std::span<const Impl<SoftmaxBackward>>(kBackward), b);
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
