// Data parallel for `mixprec train` (see train_parallel.h).
#include "train_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli_error.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/context.h"
#include "mixprec/cuda.h"
#include "mixprec/error.h"

namespace mixprec::cli {

ParallelRun start_parallel(const TrainArgs& a) {
  if (!communication::launched_by_launcher()) return {};
  communication::init();
  ParallelRun p{true, communication::get_rank(), communication::get_group_size()};
  // Before any other collective: a rank with other settings would wait forever in a collective
  // the others never make, crash on unequal sizes, or train something else without a word.
  comm::check_same_job(job_settings(a),
                       "start every rank with the same options and MIXPREC_* environment; "
                       "with mpirun's A : B form, A and B must repeat them");
  set_auto_parallel_context(
      {.parallel_mode = ParallelMode::DATA_PARALLEL,
       .gradients_mean = true,
       .grad_allreduce_dtype = a.grad_allreduce_dtype == "bf16" ? DType::bf16 : DType::f32,
       .bucket_cap_mb = a.grad_bucket_mb,
       .first_bucket_mb = std::min(1.0, a.grad_bucket_mb),
       .overlap_grad_reduce = a.grad_overlap});
  if (p.rank != 0) (void)std::freopen("/dev/null", "w", stdout);
  return p;
}

void place_rank_on_gpu(const std::string& device, const ParallelRun& p) {
  if (!p.on || device.rfind("cuda", 0) != 0) return;
  as_usage_error([&] {
    MIXPREC_CHECK(communication::built_with_nccl(), "--device ", device,
                  " under mpirun: data parallel on GPUs "
                  "needs NCCL, and this build of mixprec has none",
                  Hint{"rebuild with -DMIXPREC_CUDA=ON and MPI, with NCCL next to the CUDA toolkit "
                       "(-DMIXPREC_NCCL=ON), or train data parallel with --device cpu"});
  });
  const int local = communication::get_local_rank(), here = communication::get_local_rank_size();
  if (device != "cuda") {
    as_usage_error([&] {
      MIXPREC_CHECK(here == 1, "--device ", device, ": the ", here,
                    " ranks on this machine would share one GPU, "
                    "but data parallel on GPUs needs one GPU per rank",
                    Hint{"use --device cuda: rank r of a machine then takes GPU r"});
    });
    return;
  }
  const int gpus = cuda::device_count();
  as_usage_error([&] {
    MIXPREC_CHECK(
        local < gpus, "--device cuda: ", here, " ranks on this machine but ", gpus,
        " GPU(s) visible; data parallel on GPUs needs one GPU per rank",
        Hint{"start at most " + std::to_string(gpus) + " ranks per machine (mpirun -np)"});
  });
  ContextOptions c = get_context();
  c.device = Device::cuda(local);
  set_context(c);
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
