// The non-finite checker and AMP counters (see ops/numerics.h).
#include "mixprec/ops/numerics.h"

#include <cmath>

namespace mixprec {
namespace {
thread_local NumericsCheckScope* t_check = nullptr;
thread_local AmpCounters t_counters;
thread_local bool t_in_backward = false;
}  // namespace

NumericsCheckScope::NumericsCheckScope() : prev_(t_check) { t_check = this; }
NumericsCheckScope::~NumericsCheckScope() { t_check = prev_; }
NumericsCheckScope* numerics_check() { return t_in_backward ? nullptr : t_check; }
NumericsCheckScope* numerics_check_any_phase() { return t_check; }

BackwardPhaseGuard::BackwardPhaseGuard() : prev_(t_in_backward) { t_in_backward = true; }
BackwardPhaseGuard::~BackwardPhaseGuard() { t_in_backward = prev_; }

void NumericsCheckScope::record(NonFiniteEvent e) {
  if (!first_) first_ = std::move(e);
}

FiniteSummary summarize_finite(const Tensor& t) {
  FiniteSummary s;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return s;
  // A tensor on a GPU is read back first (check_numerics on a device: a wait per op).
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  visit_float(c.dtype(), [&]<class T>() {
    const T* p = static_cast<const T*>(c.data_ptr());
    const int64_t n = c.numel();
    int64_t bad = 0;
    int nan = 0;
    double mx = 0.0;
#pragma omp parallel for reduction(+ : bad) reduction(max : mx) reduction(| : nan) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(load(p[i]));
      if (!std::isfinite(v)) {
        ++bad;
        nan |= std::isnan(v) ? 1 : 0;
      } else {
        mx = std::max(mx, std::fabs(v));
      }
    }
    s.nonfinite = bad;
    s.has_nan = nan != 0;
    s.max_abs = mx;
  });
  return s;
}

AmpCounters& amp_counters() { return t_counters; }

}  // namespace mixprec
