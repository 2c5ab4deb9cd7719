// The CUDA entry points of a build without -DMIXPREC_CUDA=ON: queries answer "none", everything
// that needs a GPU throws one clear error naming the option to rebuild with.
#include "cuda_runtime.h"
#include "mixprec/cuda.h"
#include "mixprec/cuda_readback.h"
#include "mixprec/error.h"

namespace mixprec {
namespace {
[[noreturn]] void not_built(Device device) {
  detail::throw_error(SourceLocation::current(), false, "cuda", "device ", device.str(),
                      " is not available: this build of mixprec has no CUDA backend",
                      Hint{"rebuild with cmake -DMIXPREC_CUDA=ON (needs the CUDA toolkit), or use "
                           "Device::cpu()"});
}
}  // namespace

namespace cuda {
bool is_built() { return false; }
int device_count() { return 0; }
void check_device(Device device) { not_built(device); }
std::string describe(Device device) { not_built(device); }
void synchronize(Device device) { not_built(device); }
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void set_deterministic(bool) {}
bool deterministic() { return false; }
struct Staging::State {};
Staging::Staging(Device device) { not_built(device); }
Staging::~Staging() = default;
Tensor Staging::upload(const Tensor&) { not_built(Device::cuda()); }
struct Readback::State {};
Readback::Readback(Device device) { not_built(device); }
Readback::~Readback() = default;
void Readback::request(const Tensor&) { not_built(Device::cuda()); }
std::optional<double> Readback::poll() { not_built(Device::cuda()); }
}  // namespace cuda

namespace detail {
Allocator& cuda_allocator(Device device) { not_built(device); }
void cuda_empty_cache(Device) {}
void cuda_copy(const Tensor& src, const Tensor& dst) {
  not_built(src.device().is_cuda() ? src.device() : dst.device());
}
}  // namespace detail
}  // namespace mixprec
