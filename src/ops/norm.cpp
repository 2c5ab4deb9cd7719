// batch_norm and layer_norm, forward and backward side by side: autocast ({x, gamma, beta}
// only), shape checks, layouts, kernel dispatch, the running-statistics update and the autograd
// node. Problems and the kernels that take them: norm_problem.h.
// Invariants: arithmetic and statistics in acc_dtype(x) (f32; f64 for f64 x) whatever the
// dtypes of x and gamma; y and dx keep x's dtype and dense layout; dgamma/dbeta are acc_dtype.
#include <sstream>

#include "ops/dispatch.h"
#include "ops/layout.h"
#include "ops/norm_problem.h"
#include "ops/op_common.h"

namespace mixprec::ops {
using namespace detail;

namespace {
std::string describe_common(const Tensor& x, const char* mode, double eps) {
  std::ostringstream s;
  s << "x " << desc(x) << " strides " << shape_str(x.strides()) << mode << " eps=" << eps;
  return s.str();
}
}  // namespace

std::string BatchNormFwdProblem::describe() const {
  return describe_common(x, training ? " training" : " eval", eps) + (relu ? " + relu" : "");
}
std::string BatchNormBwdProblem::describe() const {
  return describe_common(x, training ? " training" : " eval", eps) +
         (relu_y.defined() ? " + relu mask" : "");
}
std::string LayerNormFwdProblem::describe() const { return describe_common(x, "", eps); }
std::string LayerNormBwdProblem::describe() const { return describe_common(x, "", eps); }

namespace {

// gamma / beta as packed compute-dtype tensors of `shape`; ones / zeros when undefined.
Tensor param(std::string_view op, const Tensor& t, const Shape& shape, double fill, DType cd,
             const Tensor& x, const char* what) {
  if (!t.defined()) return full(shape, fill, {.dtype = cd, .device = x.device()});
  check_floating(op, t, what);
  MIXPREC_CHECK(t.shape() == shape, op, ": expected ", what, " of shape ", shape_str(shape),
                " for x ", desc(x), ", got ", desc(t));
  check_same_device(op, {&x, &t});
  return packed(t, cd);
}

// True when x's strides are a dense layout (NCHW, channels-last, ...): kept as is, else packed.
bool is_dense(const Tensor& x) {
  const Strides d = dense_strides_like(x);
  for (size_t i = 0; i < d.size(); ++i)
    if (x.shape()[i] != 1 && x.strides()[i] != d[i]) return false;
  return true;
}

// running = momentum * running + (1 - momentum) * factor * batch, in place, without grad.
// On the CPU in f64 on the host; on a GPU as pointwise ops queued on its stream (f32: the host
// never reads the statistics, so a training step does not wait for the GPU).
void update_running_now(Tensor& running, const Tensor& batch, double momentum, double factor) {
  NoGradGuard no_grad;
  if (!running.device().is_cpu()) {
    AutocastScope f32_as_is(AutocastState{});  // inside an O2 cell: no cast to the low dtype
    running.copy_(add(mul(running.detach(), momentum), mul(batch, (1 - momentum) * factor)));
    return;
  }
  const std::vector<double> r = running.to_vector<double>(), b = batch.to_vector<double>();
  std::vector<double> next(r.size());
  for (size_t c = 0; c < r.size(); ++c) next[c] = momentum * r[c] + (1 - momentum) * factor * b[c];
  running.copy_(Tensor::from_vector<double>(next, running.shape()));
}

// Recorded as one kernel while a step is captured (core/capture.h): the host loop reads values.
// On a GPU the ops queue themselves.
void update_running(Tensor& running, const Tensor& batch, double momentum, double factor) {
  if (!running.device().is_cpu()) return update_running_now(running, batch, momentum, factor);
  mixprec::detail::run_kernel([running, batch, momentum, factor]() mutable {
    update_running_now(running, batch, momentum, factor);
  });
}

void check_running(const Tensor& t, int64_t channels, const Tensor& x, const char* what) {
  check_floating("batch_norm", t, what);
  MIXPREC_CHECK(t.shape() == Shape{channels}, "batch_norm: expected ", what, " of shape [",
                channels, "] for x ", desc(x), ", got ", desc(t));
}

struct BatchNormSaved {
  SavedTensor x, gamma, mean, var;
  int64_t channels;
  DType cd;
  bool training;
  double eps;
};

std::vector<Tensor> batch_norm_backward(const BatchNormSaved& s, const Tensor& g) {
  const Tensor x = s.x.unpack("batch_norm");
  BatchNormBwdProblem b{
      .x = x,
      .dy = with_strides(g.dtype() == x.dtype() ? g : packed(g, x.dtype()), x.strides()),
      .gamma = s.gamma.unpack("batch_norm"),
      .mean = s.mean.unpack("batch_norm"),
      .var = s.var.unpack("batch_norm"),
      .dx = empty_strided(x.shape(), x.strides(), x.dtype(), x.device()),
      .dgamma = Tensor::empty({s.channels}, {.dtype = s.cd, .device = x.device()}),
      .dbeta = Tensor::empty({s.channels}, {.dtype = s.cd, .device = x.device()}),
      .training = s.training,
      .eps = s.eps};
  dispatch(OpId::batch_norm, "backward", b);
  return {b.dx, b.dgamma, b.dbeta};
}

}  // namespace

// ---------------------------------------------------------------- batch norm

Tensor batch_norm(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, Tensor& running_mean,
                  Tensor& running_var, const BatchNormOptions& o) {
  Prepared p = autocast_inputs(OpId::batch_norm, {x0, gamma0, beta0});
  Tensor x = p.in[0];
  const Tensor &gamma = p.in[1], &beta = p.in[2];
  check_floating("batch_norm", x, "input x");
  MIXPREC_CHECK(x.dim() >= 2, "batch_norm: expected x of shape [N, C, ...], got ", desc(x));
  MIXPREC_CHECK(o.eps >= 0 && o.momentum >= 0 && o.momentum <= 1,
                "batch_norm: expected eps >= 0 and momentum in [0, 1], got eps ", o.eps,
                ", momentum ", o.momentum);
  const int64_t channels = x.shape()[1];
  const int64_t per_channel = channels ? x.numel() / channels : 0;
  const DType cd = acc_dtype(x.dtype());
  if (o.training) {
    MIXPREC_CHECK(per_channel > 1,
                  "batch_norm: training needs more than one value per channel, got x ", desc(x),
                  Hint{"use a batch larger than 1, or eval mode (training = false)"});
    if (running_mean.defined()) check_running(running_mean, channels, x, "running_mean");
    if (running_var.defined()) check_running(running_var, channels, x, "running_var");
  } else {
    MIXPREC_CHECK(running_mean.defined() && running_var.defined(),
                  "batch_norm: eval mode (training = false) needs running_mean and running_var");
    check_running(running_mean, channels, x, "running_mean");
    check_running(running_var, channels, x, "running_var");
  }
  if (!is_dense(x)) x = contiguous(x);
  BatchNormFwdProblem f{.x = x,
                        .gamma = param("batch_norm", gamma, {channels}, 1.0, cd, x, "gamma"),
                        .beta = param("batch_norm", beta, {channels}, 0.0, cd, x, "beta"),
                        .mean = Tensor::empty({channels}, {.dtype = cd, .device = x.device()}),
                        .var = Tensor::empty({channels}, {.dtype = cd, .device = x.device()}),
                        .y = empty_strided(x.shape(), x.strides(), x.dtype(), x.device()),
                        .training = o.training,
                        .eps = o.eps};
  if (!o.training) {  // copies: the node must not see later in-place updates of the stats
    f.mean.copy_(running_mean.detach());
    f.var.copy_(running_var.detach());
  }
  dispatch(OpId::batch_norm, "forward", f);
  if (o.training) {
    if (running_mean.defined()) update_running(running_mean, f.mean, o.momentum, 1.0);
    const double unbias = static_cast<double>(per_channel) / static_cast<double>(per_channel - 1);
    if (running_var.defined()) update_running(running_var, f.var, o.momentum, unbias);
  }
  Tensor y = f.y;
  if (autograd::needs_grad({&x, &gamma, &beta})) {
    const BatchNormSaved s{SavedTensor(x),
                           SavedTensor(f.gamma),
                           SavedTensor(f.mean),
                           SavedTensor(f.var),
                           channels,
                           cd,
                           o.training,
                           o.eps};
    record(OpId::batch_norm, {x, gamma, beta}, y,
           [s](const std::vector<Tensor>& g) { return batch_norm_backward(s, g[0]); });
  }
  return finish(OpId::batch_norm, p, y, gamma.defined() ? gamma.dtype() : cd);
}

// ---------------------------------------------------------------- layer norm

Tensor layer_norm(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0,
                  int64_t normalized_dims, double eps) {
  Prepared p = autocast_inputs(OpId::layer_norm, {x0, gamma0, beta0});
  const Tensor &gamma = p.in[1], &beta = p.in[2];
  check_floating("layer_norm", p.in[0], "input x");
  MIXPREC_CHECK(normalized_dims >= 1 && normalized_dims <= p.in[0].dim(),
                "layer_norm: expected normalized_dims in [1, ", p.in[0].dim(), "] for x ",
                desc(p.in[0]), ", got ", normalized_dims);
  MIXPREC_CHECK(eps >= 0, "layer_norm: expected eps >= 0, got ", eps);
  const Tensor x = contiguous(p.in[0]);
  const Shape trailing(x.shape().end() - normalized_dims, x.shape().end());
  const int64_t m = shape_numel(trailing);
  const int64_t rows = m ? x.numel() / m : 0;
  const DType cd = acc_dtype(x.dtype());
  const Device dev = x.device();
  LayerNormFwdProblem f{
      .x = x.detach().reshape({rows, m}),
      .gamma = param("layer_norm", gamma, trailing, 1.0, cd, x, "gamma").reshape({m}),
      .beta = param("layer_norm", beta, trailing, 0.0, cd, x, "beta").reshape({m}),
      .y = Tensor::empty({rows, m}, {.dtype = x.dtype(), .device = dev}),
      .mean = Tensor::empty({rows}, {.dtype = cd, .device = dev}),
      .var = Tensor::empty({rows}, {.dtype = cd, .device = dev}),
      .eps = eps};
  dispatch(OpId::layer_norm, "forward", f);
  Tensor y = f.y.reshape(x.shape());
  if (autograd::needs_grad({&x, &gamma, &beta})) {
    SavedTensor sx(f.x), sg(f.gamma), sm(f.mean), sv(f.var);
    const Shape x_shape = x.shape();
    record(OpId::layer_norm, {x, gamma, beta}, y, [=](const std::vector<Tensor>& g) {
      const Tensor xs = sx.unpack("layer_norm");
      LayerNormBwdProblem b{.x = xs,
                            .dy = packed(g[0], xs.dtype()).reshape({rows, m}),
                            .gamma = sg.unpack("layer_norm"),
                            .mean = sm.unpack("layer_norm"),
                            .var = sv.unpack("layer_norm"),
                            .dx = Tensor::empty({rows, m}, {.dtype = xs.dtype(), .device = dev}),
                            .dgamma = Tensor::empty({m}, {.dtype = cd, .device = dev}),
                            .dbeta = Tensor::empty({m}, {.dtype = cd, .device = dev}),
                            .eps = eps};
      dispatch(OpId::layer_norm, "backward", b);
      return std::vector<Tensor>{b.dx.reshape(x_shape), b.dgamma.reshape(trailing),
                                 b.dbeta.reshape(trailing)};
    });
  }
  return finish(OpId::layer_norm, p, y, gamma.defined() ? gamma.dtype() : cd);
}

}  // namespace mixprec::ops
