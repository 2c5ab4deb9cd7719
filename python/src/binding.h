// Shared declarations of the `mixprec` Python module (a thin pybind11 binding of the public C++
// API under MindSpore's names): the submodules, one bind_* function per source file, and the
// argument adapters that turn MindSpore's Python spellings (an int or a tuple, 'valid', 'mean',
// 'normal', a list of tensors) into the C++ option values. No behaviour lives here.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/mixprec.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace mixprec::python {

// Every binding that runs C++ compute releases the GIL for it.
using ReleaseGil = py::call_guard<py::gil_scoped_release>;

struct Modules {
  py::module_ root, nn, ops, amp, train, loss_scale_manager, dataset, vision, transforms, config,
      common, initializer, zoo;
};

// A Tensor that a Python-defined Cell registers as a parameter when assigned to an attribute
// (MindSpore's Parameter). It is a Tensor in every other respect.
struct Parameter : Tensor {
  Parameter(const Tensor& t, std::string n) : Tensor(t), name(std::move(n)) {}
  std::string name;
};

void bind_tensor(Modules& m);
void bind_ops(Modules& m);
void bind_nn(Modules& m);
void bind_train(Modules& m);
void bind_train_model(Modules& m);  // model.cpp: Model and callbacks
void bind_data(Modules& m);
// Last: wraps every function so that a wrong keyword gives Python's usual TypeError (keywords.cpp).
void use_python_keyword_errors(const Modules& m);

// The dataset shuffle seed (dataset.config.set_seed, ms.set_seed); module.cpp owns it.
extern uint64_t g_dataset_seed;

// None for no loss scaling, Ellipsis (the argument left out) for the AMP level's default.
std::optional<Handle<amp::LossScaleManager>> manager_arg(const py::object& v);

// ---- argument adapters (adapters.cpp)
std::array<int64_t, 2> pair_arg(py::handle v, const char* what);       // 3 or (3, 3)
std::array<int64_t, 4> padding_arg(py::handle v, const char* what);    // 1, (h, w) or (t, b, l, r)
ops::PadMode pad_mode_arg(const std::string& s, const char* what);     // 'same' | 'valid' | 'pad'
ops::Reduction reduction_arg(const std::string& s, const char* what);  // 'none' | 'mean' | 'sum'
std::vector<int64_t> axes_arg(py::handle v);                           // None, 1 or (0, 1)
// None -> nullopt; an Initializer, a name ('normal', 'zeros', 'he_uniform', ...) or a number.
std::optional<init::Initializer> init_arg(py::handle v, const char* what);
// A Tensor, or a list / tuple of Tensors.
std::vector<Tensor> tensor_list_arg(py::handle v, const char* what);
// The channel layout keyword MindSpore's layers take; only NCHW exists.
void check_data_format(const std::string& data_format, const char* what);

}  // namespace mixprec::python
