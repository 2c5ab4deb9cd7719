// The `mixprec` Python module: creates the submodules under MindSpore's names (nn, ops, amp,
// train, train.loss_scale_manager, dataset, dataset.vision, dataset.transforms, dataset.config,
// common.initializer, zoo) and registers them in sys.modules so that `from
// mixprec.train.loss_scale_manager import FixedLossScaleManager` works; maps mixprec::Error to
// mixprec.Error (message and hint kept); binds the dtypes, set_context / get_context and set_seed.
// GRAPH_MODE sets the C++ context's Mode::graph (train steps captured and replayed;
// docs/python.md).
#include "binding.h"

#include "mixprec/version.h"

namespace mixprec::python {
namespace {

constexpr int kGraphMode = 0, kPynativeMode = 1;  // MindSpore's values

py::module_ submodule(py::module_& parent, const char* name, const char* doc) {
  py::module_ sub = parent.def_submodule(name, doc);
  py::module_::import("sys").attr("modules")[py::str(sub.attr("__name__"))] = sub;
  return sub;
}

void bind_error(py::module_& m) {
  static py::handle error_type = PyErr_NewExceptionWithDoc(
      "mixprec.Error", "An error from mixprec; `message` and `hint` hold its two parts.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = error_type;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = py::reinterpret_borrow<py::object>(error_type)(e.what());
      exc.attr("message") = e.message();
      exc.attr("hint") = e.hint();
      PyErr_SetObject(error_type.ptr(), exc.ptr());
    }
  });
}

void bind_dtypes(py::module_& m) {
  py::enum_<DType>(m, "Type", "Element types; ms.float32, ms.bfloat16, ...")
      .value("float32", DType::f32)
      .value("float64", DType::f64)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("uint8", DType::u8)
      .value("bool_", DType::boolean);
  for (const char* name :
       {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool_"})
    m.attr(name) = m.attr("Type").attr(name);
  m.attr("float_") = m.attr("float32");
  m.attr("half") = m.attr("float16");
}

void py_set_context(std::optional<int> mode, std::optional<std::string> device_target,
                    std::optional<int> device_id, std::optional<int> runtime_num_threads) {
  if (mode && *mode != kGraphMode && *mode != kPynativeMode)
    throw py::value_error("set_context: mode must be GRAPH_MODE (0) or PYNATIVE_MODE (1), got " +
                          std::to_string(*mode));
  ContextOptions options = mixprec::get_context();
  if (device_target) {
    if (*device_target == "GPU")
      options.device = Device::cuda(device_id.value_or(0));
    else
      MIXPREC_CHECK(*device_target == "CPU", "set_context: device_target \"", *device_target,
                    "\" is not available: this build of mixprec runs on CPU only",
                    Hint{"use device_target=\"CPU\""});
  }
  if (runtime_num_threads) options.threads = *runtime_num_threads;
  if (mode) options.mode = *mode == kGraphMode ? Mode::graph : Mode::pynative;
  mixprec::set_context(options);  // refuses GPU in a CPU-only build, naming what it has
}

py::object py_get_context(const std::string& key) {
  const ContextOptions& c = mixprec::get_context();
  if (key == "mode") return py::int_(c.mode == Mode::graph ? kGraphMode : kPynativeMode);
  if (key == "device_target") return py::str(c.device.is_cpu() ? "CPU" : "GPU");
  if (key == "device_id") return py::int_(c.device.index);
  if (key == "runtime_num_threads") return py::int_(c.threads);
  throw py::value_error("get_context: unknown key '" + key +
                        "' (expected mode, device_target, device_id or runtime_num_threads)");
}

}  // namespace

uint64_t g_dataset_seed = 0;  // dataset.config.set_seed; read by shuffles (data.cpp)

}  // namespace mixprec::python

PYBIND11_MODULE(mixprec, root) {
  using namespace mixprec;
  using namespace mixprec::python;
  root.doc() = "mixprec: automatic mixed-precision training (C++), under MindSpore's Python names";
  root.attr("__version__") = MIXPREC_VERSION;
  Modules m;
  m.root = root;
  m.nn = submodule(root, "nn", "Cells, layers, losses, optimizers and metrics");
  m.ops = submodule(root, "ops", "Differentiable operations");
  m.amp = submodule(root, "amp", "Automatic mixed precision and loss scaling");
  m.train = submodule(root, "train", "Model, callbacks");
  m.loss_scale_manager = submodule(m.train, "loss_scale_manager", "Loss-scale managers for Model");
  m.dataset = submodule(root, "dataset", "Dataset pipeline");
  m.vision = submodule(m.dataset, "vision", "Image transforms");
  m.transforms = submodule(m.dataset, "transforms", "Generic transforms");
  m.config = submodule(m.dataset, "config", "Dataset configuration (the shuffle seed)");
  m.common = submodule(root, "common", "Initializers");
  m.initializer = submodule(m.common, "initializer", "Parameter initializers");
  m.zoo = submodule(root, "zoo", "The C++ model zoo (model_names() lists its models)");

  bind_error(root);
  bind_dtypes(root);
  root.attr("GRAPH_MODE") = kGraphMode;
  root.attr("PYNATIVE_MODE") = kPynativeMode;
  root.def("set_context", &py_set_context, py::kw_only(), "mode"_a = py::none(),
           "device_target"_a = py::none(), "device_id"_a = py::none(),
           "runtime_num_threads"_a = py::none(),
           "MindSpore's set_context. GRAPH_MODE captures each train step once and replays it "
           "(bitwise equal to "
           "PYNATIVE_MODE); device_target is \"CPU\".");
  root.def("get_context", &py_get_context, "attr_key"_a);
  m.config.def(
      "set_seed", [](uint64_t seed) { g_dataset_seed = seed; }, "seed"_a);
  m.config.def("get_seed", [] { return g_dataset_seed; });
  root.def(
      "set_seed",
      [](uint64_t seed) {
        manual_seed(seed);
        g_dataset_seed = seed;
      },
      "seed"_a, "Seeds the default generator (initializers, dropout) and the dataset shuffle.");

  bind_tensor(m);
  bind_ops(m);
  bind_attention(m);
  bind_nn(m);
  bind_train(m);
  bind_data(m);
  use_python_keyword_errors(m);
}
