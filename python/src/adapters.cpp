// Argument adapters: MindSpore's Python spellings of layer and op arguments into the C++ option
// values (binding.h). Bad values raise Python's ValueError / TypeError naming the argument.
#include "binding.h"

namespace mixprec::python {
namespace {

std::vector<int64_t> int_sequence(py::handle v, const char* what) {
  if (py::isinstance<py::int_>(v)) return {v.cast<int64_t>()};
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v))
    return v.cast<std::vector<int64_t>>();
  throw py::type_error(std::string(what) + ": expected an int or a tuple of ints, got " +
                       std::string(py::str(py::type::of(v).attr("__name__"))));
}

std::string sizes_error(const char* what, const char* expected, size_t got) {
  return std::string(what) + ": expected " + expected + ", got " + std::to_string(got) + " values";
}

}  // namespace

std::array<int64_t, 2> pair_arg(py::handle v, const char* what) {
  const std::vector<int64_t> s = int_sequence(v, what);
  if (s.size() == 1) return {s[0], s[0]};
  if (s.size() == 2) return {s[0], s[1]};
  throw py::value_error(sizes_error(what, "an int or a tuple of 2 ints", s.size()));
}

std::array<int64_t, 4> padding_arg(py::handle v, const char* what) {
  const std::vector<int64_t> s = int_sequence(v, what);
  if (s.size() == 1) return {s[0], s[0], s[0], s[0]};
  if (s.size() == 2) return {s[0], s[0], s[1], s[1]};
  if (s.size() == 4) return {s[0], s[1], s[2], s[3]};
  throw py::value_error(
      sizes_error(what, "an int, (h, w) or (top, bottom, left, right)", s.size()));
}

ops::PadMode pad_mode_arg(const std::string& s, const char* what) {
  if (s == "same") return ops::PadMode::same;
  if (s == "valid") return ops::PadMode::valid;
  if (s == "pad") return ops::PadMode::pad;
  throw py::value_error(std::string(what) + ": pad_mode must be 'same', 'valid' or 'pad', got '" +
                        s + "'");
}

ops::Reduction reduction_arg(const std::string& s, const char* what) {
  if (s == "none") return ops::Reduction::none;
  if (s == "mean") return ops::Reduction::mean;
  if (s == "sum") return ops::Reduction::sum;
  throw py::value_error(std::string(what) + ": reduction must be 'none', 'mean' or 'sum', got '" +
                        s + "'");
}

std::vector<int64_t> axes_arg(py::handle v) {
  if (v.is_none()) return {};
  return int_sequence(v, "axis");
}

std::optional<init::Initializer> init_arg(py::handle v, const char* what) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<init::Initializer>(v)) return v.cast<init::Initializer>();
  if (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v))
    return init::Constant(v.cast<double>());
  if (py::isinstance<py::str>(v)) {
    const std::string s = v.cast<std::string>();
    if (s == "normal") return init::Normal();
    if (s == "uniform") return init::Uniform();
    if (s == "zeros" || s == "zero") return init::Zero();
    if (s == "ones" || s == "one") return init::One();
    if (s == "he_uniform" || s == "heuniform") return init::HeUniform();
    if (s == "he_normal" || s == "henormal") return init::HeNormal();
    if (s == "xavier_uniform") return init::XavierUniform();
    throw py::value_error(
        std::string(what) + ": unknown initializer '" + s +
        "' (expected normal, uniform, zeros, ones, he_uniform, he_normal or xavier_uniform)");
  }
  throw py::type_error(std::string(what) + ": expected an Initializer, its name or a number");
}

std::vector<Tensor> tensor_list_arg(py::handle v, const char* what) {
  if (py::isinstance<Tensor>(v)) return {v.cast<Tensor>()};
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
    std::vector<Tensor> out;
    for (py::handle item : v) {
      if (!py::isinstance<Tensor>(item))
        throw py::type_error(std::string(what) + ": expected Tensors, got a " +
                             std::string(py::str(py::type::of(item).attr("__name__"))));
      out.push_back(item.cast<Tensor>());
    }
    return out;
  }
  throw py::type_error(std::string(what) + ": expected a Tensor or a list / tuple of Tensors");
}

void check_data_format(const std::string& data_format, const char* what) {
  if (data_format != "NCHW")
    throw py::value_error(std::string(what) +
                          ": data_format must be 'NCHW' (the only layout mixprec's "
                          "layers take), got '" +
                          data_format + "'");
}

}  // namespace mixprec::python
