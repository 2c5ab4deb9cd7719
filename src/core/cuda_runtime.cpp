// The CUDA runtime of a -DMIXPREC_CUDA=ON build: device discovery and the clear errors when no
// GPU can be used, one compute stream per device, the caching device allocator (size classes as
// the CPU's; stream-ordered reuse, see core/cuda_stream.h), copies between devices, and pinned
// staging. Host synchronisation happens only in copies to the host, synchronize(), empty_cache
// (before cudaFree) and Staging::upload (before reusing a pinned buffer).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "cuda_stream.h"
#include "mixprec/convert.h"
#include "mixprec/cuda.h"
#include "mixprec/cuda_readback.h"
#include "mixprec/env.h"
#include "mixprec/error.h"
#include "strided_copy.h"
#include "tensor_raw.h"

namespace mixprec {
namespace cuda_detail {

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  detail::throw_error(SourceLocation::current(), false, call, "CUDA call ", call, " failed at ",
                      file, ":", line, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

namespace {

constexpr int kMaxCudaDevices = 8;  // allocator.cpp's counters hold cpu + 8 ordinals

struct Discovery {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    r.error = cudaGetDeviceCount(&r.count);
    if (r.error != cudaSuccess) {
      r.count = 0;
      (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    }
    return r;
  }();
  return d;
}

// The caching allocator of one device. Blocks are cudaMalloc'ed once per size class and kept on
// a free list when their storage dies; a later request of the same class takes one back. Safe
// without events because every kernel touching the device's tensors runs on its one compute
// stream: work queued before the free runs before work queued after the reuse.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(Device device) : device_(device) {}
  void* allocate(size_t nbytes) override {
    const size_t cls = detail::size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        detail::record_cached(device_, -static_cast<int64_t>(cls));
        detail::record_alloc(device_, nbytes);
        return p;
      }
    }
    activate(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      (void)cudaGetLastError();
      empty();
      e = cudaMalloc(&p, cls);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      MIXPREC_CHECK(false, "cuda allocator: out of memory on ", device_.str(), ": ", nbytes,
                    " bytes requested, ", memory_stats(device_).live_bytes, " bytes live",
                    Hint{"use a smaller batch, or check memory_stats(Device::cuda()) for what is live"});
    }
    MIXPREC_CUDA_CHECK(e);
    detail::record_system_alloc(device_);
    detail::record_alloc(device_, nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    detail::record_free(device_, nbytes);
    const size_t cls = detail::size_class(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    free_[cls].push_back(ptr);
    detail::record_cached(device_, static_cast<int64_t>(cls));
  }
  // Waits for the device (a cached block may still be read by queued work), then frees.
  void empty() {
    std::lock_guard<std::mutex> lock(mu_);
    activate(device_);
    MIXPREC_CUDA_CHECK(cudaStreamSynchronize(activate(device_)));
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) MIXPREC_CUDA_CHECK(cudaFree(p));
      detail::record_cached(device_, -static_cast<int64_t>(cls * blocks.size()));
    }
    free_.clear();
  }
  Device device() const override { return device_; }

 private:
  Device device_;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  CudaAllocator* allocator = nullptr;  // never destroyed: storages may outlive statics
};

DeviceState& state(Device device) {
  cuda::check_device(device);
  // Never destroyed: storages released by other statics at exit still reach their allocator.
  static auto* const states = new std::array<DeviceState, kMaxCudaDevices>();
  DeviceState& st = (*states)[static_cast<size_t>(device.index)];
  std::call_once(st.once, [&] {
    MIXPREC_CUDA_CHECK(cudaSetDevice(device.index));
    MIXPREC_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    st.allocator = new CudaAllocator(device);
  });
  return st;
}

}  // namespace

cudaStream_t activate(Device device) {
  DeviceState& st = state(device);
  MIXPREC_CUDA_CHECK(cudaSetDevice(device.index));
  return st.stream;
}

unsigned grid_for(int64_t n, unsigned threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535));
}

}  // namespace cuda_detail

// ------------------------------------------------------------------ public queries

namespace cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
std::atomic<int> g_deterministic{-1};  // -1: not set: MIXPREC_DETERMINISTIC decides
}  // namespace
bool is_built() { return true; }
void set_allow_tf32(bool on) { g_allow_tf32 = on; }
bool allow_tf32() { return g_allow_tf32; }
void set_deterministic(bool on) { g_deterministic = on ? 1 : 0; }
bool deterministic() {
  if (const int v = g_deterministic; v >= 0) return v == 1;
  static const bool from_env = env::get("MIXPREC_DETERMINISTIC") == "1";  // checked: 0 or 1
  return from_env;
}
int device_count() { return cuda_detail::discovery().count; }

void check_device(Device device) {
  const auto& d = cuda_detail::discovery();
  MIXPREC_CHECK(device.is_cuda(), "cuda: expected a CUDA device, got ", device.str());
  MIXPREC_CHECK(d.count > 0, "device ", device.str(), " is not available: no CUDA device is visible (",
                cudaGetErrorName(d.error), ": ", cudaGetErrorString(d.error), ")",
                Hint{"run on a machine with an NVIDIA GPU and its driver (check nvidia-smi and "
                     "CUDA_VISIBLE_DEVICES), or use Device::cpu()"});
  MIXPREC_CHECK(device.index >= 0 && device.index < d.count && device.index < cuda_detail::kMaxCudaDevices,
                "device ", device.str(), " is not available: ", d.count, " CUDA device(s) visible",
                Hint{"use Device::cuda(i) with 0 <= i < " + std::to_string(d.count)});
}

std::string describe(Device device) {
  check_device(device);
  cudaDeviceProp prop{};
  MIXPREC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  return std::string(prop.name) + ", compute capability " + std::to_string(prop.major) + "." +
         std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB";
}

void synchronize(Device device) {
  MIXPREC_CUDA_CHECK(cudaStreamSynchronize(cuda_detail::activate(device)));
}

}  // namespace cuda

// ------------------------------------------------------------------ core hooks

namespace detail {

Allocator& cuda_allocator(Device device) { return *cuda_detail::state(device).allocator; }

void cuda_empty_cache(Device device) {
  if (device.index < 0 || device.index >= cuda::device_count()) return;  // nothing was cached
  cuda_detail::state(device).allocator->empty();
}

void cuda_copy(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.device() == dst.device()) return cuda_detail::strided_copy_kernel(src, dst);
  // Across devices: a packed copy in src's dtype crosses, then converts on dst's side.
  const Tensor packed = src.is_contiguous() ? src : raw_copy(src, src.dtype());
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
  const Tensor landing =
      direct ? dst : Tensor::empty(src.shape(), {.dtype = src.dtype(), .device = dst.device()});
  if (src.device().is_cpu()) {  // host -> device: returns once the pageable source is staged
    cudaStream_t s = cuda_detail::activate(dst.device());
    MIXPREC_CUDA_CHECK(cudaMemcpyAsync(landing.data_ptr(), packed.data_ptr(), packed.nbytes(),
                                       cudaMemcpyHostToDevice, s));
  } else if (dst.device().is_cpu()) {  // device -> host: the host reads it next, so wait
    cudaStream_t s = cuda_detail::activate(src.device());
    MIXPREC_CUDA_CHECK(cudaMemcpyAsync(landing.data_ptr(), packed.data_ptr(), packed.nbytes(),
                                       cudaMemcpyDeviceToHost, s));
    MIXPREC_CUDA_CHECK(cudaStreamSynchronize(s));
  } else {  // GPU to GPU: through the host (simple; not a hot path here)
    const Tensor host = packed.to(Device::cpu());
    strided_copy(host, landing);
  }
  if (!direct) strided_copy(landing, dst);
}

}  // namespace detail

// ------------------------------------------------------------------ pinned staging
//
// The protocol, each rule what makes the next one safe (never run on a GPU: docs/cuda.md):
//  1. Two slots, used in turn; a slot is a pinned host buffer, a device buffer it owns and the
//     event `copied`, recorded on the copy stream after the slot's last host-to-device copy.
//  2. The host overwrites a slot's pinned buffer only after `copied` (the copy issued two
//     uploads earlier, which read it) has completed. The copy itself is from pinned memory, so
//     cudaMemcpyAsync returns at once and the copy runs on the copy stream.
//  3. upload() returns a tensor over the slot's device buffer through a storage handle of its
//     own, whose release hook (Release) runs when the last tensor viewing the batch dies: it
//     records the buffer's `released` event on the compute stream. Every kernel that reads a
//     device tensor is queued on that one stream (core/cuda_stream.h), and nothing can queue a
//     kernel on the batch once its last tensor is gone, so `released` completes after the last
//     kernel that can read the batch.
//  4. The next copy into that device buffer waits on the copy stream for `released`, no more:
//     it overlaps whatever the compute stream runs after the release, such as the step on the
//     other slot's batch. That is the point of the staging.
//  5. A device buffer still held (a tensor of its batch is alive), too small, or whose release
//     could not record its event is not reused: the slot lets it go (it returns to the caching
//     allocator when its tensors die) and takes a fresh block from the allocator. The allocator
//     hands out blocks in compute-stream order (a block may be one that queued kernels still
//     read), so the copy into a fresh block first waits for all work queued on the compute
//     stream, as every upload did before.
//  6. The compute stream waits for `copied` before anything queued after upload() returns, so
//     every kernel sees the whole batch, and a buffer freed later is freed after its copy.
//  7. Each reuse bumps the buffer's storage version: caches keyed on (storage id, version), the
//     cast cache, never take one batch's values for another's.
// Loop shape this overlaps (train::Model's): batch k+1 is uploaded while batch k is alive and
// batch k-1 is dead (its release recorded after step k-1 was queued), so copy k+1 waits for
// step k-1 only.

namespace cuda {
namespace {

// A device buffer owned by a staging slot (and, while a batch in it is alive, by that batch).
struct DeviceBuffer {
  std::shared_ptr<Storage> storage;  // from the caching allocator
  Device device;
  cudaStream_t compute = nullptr;  // the device's compute stream (never destroyed)
  cudaEvent_t released = nullptr;  // recorded on `compute` when the batch's last tensor died
  std::atomic<bool> held{false};   // a tensor of the batch in it is alive
  std::atomic<bool> broken{false};  // the release could not record `released`: never reuse

  DeviceBuffer(Device d, cudaStream_t s, size_t bytes)
      : storage(Storage::allocate(bytes, d)), device(d), compute(s) {
    MIXPREC_CUDA_CHECK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
  }
  ~DeviceBuffer() {
    if (released) (void)cudaEventDestroy(released);  // a pending record still completes
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The release hook of a batch's storage handle (rule 3): runs once, when the last tensor on the
// handle dies, on whatever thread drops it; never throws.
struct Release {
  std::shared_ptr<DeviceBuffer> buffer;
  void operator()(Storage*) const noexcept {
    int current = -1;
    const bool got = cudaGetDevice(&current) == cudaSuccess;
    const bool ok = cudaSetDevice(buffer->device.index) == cudaSuccess &&
                    cudaEventRecord(buffer->released, buffer->compute) == cudaSuccess;
    if (got && current != buffer->device.index) (void)cudaSetDevice(current);
    if (!ok) {
      (void)cudaGetLastError();  // not sticky: later calls start clean
      buffer->broken.store(true, std::memory_order_release);
    }
    buffer->held.store(false, std::memory_order_release);  // after the record: rule 4 waits on it
  }
};

}  // namespace

struct Staging::State {
  Device device;
  cudaStream_t copy_stream = nullptr;
  struct Slot {
    void* pinned = nullptr;
    size_t pinned_bytes = 0;
    cudaEvent_t copied = nullptr;  // the slot's last host-to-device copy finished
    bool copy_issued = false;
    std::shared_ptr<DeviceBuffer> device;
  };
  std::array<Slot, 2> slots;
  int next = 0;
  cudaEvent_t compute_ready = nullptr;  // rule 5: all queued compute, before a fresh block
};

Staging::Staging(Device device) : state_(std::make_unique<State>()) {
  state_->device = device;
  cuda_detail::activate(device);
  MIXPREC_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->copy_stream, cudaStreamNonBlocking));
  MIXPREC_CUDA_CHECK(cudaEventCreateWithFlags(&state_->compute_ready, cudaEventDisableTiming));
  for (auto& slot : state_->slots)
    MIXPREC_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
}

Staging::~Staging() {
  if (!state_) return;
  (void)cudaSetDevice(state_->device.index);
  (void)cudaStreamSynchronize(state_->copy_stream);  // no copy may still read a pinned buffer
  for (auto& slot : state_->slots) {
    if (slot.pinned) (void)cudaFreeHost(slot.pinned);
    (void)cudaEventDestroy(slot.copied);
    slot.device.reset();  // a batch still alive keeps its buffer (and its release hook) alive
  }
  (void)cudaEventDestroy(state_->compute_ready);
  (void)cudaStreamDestroy(state_->copy_stream);
}

Tensor Staging::upload(const Tensor& host) {
  MIXPREC_CHECK(host.device().is_cpu(), "Staging::upload: expected a CPU tensor, got one on ",
                host.device().str());
  State& st = *state_;
  cudaStream_t compute = cuda_detail::activate(st.device);
  const size_t bytes = host.nbytes();
  if (bytes == 0) return Tensor::empty(host.shape(), {.dtype = host.dtype(), .device = st.device});
  State::Slot& slot = st.slots[static_cast<size_t>(st.next)];
  st.next ^= 1;
  // Rule 2: the copy that last read this pinned buffer is done before it is overwritten.
  if (slot.copy_issued) MIXPREC_CUDA_CHECK(cudaEventSynchronize(slot.copied));
  if (slot.pinned_bytes < bytes) {
    if (slot.pinned) MIXPREC_CUDA_CHECK(cudaFreeHost(slot.pinned));
    slot.pinned = nullptr;
    slot.pinned_bytes = 0;
    MIXPREC_CUDA_CHECK(cudaMallocHost(&slot.pinned, bytes));
    slot.pinned_bytes = bytes;
  }
  const Tensor packed = host.is_contiguous() ? host : detail::raw_copy(host, host.dtype());
  std::memcpy(slot.pinned, packed.data_ptr(), bytes);
  // Rules 4 and 5: the slot's own buffer after its batch's release, else a fresh block after
  // all queued compute.
  DeviceBuffer* buf = slot.device.get();
  if (buf && !buf->held.load(std::memory_order_acquire) &&
      !buf->broken.load(std::memory_order_acquire) && buf->storage->nbytes() >= bytes) {
    MIXPREC_CUDA_CHECK(cudaStreamWaitEvent(st.copy_stream, buf->released, 0));
    buf->storage->bump_version();  // rule 7
  } else {
    slot.device = std::make_shared<DeviceBuffer>(st.device, compute, bytes);
    buf = slot.device.get();
    MIXPREC_CUDA_CHECK(cudaEventRecord(st.compute_ready, compute));
    MIXPREC_CUDA_CHECK(cudaStreamWaitEvent(st.copy_stream, st.compute_ready, 0));
  }
  MIXPREC_CUDA_CHECK(cudaMemcpyAsync(buf->storage->data(), slot.pinned, bytes,
                                     cudaMemcpyHostToDevice, st.copy_stream));
  MIXPREC_CUDA_CHECK(cudaEventRecord(slot.copied, st.copy_stream));
  slot.copy_issued = true;
  MIXPREC_CUDA_CHECK(cudaStreamWaitEvent(compute, slot.copied, 0));  // rule 6
  // Rule 3: the batch's own handle on the buffer's storage, with the release hook.
  buf->held.store(true, std::memory_order_relaxed);
  std::shared_ptr<Storage> handle(buf->storage.get(), Release{slot.device});
  return Tensor::from_storage(std::move(handle), host.shape(), contiguous_strides(host.shape()), 0,
                              host.dtype());
}

// ------------------------------------------------------------------ asynchronous readback

struct Readback::State {
  Device device;
  void* pinned = nullptr;  // 8 bytes: the widest dtype
  cudaEvent_t done = nullptr;
  DType dtype = DType::f32;
  bool requested = false;
};

Readback::Readback(Device device) : state_(std::make_unique<State>()) {
  state_->device = device;
  cuda_detail::activate(device);
  MIXPREC_CUDA_CHECK(cudaMallocHost(&state_->pinned, 8));
  MIXPREC_CUDA_CHECK(cudaEventCreateWithFlags(&state_->done, cudaEventDisableTiming));
}

Readback::~Readback() {
  if (!state_) return;
  (void)cudaEventSynchronize(state_->done);  // the copy may still write the pinned bytes
  (void)cudaEventDestroy(state_->done);
  (void)cudaFreeHost(state_->pinned);
}

void Readback::request(const Tensor& scalar) {
  MIXPREC_CHECK(scalar.numel() == 1 && scalar.device() == state_->device,
                "Readback::request: expected a one-element tensor on ", state_->device.str(),
                ", got ", scalar.numel(), " elements on ", scalar.device().str());
  cudaStream_t s = cuda_detail::activate(state_->device);
  // An earlier copy into the same bytes is ordered before this one on the stream.
  MIXPREC_CUDA_CHECK(cudaMemcpyAsync(state_->pinned, scalar.data_ptr(), scalar.itemsize(),
                                     cudaMemcpyDeviceToHost, s));
  MIXPREC_CUDA_CHECK(cudaEventRecord(state_->done, s));
  state_->dtype = scalar.dtype();
  state_->requested = true;
}

std::optional<double> Readback::poll() {
  if (!state_->requested) return std::nullopt;
  const cudaError_t e = cudaEventQuery(state_->done);
  if (e == cudaErrorNotReady) return std::nullopt;
  MIXPREC_CUDA_CHECK(e);
  double v = 0;
  convert_row(state_->pinned, state_->dtype, &v, DType::f64, 1);
  return v;
}

}  // namespace cuda
}  // namespace mixprec
