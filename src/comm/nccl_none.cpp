// A build without NCCL (MIXPREC_NCCL off): collectives on CUDA tensors never get here, because
// transport_for (context.cpp) throws first, saying the build has no NCCL and how to get it.
#include "comm/transport.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"

namespace mixprec {

bool communication::built_with_nccl() { return false; }

namespace comm::detail {
void nccl_all_reduce(const Tensor& t, ReduceOp) {
  MIXPREC_ASSERT(false, "an all-reduce on ", t.device().str(), " reached NCCL in a build without it");
}
void nccl_broadcast(const Tensor& t, int) {
  MIXPREC_ASSERT(false, "a broadcast on ", t.device().str(), " reached NCCL in a build without it");
}
void nccl_release() {}
}  // namespace comm::detail
}  // namespace mixprec
