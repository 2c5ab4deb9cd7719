// The train step's stages that are the same for every strategy (step.h): gradient statistics, the
// agreement on one overflow event across ranks, the AMP telemetry of a step, and the warning of an
// update applied with non-finite gradients.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "amp/step/step.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "mixprec/ops/ops.h"

namespace mixprec::amp {
namespace detail {

namespace {
// NonFiniteEvent <-> text, to hand one rank's event to the others.
constexpr char kSep = '\x1f';
std::string serialize(const NonFiniteEvent& e) {
  std::ostringstream o;
  o.precision(17);
  o << static_cast<int>(e.op) << kSep << e.op_name << kSep << e.cell << kSep << e.phase << kSep
    << e.detail << kSep << static_cast<int>(e.dtype) << kSep << e.input_max_abs << kSep
    << e.nonfinite_count << kSep << e.has_nan;
  return o.str();
}

NonFiniteEvent deserialize(const std::string& s) {
  std::vector<std::string> f;
  std::string cur;
  for (char c : s) {
    if (c == kSep)
      f.push_back(std::exchange(cur, {}));
    else
      cur += c;
  }
  f.push_back(cur);
  MIXPREC_ASSERT(f.size() == 9, "an overflow event from another rank has ", f.size(), " fields");
  return NonFiniteEvent{static_cast<OpId>(std::stoi(f[0])),
                        f[1],
                        f[2],
                        f[3],
                        f[4],
                        static_cast<DType>(std::stoi(f[5])),
                        std::stod(f[6]),
                        std::stoll(f[7]),
                        f[8] == "1"};
}
}  // namespace

// So that what callbacks do with the event (the guard's stop or promotion) is the same everywhere.
void agree_on_event(std::optional<NonFiniteEvent>& event) {
  const int n = communication::get_group_size();
  double lowest =
      event ? static_cast<double>(n - communication::get_rank()) : 0.0;  // max = lowest rank
  comm::all_reduce_max({&lowest, 1});
  if (lowest == 0.0) {
    event.reset();
    return;
  }
  const int root = n - static_cast<int>(lowest);
  std::string text = root == communication::get_rank() ? serialize(*event) : std::string();
  comm::broadcast(text, root);
  event = deserialize(text);
}

void fill_telemetry(StepInfo& s, const AmpCounters& before) {
  const AmpCounters& now = amp_counters();
  s.casts = now.casts - before.casts;
  s.cast_bytes = now.cast_bytes - before.cast_bytes;
  const int64_t flops = now.flops - before.flops;
  s.low_flops_fraction =
      flops > 0 ? static_cast<double>(now.low_flops - before.low_flops) / static_cast<double>(flops)
                : 0.0;
}

void warn_applied_overflow(int64_t step) {
  if (communication::get_rank() == 0)
    std::fprintf(stderr,
                 "mixprec: warning: step %lld applied an update with non-finite gradients "
                 "(drop_overflow_update is false)\n",
                 static_cast<long long>(step));
}

}  // namespace detail

GradStats gradient_stats(const std::string& name, const Tensor& grad, double scale) {
  GradStats st;
  st.param = name;
  Tensor g = ops::amp_cast(grad.to(Device::cpu()), DType::f32).contiguous();  // a device's: copied
  if (scale != 1.0) g = ops::mul(g, scale);  // statistics of the unscaled gradient
  const float* p = g.data<float>();
  const int64_t n = g.numel();
  int64_t under = 0, zero = 0;
  double mx = 0.0;
#pragma omp parallel for reduction(+ : under, zero) reduction(max : mx) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    if (v == 0.0f) {
      ++zero;
      continue;
    }
    if (to_f16(v).bits == 0 || to_f16(v).bits == 0x8000) ++under;
    mx = std::max(mx, static_cast<double>(std::fabs(v)));
  }
  st.max_abs = mx;
  st.underflow_fraction = n ? static_cast<double>(under) / static_cast<double>(n) : 0.0;
  st.zero_fraction = n ? static_cast<double>(zero) / static_cast<double>(n) : 0.0;
  st.recommended_scale =
      mx > 0 && std::isfinite(mx) ? std::exp2(std::floor(std::log2(32768.0 / mx))) : 1.0;
  return st;
}

}  // namespace mixprec::amp
