// Uses the installed headers and library: builds a tensor, converts it to bf16 and back.
#include <cstdio>

#include "mixprec/mixprec.h"

int main() {
  const mixprec::Tensor t = mixprec::arange(8.0).astype(mixprec::DType::bf16);
  const auto back = t.to_vector<float>();
  const bool ok = back.size() == 8 && back[7] == 7.0f;
  std::printf("%s (mixprec %s)\n", ok ? "consumer ok" : "consumer FAILED", MIXPREC_VERSION);
  return ok ? 0 : 1;
}
