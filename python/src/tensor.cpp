// Tensor and Parameter for Python: construction from numpy arrays and Python numbers (copied, as
// MindSpore's Tensor() does), asnumpy() as a read-only numpy view of the same memory, MindSpore's
// methods and attributes (astype, shape, dtype, size, ...) and the arithmetic operators. bf16 has
// no numpy type: it is exposed as numpy.uint16 holding the bf16 bit patterns (docs/python.md);
// f16 is numpy.float16.
#include "binding.h"

namespace mixprec::python {
namespace {

py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::f16: return py::dtype("float16");
    case DType::bf16: return py::dtype::of<uint16_t>();  // the bit patterns
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::i64: return py::dtype::of<int64_t>();
    case DType::u8: return py::dtype::of<uint8_t>();
    case DType::boolean: return py::dtype::of<bool>();
  }
  throw py::value_error("unknown dtype");
}

// The mixprec dtype of a numpy array's elements; uint16 holds f16/bf16 bits when `as` says so.
DType dtype_of_numpy(const py::dtype& d, std::optional<DType> as) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 8) return DType::f64;
  if (kind == 'f' && size == 2) return DType::f16;
  if (kind == 'i' && size == 4) return DType::i32;
  if (kind == 'i' && size == 8) return DType::i64;
  if (kind == 'u' && size == 1) return DType::u8;
  if (kind == 'b') return DType::boolean;
  if (kind == 'u' && size == 2 && as && is_low_precision(*as)) return *as;
  if (kind == 'u' && size == 2)
    throw py::type_error(
        "Tensor: a numpy.uint16 array holds bf16 (or f16) bit patterns; say which with "
        "dtype=mixprec.bfloat16 or dtype=mixprec.float16");
  throw py::type_error(
      "Tensor: numpy dtype " + py::str(static_cast<const py::handle&>(d)).cast<std::string>() +
      " is not supported (float32, float64, float16, int32, int64, uint8, bool, or "
      "uint16 bit patterns with dtype=bfloat16)");
}

Tensor tensor_from_python(const py::object& data, std::optional<DType> dtype) {
  if (py::isinstance<Tensor>(data)) {
    const Tensor t = data.cast<Tensor>();
    return dtype ? t.astype(*dtype).detach().clone() : t.detach().clone();
  }
  const bool from_numpy = py::isinstance<py::array>(data);
  const py::array a = py::array::ensure(data, py::array::c_style);
  if (!a)
    throw py::type_error("Tensor: expected a numpy array, a Tensor, a number or a (nested) list");
  const DType src = dtype_of_numpy(a.dtype(), dtype);
  // Python numbers and lists follow MindSpore: float -> float32 (numpy would say float64).
  const DType dst = dtype.value_or(!from_numpy && src == DType::f64 ? DType::f32 : src);
  const Shape shape(a.shape(), a.shape() + a.ndim());
  return Tensor::from_data(a.data(), src, shape, {.dtype = dst});
}

py::array to_numpy(const Tensor& t) {
  MIXPREC_CHECK(t.defined(), "Tensor.asnumpy: the tensor is undefined");
  MIXPREC_CHECK(t.device().is_cpu(), "Tensor.asnumpy: the tensor is on ", t.device().str(),
                "; expected cpu");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * t.itemsize()));
  // The array keeps the storage alive. Read-only: a write through numpy would bypass the storage
  // version that the AMP cast cache checks (tensor.h), so writes go through the Tensor API.
  auto* keep = new std::shared_ptr<Storage>(t.storage());
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  py::array a(numpy_dtype(t.dtype()), shape, strides, t.data_ptr(), base);
  a.attr("setflags")("write"_a = false);
  return a;
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = s[i];
  return out;
}

// MindSpore's reshape(*shape) and reshape(shape).
Shape shape_args(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

// (ndim - 1, ..., 1, 0): transpose() and .T.
std::vector<int64_t> reversed_dims(const Tensor& x) {
  std::vector<int64_t> p;
  for (int64_t i = x.dim() - 1; i >= 0; --i) p.push_back(i);
  return p;
}

// t[i], t[a:b:s], t[i, a:b, ...]: ints select (and drop the dim), slices view. No fancy indexing.
Tensor getitem(const Tensor& t, const py::object& key) {
  const py::tuple keys =
      py::isinstance<py::tuple>(key) ? key.cast<py::tuple>() : py::make_tuple(key);
  if (static_cast<int64_t>(keys.size()) > t.dim())
    throw py::index_error("too many indices: " + std::to_string(keys.size()) + " for a tensor of " +
                          std::to_string(t.dim()) + " dims");
  Tensor out = t;
  int64_t dim = 0;
  for (py::handle k : keys) {
    const int64_t n = out.size(dim);
    if (py::isinstance<py::slice>(k)) {
      py::ssize_t start, stop, step, len;
      if (!k.cast<py::slice>().compute(n, &start, &stop, &step, &len))
        throw py::error_already_set();
      if (step <= 0)
        throw py::index_error("Tensor indexing: only positive slice steps are supported");
      out = out.slice(dim, start, std::max<int64_t>(start, stop), step);
      ++dim;
    } else if (py::isinstance<py::int_>(k)) {
      int64_t i = k.cast<int64_t>();
      if (i < -n || i >= n)
        throw py::index_error("index " + std::to_string(i) + " is out of range for size " +
                              std::to_string(n));
      if (i < 0) i += n;
      out = ops::squeeze(out.slice(dim, i, i + 1), dim);
    } else {
      throw py::type_error("Tensor indexing: expected ints and slices");
    }
  }
  return out;
}

// Tensor (op) Tensor and Tensor (op) number, both through the ops library, under each name (the
// operator's, and MindSpore's method of the same op: a + b and a.add(b)).
template <class F, class G> void def_binary(py::class_<Tensor>& c,
                                            std::initializer_list<const char*> names, F with_tensor,
                                            G with_number) {
  for (const char* name : names) {
    c.def(
        name, [with_tensor](const Tensor& a, const Tensor& b) { return with_tensor(a, b); },
        ReleaseGil());
    c.def(
        name, [with_number](const Tensor& a, double b) { return with_number(a, b); }, ReleaseGil());
  }
}

Tensor scalar_like(double v, const Tensor& t) { return full({}, v, {.dtype = t.dtype()}); }

void bind_tensor_math(py::class_<Tensor>& c) {
  using T = const Tensor&;
  def_binary(
      c, {"__add__", "add"}, [](T a, T b) { return ops::add(a, b); },
      [](T a, double b) { return ops::add(a, b); });
  def_binary(
      c, {"__radd__"}, [](T a, T b) { return ops::add(b, a); },
      [](T a, double b) { return ops::add(a, b); });
  def_binary(
      c, {"__sub__", "sub"}, [](T a, T b) { return ops::sub(a, b); },
      [](T a, double b) { return a - b; });
  def_binary(
      c, {"__rsub__"}, [](T a, T b) { return ops::sub(b, a); },
      [](T a, double b) { return ops::add(ops::neg(a), b); });
  def_binary(
      c, {"__mul__", "mul"}, [](T a, T b) { return ops::mul(a, b); },
      [](T a, double b) { return ops::mul(a, b); });
  def_binary(
      c, {"__rmul__"}, [](T a, T b) { return ops::mul(b, a); },
      [](T a, double b) { return ops::mul(a, b); });
  def_binary(
      c, {"__truediv__", "div"}, [](T a, T b) { return ops::div(a, b); },
      [](T a, double b) { return a / b; });
  def_binary(
      c, {"__rtruediv__"}, [](T a, T b) { return ops::div(b, a); },
      [](T a, double b) { return ops::div(scalar_like(b, a), a); });
  def_binary(
      c, {"__pow__", "pow"}, [](T a, T b) { return ops::pow(a, b); },
      [](T a, double b) { return ops::pow(a, b); });
  c.def(
      "__matmul__", [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); },
      ReleaseGil());
  c.def(
      "__neg__", [](const Tensor& a) { return ops::neg(a); }, ReleaseGil());
  c.def(
      "__abs__", [](const Tensor& a) { return ops::abs(a); }, ReleaseGil());
  // MindSpore's spellings: sum and max take keepdims, mean takes keep_dims.
  c.def(
      "sum",
      [](const Tensor& x, py::object axis, bool keepdims) {
        return ops::sum(x, axes_arg(axis), keepdims);
      },
      "axis"_a = py::none(), "keepdims"_a = false);
  c.def(
      "mean",
      [](const Tensor& x, py::object axis, bool keep_dims) {
        return ops::mean(x, axes_arg(axis), keep_dims);
      },
      "axis"_a = py::none(), "keep_dims"_a = false);
  c.def(
      "max",
      [](const Tensor& x, py::object axis, bool keepdims) {
        return ops::max(x, axes_arg(axis), keepdims);
      },
      "axis"_a = py::none(), "keepdims"_a = false);
  c.def(
      "argmax",
      [](const Tensor& x, std::optional<int64_t> axis, bool keepdims) {
        return axis ? ops::argmax(x, *axis, keepdims)
                    : ops::argmax(ops::reshape(x, {-1}), 0, false);  // None: flat index
      },
      "axis"_a = py::none(), "keepdims"_a = false);
  c.def("reshape", [](const Tensor& x, py::args shape) { return x.reshape(shape_args(shape)); });
  c.def("view", [](const Tensor& x, py::args shape) { return x.view(shape_args(shape)); });
  // transpose() reverses the dims; transpose(*perm) and permute(*axis) take a permutation, as
  // separate ints or one tuple / list (checked: ValueError / TypeError, shape_ops.cpp).
  c.def("transpose", [](const Tensor& x, py::args perm) {
    const std::vector<int64_t> p =
        perm.size() == 0 ? reversed_dims(x) : permutation_args(perm, x, "Tensor.transpose");
    py::gil_scoped_release release;
    return ops::permute(x, p);
  });
  c.def("permute", [](const Tensor& x, py::args axis) {
    const std::vector<int64_t> p = permutation_args(axis, x, "Tensor.permute");
    py::gil_scoped_release release;
    return ops::permute(x, p);
  });
  c.def_property_readonly("T", [](const Tensor& x) { return ops::permute(x, reversed_dims(x)); });
  const auto swap = [](const char* what, const char* n0, const char* n1) {
    return [what, n0, n1](const Tensor& x, py::object a0, py::object a1) {
      const int64_t d0 = dim_arg(a0, x.dim(), what, n0), d1 = dim_arg(a1, x.dim(), what, n1);
      py::gil_scoped_release release;
      return ops::transpose(x, d0, d1);
    };
  };
  c.def("swapaxes", swap("Tensor.swapaxes", "axis0", "axis1"), "axis0"_a, "axis1"_a);
  c.def("swapdims", swap("Tensor.swapdims", "dim0", "dim1"), "dim0"_a, "dim1"_a);
  c.def(
      "split",
      [](const Tensor& x, py::object sizes, py::object axis) { return split(x, sizes, axis); },
      "split_size_or_sections"_a, "axis"_a = 0);
  c.def(
      "chunk", [](const Tensor& x, py::object n, py::object axis) { return chunk(x, n, axis); },
      "chunks"_a, "axis"_a = 0);
  c.def(
      "unbind", [](const Tensor& x, py::object dim) { return unbind(x, dim); }, "dim"_a = 0);
  c.def(
      "narrow",
      [](const Tensor& x, py::object axis, py::object start, py::object length) {
        return narrow(x, axis, start, length);
      },
      "axis"_a, "start"_a, "length"_a);
  c.def(
      "unsqueeze",
      [](const Tensor& x, py::object dim) {
        const int64_t d = dim_arg(dim, x.dim() + 1, "Tensor.unsqueeze", "dim");
        py::gil_scoped_release release;
        return ops::unsqueeze(x, d);
      },
      "dim"_a);
  c.def(
      "broadcast_to",
      [](const Tensor& x, const Shape& shape) { return ops::broadcast_to(x, shape); }, "shape"_a,
      ReleaseGil());
  c.def(
      "expand_as", [](const Tensor& x, const Tensor& o) { return ops::broadcast_to(x, o.shape()); },
      "other"_a, ReleaseGil());
  c.def(
      "matmul", [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); }, "tensor2"_a,
      ReleaseGil());
  c.def(
      "softmax",
      [](const Tensor& x, int64_t axis, std::optional<DType> dtype) {
        return ops::softmax(dtype ? ops::cast(x, *dtype) : x, axis);
      },
      "axis"_a, "dtype"_a = py::none(), ReleaseGil());
  // Elementwise methods: the ops of the same names.
  using Unary = Tensor (*)(const Tensor&);
  const std::pair<const char*, Unary> unary[] = {
      {"exp", &ops::exp}, {"log", &ops::log}, {"sqrt", &ops::sqrt},       {"rsqrt", &ops::rsqrt},
      {"abs", &ops::abs}, {"neg", &ops::neg}, {"sigmoid", &ops::sigmoid}, {"tanh", &ops::tanh}};
  for (auto [name, fn] : unary) c.def(name, fn, ReleaseGil());
  for (const char* name : {"clamp", "clip"})
    c.def(name, &ops::clamp, "min"_a = py::none(), "max"_a = py::none(), ReleaseGil());
  c.def("masked_fill", &ops::masked_fill, "mask"_a, "value"_a, ReleaseGil());
  c.def(
      "maximum", [](T a, T b) { return ops::maximum(a, b); }, "other"_a, ReleaseGil());
  c.def(
      "minimum", [](T a, T b) { return ops::minimum(a, b); }, "other"_a, ReleaseGil());
  c.def(
      "float", [](T x) { return x.astype(DType::f32); }, ReleaseGil());
  c.def(
      "half", [](T x) { return x.astype(DType::f16); }, ReleaseGil());
  c.def(
      "flatten",
      [](const Tensor& x, int64_t start_dim, int64_t end_dim) {
        return ops::flatten(x, start_dim, end_dim);
      },
      "start_dim"_a = 0, "end_dim"_a = -1);
  c.def(
      "squeeze", [](const Tensor& x, std::optional<int64_t> axis) { return ops::squeeze(x, axis); },
      "axis"_a = py::none());
  c.def(
      "expand_dims", [](const Tensor& x, int64_t axis) { return ops::unsqueeze(x, axis); },
      "axis"_a);
}

}  // namespace

void bind_tensor(Modules& m) {
  py::class_<Tensor> tensor(m.root, "Tensor",
                            "A tensor: shared storage, shape, strides and dtype.");
  tensor
      .def(py::init(&tensor_from_python), "input_data"_a, "dtype"_a = py::none(),
           "Copies a numpy array, a number or a nested list. uint16 arrays need dtype=bfloat16 "
           "(bit patterns).")
      .def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("size", &Tensor::numel)
      .def_property_readonly("itemsize", &Tensor::itemsize)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("strides",
                             [](const Tensor& t) {
                               py::tuple s(t.dim());
                               for (int64_t i = 0; i < t.dim(); ++i)
                                 s[i] = t.strides()[i] * static_cast<int64_t>(t.itemsize());
                               return s;
                             })
      .def("dim", &Tensor::dim)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("asnumpy", &to_numpy,
           "A read-only numpy view of the same memory (bf16 as uint16 bit patterns).")
      .def(
          "__array__",
          [](const Tensor& t, py::object dtype) {
            py::array a = to_numpy(t);
            return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
          },
          "dtype"_a = py::none())
      .def("astype", &Tensor::astype, "dtype"_a, ReleaseGil())
      .def("to", &Tensor::astype, "dtype"_a, ReleaseGil())
      .def("item", &Tensor::item)
      .def("__float__", &Tensor::item)
      .def("__int__", [](const Tensor& t) { return static_cast<int64_t>(t.item()); })
      .def("__bool__", [](const Tensor& t) { return t.item() != 0.0; })
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__getitem__", &getitem)
      .def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); })
      .def("contiguous", &Tensor::contiguous, ReleaseGil())
      .def("copy", &Tensor::clone, ReleaseGil())
      .def("clone", &Tensor::clone, ReleaseGil())
      .def("detach", &Tensor::detach)
      .def(
          "copy_",
          [](Tensor& t, const Tensor& src) {
            t.copy_(src);
            return t;
          },
          "src"_a, ReleaseGil())
      .def(
          "fill_",
          [](Tensor& t, double v) {
            t.fill_(v);
            return t;
          },
          "value"_a, ReleaseGil())
      .def(
          "assign_value",
          [](Tensor& t, const Tensor& src) {
            t.copy_(src);
            return t;
          },
          "value"_a, ReleaseGil())
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool on) { t.set_requires_grad(on); })
      .def_property_readonly("grad",
                             [](const Tensor& t) -> py::object {
                               const Tensor g = t.grad();
                               return g.defined() ? py::cast(g) : py::none();
                             })
      .def(
          "backward", [](const Tensor& t) { t.backward(); }, ReleaseGil())
      .def("__repr__", [](const Tensor& t) {
        return t.defined() ? t.str() : std::string("Tensor(undefined)");
      });
  bind_tensor_math(tensor);

  py::class_<Parameter, Tensor>(
      m.root, "Parameter",
      "A Tensor that a Python-defined Cell registers as a parameter when assigned to an attribute.")
      .def(py::init([](const Tensor& default_input, std::optional<std::string> name,
                       bool requires_grad) {
             Parameter p(default_input.detach(), name.value_or(""));
             p.set_requires_grad(requires_grad);
             return p;
           }),
           "default_input"_a, "name"_a = py::none(), "requires_grad"_a = true)
      .def_readwrite("name", &Parameter::name);
}

}  // namespace mixprec::python
