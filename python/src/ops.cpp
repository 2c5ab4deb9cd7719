// mixprec.ops: the differentiable op library (ops/ops.h) and the tensor factories, under
// MindSpore's functional names and keywords (ops.softmax(x, axis=-1), ops.transpose(x, perm),
// ops.swapaxes, ops.cat, ops.expand_dims, ...). Each call releases the GIL while it computes.
#include <cmath>

#include "binding.h"

namespace mixprec::python {
namespace {

TensorOptions opts(std::optional<DType> dtype, DType fallback = DType::f32) {
  return {.dtype = dtype.value_or(fallback)};
}

ops::GeluApproximation gelu_arg(const std::string& s) {
  if (s == "none") return ops::GeluApproximation::none;
  if (s == "tanh") return ops::GeluApproximation::tanh;
  throw py::value_error("gelu: approximate must be 'none' or 'tanh', got '" + s + "'");
}

ops::Pool2dOptions pool_arg(py::handle kernel, py::handle stride, py::handle padding,
                            bool ceil_mode, bool count_include_pad, const char* what) {
  ops::Pool2dOptions o{.kernel = pair_arg(kernel, what)};
  o.stride = stride.is_none() ? o.kernel : pair_arg(stride, what);
  o.padding = pair_arg(padding, what);
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  return o;
}

void bind_elementwise(py::module_& o) {
  using T = const Tensor&;
  o.def(
      "add", [](T a, T b) { return ops::add(a, b); }, "input"_a, "other"_a, ReleaseGil());
  o.def(
      "sub", [](T a, T b) { return ops::sub(a, b); }, "input"_a, "other"_a, ReleaseGil());
  o.def(
      "mul", [](T a, T b) { return ops::mul(a, b); }, "input"_a, "other"_a, ReleaseGil());
  o.def(
      "div", [](T a, T b) { return ops::div(a, b); }, "input"_a, "other"_a, ReleaseGil());
  o.def(
      "pow", [](T a, T b) { return ops::pow(a, b); }, "input"_a, "exponent"_a, ReleaseGil());
  o.def(
      "pow", [](T a, double b) { return ops::pow(a, b); }, "input"_a, "exponent"_a, ReleaseGil());
  o.def("maximum", &ops::maximum, "input"_a, "other"_a, ReleaseGil());
  o.def("minimum", &ops::minimum, "input"_a, "other"_a, ReleaseGil());
  o.def("neg", &ops::neg, "input"_a, ReleaseGil());
  o.def("exp", &ops::exp, "input"_a, ReleaseGil());
  o.def("log", &ops::log, "input"_a, ReleaseGil());
  o.def("sqrt", &ops::sqrt, "x"_a, ReleaseGil());
  o.def("rsqrt", &ops::rsqrt, "input"_a, ReleaseGil());
  o.def("abs", &ops::abs, "input"_a, ReleaseGil());
  o.def("clamp", &ops::clamp, "input"_a, "min"_a = py::none(), "max"_a = py::none(), ReleaseGil());
  o.def("clip", &ops::clamp, "input"_a, "min"_a = py::none(), "max"_a = py::none(), ReleaseGil());
  o.def("where", &ops::where, "condition"_a, "input"_a, "other"_a, ReleaseGil());
  o.def("masked_fill", &ops::masked_fill, "input_x"_a, "mask"_a, "value"_a, ReleaseGil());
  o.def("relu", &ops::relu, "input"_a, ReleaseGil());
  o.def("leaky_relu", &ops::leaky_relu, "input"_a, "alpha"_a = 0.2, ReleaseGil());
  o.def(
      "gelu", [](T x, const std::string& a) { return ops::gelu(x, gelu_arg(a)); }, "input_x"_a,
      "approximate"_a = "none");
  o.def("sigmoid", &ops::sigmoid, "input"_a, ReleaseGil());
  o.def("tanh", &ops::tanh, "input"_a, ReleaseGil());
  o.def("silu", &ops::silu, "input"_a, ReleaseGil());
  o.def("hardswish", &ops::hardswish, "input"_a, ReleaseGil());
  o.def(
      "softmax",
      [](T x, int64_t axis, std::optional<DType> dtype) {
        return ops::softmax(dtype ? ops::cast(x, *dtype) : x, axis);
      },
      "input"_a, "axis"_a = -1, py::kw_only(), "dtype"_a = py::none(), ReleaseGil());
  o.def("log_softmax", &ops::log_softmax, "logits"_a, "axis"_a = -1, ReleaseGil());
  o.def("cast", &ops::cast, "input"_a, "dtype"_a, ReleaseGil());
  o.def("stop_gradient", &Tensor::detach, "input"_a);
}

void bind_nn_ops(py::module_& o) {
  using T = const Tensor&;
  o.def("matmul", &ops::matmul, "input"_a, "other"_a, ReleaseGil());
  o.def(
      "bmm",
      [](T a, T b) {
        if (a.dim() < 3 || b.dim() < 3)
          throw py::value_error(
              "bmm: expected tensors of at least 3 dims [*B, N, C] and [*B, C, "
              "M], got " +
              std::to_string(a.dim()) + "-D and " + std::to_string(b.dim()) +
              "-D (ops.matmul takes any dims)");
        py::gil_scoped_release release;
        return ops::matmul(a, b);
      },
      "input_x"_a, "mat2"_a);
  o.def(
      "dense",
      [](T x, T w, std::optional<Tensor> b) { return ops::linear(x, w, b.value_or(Tensor())); },
      "input"_a, "weight"_a, "bias"_a = py::none(), ReleaseGil());
  o.def(
      "conv2d",
      [](T x, T w, std::optional<Tensor> b, py::object stride, const std::string& pad_mode,
         py::object padding, py::object dilation, int64_t groups) {
        const ops::Conv2dOptions c{.stride = pair_arg(stride, "conv2d"),
                                   .pad_mode = pad_mode_arg(pad_mode, "conv2d"),
                                   .padding = padding_arg(padding, "conv2d"),
                                   .dilation = pair_arg(dilation, "conv2d"),
                                   .groups = groups};
        py::gil_scoped_release release;
        return ops::conv2d(x, w, b.value_or(Tensor()), c);
      },
      "input"_a, "weight"_a, "bias"_a = py::none(), "stride"_a = 1, "pad_mode"_a = "valid",
      "padding"_a = 0, "dilation"_a = 1, "groups"_a = 1);
  o.def(
      "max_pool2d",
      [](T x, py::object k, py::object s, py::object p, bool ceil_mode) {
        const auto opt = pool_arg(k, s, p, ceil_mode, true, "max_pool2d");
        py::gil_scoped_release release;
        return ops::max_pool2d(x, opt);
      },
      "x"_a, "kernel_size"_a, "stride"_a = py::none(), "padding"_a = 0, "ceil_mode"_a = false);
  o.def(
      "avg_pool2d",
      [](T x, py::object k, py::object s, py::object p, bool ceil_mode, bool count_include_pad) {
        const auto opt = pool_arg(k, s, p, ceil_mode, count_include_pad, "avg_pool2d");
        py::gil_scoped_release release;
        return ops::avg_pool2d(x, opt);
      },
      "input_x"_a, "kernel_size"_a = 1, "stride"_a = 1, "padding"_a = 0, "ceil_mode"_a = false,
      "count_include_pad"_a = true);
  o.def(
      "adaptive_avg_pool2d",
      [](T x, py::object size) {
        return ops::adaptive_avg_pool2d(x, pair_arg(size, "adaptive_avg_pool2d"));
      },
      "input"_a, "output_size"_a);
  // MindSpore's functional batch_norm: momentum is the weight of the NEW statistic (0.1); the
  // C++ op takes the weight of the old one, as nn.BatchNorm2d does (0.9).
  o.def(
      "batch_norm",
      [](T x, Tensor& running_mean, Tensor& running_var, T weight, T bias, bool training,
         double momentum, double eps) {
        return ops::batch_norm(x, weight, bias, running_mean, running_var,
                               {.training = training, .momentum = 1.0 - momentum, .eps = eps});
      },
      "input_x"_a, "running_mean"_a, "running_var"_a, "weight"_a, "bias"_a, "training"_a = false,
      "momentum"_a = 0.1, "eps"_a = 1e-5, ReleaseGil());
  o.def(
      "layer_norm",
      [](T x, const Shape& normalized_shape, std::optional<Tensor> weight,
         std::optional<Tensor> bias, double eps) {
        // MindSpore's defaults: no weight is ones, no bias zeros (constants, not parameters).
        const TensorOptions o{.dtype = DType::f32, .device = x.device()};
        return ops::layer_norm(x, weight ? *weight : ones(normalized_shape, o),
                               bias ? *bias : zeros(normalized_shape, o),
                               static_cast<int64_t>(normalized_shape.size()), eps);
      },
      "input"_a, "normalized_shape"_a, "weight"_a = py::none(), "bias"_a = py::none(),
      "eps"_a = 1e-5, ReleaseGil());
  o.def(
      "dropout",
      [](T x, double p, bool training) {
        return ops::dropout(x, p, training, default_generator());
      },
      "input"_a, "p"_a = 0.5, "training"_a = true, ReleaseGil());
  o.def("embedding", &ops::embedding, "input"_a, "weight"_a, ReleaseGil());
  o.def(
      "cross_entropy",
      [](T logits, T labels, const std::string& reduction) {
        const bool sparse = !is_floating(labels.dtype());
        return ops::softmax_cross_entropy(
            logits, labels,
            {.sparse = sparse, .reduction = reduction_arg(reduction, "cross_entropy")});
      },
      "input"_a, "target"_a, "reduction"_a = "mean");
  o.def(
      "nll_loss",
      [](T x, T y, const std::string& r) {
        return ops::nll_loss(x, y, reduction_arg(r, "nll_loss"));
      },
      "inputs"_a, "target"_a, "reduction"_a = "mean");
  o.def(
      "mse_loss",
      [](T x, T y, const std::string& r) {
        return ops::mse_loss(x, y, reduction_arg(r, "mse_loss"));
      },
      "input"_a, "target"_a, "reduction"_a = "mean");
}

void bind_shape_ops(py::module_& o) {
  using T = const Tensor&;
  o.def(
      "sum", [](T x, py::object dim, bool keepdim) { return ops::sum(x, axes_arg(dim), keepdim); },
      "input"_a, "dim"_a = py::none(), "keepdim"_a = false);
  o.def(
      "mean",
      [](T x, py::object axis, bool keep_dims) { return ops::mean(x, axes_arg(axis), keep_dims); },
      "input"_a, "axis"_a = py::none(), "keep_dims"_a = false);
  o.def(
      "amax",
      [](T x, py::object axis, bool keepdims) { return ops::max(x, axes_arg(axis), keepdims); },
      "input"_a, "axis"_a = py::none(), "keepdims"_a = false);
  o.def(
      "argmax",
      [](T x, std::optional<int64_t> dim, bool keepdim) {
        return dim ? ops::argmax(x, *dim, keepdim) : ops::argmax(ops::reshape(x, {-1}), 0, false);
      },
      "input"_a, "dim"_a = py::none(), "keepdim"_a = false);
  o.def("reshape", &ops::reshape, "input"_a, "shape"_a, ReleaseGil());
  o.def("flatten", &ops::flatten, "input"_a, "start_dim"_a = 1, "end_dim"_a = -1, ReleaseGil());
  // Permutations and axes are checked here (ValueError / TypeError, shape_ops.cpp).
  o.def(
      "permute", [](T x, py::object axis) { return permute(x, axis, "permute"); }, "input"_a,
      "axis"_a);
  o.def(
      "transpose", [](T x, py::object perm) { return permute(x, perm, "transpose"); }, "input"_a,
      "input_perm"_a);  // MindSpore: a permutation
  const auto swap = [](const char* what) {
    return [what](T x, py::object a0, py::object a1) {
      const int64_t d0 = dim_arg(a0, x.dim(), what, "axis0"),
                    d1 = dim_arg(a1, x.dim(), what, "axis1");
      py::gil_scoped_release release;
      return ops::transpose(x, d0, d1);
    };
  };
  o.def("swapaxes", swap("swapaxes"), "input"_a, "axis0"_a, "axis1"_a);
  o.def("swapdims", swap("swapdims"), "input"_a, "dim0"_a, "dim1"_a);
  o.def("split", &split, "tensor"_a, "split_size_or_sections"_a, "axis"_a = 0,
        "MindSpore's ops.split: an int gives pieces of that size (the last may be smaller), a "
        "tuple / list the sizes of each piece (they must add up to the axis). A tuple of views.");
  o.def("chunk", &chunk, "input"_a, "chunks"_a, "axis"_a = 0,
        "MindSpore's ops.chunk: pieces of ceil(n / chunks) along axis, so possibly fewer than "
        "chunks. A tuple of views.");
  o.def("unbind", &unbind, "input"_a, "dim"_a = 0);
  o.def("narrow", &narrow, "input"_a, "axis"_a, "start"_a, "length"_a);
  o.def("stack", &stack, "tensors"_a, "axis"_a = 0);
  o.def("concat", &ops::concat, "tensors"_a, "axis"_a = 0, ReleaseGil());
  o.def("cat", &ops::concat, "tensors"_a, "axis"_a = 0, ReleaseGil());
  o.def("squeeze", &ops::squeeze, "input"_a, "axis"_a = py::none(), ReleaseGil());
  o.def("unsqueeze", &ops::unsqueeze, "input"_a, "dim"_a, ReleaseGil());
  o.def("expand_dims", &ops::unsqueeze, "input_x"_a, "axis"_a, ReleaseGil());
  o.def("broadcast_to", &ops::broadcast_to, "input"_a, "shape"_a, ReleaseGil());
}

void bind_factories(py::module_& o) {
  using T = const Tensor&;
  o.def(
      "zeros", [](const Shape& s, std::optional<DType> d) { return zeros(s, opts(d)); }, "size"_a,
      "dtype"_a = py::none());
  o.def(
      "ones", [](const Shape& s, std::optional<DType> d) { return ones(s, opts(d)); }, "size"_a,
      "dtype"_a = py::none());
  o.def(
      "full", [](const Shape& s, double v, std::optional<DType> d) { return full(s, v, opts(d)); },
      "size"_a, "fill_value"_a, "dtype"_a = py::none());
  o.def(
      "zeros_like", [](T x) { return zeros(x.shape(), {.dtype = x.dtype()}); }, "input"_a);
  o.def(
      "ones_like", [](T x) { return ones(x.shape(), {.dtype = x.dtype()}); }, "input"_a);
  o.def(
      "arange",
      [](double start, std::optional<double> end, double step, std::optional<DType> d) {
        // Integer bounds and step give int64, as in MindSpore; any fraction gives float32.
        const bool whole = start == std::floor(start) && step == std::floor(step) &&
                           (!end || *end == std::floor(*end));
        const TensorOptions o = opts(d, whole ? DType::i64 : DType::f32);
        return end ? arange(start, *end, step, o) : arange(start, o);
      },
      "start"_a = 0.0, "end"_a = py::none(), "step"_a = 1.0, "dtype"_a = py::none());
  o.def(
      "randn",
      [](py::args size, std::optional<DType> d) { return randn(size.cast<Shape>(), opts(d)); },
      "dtype"_a = py::none());
  o.def(
      "rand",
      [](py::args size, std::optional<DType> d) { return rand(size.cast<Shape>(), opts(d)); },
      "dtype"_a = py::none());
}

}  // namespace

void bind_ops(Modules& m) {
  bind_elementwise(m.ops);
  bind_nn_ops(m.ops);
  bind_shape_ops(m.ops);
  bind_factories(m.ops);
}

}  // namespace mixprec::python
