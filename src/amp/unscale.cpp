// The host's unscale-and-check: every gradient times the inverse scale (computed in f64, rounded
// once to f32) and one non-finite flag, as one AmpUnscaleProblem dispatched to the cpu backend
// (ops/cpu/amp.cpp: chunked OpenMP loops, the flag an OR reduction, so the result does not depend
// on the thread count; a scale of 1 is a check with no write pass). The finite test is on the value
// stored (ops::stores_finite), so a fixed scale below 1 (1/scale > 1) that overflows the 16-bit
// type is caught too. Left here: undefined entries (skipped), non-contiguous gradients (through a
// packed copy), f64 gradients (divided in f64) and the version bumps.
#include <cmath>

#include "mixprec/amp/loss_scale.h"
#include "amp/consensus.h"
#include "mixprec/error.h"
#include "ops/amp_problem.h"
#include "ops/dispatch.h"

namespace mixprec::amp {
namespace {

// An f64 gradient: divided by the scale in f64 (no f32 rounding). True if all finite.
bool process_f64(const Tensor& g, double scale) {
  double* p = g.data<double>();
  bool ok = true;
  for (int64_t i = 0; i < g.numel(); ++i) {
    p[i] = scale != 1.0 ? p[i] / scale : p[i];
    ok &= std::isfinite(p[i]);
  }
  return ok;
}

}  // namespace

bool unscale_and_check(const std::vector<Tensor>& grads, double scale) {
  MIXPREC_CHECK(std::isfinite(scale) && scale > 0,
                "unscale: the loss scale must be finite and > 0, got ", scale);
  const bool do_scale = scale != 1.0;
  bool ok = true;
  ops::AmpUnscaleProblem p;
  std::vector<std::pair<Tensor, Tensor>> packed;  // (gradient, its contiguous copy)
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    MIXPREC_CHECK(g.device().is_cpu(), "unscale_and_check: gradient on ", g.device().str(),
                  " (cpu only in this build)");
    const DType d = g.dtype();
    MIXPREC_CHECK(is_floating(d), "unscale_and_check: gradients must be floating, got ",
                  dtype_name(d));
    // Rare (gradients are produced contiguous): go through a packed copy.
    const Tensor c = g.is_contiguous() ? g : packed.emplace_back(g, g.contiguous()).second;
    if (d == DType::f64)
      ok &= process_f64(c, scale);
    else
      p.grads.push_back(c);
  }
  if (!p.grads.empty()) {
    p.found_inf = zeros({1});
    p.inv_scale = full({1}, static_cast<float>(1.0 / scale));
    ops::dispatch(OpId::amp_unscale, "update", p);
    ok &= p.found_inf.data<float>()[0] == 0.0f;
  }
  if (do_scale) {
    for (auto& [g, c] : packed) {
      Tensor dst = g;
      dst.detach().copy_(c);
    }
    for (const Tensor& g : grads)
      if (g.defined()) g.storage()->bump_version();
  }
  return ok;
}

namespace detail {

void check_gradient_list(const std::vector<Tensor>& tensors, const char* who, bool allow_empty) {
  MIXPREC_CHECK(
      allow_empty || !tensors.empty(), who, ": expected at least one tensor, got an empty list",
      Hint{"pass the gradients value_and_grad returned for the optimizer's parameters; an "
           "empty list usually means the parameter list was empty"});
  for (size_t i = 0; i < tensors.size(); ++i)
    MIXPREC_CHECK(
        tensors[i].defined(), who, ": tensor ", i, " of ", tensors.size(),
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
