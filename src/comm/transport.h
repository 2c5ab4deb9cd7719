// Which transport carries a collective on a tensor: none (this process is in no group), MPI for
// host tensors, NCCL for CUDA tensors, or an error saying what this build lacks. context.cpp
// decides, mpi.cpp calls; comm/nccl.cpp (or nccl_none.cpp in a build without NCCL) implements the
// NCCL side. Plain C++: no MPI, CUDA or NCCL types.
#pragma once

#include "mixprec/device.h"
#include "mixprec/tensor.h"

namespace mixprec::comm::detail {

enum class Transport { none, mpi, nccl };
enum class ReduceOp { sum, max };

// The transport of a collective on a tensor on `device`. Not initialized: none. A CUDA device
// without NCCL in the build: throws mixprec::Error naming `what` and what to rebuild with.
Transport transport_for(Device device, bool initialized, bool nccl_built, const char* what);
// The same for this process and build.
Transport transport_for(const Tensor& t, const char* what);

// In place over a contiguous f32 (sum: or bf16) CUDA tensor, queued on its device's compute
// stream: no host synchronisation. The first call creates this rank's communicator (collective:
// rank 0's ncclUniqueId is broadcast over MPI) on the tensor's device; one device per rank.
void nccl_all_reduce(const Tensor& t, ReduceOp op);
// Rank `root`'s bytes into every rank's contiguous CUDA tensor, queued likewise.
void nccl_broadcast(const Tensor& t, int root);
// Destroys the communicator (communication::release, before MPI_Finalize).
void nccl_release();

}  // namespace mixprec::comm::detail
