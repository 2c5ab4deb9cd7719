// Data parallelism, in MindSpore's names: communication::init() joins the process group that
// `mpirun` started, get_rank() / get_group_size() say which process this is, and
// set_auto_parallel_context({.parallel_mode = ParallelMode::DATA_PARALLEL, .gradients_mean =
// true}) makes train::Model and the train step reduce gradients and agree on loss scaling. The
// transport is MPI (MIXPREC_WITH_MPI); a build without it is a group of one, and init() refuses
// to run as one of several processes a launcher started. Depends on the core layer only.
#pragma once

#include <cstdint>

#include "mixprec/dtype.h"

namespace mixprec {

enum class ParallelMode { STAND_ALONE, DATA_PARALLEL };

struct AutoParallelContext {
  ParallelMode parallel_mode = ParallelMode::STAND_ALONE;
  bool gradients_mean = false;  // MindSpore's default: the reducer sums unless this is set
  // The dtype gradients travel in: f32, or bf16 (half the bytes; summed with f32 arithmetic).
  DType grad_allreduce_dtype = DType::f32;
  double bucket_cap_mb = 25.0;      // gradients are all-reduced in buckets of about this size
  double first_bucket_mb = 1.0;     // the first bucket (the last layers) is small so it starts early
  bool overlap_grad_reduce = true;  // start each bucket during backward (false: all after it)
};

// Checks and sets the context. DATA_PARALLEL needs communication::init() first.
void set_auto_parallel_context(const AutoParallelContext& context);
const AutoParallelContext& get_auto_parallel_context();
void reset_auto_parallel_context();
// True when the parallel mode is DATA_PARALLEL.
bool is_data_parallel();

namespace communication {

// Joins the group (MPI_Init_thread, funneled); a second call does nothing. Without MPI in this
// build: a group of one, or an error when a launcher started several processes.
void init();
// Leaves the group (MPI_Finalize); call once, at the end, on every rank.
void release();
bool is_initialized();
int get_rank();            // 0 when not initialized
int get_group_size();      // 1 when not initialized
int get_local_rank();      // rank among the processes on this machine
int get_local_rank_size(); // processes of the group on this machine
// True when this process was started by mpirun / an MPI launcher (its environment says so).
bool launched_by_launcher();
// Whether this build has NCCL, which carries the collectives of CUDA tensors (without it they
// throw mixprec::Error saying so).
bool built_with_nccl();
// OpenMP threads for this rank when the user chose none: the CPUs this process may run on,
// shared evenly with the other ranks of this machine that may run on the same CPUs (at least 1).
// Collective over the machine's ranks. 0 when not initialized.
int default_threads_per_rank();
// Ends every process of the group with `status` (MPI_Abort). For programs (the CLI) after a
// rank-local error: the other ranks may be waiting in a collective that will never complete.
// The library never calls it itself.
[[noreturn]] void abort_group(int status);

}  // namespace communication
}  // namespace mixprec
