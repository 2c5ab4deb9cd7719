// Test-only switches of the train step (tests/amp, tests/comm): the device strategy on CPU tensors
// and a simulated readback lag, so that the device step is tested against the host step without
// a GPU; the data-parallel consensus on overflow switched off. Never set in a real run.
#pragma once

#include <cstdint>

namespace mixprec::amp::testing {
// true runs the device strategy (src/amp/step/device.cpp) on CPU tensors too, with the
// reference kernels of the AMP ops, so that it can be compared with the host strategy.
void set_device_step_on_cpu(bool on);
// The device strategy on CPU tensors treats a step's flag and loss as back only once `steps`
// later steps were queued (0: at once), as a GPU's readbacks may be, so that the steps in flight
// and their device-side step count are exercised without a GPU.
void set_cpu_readback_lag(int64_t steps);
// false turns the cross-rank combination of finite flags off, so that a test can show the
// divergence it prevents.
void set_overflow_consensus(bool enabled);
}  // namespace mixprec::amp::testing
