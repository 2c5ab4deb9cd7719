// The CPU allocator (64-byte aligned operator new) and the per-device memory counters.
// Zero-byte requests get a unique non-null pointer so that every storage has an address.
#include "mixprec/allocator.h"

#include <atomic>
#include <new>

#include "mixprec/error.h"

namespace mixprec {
namespace {

constexpr int kMaxDevices = 9;  // cpu + 8 cuda ordinals

struct Counters {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};

Counters& counters(Device d) {
  static Counters table[kMaxDevices];
  const int slot = d.is_cpu() ? 0 : 1 + d.index;
  MIXPREC_CHECK(slot >= 0 && slot < kMaxDevices, "device ", d.str(), " is out of range");
  return table[slot];
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t rounded = nbytes == 0 ? kAllocAlignment : nbytes;
    void* p = ::operator new(rounded, std::align_val_t{kAllocAlignment}, std::nothrow);
    MIXPREC_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes",
                  Hint{"reduce --batch-size, or check memory_stats() for what is live"});
    detail::record_alloc(Device::cpu(), nbytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    ::operator delete(ptr, std::align_val_t{kAllocAlignment});
    detail::record_free(Device::cpu(), nbytes);
  }
  Device device() const override { return Device::cpu(); }
};

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
}  // namespace detail

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  MIXPREC_CHECK(device.is_cpu(), "no allocator for device ", device.str(),
                ": this build has no CUDA backend",
                Hint{"configure with -DMIXPREC_WITH_CUDA=ON on a machine with CUDA"});
  return cpu;
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return MemoryStats{c.live.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.live.load());
}

}  // namespace mixprec
