// Which transport carries a tensor's collective (src/comm/transport.h): none outside a group, MPI
// for host tensors, NCCL for GPU tensors; a GPU tensor in a build without NCCL is a clear error
// naming the device and the rebuild. Pure decisions: no GPU needed.
#include "comm/transport.h"
#include "comm_test_util.h"

namespace mixprec {
namespace {

using comm::detail::Transport;
using comm::detail::transport_for;

TEST(Transport, HostTensorsGoThroughMpiAndGpuTensorsThroughNccl) {
  EXPECT_EQ(transport_for(Device::cpu(), true, false, "t"), Transport::mpi);
  EXPECT_EQ(transport_for(Device::cpu(), true, true, "t"), Transport::mpi);
  EXPECT_EQ(transport_for(Device::cuda(0), true, true, "t"), Transport::nccl);
  EXPECT_EQ(transport_for(Device::cuda(3), true, true, "t"), Transport::nccl);
  EXPECT_EQ(transport_for(Device::cuda(0), false, true, "t"), Transport::none) << "outside a group: nothing to do";
  EXPECT_EQ(transport_for(Device::cpu(), false, false, "t"), Transport::none);
}

TEST(Transport, AGpuTensorWithoutNcclSaysWhatIsMissing) {
  const std::string err = testing::error_text([] { (void)transport_for(Device::cuda(1), true, false, "all_reduce_max"); });
  EXPECT_NE(err.find("all_reduce_max: tensors on cuda:1 need NCCL"), std::string::npos) << err;
  EXPECT_NE(err.find("this build of mixprec has none"), std::string::npos) << err;
  EXPECT_NE(err.find("-DMIXPREC_NCCL=ON"), std::string::npos) << "the hint says how to get it: " << err;
  // Outside a group there is nothing to carry, so no error either.
  EXPECT_EQ(testing::error_text([] { (void)transport_for(Device::cuda(1), false, false, "x"); }), "(no error)");
}

TEST(Transport, HostTensorCollectivesStillGoThroughMpi) {
  // This process is in the group mpirun started: a host tensor's max and sum reach every rank.
  Tensor flag = full({}, testing::rank() == testing::ranks() - 1 ? 1.0 : 0.0);
  comm::all_reduce_max(flag);
  EXPECT_EQ(flag.item(), 1.0) << "rank " << testing::rank();
  Tensor sum = full({3}, static_cast<double>(testing::rank() + 1));
  comm::all_reduce_sum(sum);
  const double n = testing::ranks();
  for (double v : sum.to_vector<double>()) EXPECT_EQ(v, n * (n + 1) / 2);
}

}  // namespace
}  // namespace mixprec
