// The collectives the layers above use (MPI underneath; a group of one does no communication):
// blocking all-reduces of small host arrays (sum, max), in-place all-reduce and broadcast of
// tensors, a non-blocking in-place sum of a gradient bucket (f32, or bf16 through a user-defined
// MPI operation that adds in f32), the rank-consistency check behind --check-ranks, and the
// same-job check that data-parallel start-up runs (check_same_job). Every
// function is collective: all ranks of the group call it, in the same order.
// Tensors on a CUDA device go through NCCL instead (one GPU per rank; a build without NCCL
// throws): queued on the device's compute stream, so the host never waits, and complete for
// every later kernel on that stream (a PendingReduce of them is never pending).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mixprec/error.h"
#include "mixprec/tensor.h"

namespace mixprec::comm {

void all_reduce_sum(std::span<double> values);
void all_reduce_max(std::span<double> values);
// In place over a contiguous f32 tensor.
void all_reduce_sum(const Tensor& t);
// In place over a contiguous f32 tensor: the elementwise maximum (a found-inf flag's consensus).
void all_reduce_max(const Tensor& t);
// Rank `root`'s bytes into every rank's contiguous tensor / string.
void broadcast(const Tensor& t, int root = 0);
void broadcast(std::string& s, int root = 0);
// Every rank's `mine` (same length everywhere), rank after rank.
std::vector<uint64_t> all_gather(std::span<const uint64_t> mine);
void barrier();

// A sum over all ranks, in place, started now and finished by wait(). While it is pending the
// buffer must not be touched. f32 buffers are summed in f32; bf16 buffers by an operation that
// widens both operands to f32, adds, and rounds once to bf16 (never bf16 arithmetic), once per
// combine. On a GPU NCCL's bf16 sum also rounds each combine to bf16, in its own order (ring,
// tree: docs/cuda.md), so the two transports need not agree bit for bit.
class PendingReduce {
 public:
  PendingReduce();
  PendingReduce(PendingReduce&&) noexcept;
  PendingReduce& operator=(PendingReduce&&) noexcept;
  ~PendingReduce();  // waits if still pending
  bool pending() const { return impl_ != nullptr; }
  // Lets the transport make progress; true once complete (then no longer pending).
  bool test();
  void wait();

 private:
  friend PendingReduce start_all_reduce_sum(const Tensor& buffer);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
PendingReduce start_all_reduce_sum(const Tensor& buffer);

// ---------------------------------------------------------------- rank consistency

// One value every rank must hold identically: a tensor (compared by a hash of its bytes) or a
// number (compared exactly, and printed when ranks disagree).
struct RankCheckEntry {
  std::string name;
  uint64_t hash = 0;
  bool is_number = false;
  double number = 0.0;
};
RankCheckEntry tensor_entry(std::string name, const Tensor& t);
RankCheckEntry number_entry(std::string name, double value);

// Thrown on every rank alike when the ranks disagree (a collective error: each rank reaches it).
class RankMismatchError : public Error {
 public:
  using Error::Error;
};

// Compares the entries across ranks (names and order must be the same on every rank); throws
// RankMismatchError naming the first entry that differs, the ranks that differ from rank 0, the
// values when it is a number, and how many entries differ in all. `when` says where ("step 20").
void check_same_on_all_ranks(const std::vector<RankCheckEntry>& entries, const std::string& when);

// ---------------------------------------------------------------- same job on every rank

// One setting every rank of a data-parallel job must share: its name as the user spells it
// ("--batch-size", "MIXPREC_ISA") and its value as text, written the same way on every rank.
struct JobSetting {
  std::string name;
  std::string value;
};

// The environment switches that change numerics or the kernels that run (MIXPREC_ISA,
// MIXPREC_KERNEL_CHOICE, MIXPREC_GRAPH_FUSE, MIXPREC_DISABLE_KERNELS), as this process sees them
// ("unset" when unset or empty).
std::vector<JobSetting> numerics_environment();

// rank `b`'s settings against rank `a`'s, compared by name: nullopt when they are the same, else
// the first difference in `a`'s order ("rank 1's --batch-size is 32, rank 0's is 64"; a name only
// one side has counts as a difference), followed by the other differing names when there are any.
std::optional<std::string> describe_job_difference(int a, const std::vector<JobSetting>& a_settings,
                                                   int b,
                                                   const std::vector<JobSetting>& b_settings);

// Collective: compares `settings` plus numerics_environment() across the ranks and, when any rank
// differs from rank 0, throws RankMismatchError on every rank alike, naming the first differing
// setting with both ranks' values, the other differing settings and ranks, and `hint`. Cheap: one
// all-gather of a 64-bit digest per rank; the settings themselves travel only when digests differ.
// Call it before any collective whose sizes or count the settings decide.
void check_same_job(const std::vector<JobSetting>& settings, const std::string& hint);

}  // namespace mixprec::comm
