// mixprec.dataset and the checkpoint functions for Python. MnistDataset / FashionMnistDataset take
// MindSpore's keywords (usage, num_samples, shuffle) and yield HWC images as MindSpore does:
// the C++ pipeline's [B, C, H, W] batches are permuted to [B, H, W, C] by a first map, and
// vision.HWC2CHW permutes them back. Iteration (create_tuple_iterator / create_dict_iterator)
// yields batches; without batch() a batch holds one sample. ms.save_checkpoint,
// load_checkpoint and load_param_into_net write and read safetensors files.
#include "binding.h"

namespace mixprec::python {
namespace {

using dataset::Dataset;
using dataset::Transform;

// A permutation of a batch of images, [B, a, b, c] -> [B, ...].
Transform permute_images(const char* name, std::vector<int64_t> perm) {
  return {name, [name, perm](const Tensor& x) {
            MIXPREC_CHECK(x.dim() == 4, name, ": expected a batch of images with 4 dims, got shape ", shape_str(x.shape()));
            return x.permute(perm).contiguous();
          }};
}

Dataset mnist(bool fashion, const std::filesystem::path& dir, std::optional<std::string> usage,
              std::optional<int64_t> num_samples, std::optional<bool> shuffle) {
  // MindSpore: usage None reads train and test; shuffle None shuffles; num_samples with a
  // shuffle draws from the whole set each epoch (the first rows of that epoch's permutation).
  const bool shuffled = shuffle.value_or(true);
  dataset::MnistOptions o{.usage = usage.value_or("all")};
  if (num_samples && !shuffled) o.num_samples = *num_samples;
  Dataset ds = fashion ? Dataset(dataset::FashionMnistDataset(dir, o)) : Dataset(dataset::MnistDataset(dir, o));
  if (shuffled) ds = ds.shuffle(g_dataset_seed);
  if (num_samples && shuffled) ds = ds.take(*num_samples);
  return ds.map(permute_images("to HWC", {0, 2, 3, 1}));
}

// The columns MindSpore's map names: "image" or "label" (a list of one).
std::string column_arg(const py::object& v) {
  if (v.is_none()) return "image";
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  const auto list = v.cast<std::vector<std::string>>();
  if (list.size() != 1) throw py::value_error("map: input_columns must name one column ('image' or 'label')");
  return list[0];
}

// Yields the batches of successive epochs: each `for` over it runs the next epoch (MindSpore's
// iterator with num_epochs), as a list [image, label] or a dict {"image", "label"}.
class PyIterator {
 public:
  PyIterator(Dataset ds, int64_t num_epochs, bool as_dict, bool output_numpy)
      : ds_(std::move(ds)), num_epochs_(num_epochs), as_dict_(as_dict), numpy_(output_numpy) {}
  PyIterator& iter() {
    if ((!it_ || it_->done()) && (num_epochs_ < 0 || epoch_ < num_epochs_)) it_.emplace(ds_.iterator(epoch_++));
    return *this;
  }
  py::object next() {
    if (!it_) iter();
    dataset::Batch b;
    {
      py::gil_scoped_release release;  // waits for the prefetch thread
      if (it_->done()) b = {};
      else {
        b = **it_;
        ++*it_;
      }
    }
    if (!b.image.defined()) throw py::stop_iteration();
    py::object image = py::cast(b.image), label = py::cast(b.label);
    if (numpy_) image = image.attr("asnumpy")(), label = label.attr("asnumpy")();
    if (as_dict_) return py::dict("image"_a = image, "label"_a = label);
    return py::list(py::make_tuple(image, label));
  }

 private:
  Dataset ds_;
  int64_t num_epochs_, epoch_ = 0;
  bool as_dict_, numpy_;
  std::optional<dataset::BatchIterator> it_;
};

void bind_transforms(Modules& m) {
  py::class_<Transform>(m.transforms, "Transform").def("__repr__", [](const Transform& t) { return t.name; });
  m.vision.attr("Transform") = m.transforms.attr("Transform");
  m.vision.def("Rescale", &dataset::transforms::rescale, "rescale"_a, "shift"_a);
  m.vision.def("Normalize", [](std::vector<double> mean, std::vector<double> std, bool is_hwc) {
    if (is_hwc && mean.size() > 1)
      throw py::value_error("Normalize: per-channel values need CHW images; apply vision.HWC2CHW() first and "
                            "pass is_hwc=False");
    return dataset::transforms::normalize(std::move(mean), std::move(std));
  }, "mean"_a, "std"_a, "is_hwc"_a = true);
  m.vision.def("HWC2CHW", [] { return permute_images("HWC2CHW", {0, 3, 1, 2}); });
  m.transforms.def("TypeCast", &dataset::transforms::type_cast, "data_type"_a);
}

void bind_dataset(Modules& m) {
  py::class_<PyIterator>(m.dataset, "Iterator")
      .def("__iter__", &PyIterator::iter, py::return_value_policy::reference_internal)
      .def("__next__", &PyIterator::next);
  py::class_<Dataset>(m.dataset, "Dataset")
      .def("map", [](const Dataset& ds, py::object operations, py::object input_columns) {
        const std::string column = column_arg(input_columns);
        if (py::isinstance<Transform>(operations)) return ds.map(operations.cast<Transform>(), column);
        Dataset out = ds;
        for (py::handle op : operations) out = out.map(op.cast<Transform>(), column);
        return out;
      }, "operations"_a, "input_columns"_a = py::none())
      .def("shuffle", [](const Dataset& ds, int64_t /*buffer_size: the shuffle is always a full permutation*/) {
        return ds.shuffle(g_dataset_seed);
      }, "buffer_size"_a)
      .def("batch", &Dataset::batch, "batch_size"_a, "drop_remainder"_a = false)
      .def("take", &Dataset::take, "count"_a = -1)
      .def("get_dataset_size", &Dataset::get_dataset_size)
      .def("get_batch_size", &Dataset::batch_size)
      .def("create_tuple_iterator", [](const Dataset& ds, py::object columns, int64_t num_epochs, bool output_numpy) {
        if (!columns.is_none()) throw py::value_error("create_tuple_iterator: columns must be None (image, label)");
        return PyIterator(ds, num_epochs, false, output_numpy);
      }, "columns"_a = py::none(), "num_epochs"_a = -1, "output_numpy"_a = false)
      .def("create_dict_iterator", [](const Dataset& ds, int64_t num_epochs, bool output_numpy) {
        return PyIterator(ds, num_epochs, true, output_numpy);
      }, "num_epochs"_a = -1, "output_numpy"_a = false)
      .def("__iter__", [](const Dataset& ds) { return PyIterator(ds, 1, false, false); });
  for (bool fashion : {false, true})
    m.dataset.def(fashion ? "FashionMnistDataset" : "MnistDataset",
                  [fashion](const std::filesystem::path& dir, std::optional<std::string> usage, std::optional<int64_t> n,
                            py::object /*num_parallel_workers: one prefetch thread*/, std::optional<bool> shuffle) {
                    return mnist(fashion, dir, usage, n, shuffle);
                  },
                  "dataset_dir"_a, "usage"_a = py::none(), "num_samples"_a = py::none(),
                  "num_parallel_workers"_a = py::none(), "shuffle"_a = py::none());
  m.dataset.attr("vision") = m.vision;
  m.dataset.attr("transforms") = m.transforms;
}

void bind_checkpoints(Modules& m) {
  m.root.def("save_checkpoint", [](const nn::Cell& net, const std::filesystem::path& path) {
    io::save_checkpoint(net, path);
  }, "save_obj"_a, "ckpt_file_name"_a, ReleaseGil());
  m.root.def("load_param_into_net", [](nn::Cell& net, const std::map<std::string, Tensor>& params, bool strict_load) {
    auto r = io::load_param_into_net(net, params, {.strict = strict_load});
    return py::make_tuple(r.param_not_load, r.ckpt_not_load);
  }, "net"_a, "parameter_dict"_a, "strict_load"_a = false);
  m.root.def("load_checkpoint", [](const std::filesystem::path& path, nn::Cell* net, bool strict_load) {
    std::map<std::string, Tensor> params;
    {
      py::gil_scoped_release release;
      params = io::load_checkpoint(path);
      if (net) io::load_param_into_net(*net, params, {.strict = strict_load});
    }
    return params;
  }, "ckpt_file_name"_a, "net"_a = py::none(), "strict_load"_a = false);
}

}  // namespace

void bind_data(Modules& m) {
  bind_transforms(m);
  bind_dataset(m);
  bind_checkpoints(m);
}

}  // namespace mixprec::python
