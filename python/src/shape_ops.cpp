// The shape ops a custom layer needs, with MindSpore's signatures and argument checks: permute,
// split, chunk, unbind, narrow and stack, shared by mixprec.ops and the Tensor methods
// (binding.h). Every result comes from the differentiable C++ ops (ops::permute, ops::slice,
// ops::squeeze, ops::unsqueeze, ops::concat): the pieces are views whose gradients flow back
// through autograd. A wrong argument is a ValueError or a TypeError naming it, raised before any
// C++ runs (MindSpore raises the same classes).
#include "binding.h"

namespace mixprec::python {
namespace {

std::string type_name(py::handle v) { return py::str(py::type::of(v).attr("__name__")); }

std::string ints_text(const std::vector<int64_t>& v) {
  return shape_text(Shape(v.begin(), v.end()));
}

// A sequence of ints: a tuple or a list (each element an int, see int_arg).
std::vector<int64_t> int_list_arg(py::handle v, const char* what, const char* name) {
  if (!py::isinstance<py::tuple>(v) && !py::isinstance<py::list>(v))
    throw py::type_error(std::string(what) + ": " + name +
                         " must be a tuple or list of ints, got " + type_name(v));
  std::vector<int64_t> out;
  for (py::handle item : v) out.push_back(int_arg(item, what, name));
  return out;
}

}  // namespace

std::string shape_text(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

int64_t int_arg(py::handle v, const char* what, const char* name) {
  // Python ints and numpy integers (anything with __index__), but not bools or floats.
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
    throw py::type_error(std::string(what) + ": " + name + " must be an int, got " + type_name(v));
  return py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr())).cast<int64_t>();
}

int64_t dim_arg(py::handle axis, int64_t ndim, const char* what, const char* name) {
  const int64_t a = int_arg(axis, what, name);
  if (ndim == 0 || a < -ndim || a >= ndim)
    throw py::value_error(std::string(what) + ": " + name + " " + std::to_string(a) +
                          " is out of range for a tensor of " + std::to_string(ndim) + " dims" +
                          (ndim ? " (expected -" + std::to_string(ndim) + " <= " + name + " < " +
                                      std::to_string(ndim) + ")"
                                : ""));
  return a < 0 ? a + ndim : a;
}

std::vector<int64_t> permutation_arg(py::handle axes, const Tensor& x, const char* what) {
  std::vector<int64_t> p = int_list_arg(axes, what, "axis");
  const int64_t nd = x.dim();
  const std::string head = std::string(what) + ": axis " + ints_text(p) +
                           " is not a permutation of the dims of a tensor of shape " +
                           shape_text(x.shape());
  if (static_cast<int64_t>(p.size()) != nd)
    throw py::value_error(head + ": it has " + std::to_string(p.size()) + " entries, expected " +
                          std::to_string(nd));
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  for (int64_t& a : p) {
    if (a < -nd || a >= nd)
      throw py::value_error(head + ": " + std::to_string(a) + " is out of range [-" +
                            std::to_string(nd) + ", " + std::to_string(nd) + ")");
    if (a < 0) a += nd;
    if (seen[static_cast<size_t>(a)])
      throw py::value_error(head + ": dim " + std::to_string(a) + " appears twice");
    seen[static_cast<size_t>(a)] = true;
  }
  return p;
}

std::vector<int64_t> permutation_args(const py::args& args, const Tensor& x, const char* what) {
  // permute(0, 2, 1) or permute((0, 2, 1)) / permute([0, 2, 1]), as MindSpore's Tensor takes both.
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) return permutation_arg(args[0], x, what);
  return permutation_arg(py::tuple(args), x, what);
}

Tensor permute(const Tensor& x, py::handle axes, const char* what) {
  const std::vector<int64_t> p = permutation_arg(axes, x, what);
  py::gil_scoped_release release;
  return ops::permute(x, p);
}

py::tuple split(const Tensor& x, py::handle sizes, py::handle axis) {
  const char* what = "split";
  const int64_t d = dim_arg(axis, x.dim(), what, "axis");
  const int64_t n = x.size(d);
  std::vector<int64_t> pieces;
  if (PyIndex_Check(sizes.ptr()) && !PyBool_Check(sizes.ptr())) {
    const int64_t s = int_arg(sizes, what, "split_size_or_sections");
    if (s <= 0)
      throw py::value_error(std::string(what) + ": split_size_or_sections must be positive, got " +
                            std::to_string(s));
    for (int64_t at = 0; at < n; at += s) pieces.push_back(std::min(s, n - at));
    if (pieces.empty()) pieces.push_back(0);  // an empty axis: one empty piece
  } else if (py::isinstance<py::tuple>(sizes) || py::isinstance<py::list>(sizes)) {
    pieces = int_list_arg(sizes, what, "split_size_or_sections");
    int64_t total = 0;
    for (int64_t s : pieces) {
      if (s < 0)
        throw py::value_error(std::string(what) + ": split_size_or_sections " + ints_text(pieces) +
                              " has a negative size");
      total += s;
    }
    if (pieces.empty() || total != n)
      throw py::value_error(std::string(what) + ": split_size_or_sections " + ints_text(pieces) +
                            " sums to " + std::to_string(total) + ", but axis " +
                            std::to_string(d) + " of the tensor of shape " + shape_text(x.shape()) +
                            " has " + std::to_string(n) + " elements");
  } else {
    throw py::type_error(std::string(what) +
                         ": split_size_or_sections must be an int or a tuple / list of ints, got " +
                         type_name(sizes));
  }
  std::vector<Tensor> out;
  {
    py::gil_scoped_release release;
    int64_t at = 0;
    for (int64_t s : pieces) {
      out.push_back(ops::slice(x, d, at, at + s));
      at += s;
    }
  }
  return py::tuple(py::cast(out));
}

py::tuple chunk(const Tensor& x, py::handle chunks, py::handle axis) {
  const int64_t c = int_arg(chunks, "chunk", "chunks");
  if (c <= 0) throw py::value_error("chunk: chunks must be positive, got " + std::to_string(c));
  const int64_t d = dim_arg(axis, x.dim(), "chunk", "axis");
  // MindSpore's (and PyTorch's) rule: pieces of ceil(n / chunks), so there may be fewer of them.
  const int64_t size = std::max<int64_t>((x.size(d) + c - 1) / c, 1);
  return split(x, py::int_(size), py::int_(d));
}

py::tuple unbind(const Tensor& x, py::handle dim) {
  const int64_t d = dim_arg(dim, x.dim(), "unbind", "dim");
  std::vector<Tensor> out;
  {
    py::gil_scoped_release release;
    out = ops::unbind(x, d);  // one backward node: the parts' gradients go into one tensor
  }
  return py::tuple(py::cast(out));
}

Tensor narrow(const Tensor& x, py::handle axis, py::handle start, py::handle length) {
  const int64_t d = dim_arg(axis, x.dim(), "narrow", "axis");
  const int64_t n = x.size(d);
  const int64_t s = int_arg(start, "narrow", "start");
  const int64_t l = int_arg(length, "narrow", "length");
  if (s < 0 || s >= n)  // MindSpore's range (PyTorch's narrow also takes a negative start)
    throw py::value_error("narrow: start " + std::to_string(s) + " is out of range [0, " +
                          std::to_string(n) + ") of axis " + std::to_string(d));
  if (l < 0 || s + l > n)
    throw py::value_error("narrow: start " + std::to_string(s) + " + length " + std::to_string(l) +
                          " goes past axis " + std::to_string(d) + " of size " + std::to_string(n));
  py::gil_scoped_release release;
  return ops::slice(x, d, s, s + l);
}

Tensor stack(py::handle tensors, py::handle axis) {
  const std::vector<Tensor> xs = tensor_list_arg(tensors, "stack");
  if (xs.empty()) throw py::value_error("stack: expected at least one tensor");
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape())
      throw py::value_error("stack: tensor " + std::to_string(i) + " has shape " +
                            shape_text(xs[i].shape()) + ", tensor 0 has " +
                            shape_text(xs[0].shape()) + "; stacked tensors must have one shape");
  const int64_t d = dim_arg(axis, xs[0].dim() + 1, "stack", "axis");
  py::gil_scoped_release release;
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) parts.push_back(ops::unsqueeze(t, d));
  return ops::concat(parts, d);
}

}  // namespace mixprec::python
