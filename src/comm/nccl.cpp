// NCCL for the collectives of CUDA tensors (built with MIXPREC_NCCL; comm/mpi.cpp hands them
// here, see transport.h). One communicator per process, made at the first GPU collective on the
// device of its tensor (one rank, one GPU): rank 0's ncclUniqueId travels over MPI
// (comm::broadcast), then ncclCommInitRank. Every operation is queued on that device's compute
// stream (core/cuda_stream.h), so it is ordered with the kernels around it and the host never waits.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "comm/transport.h"
#include "core/cuda_stream.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"

namespace mixprec {
namespace {

struct Communicator {
  ncclComm_t comm = nullptr;
  Device device;
};
Communicator g_nccl;

void check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(g_nccl.comm);
  MIXPREC_CHECK(false, call, " failed: ", ncclGetErrorString(r),
                last && *last ? std::string(" (") + last + ")" : std::string(),
                Hint{"NCCL needs one rank per GPU: start at most as many ranks on a machine as it has GPUs, "
                     "each on its own device (Device::cuda(communication::get_local_rank())); NCCL_DEBUG=WARN "
                     "prints NCCL's own account"});
}

// This rank's communicator, made on first use on `device` (collective: every rank reaches its
// first GPU collective at the same call, as every collective is called in the same order).
ncclComm_t communicator(Device device) {
  if (g_nccl.comm) {
    MIXPREC_CHECK(g_nccl.device == device, "data parallel on GPUs: this rank's NCCL communicator is on ",
                  g_nccl.device.str(), ", but a collective got a tensor on ", device.str(),
                  Hint{"one rank uses one GPU: keep every tensor it reduces or broadcasts on that device"});
    return g_nccl.comm;
  }
  ncclUniqueId id{};
  std::string bytes;
  if (communication::get_rank() == 0) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bytes.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  comm::broadcast(bytes, 0);  // MPI
  MIXPREC_ASSERT(bytes.size() == sizeof id, "the NCCL id from rank 0 has ", bytes.size(), " bytes");
  std::memcpy(&id, bytes.data(), sizeof id);
  cuda_detail::activate(device);  // ncclCommInitRank binds the current device
  ncclComm_t c = nullptr;
  check(ncclCommInitRank(&c, communication::get_group_size(), id, communication::get_rank()), "ncclCommInitRank");
  g_nccl = {c, device};
  return c;
}

ncclDataType_t nccl_type(const Tensor& t, comm::detail::ReduceOp op) {
  MIXPREC_CHECK(t.dtype() == DType::f32 || (t.dtype() == DType::bf16 && op == comm::detail::ReduceOp::sum),
                "all_reduce on ", t.device().str(), ": expected an f32 (or, summed, bf16) tensor, got ",
                dtype_name(t.dtype()));
  return t.dtype() == DType::f32 ? ncclFloat32 : ncclBfloat16;
}

}  // namespace

bool communication::built_with_nccl() { return true; }

namespace comm::detail {

void nccl_all_reduce(const Tensor& t, ReduceOp op) {
  MIXPREC_CHECK(t.device().is_cuda() && t.is_contiguous(), "all_reduce: expected a contiguous CUDA tensor, got one on ",
                t.device().str());
  const ncclDataType_t type = nccl_type(t, op);
  const ncclComm_t c = communicator(t.device());
  cudaStream_t stream = cuda_detail::activate(t.device());
  check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type,
                      op == ReduceOp::sum ? ncclSum : ncclMax, c, stream),
        "ncclAllReduce");
}

void nccl_broadcast(const Tensor& t, int root) {
  MIXPREC_CHECK(t.device().is_cuda() && t.is_contiguous(), "broadcast: expected a contiguous CUDA tensor, got one on ",
                t.device().str());
  const ncclComm_t c = communicator(t.device());
  cudaStream_t stream = cuda_detail::activate(t.device());
  check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, c, stream), "ncclBroadcast");
}

void nccl_release() {
  if (!g_nccl.comm) return;
  (void)cudaSetDevice(g_nccl.device.index);
  (void)ncclCommFinalize(g_nccl.comm);  // completes what is queued; errors here have nowhere to go
  (void)ncclCommDestroy(g_nccl.comm);
  g_nccl = {};
}

}  // namespace comm::detail
}  // namespace mixprec
