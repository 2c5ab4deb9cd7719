// Tensor: a thin value handle (shared, like std::shared_ptr) to shared storage plus shape,
// strides (in elements), offset (in elements), dtype and device. Copies of a Tensor alias the
// same data; views (reshape of contiguous data, permute, slice) alias the same Storage.
// Invariants: strides/offset always address inside storage; Storage::version() is bumped by
// every in-place write, so caches keyed on (storage id, version) see in-place changes.
// Math lives in free functions (ops); this class keeps to views, copies and element access.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/device.h"
#include "mixprec/dtype.h"
#include "mixprec/shape.h"

namespace mixprec {

class Storage {
 public:
  // Uninitialised bytes from the device's allocator.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Unique for the life of the process (addresses get reused; ids do not).
  uint64_t id() const { return id_; }
  // Bumped by every in-place write through any tensor on this storage.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // GRAPH_MODE memory planning (src/graph): frees this storage's own block and points it at
  // `data`, inside an arena that the caller owns and keeps alive longer than this storage.
  void rebind_to_arena(void* data);

 private:
  Storage(void* data, size_t nbytes, Device device);
  bool owned_ = true;
  void* data_;
  size_t nbytes_;
  Device device_;
  uint64_t id_;
  uint64_t version_ = 0;
};

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

struct AutogradMeta;  // src/core/autograd_graph.h (internal)
struct Node;          // src/core/autograd_graph.h (internal)

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;  // null unless autograd tracks this tensor
  // Set when the user chose this dtype explicitly (astype / ops::cast) or it derives from such a
  // tensor: the id of the cell call it happened in (ops/autocast.h, "the explicit-cast rule").
  // 0 when AMP may choose the dtype.
  uint64_t explicit_dtype_scope = 0;
  // The convolution (a site of ops/layout_choice.h) whose channels-last output this tensor is or
  // derives from element-wise; 0 for every other tensor. Lets the library choose that
  // convolution's output layout from where its output goes.
  uint32_t layout_site = 0;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; most calls on it throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contents.
  static Tensor empty(const Shape& shape, TensorOptions options = {});
  // A tensor over existing storage (a view). Checks that the view fits in the storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape,
                             const Strides& strides, int64_t offset, DType dtype);
  // Copies `data` (element type T) into a new tensor of `shape`, converted to `dtype` (default:
  // T's own dtype). data.size() must equal the number of elements.
  template <class T>
  static Tensor from_vector(const std::vector<T>& data, const Shape& shape,
                            std::optional<DType> dtype = std::nullopt);
  static Tensor from_data(const void* data, DType src_dtype, const Shape& shape,
                          TensorOptions options);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const;
  int64_t offset() const;
  DType dtype() const;
  Device device() const;
  size_t itemsize() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // Address of element 0 (storage base + offset), on the tensor's device: kernels of any backend
  // take it (a CUDA kernel, a device pointer). data<T>() is the host's typed access: it checks
  // that T matches dtype and that the tensor is on the CPU (a GPU tensor's elements cannot be
  // read from the host: an error naming its device, not a segfault).
  void* data_ptr() const;
  template <class T> T* data() const;

  // ---- autograd (src/core/autograd_graph.h has the structures, autograd/ the engine)
  bool requires_grad() const;
  // Marks a leaf as requiring gradients (parameters). Returns *this.
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const;                  // no grad_fn
  Tensor grad() const;                   // accumulated gradient (undefined if none yet)
  void set_grad(const Tensor& grad);     // replaces it (undefined clears it)
  std::shared_ptr<Node> grad_fn() const;
  Tensor detach() const;                 // same storage, no autograd history
  // Backpropagates from this tensor (a scalar unless `gradient` is given) into the .grad of
  // the leaves that require grad. Frees the graph unless retain_graph.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;

  // ---- views and copies (differentiable: they record autograd nodes like ops do)
  Tensor contiguous() const;  // self if already contiguous, else a packed copy
  Tensor clone() const;       // always a new packed copy
  Tensor view(const Shape& shape) const;     // no copy; throws if strides do not allow it
  Tensor reshape(const Shape& shape) const;  // view when possible, else copy; one -1 allowed
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor astype(DType dtype) const;  // self if already dtype, else a converted copy
  // Self if already on `device`, else a packed copy there (not differentiable: a new leaf). A
  // copy to the CPU waits for the GPU; one to a GPU is queued on its stream.
  Tensor to(Device device) const;
  // In-place writes (not differentiable: refused on tensors that require grad while grad mode
  // is on). Writes src (same shape, any dtype) into this tensor's elements; bumps the version.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);

  // ---- element access (checked: indices in range, dims match)
  double item() const;
  double at(std::initializer_list<int64_t> index) const;
  template <class T> std::vector<T> to_vector() const;

  // ---- printing
  std::string str(int edge_items = 3) const;

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories.
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
// [0, end) and [start, end) with step, like numpy.arange.
Tensor arange(double end, TensorOptions options = {});
Tensor arange(double start, double end, double step, TensorOptions options = {});

// ------------------------------------------------------------------ template definitions

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& data, const Shape& shape,
                           std::optional<DType> dtype) {
  constexpr DType src = std::is_same_v<T, bool> ? DType::boolean : dtype_of<T>();
  static_assert(!std::is_same_v<T, bool>, "use std::vector<uint8_t> for boolean data");
  MIXPREC_CHECK(static_cast<int64_t>(data.size()) == shape_numel(shape),
                "Tensor::from_vector: expected ", shape_numel(shape), " elements for shape ",
                shape_str(shape), ", got ", data.size());
  return from_data(data.data(), src, shape, {.dtype = dtype.value_or(src)});
}

template <class T>
T* Tensor::data() const {
  MIXPREC_CHECK(dtype_size(dtype()) == sizeof(T) &&
                    (dtype_of<T>() == dtype() ||
                     (std::is_same_v<T, uint8_t> && dtype() == DType::boolean)),
                "Tensor::data<T>: T does not match the tensor dtype ", dtype_name(dtype()));
  MIXPREC_CHECK(device().is_cpu(), "Tensor::data<T>: the tensor is on ", device().str(),
                ", not cpu: the host cannot read or write its elements",
                Hint{"copy it to the host first: t.to(Device::cpu())"});
  return static_cast<T*>(data_ptr());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  const Tensor packed = (dtype() == dtype_of<T>() ? host : host.astype(dtype_of<T>())).contiguous();
  const T* p = packed.data<T>();
  return std::vector<T>(p, p + packed.numel());
}

}  // namespace mixprec
