// Tensor and Storage: construction, metadata, the history-free view and copy primitives
// (core/tensor_raw.h: views never copy; a reshape copies only when the strides cannot express the
// new shape), in-place copy_/fill_, checked element access and factories. The methods that
// record autograd history are defined above core (docs/design.md, decision 9): view, reshape,
// permute, transpose, slice, contiguous, clone and astype in ops/shape.cpp, backward in
// autograd/engine.cpp.
#include "mixprec/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>

#include "mixprec/allocator.h"
#include "mixprec/convert.h"
#include "strided_copy.h"
#include "tensor_raw.h"
#include "autograd_graph.h"
#include "capture.h"

namespace mixprec {

// ------------------------------------------------------------------ Storage

static std::atomic<uint64_t> g_next_storage_id{1};

Storage::Storage(void* data, size_t nbytes, Device device)
    : data_(data), nbytes_(nbytes), device_(device), id_(g_next_storage_id.fetch_add(1)) {}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  void* p = allocator_for(device).allocate(nbytes);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device));
}

Storage::~Storage() {
  if (owned_) allocator_for(device_).deallocate(data_, nbytes_);
}

void Storage::rebind_to_arena(void* data) {
  if (owned_) allocator_for(device_).deallocate(data_, nbytes_);
  owned_ = false;
  data_ = data;
}

// ------------------------------------------------------------------ construction

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  const int64_t n = shape_numel(shape);
  const size_t es = dtype_size(options.dtype);
  MIXPREC_CHECK(n <= (int64_t{1} << 40) / static_cast<int64_t>(es), "Tensor::empty: shape ",
                shape_str(shape), " of ", dtype_name(options.dtype), " needs ", n * es,
                " bytes, over the 1 TiB limit");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(static_cast<size_t>(n) * es, options.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape,
                            const Strides& strides, int64_t offset, DType dtype) {
  MIXPREC_CHECK(storage != nullptr, "Tensor::from_storage: storage is null");
  MIXPREC_CHECK(shape.size() == strides.size(), "Tensor::from_storage: shape ", shape_str(shape),
                " and strides ", shape_str(strides), " differ in length");
  const int64_t n = shape_numel(shape);
  if (n > 0) {
    int64_t lo = offset, hi = offset;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t span = (shape[i] - 1) * strides[i];
      (span < 0 ? lo : hi) += span;
    }
    const int64_t capacity = static_cast<int64_t>(storage->nbytes() / dtype_size(dtype));
    MIXPREC_CHECK(lo >= 0 && hi < capacity, "Tensor::from_storage: view of shape ",
                  shape_str(shape), " strides ", shape_str(strides), " offset ", offset,
                  " reaches elements [", lo, ", ", hi, "] outside storage of ", capacity,
                  " elements");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::from_data(const void* data, DType src_dtype, const Shape& shape,
                         TensorOptions options) {
  if (!options.device.is_cpu()) {  // converted on the host, then one upload
    const Tensor host = from_data(data, src_dtype, shape, {.dtype = options.dtype});
    Tensor t = empty(shape, options);
    detail::strided_copy(host, t);
    return t;
  }
  Tensor t = empty(shape, options);
  convert_row(data, src_dtype, t.data_ptr(), options.dtype, t.numel());
  return t;
}

Tensor Tensor::to(Device device) const {
  if (this->device() == device) return *this;
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device});
  detail::strided_copy(*this, out);
  return out;
}

// ------------------------------------------------------------------ metadata

void Tensor::check_defined(const char* what) const {
  MIXPREC_CHECK(impl_ != nullptr, "Tensor::", what, ": the tensor is undefined",
                Hint{"a default-constructed Tensor holds no data; create it with a factory"});
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
const Strides& Tensor::strides() const {
  check_defined("strides");
  return impl_->strides;
}
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim())]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }
int64_t Tensor::offset() const {
  check_defined("offset");
  return impl_->offset;
}
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined("device");
  return impl_->storage->device();
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}
void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  if (detail::CaptureRecorder* r = detail::capture_recorder()) r->touch(impl_, detail::capture_depth() > 0);
  return static_cast<char*>(impl_->storage->data()) +
         impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
}

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  const Strides& st = strides();
  if (shape_numel(s) == 0) return true;
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

// ------------------------------------------------------------------ views

static Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape out = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MIXPREC_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      MIXPREC_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(requested));
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    MIXPREC_CHECK(known != 0 && numel % known == 0, op, ": cannot infer -1 in ",
                  shape_str(requested), " for ", numel, " elements");
    out[static_cast<size_t>(infer_at)] = numel / known;
  }
  MIXPREC_CHECK(shape_numel(out) == numel, op, ": expected a shape with ", numel,
                " elements, got ", shape_str(requested), " (", shape_numel(out), " elements)");
  return out;
}

// Strides for viewing (shape, strides) as new_shape without copying, or nullopt if impossible.
// ATen's computeStride: walk chunks of old dims that are contiguous among themselves and split
// each chunk over the new dims that multiply to the same size.
static std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                           const Shape& new_shape) {
  const int64_t nn = static_cast<int64_t>(new_shape.size());
  Strides out(new_shape.size(), 1);
  if (shape.empty() || shape_numel(shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = nn - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= shape[static_cast<size_t>(td)];
    const bool chunk_ends =
        td == 0 || (shape[static_cast<size_t>(td - 1)] != 1 &&
                    strides[static_cast<size_t>(td - 1)] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[static_cast<size_t>(view_d)] == 1)) {
      out[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel *= new_shape[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (td > 0) {
      chunk_base_stride = strides[static_cast<size_t>(td - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

namespace detail {

Tensor raw_view(const Tensor& t, const Shape& new_shape) {
  const Shape s = infer_shape(new_shape, t.numel(), "view");
  auto st = view_strides(t.shape(), t.strides(), s);
  MIXPREC_CHECK(st.has_value(), "view: cannot view a tensor of shape ", shape_str(t.shape()),
                " and strides ", shape_str(t.strides()), " as ", shape_str(s), " without a copy",
                Hint{"use reshape(), which copies when it must, or call contiguous() first"});
  return Tensor::from_storage(t.storage(), s, *st, t.offset(), t.dtype());
}

std::optional<Tensor> raw_try_view(const Tensor& t, const Shape& new_shape) {
  const Shape s = infer_shape(new_shape, t.numel(), "reshape");
  if (auto st = view_strides(t.shape(), t.strides(), s))
    return Tensor::from_storage(t.storage(), s, *st, t.offset(), t.dtype());
  return std::nullopt;
}

Shape infer_reshape(const Shape& requested, int64_t numel) {
  return infer_shape(requested, numel, "reshape");
}

Tensor raw_permute(const Tensor& t, const std::vector<int64_t>& dims) {
  const int64_t nd = t.dim();
  MIXPREC_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: expected ", nd,
                " dims, got ", dims.size());
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], nd, "permute dim");
    MIXPREC_CHECK(!seen[static_cast<size_t>(d)], "permute: dim ", d, " repeated");
    seen[static_cast<size_t>(d)] = true;
    s[i] = t.shape()[static_cast<size_t>(d)];
    st[i] = t.strides()[static_cast<size_t>(d)];
  }
  return Tensor::from_storage(t.storage(), s, st, t.offset(), t.dtype());
}

Tensor raw_slice(const Tensor& t, int64_t d, int64_t start, int64_t end, int64_t step) {
  d = wrap_dim(d, t.dim(), "slice dim");
  MIXPREC_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = t.shape()[static_cast<size_t>(d)];
  auto clampi = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  start = clampi(start);
  end = std::max(clampi(end), start);
  Shape s = t.shape();
  Strides st = t.strides();
  s[static_cast<size_t>(d)] = (end - start + step - 1) / step;
  st[static_cast<size_t>(d)] *= step;
  return Tensor::from_storage(t.storage(), s, st,
                              t.offset() + start * t.strides()[static_cast<size_t>(d)], t.dtype());
}

Tensor raw_convert(const Tensor& t, DType dt) {
  if (t.is_contiguous() || !is_dense(t.shape(), t.strides())) return raw_copy(t, dt);
  auto storage = Storage::allocate(static_cast<size_t>(t.numel()) * dtype_size(dt), t.device());
  Tensor out = Tensor::from_storage(std::move(storage), t.shape(), t.strides(), 0, dt);
  strided_copy(t, out);
  return out;
}

Tensor raw_copy(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), {.dtype = dt, .device = t.device()});
  strided_copy(t, out);
  return out;
}

}  // namespace detail

// ------------------------------------------------------------------ in-place writes

static void check_inplace(const Tensor& t, const char* op) {
  MIXPREC_CHECK(!(grad_enabled() && t.requires_grad()), op,
                ": in-place write into a tensor that requires grad",
                Hint{"wrap the update in NoGradGuard (optimizers do), or write into a detach()ed copy"});
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  MIXPREC_CHECK(src.shape() == shape(), "copy_: expected a source of shape ", shape_str(shape()),
                ", got ", shape_str(src.shape()));
  detail::strided_copy(src, *this);
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  // Convert once, then replicate the element bytes.
  alignas(8) unsigned char elem[8];
  convert_row(&value, DType::f64, elem, dtype(), 1);
  const Tensor src = from_data(elem, dtype(), {}, {.dtype = dtype(), .device = device()});
  Tensor expanded = from_storage(src.storage(), shape(), Strides(shape().size(), 0), 0, dtype());
  detail::strided_copy(expanded, *this);
  storage()->bump_version();
  return *this;
}

// ------------------------------------------------------------------ element access

double Tensor::item() const {
  MIXPREC_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ",
                shape_str(shape()));
  MIXPREC_CHECK(device().is_cpu(), "item: tensor is on ", device().str(), ", not cpu",
                Hint{"copy it to the host first: t.to(Device::cpu()).item()"});
  return visit_dtype(dtype(), [&]<class T>() { return to_double(*static_cast<const T*>(data_ptr())); });
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  MIXPREC_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: expected ", dim(),
                " indices, got ", index.size());
  MIXPREC_CHECK(device().is_cpu(), "at: tensor is on ", device().str(), ", not cpu",
                Hint{"copy it to the host first: t.to(Device::cpu())"});
  int64_t off = 0;
  size_t k = 0;
  for (int64_t i : index) {
    const int64_t n = shape()[k];
    MIXPREC_CHECK(i >= -n && i < n, "at: index ", i, " out of range for dim ", k, " of size ", n);
    off += (i < 0 ? i + n : i) * strides()[k];
    ++k;
  }
  return visit_dtype(dtype(), [&]<class T>() {
    return to_double(static_cast<const T*>(data_ptr())[off]);
  });
}

// ------------------------------------------------------------------ factories

Tensor full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = Tensor::empty(shape, options);
  t.fill_(value);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = Tensor::empty(shape, options);
  if (options.device.is_cpu()) detail::run_kernel([t] { std::memset(t.data_ptr(), 0, t.nbytes()); });
  else t.fill_(0.0);
  return t;
}
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  MIXPREC_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
                "arange: expected finite start/end and a nonzero step, got ", start, ", ", end,
                ", ", step);
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return Tensor::from_data(v.data(), DType::f64, {n}, options);
}

}  // namespace mixprec
