// Training for Python: the optimizers and metrics (in mixprec.nn, as the seed writes them), the
// learning-rate schedules, mixprec.amp (levels, lists, build_train_network, loss scalers and
// managers, all_finite), value_and_grad / grad over a Python function, and mixprec.train (Model,
// callbacks, including callbacks written in Python). Model.train/eval and the optimizer step run
// without the GIL; a Python construct or callback takes it back for its own lines.
#include "binding.h"

namespace mixprec::python {
namespace {

using nn::Cell;
using optim::Optimizer;

template <class O> using OptimizerClass = py::class_<O, Optimizer, std::shared_ptr<O>>;

// An optimizer's learning_rate: a LearningRate, or a number made into one here, so that a bad
// number (nan, inf, -1) gets the library's learning-rate message, not pybind11's list of
// signatures.
optim::LearningRate learning_rate_arg(const py::object& lr) {
  if (py::isinstance<optim::LearningRate>(lr)) return lr.cast<optim::LearningRate>();
  if ((py::isinstance<py::float_>(lr) || py::isinstance<py::int_>(lr)) &&
      !py::isinstance<py::bool_>(lr))
    return optim::LearningRate(lr.cast<double>());
  throw py::type_error("learning_rate: expected a number or a LearningRate, got a " +
                       std::string(py::str(py::type::of(lr).attr("__name__"))));
}

void bind_optimizers(Modules& m) {
  py::class_<optim::LearningRate>(m.nn, "LearningRate",
                                  "A learning rate as a function of the step; a float converts.")
      .def(py::init<double>(), "learning_rate"_a)
      .def_static("constant", &optim::LearningRate::constant, "lr"_a)
      .def_static("step_decay", &optim::LearningRate::step_decay, "lr"_a, "step_size"_a, "gamma"_a)
      .def_static("cosine", &optim::LearningRate::cosine, "lr"_a, "total_steps"_a, "min_lr"_a = 0.0)
      .def("with_warmup", &optim::LearningRate::with_warmup, "steps"_a)
      .def("__call__", &optim::LearningRate::at, "step"_a)
      .def("__repr__", &optim::LearningRate::description);
  py::implicitly_convertible<double, optim::LearningRate>();
  py::implicitly_convertible<int, optim::LearningRate>();

  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m.nn, "Optimizer")
      .def(
          "__call__",
          [](Optimizer& o, py::object grads) {
            const auto g = tensor_list_arg(grads, "optimizer(grads)");
            py::gil_scoped_release release;
            o(g);
          },
          "gradients"_a)
      .def("step", py::overload_cast<>(&Optimizer::step), ReleaseGil())
      .def("zero_grad", &Optimizer::zero_grad)
      .def_property_readonly("parameters", &Optimizer::parameters)
      .def_property_readonly("global_step", &Optimizer::global_step)
      .def("get_lr", &Optimizer::learning_rate);
  OptimizerClass<optim::Momentum>(m.nn, "Momentum")
      .def(
          py::init([](py::object params, py::object lr, double momentum, double wd, bool nesterov) {
            return std::make_shared<optim::Momentum>(tensor_list_arg(params, "params"),
                                                     learning_rate_arg(lr), momentum, wd, nesterov);
          }),
          "params"_a, "learning_rate"_a, "momentum"_a, "weight_decay"_a = 0.0,
          "use_nesterov"_a = false);
  OptimizerClass<optim::SGD>(m.nn, "SGD")
      .def(py::init([](py::object params, py::object lr, double wd) {
             return std::make_shared<optim::SGD>(tensor_list_arg(params, "params"),
                                                 learning_rate_arg(lr), wd);
           }),
           "params"_a, "learning_rate"_a = 0.1, "weight_decay"_a = 0.0);
  OptimizerClass<optim::Adam>(m.nn, "Adam")
      .def(py::init(
               [](py::object params, py::object lr, double b1, double b2, double eps, double wd) {
                 return std::make_shared<optim::Adam>(tensor_list_arg(params, "params"),
                                                      learning_rate_arg(lr), b1, b2, eps, wd);
               }),
           "params"_a, "learning_rate"_a = 1e-3, "beta1"_a = 0.9, "beta2"_a = 0.999, "eps"_a = 1e-8,
           "weight_decay"_a = 0.0);
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(m.nn, "AdamW")
      .def(py::init(
               [](py::object params, py::object lr, double b1, double b2, double eps, double wd) {
                 return std::make_shared<optim::AdamW>(tensor_list_arg(params, "params"),
                                                       learning_rate_arg(lr), b1, b2, eps, wd);
               }),
           "params"_a, "learning_rate"_a = 1e-3, "beta1"_a = 0.9, "beta2"_a = 0.999, "eps"_a = 1e-8,
           "weight_decay"_a = 1e-2);
}

void bind_metrics(Modules& m) {
  py::class_<train::Metric, std::shared_ptr<train::Metric>>(m.nn, "Metric")
      .def("clear", &train::Metric::clear)
      .def(
          "update",
          [](train::Metric& x, const Tensor& logits, const Tensor& labels,
             std::optional<Tensor> loss) { x.update(logits, labels, loss.value_or(Tensor())); },
          "logits"_a, "labels"_a, "loss"_a = py::none())
      .def("eval", &train::Metric::eval);
  py::class_<train::Accuracy, train::Metric, std::shared_ptr<train::Accuracy>>(m.nn, "Accuracy")
      .def(py::init<>());
  py::class_<train::Loss, train::Metric, std::shared_ptr<train::Loss>>(m.nn, "Loss")
      .def(py::init<>());
}

// ---------------------------------------------------------------- amp

}  // namespace

std::optional<Handle<amp::LossScaleManager>> manager_arg(const py::object& v) {
  if (v.is(py::ellipsis())) return std::nullopt;
  if (v.is_none()) return Handle<amp::LossScaleManager>(nullptr);
  return Handle<amp::LossScaleManager>(v.cast<std::shared_ptr<amp::LossScaleManager>>());
}

namespace {

// A Tensor in, a Tensor out; a list or tuple in, a tuple out (MindSpore's scaler methods).
template <class F> py::object per_tensor(const py::object& inputs, F f) {
  if (py::isinstance<Tensor>(inputs)) return py::cast(f(inputs.cast<Tensor>()));
  py::tuple out(py::len(inputs));
  size_t i = 0;
  for (const Tensor& t : tensor_list_arg(inputs, "inputs")) out[i++] = f(t);
  return out;
}

bool finite_arg(const py::object& v) {
  return py::isinstance<Tensor>(v) ? v.cast<Tensor>().item() != 0 : v.cast<bool>();
}

void bind_loss_scale(Modules& m) {
  using amp::LossScaleManager;
  py::class_<LossScaleManager, std::shared_ptr<LossScaleManager>> base(m.loss_scale_manager,
                                                                       "LossScaleManager");
  base.def("get_loss_scale", &LossScaleManager::get_loss_scale)
      .def("get_drop_overflow_update", &LossScaleManager::get_drop_overflow_update)
      .def("update_loss_scale", &LossScaleManager::update_loss_scale, "overflow"_a,
           "loss_finite"_a = true)
      .def("__repr__", &LossScaleManager::description);
  py::class_<amp::FixedLossScaleManager, LossScaleManager,
             std::shared_ptr<amp::FixedLossScaleManager>>(m.loss_scale_manager,
                                                          "FixedLossScaleManager")
      .def(py::init([](double s, bool drop) {
             return std::make_shared<amp::FixedLossScaleManager>(s,
                                                                 amp::FixedLossScaleOptions{drop});
           }),
           "loss_scale"_a = 128.0, "drop_overflow_update"_a = true);
  py::class_<amp::DynamicLossScaleManager, LossScaleManager,
             std::shared_ptr<amp::DynamicLossScaleManager>>(m.loss_scale_manager,
                                                            "DynamicLossScaleManager")
      .def(py::init([](double init, double factor, int64_t window) {
             return std::make_shared<amp::DynamicLossScaleManager>(init, factor, window);
           }),
           "init_loss_scale"_a = 16777216.0, "scale_factor"_a = 2.0, "scale_window"_a = 2000);
  for (const char* name : {"LossScaleManager", "FixedLossScaleManager", "DynamicLossScaleManager"})
    m.amp.attr(name) = m.loss_scale_manager.attr(name);

  py::class_<amp::LossScaler>(m.amp, "LossScaler")
      .def(
          "scale",
          [](const amp::LossScaler& s, py::object x) {
            return per_tensor(x, [&](const Tensor& t) { return s.scale(t); });
          },
          "inputs"_a)
      .def(
          "unscale",
          [](const amp::LossScaler& s, py::object x) {
            return per_tensor(x, [&](const Tensor& t) { return s.unscale(t); });
          },
          "inputs"_a)
      .def(
          "adjust",
          [](amp::LossScaler& s, py::object finite) { return s.adjust(finite_arg(finite)); },
          "grads_finite"_a)
      .def_property_readonly("scale_value", &amp::LossScaler::scale_value);
  py::class_<amp::StaticLossScaler, amp::LossScaler>(m.amp, "StaticLossScaler")
      .def(py::init<double>(), "scale_value"_a);
  py::class_<amp::DynamicLossScaler, amp::LossScaler>(m.amp, "DynamicLossScaler")
      .def(py::init<double, double, int64_t>(), "scale_value"_a, "scale_factor"_a,
           "scale_window"_a);
  m.amp.def(
      "all_finite",
      [](py::object inputs) { return amp::all_finite(tensor_list_arg(inputs, "all_finite")); },
      "inputs"_a);
}

void bind_amp(Modules& m) {
  m.amp.def(
      "auto_mixed_precision",
      [](py::object network, const std::string& level, std::optional<DType> dtype) {
        amp::auto_mixed_precision(network.cast<Cell&>(), level,
                                  dtype.value_or(amp::default_low_dtype()));
        return network;
      },
      "network"_a, "amp_level"_a = "O0", "dtype"_a = py::none());
  m.amp.def(
      "custom_mixed_precision",
      [](py::object network, std::optional<std::vector<py::object>> white,
         std::optional<std::vector<py::object>> black, std::optional<DType> dtype) {
        auto names = [](const std::optional<std::vector<py::object>>& list) {
          std::vector<std::string>
              out;  // names, or cell classes (nn.Conv2d) standing for their names
          for (const py::object& x : list.value_or(std::vector<py::object>{}))
            out.push_back(py::isinstance<py::type>(x) ? x.attr("__name__").cast<std::string>()
                                                      : x.cast<std::string>());
          return out;
        };
        amp::custom_mixed_precision(network.cast<Cell&>(),
                                    {.white_list = names(white), .black_list = names(black)},
                                    dtype.value_or(amp::default_low_dtype()));
        return network;
      },
      "network"_a, "white_list"_a = py::none(), "black_list"_a = py::none(),
      "dtype"_a = py::none());
  m.amp.def("set_undone_cast_warnings", &nn::set_undone_cast_warnings, "enabled"_a,
            "Print (True, the default) or not the warning for an explicit cast undone at a cell "
            "boundary.");
  m.amp.def("undone_casts", [] {
    py::list
        out;  // each reported undone cast: the cell's path and class, the level, the two dtypes
    for (const nn::UndoneCast& u : nn::undone_casts())
      out.append(py::dict("path"_a = u.path, "cell_class"_a = u.cell_class, "level"_a = u.level,
                          "user_dtype"_a = u.user_dtype, "cell_dtype"_a = u.cell_dtype,
                          "message"_a = u.message));
    return out;
  });
  m.amp.def("get_white_list", &amp::get_white_list);
  m.amp.def("get_black_list", &amp::get_black_list);
  py::class_<amp::TrainOneStepCell, Cell, std::shared_ptr<amp::TrainOneStepCell>>(
      m.amp, "TrainOneStepCell")
      .def_property_readonly(
          "loss_scale_manager",
          [](amp::TrainOneStepCell& c) -> py::object {
            auto* l = c.loss_scale_manager();
            return l ? py::cast(l, py::return_value_policy::reference) : py::none();
          },
          py::keep_alive<0, 1>())
      .def_property_readonly("skipped_steps", &amp::TrainOneStepCell::skipped_steps)
      .def_property_readonly("last_loss",
                             [](const amp::TrainOneStepCell& c) { return c.last_step().loss; })
      .def_property_readonly("last_skipped",
                             [](const amp::TrainOneStepCell& c) { return c.last_step().skipped; });
  m.amp.def(
      "build_train_network",
      [](Cell& network, Optimizer& optimizer, Cell& loss_fn, const std::string& level,
         const std::string& boost_level, std::optional<bool> keep_bn_fp32,
         std::optional<DType> cast_model_type, py::object manager) {
        if (boost_level != "O0")
          throw py::value_error(
              "build_train_network: boost_level must be 'O0' (mixprec has no boost)");
        return amp::build_train_network(network, optimizer, loss_fn, level,
                                        {.keep_batchnorm_fp32 = keep_bn_fp32,
                                         .cast_model_type = cast_model_type,
                                         .loss_scale_manager = manager_arg(manager)});
      },
      "network"_a, "optimizer"_a, "loss_fn"_a, "level"_a = "O0", "boost_level"_a = "O0",
      "keep_batchnorm_fp32"_a = py::none(), "cast_model_type"_a = py::none(),
      "loss_scale_manager"_a = py::ellipsis(), py::keep_alive<0, 1>(), py::keep_alive<0, 2>(),
      py::keep_alive<0, 3>());
  bind_loss_scale(m);
}

// ---------------------------------------------------------------- value_and_grad

std::vector<int> positions_arg(const py::object& v) {
  if (v.is_none()) return {};
  if (py::isinstance<py::int_>(v)) return {v.cast<int>()};
  return v.cast<std::vector<int>>();
}

std::vector<Tensor> tensors_of(const py::object& out) {
  if (py::isinstance<Tensor>(out)) return {out.cast<Tensor>()};
  if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
    std::vector<Tensor> v;  // non-Tensor aux outputs are returned, not differentiated
    for (py::handle x : out)
      if (py::isinstance<Tensor>(x)) v.push_back(x.cast<Tensor>());
    if (!v.empty() && py::isinstance<Tensor>(out.cast<py::sequence>()[0])) return v;
  }
  throw py::type_error(
      "value_and_grad: the function must return a Tensor, or a tuple whose first item is a Tensor");
}

py::tuple as_tuple(const std::vector<Tensor>& v, size_t begin, size_t end) {
  py::tuple t(end - begin);
  for (size_t i = begin; i < end; ++i) t[i - begin] = v[i];
  return t;
}

// Runs fn(*args) with grad on and returns (fn's output, gradients shaped as MindSpore returns
// them: one Tensor for an int grad_position or a 1-tuple, a tuple for a longer tuple, (inputs,
// weights) for both).
py::tuple call_and_differentiate(const py::function& fn, const py::args& args,
                                 const py::object& grad_position,
                                 const std::vector<Tensor>& weights, bool has_aux) {
  const std::vector<int> positions = positions_arg(grad_position);
  EnableGradGuard enable(true);
  std::vector<Tensor> inputs(positions.size());
  py::list call_args;
  for (size_t i = 0; i < args.size(); ++i)
    call_args.append(
        py::isinstance<Tensor>(args[i])
            ? py::cast(detail::input_leaf(i, positions, inputs, args[i].cast<Tensor>()))
            : py::reinterpret_borrow<py::object>(args[i]));
  py::object out = fn(*call_args);
  if (has_aux &&
      !((py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) && py::len(out) >= 2))
    throw py::value_error(
        "value_and_grad(has_aux=True): the function must return more than one output (the value "
        "to differentiate, then the aux outputs), as in MindSpore; drop has_aux=True for one "
        "output");
  std::vector<Tensor> values = tensors_of(out);
  if (has_aux) values.resize(1);
  ValueAndGrad r;
  {
    py::gil_scoped_release release;
    r = detail::differentiate(std::move(values), positions, inputs, args.size(), weights,
                              {.has_aux = has_aux});
  }
  const size_t np = positions.size();
  // One position, an int or a 1-tuple, gives one Tensor (MindSpore unwraps (i,) too).
  py::object input_grads = np == 1 ? py::cast(r.grads[0]) : py::object(as_tuple(r.grads, 0, np));
  py::object weight_grads = as_tuple(r.grads, np, r.grads.size());
  py::object grads = np == 0           ? weight_grads
                     : weights.empty() ? input_grads
                                       : py::make_tuple(input_grads, weight_grads);
  return py::make_tuple(out, grads);
}

// value_and_grad's and grad's weights, with the positions checked against them at definition.
std::vector<Tensor> checked_grad_weights(const py::object& grad_position,
                                         const py::object& weights) {
  std::vector<Tensor> w =
      weights.is_none() ? std::vector<Tensor>{} : tensor_list_arg(weights, "weights");
  detail::check_grad_spec(positions_arg(grad_position), w);
  return w;
}

void bind_autodiff(Modules& m) {
  m.root.def(
      "value_and_grad",
      [](py::function fn, py::object grad_position, py::object weights, bool has_aux) {
        const std::vector<Tensor> w = checked_grad_weights(grad_position, weights);
        return py::cpp_function([fn, grad_position, w, has_aux](py::args args) {
          return call_and_differentiate(fn, args, grad_position, w, has_aux);
        });
      },
      "fn"_a, "grad_position"_a = 0, "weights"_a = py::none(), "has_aux"_a = false,
      "MindSpore's value_and_grad: returns grad_fn; grad_fn(*args) returns (fn's output, "
      "gradients).");
  m.root.def(
      "grad",
      [](py::function fn, py::object grad_position, py::object weights, bool has_aux) {
        const std::vector<Tensor> w = checked_grad_weights(grad_position, weights);
        return py::cpp_function([fn, grad_position, w, has_aux](py::args args) -> py::object {
          const py::tuple r = call_and_differentiate(fn, args, grad_position, w, has_aux);
          if (!has_aux) return r[1];
          const py::tuple out = r[0].cast<py::tuple>();  // (grads, aux...)
          return py::make_tuple(r[1], out[py::slice(1, out.size(), 1)]);
        });
      },
      "fn"_a, "grad_position"_a = 0, "weights"_a = py::none(), "has_aux"_a = false);
}

}  // namespace

void bind_train(Modules& m) {
  bind_optimizers(m);
  bind_metrics(m);
  bind_amp(m);
  bind_autodiff(m);
  bind_train_model(m);
}

}  // namespace mixprec::python
