// mixprec.train for Python: Model (MindSpore's keywords: network, loss_fn, optimizer, metrics,
// amp_level, loss_scale_manager, ...), the C++ callbacks (LossMonitor, TimeMonitor,
// LossScaleMonitor), Callback subclassable in Python with MindSpore 2.x hook names, and the
// RunContext those hooks receive (original_args() with cur_epoch_num, cur_step_num, net_outputs).
#include "binding.h"

namespace mixprec::python {
namespace {

using nn::Cell;
using train::Callback;
using train::RunContext;

// A callback written in Python: MindSpore 2.x names (on_train_step_end) or the older ones
// (step_end). Each hook takes the GIL only when the Python class defines it.
class PyCallback : public Callback {
 public:
  void on_train_begin(RunContext& c) override { call("on_train_begin", "begin", c); }
  void on_epoch_begin(RunContext& c) override { call("on_train_epoch_begin", "epoch_begin", c); }
  void on_step_end(RunContext& c) override { call("on_train_step_end", "step_end", c); }
  void on_epoch_end(RunContext& c) override { call("on_train_epoch_end", "epoch_end", c); }
  void on_train_end(RunContext& c) override { call("on_train_end", "end", c); }
  // A Python callback may say that it reads only its RunContext (Callback::may_lag): define
  // may_lag(self) returning True. Without it, each device step is waited for before its hooks.
  bool may_lag() const override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const Callback*>(this), "may_lag");
    return f ? f().cast<bool>() : false;
  }

 private:
  void call(const char* name, const char* legacy, RunContext& c) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const Callback*>(this), name);
    if (!f) f = py::get_override(static_cast<const Callback*>(this), legacy);
    if (f) f(&c);
  }
};

std::map<std::string, train::MetricHandle> metrics_arg(const py::object& v) {
  std::map<std::string, train::MetricHandle> out;
  if (v.is_none()) return out;
  if (py::isinstance<py::dict>(v)) {
    for (auto [k, metric] : v.cast<py::dict>())
      out[k.cast<std::string>()] = metric.cast<std::shared_ptr<train::Metric>>();
    return out;
  }
  for (py::handle name : v) {  // {"accuracy", "loss"}
    const std::string n = name.cast<std::string>();
    if (n == "accuracy" || n == "acc")
      out[n] = std::make_shared<train::Accuracy>();
    else if (n == "loss")
      out[n] = std::make_shared<train::Loss>();
    else
      throw py::value_error("Model: unknown metric '" + n +
                            "' (expected 'accuracy' or 'loss', or a dict of Metrics)");
  }
  return out;
}

std::vector<train::CallbackHandle> callbacks_arg(const py::object& v) {
  std::vector<train::CallbackHandle> out;
  if (v.is_none()) return out;
  if (py::isinstance<Callback>(v)) return {v.cast<std::shared_ptr<Callback>>()};
  for (py::handle c : v) out.emplace_back(c.cast<std::shared_ptr<Callback>>());
  return out;
}

void bind_callbacks(Modules& m) {
  py::class_<amp::StepInfo>(m.train, "StepInfo")
      .def_readonly("step", &amp::StepInfo::step)
      .def_readonly("loss", &amp::StepInfo::loss)
      .def_readonly("loss_finite", &amp::StepInfo::loss_finite)
      .def_readonly("overflow", &amp::StepInfo::overflow)
      .def_readonly("skipped", &amp::StepInfo::skipped)
      .def_readonly("loss_scale", &amp::StepInfo::loss_scale)
      .def_readonly("lr", &amp::StepInfo::lr);
  py::class_<RunContext>(m.train, "RunContext",
                         "What a callback sees; original_args() returns itself.")
      .def(
          "original_args", [](RunContext& c) -> RunContext& { return c; },
          py::return_value_policy::reference)
      .def("request_stop", [](RunContext& c) { c.stop_requested = true; })
      .def_property_readonly("cur_epoch_num", [](const RunContext& c) { return c.epoch + 1; })
      .def_property_readonly("epoch_num", [](const RunContext& c) { return c.epochs; })
      .def_property_readonly("cur_step_num", [](const RunContext& c) { return c.global_step; })
      .def_property_readonly("batch_num", [](const RunContext& c) { return c.steps_per_epoch; })
      .def_property_readonly("step_in_epoch", [](const RunContext& c) { return c.step_in_epoch; })
      .def_property_readonly("batch_size", [](const RunContext& c) { return c.batch_size; })
      .def_property_readonly("net_outputs", [](const RunContext& c) { return c.step.loss; })
      .def_readonly("step", &RunContext::step);
  py::class_<Callback, PyCallback, std::shared_ptr<Callback>>(m.train, "Callback")
      .def(py::init<>())
      .def("may_lag", &Callback::may_lag,
           "True when on_train_step_end may come after later steps were queued (on a GPU a step's "
           "outcome comes back asynchronously): the callback reads only its RunContext. False by "
           "default; override it in a subclass to return True.");
  py::class_<train::LossMonitor, Callback, std::shared_ptr<train::LossMonitor>>(m.train,
                                                                                "LossMonitor")
      .def(py::init<int64_t>(), "per_print_times"_a = 1);
  py::class_<train::TimeMonitor, Callback, std::shared_ptr<train::TimeMonitor>>(m.train,
                                                                                "TimeMonitor")
      .def(py::init(
               [](py::object /*data_size: MindSpore's; epoch and step times print regardless*/) {
                 return std::make_shared<train::TimeMonitor>();
               }),
           "data_size"_a = py::none());
  py::class_<train::LossScaleMonitor, Callback, std::shared_ptr<train::LossScaleMonitor>>(
      m.train, "LossScaleMonitor")
      .def(py::init<int64_t>(), "every"_a = 100);
}

void bind_model(Modules& m) {
  py::class_<train::Model, std::shared_ptr<train::Model>>(m.train, "Model")
      .def(py::init([](Cell& network, Cell& loss_fn, optim::Optimizer* optimizer,
                       py::object metrics, const std::string& amp_level, py::object manager,
                       std::optional<bool> keep_bn_fp32, std::optional<DType> cast_model_type,
                       py::object eval_network, const std::string& boost_level) {
             if (!eval_network.is_none())
               throw py::value_error("Model: eval_network is not supported; eval runs `network`");
             if (boost_level != "O0")
               throw py::value_error("Model: boost_level must be 'O0' (mixprec has no boost)");
             train::ModelOptions o{.metrics = metrics_arg(metrics),
                                   .amp_level = amp_level,
                                   .keep_batchnorm_fp32 = keep_bn_fp32,
                                   .loss_scale_manager = manager_arg(manager),
                                   .dtype = cast_model_type};
             // Without an optimizer: eval and predict only (train refuses), as MindSpore's Model.
             if (!optimizer) return std::make_shared<train::Model>(network, loss_fn, std::move(o));
             return std::make_shared<train::Model>(network, loss_fn, *optimizer, std::move(o));
           }),
           "network"_a, "loss_fn"_a, "optimizer"_a = py::none(), "metrics"_a = py::none(),
           "amp_level"_a = "O0", "loss_scale_manager"_a = py::ellipsis(),
           "keep_batchnorm_fp32"_a = py::none(), "cast_model_type"_a = py::none(),
           "eval_network"_a = py::none(), "boost_level"_a = "O0", py::keep_alive<1, 2>(),
           py::keep_alive<1, 3>(), py::keep_alive<1, 4>(), py::keep_alive<1, 5>())
      .def(
          "train",
          [](train::Model& model, int64_t epoch, const dataset::Dataset& train_dataset,
             py::object callbacks, bool /*dataset_sink_mode: no sinking on the CPU*/,
             int64_t sink_size, int64_t initial_epoch) {
            if (sink_size != -1)
              throw py::value_error("Model.train: sink_size must be -1 (no dataset sinking)");
            std::vector<train::CallbackHandle> cbs = callbacks_arg(callbacks);
            py::gil_scoped_release release;
            model.train(epoch, train_dataset, std::move(cbs), {.initial_epoch = initial_epoch});
          },
          "epoch"_a, "train_dataset"_a, "callbacks"_a = py::none(), "dataset_sink_mode"_a = false,
          "sink_size"_a = -1, "initial_epoch"_a = 0)
      .def(
          "eval",
          [](train::Model& model, const dataset::Dataset& valid_dataset, py::object /*callbacks*/,
             bool /*dataset_sink_mode*/) {
            py::gil_scoped_release release;
            return model.eval(valid_dataset);
          },
          "valid_dataset"_a, "callbacks"_a = py::none(), "dataset_sink_mode"_a = false)
      .def("predict", &train::Model::predict, "predict_data"_a, ReleaseGil())
      .def_property_readonly("train_network", &train::Model::train_network,
                             py::return_value_policy::reference_internal);
  for (const char* name : {"Model", "LossMonitor", "TimeMonitor", "Callback", "RunContext"})
    m.root.attr(name) = m.train.attr(name);
}

}  // namespace

void bind_train_model(Modules& m) {
  bind_callbacks(m);
  bind_model(m);
}

}  // namespace mixprec::python
