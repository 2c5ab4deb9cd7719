// A build without MPI: the process is a group of one. Collectives leave their data as it is
// (a sum or max over one rank); init() refuses to run as one of several processes a launcher
// started, which would otherwise train N independent copies that overwrite each other's files.
#include <cstdlib>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"

namespace mixprec {
namespace {
bool g_initialized = false;
}

namespace communication {

void init() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  MIXPREC_CHECK(!size || std::atoi(size) <= 1, "communication::init: this process is one of ", size,
                " that a launcher (mpirun) started, but this mixprec was built without MPI",
                Hint{"install MPI (apt-get install libopenmpi-dev openmpi-bin) and rebuild with "
                     "-DMIXPREC_WITH_MPI=ON, or run a single process"});
  g_initialized = true;
}
void release() { g_initialized = false; }
bool is_initialized() { return g_initialized; }
int get_rank() { return 0; }
int get_group_size() { return 1; }
int get_local_rank() { return 0; }
int get_local_rank_size() { return 1; }
int default_threads_per_rank() { return 0; }
void abort_group(int status) { std::_Exit(status); }

}  // namespace communication

namespace comm {

void all_reduce_sum(std::span<double>) {}
void all_reduce_max(std::span<double>) {}
void all_reduce_sum(const Tensor&) {}
void all_reduce_max(const Tensor&) {}
void broadcast(const Tensor&, int) {}
void broadcast(std::string&, int) {}
std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) { return {mine.begin(), mine.end()}; }
void barrier() {}

struct PendingReduce::Impl {};
PendingReduce::PendingReduce() = default;
PendingReduce::PendingReduce(PendingReduce&&) noexcept = default;
PendingReduce& PendingReduce::operator=(PendingReduce&&) noexcept = default;
PendingReduce::~PendingReduce() = default;
bool PendingReduce::test() { return true; }
void PendingReduce::wait() {}
PendingReduce start_all_reduce_sum(const Tensor&) { return {}; }

}  // namespace comm
}  // namespace mixprec
