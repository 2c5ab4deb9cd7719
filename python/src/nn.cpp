// mixprec.nn cells for Python: nn.Cell subclassable in Python (construct with one or two inputs;
// sub-cells and Parameters assigned to attributes are registered under the attribute's name, as
// in MindSpore), the C++ layers and losses with MindSpore's keyword arguments, the C++ zoo
// (mixprec.zoo) and mixprec.common.initializer. Calling a cell releases the GIL; a Python
// construct takes it back for its own lines.
#include "binding.h"

namespace mixprec::python {
namespace {

using nn::Cell;
template <class C> using CellClass = py::class_<C, Cell, std::shared_ptr<C>>;

// A Cell whose construct is written in Python; what it returns must be a Tensor (a construct
// that forgot its `return` gives None: a TypeError naming the class, not a signature dump later).
class PyCell : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return call_construct(x); }
  Tensor construct(const Tensor& x, const Tensor& y) override { return call_construct(x, y); }
  // The Python class name, for repr, the precision table and overflow provenance.
  std::string type_name() const override {
    py::gil_scoped_acquire gil;
    const py::function f = py::get_override(static_cast<const Cell*>(this), "construct");
    return f ? py::str(f.attr("__self__").get_type().attr("__name__")).cast<std::string>() : "Cell";
  }

 private:
  template <class... Args> Tensor call_construct(const Args&... args) {
    py::gil_scoped_acquire gil;
    const py::function f = py::get_override(static_cast<const Cell*>(this), "construct");
    if (!f) return Cell::construct(args...);
    const py::object out = f(args...);
    if (py::isinstance<Tensor>(out)) return out.cast<Tensor>();
    const std::string cls = py::str(f.attr("__self__").get_type().attr("__name__"));
    throw py::type_error(cls + ".construct returned " +
                         (out.is_none()
                              ? std::string("None (is a `return` missing?)")
                              : "a " + std::string(py::str(py::type::of(out).attr("__name__")))) +
                         "; a cell's construct must return a Tensor");
  }
};

// Whether Cell.__init__ has run for `self` (a Python subclass that assigns before
// super().__init__() has no C++ Cell yet: using it would crash).
bool cell_initialized(const py::object& self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  return inst->get_value_and_holder().holder_constructed();
}

// MindSpore's attribute registration: `self.fc = nn.Dense(...)`, `self.w = Parameter(...)`.
void cell_setattr(const py::object& self, const py::str& name, const py::object& value) {
  if (!cell_initialized(self)) {
    if (py::isinstance<Cell>(value) || py::isinstance<Parameter>(value))
      throw py::type_error(std::string(py::str(py::type::of(self).attr("__name__"))) +
                           ".__init__ assigned '" + std::string(name) +
                           "' before Cell.__init__ ran: call super().__init__() first in __init__");
    if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0)
      throw py::error_already_set();
    return;
  }
  Cell& cell = self.cast<Cell&>();
  if (dynamic_cast<PyCell*>(&cell)) {
    if (py::isinstance<Cell>(value))
      cell.register_cell(name, value.cast<std::shared_ptr<Cell>>());
    else if (py::isinstance<Parameter>(value)) {
      const Tensor& p = value.cast<const Parameter&>();
      cell.register_parameter(name, p, p.requires_grad());
    }
  }
  if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0)
    throw py::error_already_set();
}

py::object tensor_or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

ops::MemoryFormat memory_format_arg(const std::string& s) {
  if (s == "any") return ops::MemoryFormat::any;
  if (s == "channels_last") return ops::MemoryFormat::channels_last;
  if (s == "contiguous") return ops::MemoryFormat::contiguous;
  throw py::value_error(
      "Conv2d: memory_format must be 'any', 'channels_last' or 'contiguous', got '" + s + "'");
}

ops::Activation activation_arg(const py::object& a) {
  if (a.is_none()) return ops::Activation::none;
  if ((py::isinstance<py::str>(a) && a.cast<std::string>() == "relu") ||
      py::isinstance<nn::ReLU>(a))
    return ops::Activation::relu;
  throw py::value_error(
      "Dense: activation must be None or 'relu' (fused into the GEMM); apply other "
      "activations as a separate cell");
}

void bind_cell(Modules& m) {
  py::class_<Cell, PyCell, std::shared_ptr<Cell>>(
      m.nn, "Cell", py::dynamic_attr(), "Base of every network; subclass it and write construct().")
      .def(py::init<>())
      .def(
          "__call__", [](Cell& c, const Tensor& x) { return c(x); }, ReleaseGil())
      .def(
          "__call__", [](Cell& c, const Tensor& x, const Tensor& y) { return c(x, y); },
          ReleaseGil())
      .def(
          "construct", [](Cell& c, const Tensor& x) { return c.construct(x); }, ReleaseGil())
      .def(
          "construct", [](Cell& c, const Tensor& x, const Tensor& y) { return c.construct(x, y); },
          ReleaseGil())
      .def("__setattr__", &cell_setattr)
      .def("trainable_params", &Cell::trainable_params)
      .def("get_parameters",
           [](const Cell& c) {
             std::vector<Tensor> out;
             for (auto& [n, t] : c.parameters_and_names()) out.push_back(t);
             return out;
           })
      .def("parameters_and_names", &Cell::parameters_and_names)
      .def("parameters_dict",
           [](const Cell& c) {
             py::dict d;
             for (auto& [n, t] : c.parameters_and_names()) d[py::str(n)] = t;
             return d;
           })
      .def("cells_and_names", &Cell::cells_and_names, py::return_value_policy::reference_internal)
      .def(
          "set_train",
          [](py::object self, bool mode) {
            self.cast<Cell&>().set_train(mode);
            return self;
          },
          "mode"_a = true)
      .def(
          "to_float",
          [](py::object self, DType d) {
            self.cast<Cell&>().to_float(d);
            return self;
          },
          "dst_type"_a)
      .def_property_readonly("training", &Cell::training)
      .def(
          "insert_child_to_cell",
          [](Cell& c, const std::string& name, std::shared_ptr<Cell> child) {
            c.register_cell(name, std::move(child));
          },
          "child_name"_a, "child_cell"_a, py::keep_alive<1, 3>())
      .def(
          "insert_param_to_cell",
          [](Cell& c, const std::string& name, const Parameter& p) {
            c.register_parameter(name, p, p.requires_grad());
          },
          "param_name"_a, "param"_a)
      .def("__repr__", [](const Cell& c) { return c.repr(); });
}

void bind_conv_dense(Modules& m) {
  CellClass<nn::Conv2d>(m.nn, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, py::object kernel_size, py::object stride,
                       const std::string& pad_mode, py::object padding, py::object dilation,
                       int64_t group, bool has_bias, py::object weight_init, py::object bias_init,
                       const std::string& data_format, const std::string& memory_format) {
             check_data_format(data_format, "Conv2d");
             nn::Conv2dOptions o{.stride = pair_arg(stride, "Conv2d stride"),
                                 .pad_mode = pad_mode_arg(pad_mode, "Conv2d"),
                                 .padding = padding_arg(padding, "Conv2d padding"),
                                 .dilation = pair_arg(dilation, "Conv2d dilation"),
                                 .group = group,
                                 .has_bias = has_bias,
                                 .bias_init = init_arg(bias_init, "Conv2d bias_init"),
                                 .memory_format = memory_format_arg(memory_format)};
             if (auto w = init_arg(weight_init, "Conv2d weight_init")) o.weight_init = *w;
             return std::make_shared<nn::Conv2d>(in, out,
                                                 pair_arg(kernel_size, "Conv2d kernel_size"), o);
           }),
           "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1,
           "pad_mode"_a = "same", "padding"_a = 0, "dilation"_a = 1, "group"_a = 1,
           "has_bias"_a = false, "weight_init"_a = py::none(), "bias_init"_a = py::none(),
           "data_format"_a = "NCHW", "memory_format"_a = "any")
      .def_readonly("weight", &nn::Conv2d::weight)
      .def_property_readonly("bias", [](const nn::Conv2d& c) { return tensor_or_none(c.bias); });
  CellClass<nn::Dense>(m.nn, "Dense")
      .def(py::init([](int64_t in, int64_t out, py::object weight_init, py::object bias_init,
                       bool has_bias, py::object activation) {
             nn::DenseOptions o{.bias_init = init_arg(bias_init, "Dense bias_init"),
                                .has_bias = has_bias,
                                .activation = activation_arg(activation)};
             if (auto w = init_arg(weight_init, "Dense weight_init")) o.weight_init = *w;
             return std::make_shared<nn::Dense>(in, out, o);
           }),
           "in_channels"_a, "out_channels"_a, "weight_init"_a = py::none(),
           "bias_init"_a = py::none(), "has_bias"_a = true, "activation"_a = py::none())
      .def_readonly("weight", &nn::Dense::weight)
      .def_property_readonly("bias", [](const nn::Dense& c) { return tensor_or_none(c.bias); });
}

template <class BN, class Base>
void bind_batch_norm(py::class_<BN, Base, std::shared_ptr<BN>> c, const char* name) {
  c.def(py::init([name](int64_t num_features, double eps, double momentum, bool affine,
                        py::object gamma_init, py::object beta_init,
                        std::optional<bool> use_batch_statistics, const std::string& data_format) {
          check_data_format(data_format, name);
          nn::BatchNormOptions o{.eps = eps,
                                 .momentum = momentum,
                                 .affine = affine,
                                 .use_batch_statistics = use_batch_statistics};
          if (auto g = init_arg(gamma_init, "gamma_init")) o.gamma_init = *g;
          if (auto b = init_arg(beta_init, "beta_init")) o.beta_init = *b;
          return std::make_shared<BN>(num_features, o);
        }),
        "num_features"_a, "eps"_a = 1e-5, "momentum"_a = 0.9, "affine"_a = true,
        "gamma_init"_a = "ones", "beta_init"_a = "zeros", "use_batch_statistics"_a = py::none(),
        "data_format"_a = "NCHW")
      .def_readonly("gamma", &BN::gamma)
      .def_readonly("beta", &BN::beta)
      .def_readonly("moving_mean", &BN::moving_mean)
      .def_readonly("moving_variance", &BN::moving_variance);
}

void bind_norms_and_activations(Modules& m) {
  bind_batch_norm(CellClass<nn::BatchNorm2d>(m.nn, "BatchNorm2d"), "BatchNorm2d");
  bind_batch_norm(py::class_<nn::BatchNorm1d, nn::BatchNorm2d, std::shared_ptr<nn::BatchNorm1d>>(
                      m.nn, "BatchNorm1d"),
                  "BatchNorm1d");
  CellClass<nn::LayerNorm>(m.nn, "LayerNorm")
      .def(py::init([](const Shape& shape, double epsilon) {
             return std::make_shared<nn::LayerNorm>(shape, epsilon);
           }),
           "normalized_shape"_a, "epsilon"_a = 1e-7)
      .def_readonly("gamma", &nn::LayerNorm::gamma)
      .def_readonly("beta", &nn::LayerNorm::beta);
  CellClass<nn::ReLU>(m.nn, "ReLU").def(py::init<>());
  CellClass<nn::Sigmoid>(m.nn, "Sigmoid").def(py::init<>());
  CellClass<nn::Tanh>(m.nn, "Tanh").def(py::init<>());
  CellClass<nn::HSwish>(m.nn, "HSwish").def(py::init<>());
  CellClass<nn::GELU>(m.nn, "GELU").def(py::init<bool>(), "approximate"_a = true);
  CellClass<nn::Softmax>(m.nn, "Softmax").def(py::init<int64_t>(), "axis"_a = -1);
  CellClass<nn::Flatten>(m.nn, "Flatten")
      .def(py::init<int64_t, int64_t>(), "start_dim"_a = 1, "end_dim"_a = -1);
}

void bind_pools(Modules& m) {
  CellClass<nn::MaxPool2d>(m.nn, "MaxPool2d")
      .def(py::init([](int64_t k, int64_t s, const std::string& pad_mode, py::object padding,
                       bool ceil_mode, const std::string& data_format) {
             check_data_format(data_format, "MaxPool2d");
             return std::make_shared<nn::MaxPool2d>(
                 k, s,
                 nn::PoolOptions{.pad_mode = pad_mode_arg(pad_mode, "MaxPool2d"),
                                 .padding = pair_arg(padding, "MaxPool2d padding"),
                                 .ceil_mode = ceil_mode});
           }),
           "kernel_size"_a = 1, "stride"_a = 1, "pad_mode"_a = "valid", "padding"_a = 0,
           "ceil_mode"_a = false, "data_format"_a = "NCHW");
  CellClass<nn::AvgPool2d>(m.nn, "AvgPool2d")
      .def(py::init([](int64_t k, int64_t s, const std::string& pad_mode, py::object padding,
                       bool ceil_mode, bool count_include_pad, const std::string& data_format) {
             check_data_format(data_format, "AvgPool2d");
             return std::make_shared<nn::AvgPool2d>(
                 k, s,
                 nn::PoolOptions{.pad_mode = pad_mode_arg(pad_mode, "AvgPool2d"),
                                 .padding = pair_arg(padding, "AvgPool2d padding"),
                                 .ceil_mode = ceil_mode,
                                 .count_include_pad = count_include_pad});
           }),
           "kernel_size"_a = 1, "stride"_a = 1, "pad_mode"_a = "valid", "padding"_a = 0,
           "ceil_mode"_a = false, "count_include_pad"_a = true, "data_format"_a = "NCHW");
  CellClass<nn::AdaptiveAvgPool2d>(m.nn, "AdaptiveAvgPool2d")
      .def(py::init([](py::object size) {
             return std::make_shared<nn::AdaptiveAvgPool2d>(pair_arg(size, "output_size"));
           }),
           "output_size"_a);
}

void bind_other_layers(Modules& m) {
  CellClass<nn::Dropout>(m.nn, "Dropout")
      .def(py::init([](std::optional<double> keep_prob, std::optional<double> p) {
             return std::make_shared<nn::Dropout>(p ? *p : keep_prob ? 1.0 - *keep_prob : 0.5);
           }),
           "keep_prob"_a = py::none(), "p"_a = py::none());
  CellClass<nn::Embedding>(m.nn, "Embedding")
      .def(py::init([](int64_t vocab, int64_t size, py::object table) {
             auto init = init_arg(table, "embedding_table");
             return init ? std::make_shared<nn::Embedding>(vocab, size, *init)
                         : std::make_shared<nn::Embedding>(vocab, size);
           }),
           "vocab_size"_a, "embedding_size"_a, "embedding_table"_a = "normal")
      .def_readonly("embedding_table", &nn::Embedding::embedding_table);
  CellClass<nn::SequentialCell>(m.nn, "SequentialCell")
      .def(
          py::init([](py::args args) {
            // SequentialCell([a, b]) or SequentialCell(a, b); the arguments are kept alive with it.
            const bool one_list = args.size() == 1 && py::isinstance<py::list>(args[0]);
            const py::object cells =
                one_list ? py::reinterpret_borrow<py::object>(args[0]) : py::object(args);
            std::vector<std::shared_ptr<Cell>> list;
            for (py::handle c : cells) {
              if (!py::isinstance<Cell>(c))
                throw py::type_error("SequentialCell: expected Cells, got a " +
                                     py::str(py::type::of(c).attr("__name__")).cast<std::string>());
              list.push_back(c.cast<std::shared_ptr<Cell>>());
            }
            return std::make_shared<nn::SequentialCell>(std::move(list));
          }),
          py::keep_alive<1, 2>())
      .def(
          "append", [](nn::SequentialCell& s, std::shared_ptr<Cell> c) { s.append(std::move(c)); },
          "cell"_a, py::keep_alive<1, 2>())
      .def("__len__", &nn::SequentialCell::size)
      .def(
          "__getitem__",
          [](nn::SequentialCell& s, size_t i) -> Cell& {
            if (i >= s.size())
              throw py::index_error("SequentialCell index " + std::to_string(i) + " out of range");
            return s[i];
          },
          py::return_value_policy::reference_internal);
}

void bind_losses(Modules& m) {
  CellClass<nn::SoftmaxCrossEntropyWithLogits>(m.nn, "SoftmaxCrossEntropyWithLogits")
      .def(py::init([](bool sparse, const std::string& reduction) {
             return std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(
                 nn::SoftmaxCrossEntropyOptions{
                     .sparse = sparse,
                     .reduction = reduction_arg(reduction, "SoftmaxCrossEntropyWithLogits")});
           }),
           "sparse"_a = false, "reduction"_a = "none");
  CellClass<nn::MSELoss>(m.nn, "MSELoss")
      .def(py::init([](const std::string& r) {
             return std::make_shared<nn::MSELoss>(reduction_arg(r, "MSELoss"));
           }),
           "reduction"_a = "mean");
  CellClass<nn::NLLLoss>(m.nn, "NLLLoss")
      .def(py::init([](const std::string& r) {
             return std::make_shared<nn::NLLLoss>(reduction_arg(r, "NLLLoss"));
           }),
           "reduction"_a = "mean");
  CellClass<nn::WithLossCell>(m.nn, "WithLossCell")
      .def(py::init([](Cell& backbone, Cell& loss_fn) {
             return std::make_shared<nn::WithLossCell>(backbone, loss_fn);
           }),
           "backbone"_a, "loss_fn"_a, py::keep_alive<1, 2>(), py::keep_alive<1, 3>());
}

void bind_zoo(Modules& m) {
  CellClass<nn::SimpleNet>(m.zoo, "SimpleNet",
                           "The seed's SimpleNet, in C++ (conv1 keeps a contiguous output).")
      .def(py::init<>())
      .def_property_readonly(
          "conv1", [](nn::SimpleNet& n) -> nn::Conv2d& { return n.conv1; },
          py::return_value_policy::reference_internal)
      .def_property_readonly(
          "fc", [](nn::SimpleNet& n) -> nn::Dense& { return n.fc; },
          py::return_value_policy::reference_internal);
  m.zoo.def("make_model", &nn::make_model, "name"_a);
  m.zoo.def("model_names", &nn::model_names);
  m.zoo.def("default_batch_size", &nn::default_batch_size, "name"_a);
}

void bind_initializers(Modules& m) {
  py::module_& i = m.initializer;
  py::class_<init::Initializer>(i, "Initializer")
      .def_readonly("name", &init::Initializer::name)
      .def("__repr__", [](const init::Initializer& x) { return x.name; });
  auto fan = [](const std::string& mode) {
    if (mode == "fan_in") return init::FanMode::fan_in;
    if (mode == "fan_out") return init::FanMode::fan_out;
    throw py::value_error("mode must be 'fan_in' or 'fan_out', got '" + mode + "'");
  };
  i.def("Normal", &init::Normal, "sigma"_a = 0.01, "mean"_a = 0.0);
  i.def("Uniform", &init::Uniform, "scale"_a = 0.07);
  i.def(
      "HeUniform",
      [fan](double a, const std::string& mode, const std::string& nl) {
        return init::HeUniform(a, fan(mode), nl);
      },
      "negative_slope"_a = 0.0, "mode"_a = "fan_in", "nonlinearity"_a = "leaky_relu");
  i.def(
      "HeNormal",
      [fan](double a, const std::string& mode, const std::string& nl) {
        return init::HeNormal(a, fan(mode), nl);
      },
      "negative_slope"_a = 0.0, "mode"_a = "fan_in", "nonlinearity"_a = "leaky_relu");
  i.def("XavierUniform", &init::XavierUniform, "gain"_a = 1.0);
  i.def("Zero", &init::Zero);
  i.def("One", &init::One);
  i.def("Constant", &init::Constant, "value"_a);
  i.def(
      "initializer",
      [](py::object init, const Shape& shape, DType dtype) {
        const auto x = init_arg(init, "initializer");
        if (!x) throw py::value_error("initializer: init must not be None");
        return init::initialize(*x, shape, dtype);
      },
      "init"_a, "shape"_a, "dtype"_a = DType::f32);
}

}  // namespace

void bind_nn(Modules& m) {
  bind_initializers(m);
  bind_cell(m);
  bind_conv_dense(m);
  bind_norms_and_activations(m);
  bind_pools(m);
  bind_other_layers(m);
  bind_losses(m);
  bind_zoo(m);
}

}  // namespace mixprec::python
