// Data parallel for `mixprec train` started by mpirun: joins the group, checks that every rank
// runs the same job (job_settings: any difference stops every rank, naming it), sets the parallel
// context (gradients averaged, in the --grad-allreduce-dtype), gives each rank its share of the
// cores unless --threads or OMP_NUM_THREADS chose, and silences stdout on ranks other than 0
// (progress, summary and report come from rank 0 alone; errors still reach stderr from any rank).
// Decisions a rank could take alone (was the run interrupted?) are agreed on with agreed(). On GPUs
// each rank of a machine takes its own (NCCL needs one GPU per rank).
#pragma once

#include <string>

#include "train_settings.h"

namespace mixprec::cli {

struct ParallelRun {
  bool on = false;  // started by a launcher: data parallel, even with one rank
  int rank = 0;
  int ranks = 1;
};

// Call first: joins the group when a launcher started this process (else does nothing) and checks
// that every rank was given the same job (comm::RankMismatchError on every rank otherwise).
ParallelRun start_parallel(const TrainArgs& a);
// --device cuda under a launcher: rank r of this machine runs on cuda:r (an error when the machine
// has fewer GPUs than ranks, or when cuda:N would put several ranks on one GPU).
void place_rank_on_gpu(const std::string& device, const ParallelRun& p);
// The thread count to apply for --threads (0 keeps OpenMP's default).
int parallel_threads(const TrainArgs& a, const ParallelRun& p);
// True if `local` is true on any rank (a MAX all-reduce; `local` outside data parallel).
bool agreed(bool local, const ParallelRun& p);
// "mpirun -np N " when data parallel, for the printed --resume command.
std::string launcher_prefix(const ParallelRun& p);

}  // namespace mixprec::cli
