// Data parallel for `mixprec train` (see train_parallel.h).
#include "train_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"

namespace mixprec::cli {

ParallelRun start_parallel(const TrainArgs& a) {
  if (!communication::launched_by_launcher()) return {};
  communication::init();
  ParallelRun p{true, communication::get_rank(), communication::get_group_size()};
  set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL,
                             .gradients_mean = true,
                             .grad_allreduce_dtype = a.grad_allreduce_dtype == "bf16" ? DType::bf16 : DType::f32,
                             .bucket_cap_mb = a.grad_bucket_mb,
                             .first_bucket_mb = std::min(1.0, a.grad_bucket_mb),
                             .overlap_grad_reduce = a.grad_overlap});
  if (p.rank != 0) (void)std::freopen("/dev/null", "w", stdout);
  return p;
}

int parallel_threads(const TrainArgs& a, const ParallelRun& p) {
  if (!p.on || a.threads > 0 || std::getenv("OMP_NUM_THREADS")) return a.threads;
  return communication::default_threads_per_rank();  // collective among this machine's ranks
}

bool agreed(bool local, const ParallelRun& p) {
  if (!p.on) return local;
  double v = local ? 1.0 : 0.0;
  comm::all_reduce_max({&v, 1});
  return v != 0.0;
}

std::string launcher_prefix(const ParallelRun& p) {
  return p.on ? "mpirun -np " + std::to_string(p.ranks) + " " : "";
}

}  // namespace mixprec::cli
