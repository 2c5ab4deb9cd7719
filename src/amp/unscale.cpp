// The fused unscale-and-check pass: one sweep per gradient tensor that multiplies by the
// inverse scale (computed in f64, rounded once to f32) and ORs a non-finite flag. The finite
// test is on the value stored: f32's exponent bits after scaling, and for f16/bf16 the scaled
// value against the first one that rounds to infinity (ops::stores_finite), so a fixed scale
// below 1 (1/scale > 1) that overflows the 16-bit type is caught too. Chunks are independent; the
// flag is combined with a reduction, so the result does not depend on the thread count.
#include <bit>
#include <cmath>

#include "mixprec/amp/loss_scale.h"
#include "mixprec/convert.h"
#include "mixprec/error.h"
#include "ops/amp_problem.h"

namespace mixprec::amp {
namespace {

constexpr int64_t kChunk = 4096;

inline bool finite_bits(float v) { return (std::bit_cast<uint32_t>(v) & 0x7f800000u) != 0x7f800000u; }

// Contiguous f32: scale in place, return whether all finite.
bool scale_f32(float* p, int64_t n, float inv, bool do_scale) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
    int local = 0;
    if (do_scale) {
      for (int64_t i = lo; i < hi; ++i) {
        const float v = p[i] * inv;
        local |= !finite_bits(v);
        p[i] = v;
      }
    } else {  // check only: no write pass
      for (int64_t i = lo; i < hi; ++i) local |= !finite_bits(p[i]);
    }
    bad |= local;
  }
  return bad == 0;
}

// Contiguous f16/bf16: widen a chunk, scale, check, round back.
bool scale_16(void* p, DType dt, int64_t n, float inv, bool do_scale) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
    alignas(64) float buf[kChunk];
    char* base = static_cast<char*>(p) + lo * 2;
    convert_row(base, dt, buf, DType::f32, hi - lo);
    int local = 0;
    for (int64_t i = 0; i < hi - lo; ++i) {
      const float v = do_scale ? buf[i] * inv : buf[i];
      local |= !ops::stores_finite(v, dt);
      buf[i] = v;
    }
    if (do_scale) convert_row(buf, DType::f32, base, dt, hi - lo);
    bad |= local;
  }
  return bad == 0;
}

bool process(const Tensor& g, double scale) {
  MIXPREC_CHECK(g.device().is_cpu(), "unscale_and_check: gradient on ", g.device().str(), " (cpu only in this build)");
  const bool do_scale = scale != 1.0;
  const float inv = static_cast<float>(1.0 / scale);
  if (!g.is_contiguous()) {
    // Rare (gradients are produced contiguous): go through a packed copy.
    Tensor packed = g.contiguous();
    const bool ok = process(packed, scale);
    if (do_scale) {
      Tensor dst = g;
      dst.detach().copy_(packed);
    }
    return ok;
  }
  switch (g.dtype()) {
    case DType::f32: return scale_f32(g.data<float>(), g.numel(), inv, do_scale);
    case DType::f16:
    case DType::bf16: return scale_16(g.data_ptr(), g.dtype(), g.numel(), inv, do_scale);
    case DType::f64: {
      double* p = g.data<double>();
      bool ok = true;
      for (int64_t i = 0; i < g.numel(); ++i) {
        p[i] = do_scale ? p[i] / scale : p[i];
        ok &= std::isfinite(p[i]);
      }
      return ok;
    }
    default: MIXPREC_CHECK(false, "unscale_and_check: gradients must be floating, got ", dtype_name(g.dtype()));
  }
  return false;
}

}  // namespace

bool unscale_and_check(const std::vector<Tensor>& grads, double scale) {
  MIXPREC_CHECK(std::isfinite(scale) && scale > 0, "unscale: the loss scale must be finite and > 0, got ", scale);
  bool ok = true;
  for (const Tensor& g : grads)
    if (g.defined()) ok &= process(g, scale);
  for (const Tensor& g : grads)
    if (g.defined() && scale != 1.0) g.storage()->bump_version();
  return ok;
}

namespace detail {

void check_gradient_list(const std::vector<Tensor>& tensors, const char* who, bool allow_empty) {
  MIXPREC_CHECK(allow_empty || !tensors.empty(), who, ": expected at least one tensor, got an empty list",
                Hint{"pass the gradients value_and_grad returned for the optimizer's parameters; an "
                     "empty list usually means the parameter list was empty"});
  for (size_t i = 0; i < tensors.size(); ++i)
    MIXPREC_CHECK(tensors[i].defined(), who, ": tensor ", i, " of ", tensors.size(),
                  " is undefined; expected a gradient (a gradient that was never computed is not finite)",
                  Hint{"value_and_grad returns zeros for a parameter no gradient reached; check how "
                       "this list was built"});
}

}  // namespace detail

bool all_finite(const std::vector<Tensor>& tensors) {
  detail::check_gradient_list(tensors, "all_finite", /*allow_empty=*/false);
  return finite_on_all_ranks(unscale_and_check(tensors, 1.0));  // scale 1: the read-only check pass
}

}  // namespace mixprec::amp
