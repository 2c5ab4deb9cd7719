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
            MIXPREC_CHECK(x.dim() == 4, name,
                          ": expected a batch of images with 4 dims, got shape ",
                          shape_str(x.shape()));
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
  Dataset ds = fashion ? Dataset(dataset::FashionMnistDataset(dir, o))
                       : Dataset(dataset::MnistDataset(dir, o));
  if (shuffled) ds = ds.shuffle(g_dataset_seed);
  if (num_samples && shuffled) ds = ds.take(*num_samples);
  return ds.map(permute_images("to HWC", {0, 2, 3, 1}));
}

// The columns MindSpore's map names: "image" or "label" (a list of one).
std::string column_arg(const py::object& v) {
  if (v.is_none()) return "image";
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  const auto list = v.cast<std::vector<std::string>>();
  if (list.size() != 1)
    throw py::value_error("map: input_columns must name one column (the first or the second)");
  return list[0];
}

// Yields the batches of successive epochs: each `for` over it runs the next epoch (MindSpore's
// iterator with num_epochs), as a list [image, label] or a dict {"image", "label"}.
class PyIterator {
 public:
  PyIterator(Dataset ds, int64_t num_epochs, bool as_dict, bool output_numpy)
      : ds_(std::move(ds)), num_epochs_(num_epochs), as_dict_(as_dict), numpy_(output_numpy) {}
  PyIterator& iter() {
    if ((!it_ || it_->done()) && (num_epochs_ < 0 || epoch_ < num_epochs_))
      it_.emplace(ds_.iterator(epoch_++));
    return *this;
  }
  py::object next() {
    if (!it_) iter();
    dataset::Batch b;
    {
      py::gil_scoped_release release;  // waits for the prefetch thread
      if (it_->done())
        b = {};
      else {
        b = **it_;
        ++*it_;
      }
    }
    if (!b.image.defined()) throw py::stop_iteration();
    py::object image = py::cast(b.image), label = py::cast(b.label);
    if (numpy_) image = image.attr("asnumpy")(), label = label.attr("asnumpy")();
    if (as_dict_) {
      const std::array<std::string, 2> names = ds_.source().column_names();
      py::dict d;
      d[py::str(names[0])] = image;
      d[py::str(names[1])] = label;
      return d;
    }
    return py::list(py::make_tuple(image, label));
  }

 private:
  Dataset ds_;
  int64_t num_epochs_, epoch_ = 0;
  bool as_dict_, numpy_;
  std::optional<dataset::BatchIterator> it_;
};

// ---------------------------------------------------------------- bring your own data
// NumpySlicesDataset and GeneratorDataset read the user's arrays (or every sample of the user's
// source) into memory once, at construction: the pipeline then runs in C++ without the GIL, as the
// MNIST readers do, and an exception from the user's source reaches the caller there, unchanged.
// Two columns (data, label), as Model.train and eval take them.

// A column (an array, or a sequence of per-sample values) as a Tensor of its numpy dtype; the
// error names the column, and for ragged samples the first sample whose shape differs.
Tensor column_tensor(const char* who, const std::string& name, const py::object& values) {
  const py::module_ np = py::module_::import("numpy");
  if (!py::isinstance<py::array>(values) &&
      (py::isinstance<py::list>(values) || py::isinstance<py::tuple>(values))) {
    const py::sequence seq = values.cast<py::sequence>();
    if (seq.size() > 0) {
      const py::object first = np.attr("shape")(seq[0]);
      for (size_t i = 1; i < seq.size(); ++i)
        if (!np.attr("shape")(seq[i]).equal(first))
          throw py::value_error(
              std::string(who) + ": sample " + std::to_string(i) + " of column '" + name +
              "' has shape " + py::str(np.attr("shape")(seq[i])).cast<std::string>() +
              " but sample 0 has " + py::str(first).cast<std::string>() +
              "; every sample of a column needs the same shape (pad or crop ragged samples)");
    }
  }
  const py::array a = np.attr("ascontiguousarray")(values);
  const std::string kind = py::str(a.dtype().attr("kind")).cast<std::string>();
  if (kind != "b" && kind != "i" && kind != "u" && kind != "f")
    throw py::type_error(std::string(who) + ": column '" + name + "' has numpy dtype " +
                         py::str(static_cast<py::handle>(a.dtype())).cast<std::string>() +
                         "; expected numbers (bool, integers, float16/32/64)");
  if (a.ndim() == 0)
    throw py::value_error(std::string(who) + ": column '" + name +
                          "' is a scalar; expected one row per sample");
  return py::module_::import("mixprec").attr("Tensor")(a).cast<Tensor>();
}

std::array<std::string, 2> column_names_arg(const char* who, const py::object& names,
                                            std::vector<std::string> fallback) {
  std::vector<std::string> v = names.is_none() ? std::move(fallback)
                               : py::isinstance<py::str>(names)
                                   ? std::vector<std::string>{names.cast<std::string>()}
                                   : names.cast<std::vector<std::string>>();
  if (v.size() != 2)
    throw py::value_error(std::string(who) + ": expected two columns (data, label), got " +
                          std::to_string(v.size()) +
                          "; mixprec datasets have two columns, as Model.train and eval take them");
  return {v[0], v[1]};
}

Dataset finish_dataset(const char* who, Tensor data, Tensor label, std::array<std::string, 2> names,
                       bool shuffle, std::optional<int64_t> num_samples,
                       std::optional<int64_t> num_shards, std::optional<int64_t> shard_id) {
  if (num_shards.has_value() != shard_id.has_value())
    throw py::value_error(std::string(who) + ": give both num_shards and shard_id, or neither");
  Dataset ds = dataset::array_dataset(std::move(data), std::move(label), std::move(names));
  if (shuffle) ds = ds.shuffle(g_dataset_seed);
  if (num_samples) ds = ds.take(*num_samples);
  if (num_shards) ds = ds.shard(*num_shards, *shard_id);
  return ds;
}

Dataset numpy_slices(const py::object& data, const py::object& column_names,
                     std::optional<int64_t> num_samples, std::optional<bool> shuffle,
                     std::optional<int64_t> num_shards, std::optional<int64_t> shard_id) {
  const char* who = "NumpySlicesDataset";
  std::vector<py::object> columns;
  std::vector<std::string> keys;
  if (py::isinstance<py::dict>(data)) {
    for (auto [k, v] : data.cast<py::dict>()) {
      keys.push_back(py::str(k).cast<std::string>());
      columns.push_back(py::reinterpret_borrow<py::object>(v));
    }
  } else if (py::isinstance<py::tuple>(data) || py::isinstance<py::list>(data)) {
    for (py::handle v : data) columns.push_back(py::reinterpret_borrow<py::object>(v));
    for (size_t i = 0; i < columns.size(); ++i) keys.push_back("column_" + std::to_string(i));
  } else {
    throw py::type_error(std::string(who) +
                         ": data must be a dict, tuple or list of numpy arrays (data, label)");
  }
  const std::array<std::string, 2> names = column_names_arg(who, column_names, keys);
  if (columns.size() != 2)
    throw py::value_error(std::string(who) + ": expected two columns (data, label), got " +
                          std::to_string(columns.size()));
  const Tensor x = column_tensor(who, names[0], columns[0]),
               y = column_tensor(who, names[1], columns[1]);
  if (x.size(0) != y.size(0))
    throw py::value_error(std::string(who) + ": column '" + names[0] + "' has " +
                          std::to_string(x.size(0)) + " samples but column '" + names[1] +
                          "' has " + std::to_string(y.size(0)));
  return finish_dataset(who, x, y, names, shuffle.value_or(true), num_samples, num_shards,
                        shard_id);
}

Dataset generator_dataset(py::object source, const py::object& column_names,
                          std::optional<int64_t> num_samples, std::optional<bool> shuffle,
                          std::optional<int64_t> num_shards, std::optional<int64_t> shard_id) {
  const char* who = "GeneratorDataset";
  const std::array<std::string, 2> names = column_names_arg(who, column_names, {});
  // A generator function is called; a random-access source (__getitem__ and __len__) is indexed;
  // anything else is iterated.
  if (py::isinstance<py::function>(source) && !py::hasattr(source, "__getitem__"))
    source = source();
  const bool random_access = py::hasattr(source, "__getitem__") && py::hasattr(source, "__len__");
  std::vector<py::object> samples;
  if (random_access) {
    const auto n = py::len(source);
    for (size_t i = 0; i < n; ++i) samples.push_back(source[py::int_(i)]);
  } else {
    if (!py::hasattr(source, "__iter__"))
      throw py::type_error(std::string(who) +
                           ": source must be iterable, random-access (__getitem__ and __len__) "
                           "or a generator function");
    for (py::handle s : source) samples.push_back(py::reinterpret_borrow<py::object>(s));
  }
  if (samples.empty()) throw py::value_error(std::string(who) + ": the source yielded no samples");
  std::array<py::list, 2> cols;
  for (size_t i = 0; i < samples.size(); ++i) {
    const py::object& s = samples[i];
    const bool seq = py::isinstance<py::tuple>(s) || py::isinstance<py::list>(s);
    if (!seq || py::len(s) != 2)
      throw py::value_error(std::string(who) + ": sample " + std::to_string(i) +
                            " must be a tuple of 2 values (" + names[0] + ", " + names[1] +
                            "), got " +
                            (seq ? "a tuple of " + std::to_string(py::len(s))
                                 : py::str(py::type::of(s).attr("__name__")).cast<std::string>()));
    const py::sequence t = s.cast<py::sequence>();
    cols[0].append(t[0]);
    cols[1].append(t[1]);
  }
  const Tensor x = column_tensor(who, names[0], cols[0]), y = column_tensor(who, names[1], cols[1]);
  return finish_dataset(who, x, y, names, shuffle.value_or(random_access), num_samples, num_shards,
                        shard_id);
}

void bind_transforms(Modules& m) {
  py::class_<Transform>(m.transforms, "Transform").def("__repr__", [](const Transform& t) {
    return t.name;
  });
  m.vision.attr("Transform") = m.transforms.attr("Transform");
  m.vision.def("Rescale", &dataset::transforms::rescale, "rescale"_a, "shift"_a);
  m.vision.def(
      "Normalize",
      [](std::vector<double> mean, std::vector<double> std, bool is_hwc) {
        if (is_hwc && mean.size() > 1)
          throw py::value_error(
              "Normalize: per-channel values need CHW images; apply vision.HWC2CHW() first and "
              "pass is_hwc=False");
        return dataset::transforms::normalize(std::move(mean), std::move(std));
      },
      "mean"_a, "std"_a, "is_hwc"_a = true);
  m.vision.def("HWC2CHW", [] { return permute_images("HWC2CHW", {0, 3, 1, 2}); });
  m.transforms.def("TypeCast", &dataset::transforms::type_cast, "data_type"_a);
}

void bind_dataset(Modules& m) {
  py::class_<PyIterator>(m.dataset, "Iterator")
      .def("__iter__", &PyIterator::iter, py::return_value_policy::reference_internal)
      .def("__next__", &PyIterator::next);
  py::class_<Dataset>(m.dataset, "Dataset")
      .def(
          "map",
          [](const Dataset& ds, py::object operations, py::object input_columns) {
            const std::string column = column_arg(input_columns);
            if (py::isinstance<Transform>(operations))
              return ds.map(operations.cast<Transform>(), column);
            const bool listed =
                py::isinstance<py::list>(operations) || py::isinstance<py::tuple>(operations);
            py::object bad =
                listed ? py::object() : operations;  // the first operation that is no Transform
            if (listed)
              for (py::handle op : operations)
                if (!bad && !py::isinstance<Transform>(op))
                  bad = py::reinterpret_borrow<py::object>(op);
            if (bad)
              throw py::type_error(
                  "map: operations must be mixprec transforms (mixprec.dataset.vision, "
                  "mixprec.dataset.transforms) or a list of them; got a " +
                  std::string(py::str(py::type::of(bad).attr("__name__"))) +
                  " (Python functions are not supported: the pipeline runs in C++ without the "
                  "GIL)");
            Dataset out = ds;
            for (py::handle op : operations) out = out.map(op.cast<Transform>(), column);
            return out;
          },
          "operations"_a, "input_columns"_a = py::none())
      .def(
          "shuffle",
          [](const Dataset& ds, int64_t /*buffer_size: the shuffle is always a full permutation*/) {
            return ds.shuffle(g_dataset_seed);
          },
          "buffer_size"_a)
      .def("batch", &Dataset::batch, "batch_size"_a, "drop_remainder"_a = false)
      .def("take", &Dataset::take, "count"_a = -1)
      .def("get_dataset_size", &Dataset::get_dataset_size)
      .def("get_batch_size", &Dataset::batch_size)
      .def(
          "create_tuple_iterator",
          [](const Dataset& ds, py::object columns, int64_t num_epochs, bool output_numpy) {
            if (!columns.is_none())
              throw py::value_error("create_tuple_iterator: columns must be None (image, label)");
            return PyIterator(ds, num_epochs, false, output_numpy);
          },
          "columns"_a = py::none(), "num_epochs"_a = -1, "output_numpy"_a = false)
      .def(
          "create_dict_iterator",
          [](const Dataset& ds, int64_t num_epochs, bool output_numpy) {
            return PyIterator(ds, num_epochs, true, output_numpy);
          },
          "num_epochs"_a = -1, "output_numpy"_a = false)
      .def("__iter__", [](const Dataset& ds) { return PyIterator(ds, 1, false, false); });
  for (bool fashion : {false, true})
    m.dataset.def(
        fashion ? "FashionMnistDataset" : "MnistDataset",
        [fashion](const std::filesystem::path& dir, std::optional<std::string> usage,
                  std::optional<int64_t> n,
                  py::object /*num_parallel_workers: one prefetch thread*/,
                  std::optional<bool> shuffle) { return mnist(fashion, dir, usage, n, shuffle); },
        "dataset_dir"_a, "usage"_a = py::none(), "num_samples"_a = py::none(),
        "num_parallel_workers"_a = py::none(), "shuffle"_a = py::none());
  m.dataset.def(
      "NumpySlicesDataset",
      [](py::object data, py::object column_names, std::optional<int64_t> num_samples,
         py::object /*num_parallel_workers*/, std::optional<bool> shuffle, py::object sampler,
         std::optional<int64_t> num_shards, std::optional<int64_t> shard_id) {
        if (!sampler.is_none())
          throw py::value_error("NumpySlicesDataset: sampler is not supported");
        return numpy_slices(data, column_names, num_samples, shuffle, num_shards, shard_id);
      },
      "data"_a, "column_names"_a = py::none(), "num_samples"_a = py::none(),
      "num_parallel_workers"_a = 1, "shuffle"_a = py::none(), "sampler"_a = py::none(),
      "num_shards"_a = py::none(), "shard_id"_a = py::none());
  m.dataset.def(
      "GeneratorDataset",
      [](py::object source, py::object column_names, py::object column_types, py::object schema,
         std::optional<int64_t> num_samples, py::object /*num_parallel_workers*/,
         std::optional<bool> shuffle, py::object sampler, std::optional<int64_t> num_shards,
         std::optional<int64_t> shard_id) {
        if (!column_types.is_none() || !schema.is_none() || !sampler.is_none())
          throw py::value_error(
              "GeneratorDataset: column_types, schema and sampler are not supported");
        return generator_dataset(source, column_names, num_samples, shuffle, num_shards, shard_id);
      },
      "source"_a, "column_names"_a = py::none(), "column_types"_a = py::none(),
      "schema"_a = py::none(), "num_samples"_a = py::none(), "num_parallel_workers"_a = 1,
      "shuffle"_a = py::none(), "sampler"_a = py::none(), "num_shards"_a = py::none(),
      "shard_id"_a = py::none());
  m.dataset.attr("vision") = m.vision;
  m.dataset.attr("transforms") = m.transforms;
}

void bind_checkpoints(Modules& m) {
  m.root.def(
      "save_checkpoint",
      [](const nn::Cell& net, const std::filesystem::path& path) {
        io::save_checkpoint(net, path);
      },
      "save_obj"_a, "ckpt_file_name"_a, ReleaseGil());
  m.root.def(
      "load_param_into_net",
      [](nn::Cell& net, const std::map<std::string, Tensor>& params, bool strict_load) {
        auto r = io::load_param_into_net(net, params, {.strict = strict_load});
        return py::make_tuple(r.param_not_load, r.ckpt_not_load);
      },
      "net"_a, "parameter_dict"_a, "strict_load"_a = false);
  m.root.def(
      "load_checkpoint",
      [](const std::filesystem::path& path, nn::Cell* net, bool strict_load) {
        std::map<std::string, Tensor> params;
        {
          py::gil_scoped_release release;
          params = io::load_checkpoint(path);
          if (net) io::load_param_into_net(*net, params, {.strict = strict_load});
        }
        return params;
      },
      "ckpt_file_name"_a, "net"_a = py::none(), "strict_load"_a = false);
}

}  // namespace

void bind_data(Modules& m) {
  bind_transforms(m);
  bind_dataset(m);
  bind_checkpoints(m);
}

}  // namespace mixprec::python
