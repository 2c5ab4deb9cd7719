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

// ---- shape arguments and the shape ops of a custom layer (shape_ops.cpp). A wrong argument is a
// TypeError (not an int, not a sequence) or a ValueError (out of range, sizes that do not add up)
// naming `what` and the argument, raised before any C++ runs.
std::string shape_text(const Shape& s);                             // Python's (2, 3)
int64_t int_arg(py::handle v, const char* what, const char* name);  // an int or numpy integer
int64_t dim_arg(py::handle axis, int64_t ndim, const char* what, const char* name);  // wrapped
std::vector<int64_t> permutation_arg(py::handle axes, const Tensor& x, const char* what);
std::vector<int64_t> permutation_args(const py::args& args, const Tensor& x, const char* what);
Tensor permute(const Tensor& x, py::handle axes, const char* what);
py::tuple split(const Tensor& x, py::handle split_size_or_sections, py::handle axis);
py::tuple chunk(const Tensor& x, py::handle chunks, py::handle axis);
py::tuple unbind(const Tensor& x, py::handle dim);
Tensor narrow(const Tensor& x, py::handle axis, py::handle start, py::handle length);
Tensor stack(py::handle tensors, py::handle axis);

// ops.scaled_dot_product_attention and the kernel profile (attention.cpp).
void bind_attention(Modules& m);

}  // namespace mixprec::python
