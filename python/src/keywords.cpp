// Python's usual TypeError for a wrong keyword argument: "Conv2d() got an unexpected keyword
// argument 'pad_mod'". pybind11 answers any call no overload accepts with its own TypeError
// ("incompatible function arguments", every signature, then what it was invoked with). After
// all bindings exist, each public function and method (and each __init__) is wrapped: the
// wrapper calls the original, and when pybind11 refuses the call and a keyword matches no
// argument name of any overload, raises Python's message instead. Other errors pass unchanged.
#include <set>

#include "binding.h"

namespace mixprec::python {
namespace {

// The argument names of every overload of a pybind11 function (its records hang off a capsule).
std::set<std::string> argument_names(const py::handle& fn) {
  std::set<std::string> names;
  if (!PyCFunction_Check(fn.ptr())) return names;
  PyObject* self = PyCFunction_GET_SELF(fn.ptr());
  if (!self || !PyCapsule_CheckExact(self)) return names;
  for (auto* rec =
           py::reinterpret_borrow<py::capsule>(self).get_pointer<py::detail::function_record>();
       rec; rec = rec->next)
    for (const auto& a : rec->args)
      if (a.name) names.insert(a.name);
  return names;
}

py::cpp_function wrapped(const py::object& fn, const std::string& name, const std::string& shown,
                         py::handle scope) {
  std::set<std::string> names = argument_names(fn);
  auto call = [fn, name, shown, names](py::args args, py::kwargs kwargs) -> py::object {
    try {
      return fn(*args, **kwargs);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError) ||
          std::string(py::str(e.value())).rfind(name + "(): incompatible", 0) != 0)
        throw;
      for (auto item : kwargs) {
        const std::string k = py::str(item.first);
        if (!names.count(k))
          throw py::type_error(shown + "() got an unexpected keyword argument '" + k + "'");
      }
      throw;
    }
  };
  py::options options;
  options.disable_function_signatures();  // the original's docstring already shows them
  const py::object doc = py::getattr(fn, "__doc__", py::none());
  const std::string text = doc.is_none() ? std::string() : doc.cast<std::string>();
  if (scope)
    return py::cpp_function(call, py::name(name.c_str()), py::is_method(scope),
                            py::doc(text.c_str()));
  return py::cpp_function(call, py::name(name.c_str()), py::doc(text.c_str()));
}

bool is_pybind_function(const py::handle& f) {
  return !argument_names(f).empty() || PyCFunction_Check(f.ptr());
}

void wrap_class(const py::handle& cls) {
  const std::string cls_name = py::str(cls.attr("__name__"));
  const py::dict members(cls.attr("__dict__"));  // a copy: the class's own is a mappingproxy
  for (auto [key, value] : members) {
    const std::string name = py::str(key);
    if (name.rfind("__", 0) == 0 && name != "__init__")
      continue;  // operators must return NotImplemented
    if (PyInstanceMethod_Check(value.ptr())) {
      const py::object fn =
          py::reinterpret_borrow<py::object>(PyInstanceMethod_GET_FUNCTION(value.ptr()));
      if (!is_pybind_function(fn)) continue;
      const std::string shown = name == "__init__" ? cls_name : cls_name + "." + name;
      py::setattr(cls, name.c_str(),
                  wrapped(fn, name, shown, cls));  // a method: already an instancemethod
    } else if (py::isinstance<py::staticmethod>(value)) {
      const py::object fn = value.attr("__func__");
      if (!is_pybind_function(fn)) continue;
      py::setattr(cls, name.c_str(),
                  py::staticmethod(wrapped(fn, name, cls_name + "." + name, py::handle())));
    }
  }
}

}  // namespace

void use_python_keyword_errors(const Modules& m) {
  for (const py::module_& mod :
       {m.root, m.nn, m.ops, m.amp, m.train, m.loss_scale_manager, m.dataset, m.vision,
        m.transforms, m.config, m.initializer, m.zoo}) {
    const py::dict members = mod.attr("__dict__");
    for (auto [key, value] : members) {
      const std::string name = py::str(key);
      if (name.rfind("__", 0) == 0) continue;
      if (py::isinstance<py::type>(value)) {
        if (py::str(value.attr("__module__")).cast<std::string>() ==
            py::str(mod.attr("__name__")).cast<std::string>())
          wrap_class(value);  // once, in the module that defines it
      } else if (PyCFunction_Check(value.ptr()) && !argument_names(value).empty()) {
        py::setattr(mod, name.c_str(),
                    wrapped(py::reinterpret_borrow<py::object>(value), name, name, py::handle()));
      }
    }
  }
}

}  // namespace mixprec::python
