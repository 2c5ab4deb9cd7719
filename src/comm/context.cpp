// The parallel context (set_auto_parallel_context) and what needs no transport: recognising a
// launcher from the environment, choosing a tensor's transport (MPI or NCCL, transport.h), and
// the rank-consistency check built on all_gather. The MPI calls themselves are in mpi.cpp (or
// single.cpp in a build without MPI), the NCCL ones in nccl.cpp.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "comm/transport.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"

namespace mixprec {
namespace {
AutoParallelContext g_parallel;
}

void set_auto_parallel_context(const AutoParallelContext& c) {
  MIXPREC_CHECK(c.grad_allreduce_dtype == DType::f32 || c.grad_allreduce_dtype == DType::bf16,
                "set_auto_parallel_context: grad_allreduce_dtype must be f32 or bf16, got ",
                dtype_name(c.grad_allreduce_dtype));
  MIXPREC_CHECK(std::isfinite(c.bucket_cap_mb) && c.bucket_cap_mb > 0 && std::isfinite(c.first_bucket_mb) &&
                    c.first_bucket_mb > 0,
                "set_auto_parallel_context: bucket_cap_mb and first_bucket_mb must be finite and > 0, got ",
                c.bucket_cap_mb, " and ", c.first_bucket_mb);
  MIXPREC_CHECK(c.parallel_mode == ParallelMode::STAND_ALONE || communication::is_initialized(),
                "set_auto_parallel_context: DATA_PARALLEL needs the process group, but communication::init() "
                "was not called",
                Hint{"call communication::init() first, in every process mpirun started"});
  g_parallel = c;
}

const AutoParallelContext& get_auto_parallel_context() { return g_parallel; }
void reset_auto_parallel_context() { g_parallel = AutoParallelContext{}; }
bool is_data_parallel() { return g_parallel.parallel_mode == ParallelMode::DATA_PARALLEL; }

bool communication::launched_by_launcher() {
  // Open MPI, then the PMI/PMIx variables that MPICH's hydra, Slurm and others set.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

namespace comm {

detail::Transport detail::transport_for(Device device, bool initialized, bool nccl_built, const char* what) {
  if (!initialized) return Transport::none;
  if (device.is_cpu()) return Transport::mpi;
  MIXPREC_CHECK(nccl_built, what, ": tensors on ", device.str(),
                " need NCCL for their collectives (data parallel on GPUs), and this build of mixprec has none",
                Hint{"rebuild with -DMIXPREC_CUDA=ON and MPI, with NCCL next to the CUDA toolkit (nccl.h, "
                     "libnccl.so; -DMIXPREC_NCCL=ON), or keep the tensors on the CPU"});
  return Transport::nccl;
}

detail::Transport detail::transport_for(const Tensor& t, const char* what) {
  return transport_for(t.device(), communication::is_initialized(), communication::built_with_nccl(), what);
}

namespace {
// FNV-1a over 8-byte words (then the tail): fast, and any change of a bit changes the hash.
uint64_t hash_bytes(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
}  // namespace

RankCheckEntry tensor_entry(std::string name, const Tensor& t) {
  const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
  return {std::move(name), hash_bytes(c.data_ptr(), c.nbytes()), false, 0.0};
}

RankCheckEntry number_entry(std::string name, double value) {
  return {std::move(name), std::bit_cast<uint64_t>(value), true, value};
}

void check_same_on_all_ranks(const std::vector<RankCheckEntry>& entries, const std::string& when) {
  const int n = communication::get_group_size();
  std::vector<uint64_t> mine(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) mine[i] = entries[i].hash;
  const std::vector<uint64_t> all = all_gather(mine);
  const size_t e = entries.size();
  size_t differing = 0, first = e;
  for (size_t i = 0; i < e; ++i)
    for (int r = 1; r < n; ++r)
      if (all[r * e + i] != all[i]) {
        differing += 1;
        if (first == e) first = i;
        break;
      }
  if (differing == 0) return;
  const RankCheckEntry& f = entries[first];
  std::ostringstream ranks, values;
  for (int r = 1; r < n; ++r) {
    if (all[r * e + first] == all[first]) continue;
    ranks << (ranks.tellp() > 0 ? ", " : "") << r;
    if (f.is_number) values << "; rank " << r << " holds " << std::bit_cast<double>(all[r * e + first]);
  }
  std::ostringstream msg;
  msg << "rank consistency check at " << when << ": '" << f.name << "' differs between ranks: rank"
      << (ranks.str().find(',') != std::string::npos ? "s " : " ") << ranks.str() << " against rank 0";
  if (f.is_number) msg << " (rank 0 holds " << std::bit_cast<double>(all[first]) << values.str() << ")";
  msg << "; " << differing << " of " << e << " checked values differ";
  throw RankMismatchError(msg.str(),
                          "data-parallel ranks must take identical decisions; a difference means a rank "
                          "reduced, skipped or updated on its own (a bug, or ranks built or configured differently)",
                          SourceLocation::current(), false);
}

}  // namespace comm
}  // namespace mixprec
