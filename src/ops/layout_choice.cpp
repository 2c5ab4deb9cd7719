// The convolution output layout chosen by where the output goes (ops/layout_choice.h).
#include "ops/layout_choice.h"

#include <cstdio>
#include <mutex>
#include <vector>

#include "ops/dispatch.h"
#include "ops/kernel_choice.h"

namespace mixprec::ops::detail {
namespace {

constexpr const char* kRowMajor = "contiguous";

struct Sites {
  std::mutex mu;
  std::vector<std::string> sigs;  // site k is sigs[k - 1]
};

Sites& sites() {
  static auto* s = new Sites();  // lives until exit, as the kernel-choice table
  return *s;
}

uint32_t site_of(const std::string& sig) {
  Sites& s = sites();
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t k = 0; k < s.sigs.size(); ++k)
    if (s.sigs[k] == sig) return static_cast<uint32_t>(k + 1);
  s.sigs.push_back(sig);
  return static_cast<uint32_t>(s.sigs.size());
}

std::string site_signature(uint32_t site) {
  Sites& s = sites();
  std::lock_guard<std::mutex> lock(s.mu);
  return site >= 1 && site <= s.sigs.size() ? s.sigs[site - 1] : std::string();
}

// The input is already in row-major order (or has one channel): a row-major output needs no
// transposition of the input either.
bool input_row_major_ready(const Tensor& x) { return x.size(1) == 1 || x.is_contiguous(); }

}  // namespace

ImageLayout conv_output_layout(MemoryFormat output_format, const Tensor& x, const Tensor& w,
                               const ConvGeometry& g, uint32_t* site) {
  *site = 0;
  if (output_format == MemoryFormat::contiguous) return ImageLayout::nchw;
  if (output_format == MemoryFormat::channels_last) return ImageLayout::nhwc;
  // MemoryFormat::any.
  if (!x.device().is_cpu() || !input_row_major_ready(x)) return ImageLayout::nhwc;
  const std::string sig = choice::signature_prefix("conv2d", "output layout") +
                          desc_with_strides(x) + " * " + desc(w) + " " + g.str();
  // This process's choice or a checkpoint's pin; never the cache file (note_row_major_copy).
  if (const std::optional<choice::Choice> c = choice::lookup(sig, false);
      c && c->kernel == kRowMajor) {
    choice::note_used(sig, *c);
    return ImageLayout::nchw;
  }
  *site = site_of(sig);
  return ImageLayout::nhwc;
}

void mark_layout_site(const Tensor& out, uint32_t site) {
  if (site != 0 && out.defined()) out.impl()->layout_site = site;
}

uint32_t layout_site(const Tensor& t) { return t.defined() ? t.impl()->layout_site : 0; }

void note_row_major_copy(const Tensor& x) {
  const uint32_t site = layout_site(x);
  if (site == 0 || !is_channels_last(x)) return;
  const std::string sig = site_signature(site);
  if (sig.empty()) return;
  if (const std::optional<choice::Choice> c = choice::lookup(sig, false);
      c && c->kernel == kRowMajor)
    return;  // already chosen (this tensor was made before the choice)
  // Kept for this process and recorded for checkpoints (a resumed run pins it), never saved in
  // the cache file: every run then takes its first step channels-last and the rest row-major,
  // whatever the cache holds, so its bits do not depend on what an earlier run left there.
  choice::Choice c;
  c.kernel = kRowMajor;
  choice::store(sig, c);
  choice::note_used(sig, c);
  if (verbose_level() > 0)
    std::fprintf(stderr,
                 "mixprec: conv2d output layout -> contiguous from the next call  %s (its "
                 "channels-last output is copied into row-major order by a Flatten or reshape, "
                 "forward and backward)\n",
                 sig.c_str());
}

}  // namespace mixprec::ops::detail
