// The CPU allocator (64-byte aligned operator new behind a size-class cache) and the per-device
// memory counters. Zero-byte requests get a unique non-null pointer so that every storage has an
// address. Size classes: 4 per power of two (at most 25% slack), blocks under 4 KiB rounded to
// 64 bytes. The cache is bounded (MIXPREC_CACHE_LIMIT_MB, default 4096) and thread-safe (the
// data prefetch thread allocates too).
#include "mixprec/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "mixprec/env.h"
#include "mixprec/error.h"

namespace mixprec {
namespace {

constexpr int kMaxDevices = 9;  // cpu + 8 cuda ordinals

struct Counters {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> system_allocations{0};
  std::atomic<int64_t> cached{0};
};

Counters& counters(Device d) {
  static Counters table[kMaxDevices];
  const int slot = d.is_cpu() ? 0 : 1 + d.index;
  MIXPREC_CHECK(slot >= 0 && slot < kMaxDevices, "device ", d.str(), " is out of range");
  return table[slot];
}

}  // namespace

size_t detail::size_class(size_t n) {
  if (n <= 4096) return (std::max<size_t>(n, 1) + 63) / 64 * 64;
  size_t p = 1;
  while (p * 2 <= n) p *= 2;  // p <= n < 2p
  const size_t step = p / 4;
  return (n + step - 1) / step * step;
}

namespace {
using detail::size_class;

bool caching_enabled() {
#ifdef MIXPREC_NO_CACHING_ALLOCATOR
  return false;
#else
  static const bool on = [] {
    return env::get("MIXPREC_ALLOCATOR").value_or("caching") == "caching";  // or "system"
  }();
  return on;
#endif
}

int64_t cache_limit_bytes() {
  static const int64_t limit = [] {
    return env::get_integer("MIXPREC_CACHE_LIMIT_MB", 4096) << 20;
  }();
  return limit;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // More than the machine has can never succeed (and a sanitizer aborts on such a request
    // instead of returning null): say so before trying.
    static const size_t machine_bytes =
        static_cast<size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(::sysconf(_SC_PAGE_SIZE));
    MIXPREC_CHECK(nbytes <= machine_bytes, "cpu allocator: out of memory: ", nbytes,
                  " bytes requested, more than this machine's ", machine_bytes, " bytes of memory",
                  Hint{"use a smaller batch, or check memory_stats() for what is live"});
    const size_t cls = size_class(nbytes);
    if (caching_enabled()) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        detail::record_cached(Device::cpu(), -static_cast<int64_t>(cls));
        detail::record_alloc(Device::cpu(), nbytes);
        return p;
      }
    }
    void* p = ::operator new(cls, std::align_val_t{kAllocAlignment}, std::nothrow);
    MIXPREC_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes",
                  Hint{"use a smaller batch, or check memory_stats() for what is live"});
    detail::record_system_alloc(Device::cpu());
    detail::record_alloc(Device::cpu(), nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    detail::record_free(Device::cpu(), nbytes);
    const size_t cls = size_class(nbytes);
    if (caching_enabled() && memory_stats(Device::cpu()).cached_bytes + static_cast<int64_t>(cls) <= cache_limit_bytes()) {
      std::lock_guard<std::mutex> lock(mu_);
      free_[cls].push_back(ptr);
      detail::record_cached(Device::cpu(), static_cast<int64_t>(cls));
      return;
    }
    ::operator delete(ptr, std::align_val_t{kAllocAlignment});
  }
  void empty() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) ::operator delete(p, std::align_val_t{kAllocAlignment});
      detail::record_cached(Device::cpu(), -static_cast<int64_t>(cls * blocks.size()));
    }
    free_.clear();
  }
  Device device() const override { return Device::cpu(); }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: storages may outlive statics
  return *a;
}

}  // namespace

namespace detail {
void record_alloc(Device device, size_t nbytes) {
  Counters& c = counters(device);
  const int64_t live = c.live.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
  c.allocations.fetch_add(1);
}
void record_free(Device device, size_t nbytes) {
  counters(device).live.fetch_sub(static_cast<int64_t>(nbytes));
}
void record_system_alloc(Device device) { counters(device).system_allocations.fetch_add(1); }
void record_cached(Device device, int64_t delta) { counters(device).cached.fetch_add(delta); }
void raise_peak(Device device, int64_t bytes) {
  Counters& c = counters(device);
  int64_t peak = c.peak.load();
  while (bytes > peak && !c.peak.compare_exchange_weak(peak, bytes)) {
  }
}
}  // namespace detail

Allocator& allocator_for(Device device) {
  if (device.is_cuda()) return detail::cuda_allocator(device);  // throws without CUDA or a GPU
  return cpu_allocator();
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return MemoryStats{c.live.load(), c.peak.load(), c.allocations.load(), c.system_allocations.load(),
                     c.cached.load()};
}

void empty_cache(Device device) {
  if (device.is_cpu()) cpu_allocator().empty();
  else detail::cuda_empty_cache(device);
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.live.load());
}

}  // namespace mixprec
