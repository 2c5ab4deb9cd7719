// Allocators and memory accounting. Every storage byte goes through allocate()/deallocate() of
// its device's allocator, which aligns to 64 bytes and keeps live and peak byte counters per
// device (training reports peak memory from them). Counters are atomic; peak is resettable.
// The CPU allocator caches freed blocks by size class (4 classes per power of two) and hands
// them out again, so a training step in steady state makes no system allocation (and takes no
// page faults). live/peak count the bytes tensors asked for; cached blocks are reported apart.
// MIXPREC_ALLOCATOR=system disables the cache (sanitizer builds disable it too).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mixprec/device.h"

namespace mixprec {

struct MemoryStats {
  int64_t live_bytes = 0;          // bytes held by live storages now
  int64_t peak_bytes = 0;          // maximum of live_bytes since start or the last reset_peak_memory
  int64_t allocations = 0;         // number of allocate() calls since start
  int64_t system_allocations = 0;  // of those, the ones the cache could not serve
  int64_t cached_bytes = 0;        // freed blocks kept for reuse (not counted in live_bytes)
};

inline constexpr size_t kAllocAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

// The allocator of a device. Throws for a device this build has no backend for.
Allocator& allocator_for(Device device);

MemoryStats memory_stats(Device device = Device::cpu());
// Sets peak to the current live bytes.
void reset_peak_memory(Device device = Device::cpu());
// Returns the cached free blocks of the device to the system.
void empty_cache(Device device = Device::cpu());

namespace detail {
// Called by allocators to keep the counters.
void record_alloc(Device device, size_t nbytes);
void record_free(Device device, size_t nbytes);
void record_system_alloc(Device device);
void record_cached(Device device, int64_t delta_bytes);
// The block size a request of n bytes is served with (both caching allocators): n rounded up to
// 64 bytes below 4 KiB, else to a quarter of its power of two.
size_t size_class(size_t n);
// Raises the peak to at least `bytes` (restores a peak after a measurement reset it).
void raise_peak(Device device, int64_t bytes);
}  // namespace detail

}  // namespace mixprec
