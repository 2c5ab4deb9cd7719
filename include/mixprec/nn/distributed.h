// nn::DistributedGradReducer (MindSpore's name): sums, or averages, gradients over the ranks of
// a data-parallel group. Gradients travel in buckets of about bucket_cap_mb (the first, holding
// the last layers, about first_bucket_mb, so it starts early); buckets are assigned in reverse
// parameter order (the order backward produces gradients) and always started in bucket order,
// the same on every rank. Packing a gradient into its bucket also scales it (by 1/degree for a
// mean) and checks it for inf/NaN, so the local finite flag costs no extra pass. The reduced
// gradients are views of the bucket buffers, in the all-reduce dtype (f32, or bf16). The buckets
// live where the parameters are when a reduction begins: on a GPU they are summed by NCCL on the
// device's stream, and packing does not check for inf/NaN there (local_finite() throws).
// Every call is collective: all ranks make the same calls in the same order.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mixprec/comm/collectives.h"
#include "mixprec/nn/cell.h"

namespace mixprec::nn {

// Where the time of the reductions went (all reductions since construction, this rank).
struct GradReducerStats {
  int64_t reductions = 0;
  int64_t bytes_per_reduction = 0;  // bytes this rank contributes to each all-reduce
  int buckets = 0;
  double pack_seconds = 0.0;        // packing gradients into buckets, with the finite check
  double wait_seconds = 0.0;        // blocked in finish() until every bucket had arrived
  double sync_seconds = 0.0;        // the train step's small collectives (flags, loss, statistics)
  int64_t buckets_started_early = 0;  // started during backward (before finish())
  int64_t buckets_done_early = 0;     // already complete when finish() was called
  int64_t bytes_done_early = 0;       // their bytes: the communication hidden behind backward
};

class DistributedGradReducer {
 public:
  // parameters: those the gradients belong to (optimizer.parameters()). mean: average instead of
  // sum (default: the context's gradients_mean); degree: the divisor of the mean (default: the
  // group size). Bucket sizes, the all-reduce dtype and overlap come from the parallel context.
  // Checks that every rank has the same parameters, bucket layout and context
  // (comm::check_same_job: RankMismatchError on every rank otherwise), then broadcasts the
  // parameters from rank 0, so every rank starts from the same weights.
  explicit DistributedGradReducer(std::vector<Tensor> parameters, std::optional<bool> mean = std::nullopt,
                                  std::optional<int> degree = std::nullopt);
  DistributedGradReducer(const DistributedGradReducer&) = delete;
  DistributedGradReducer& operator=(const DistributedGradReducer&) = delete;

  // The seed-style call: the reduced gradients, one per parameter (an undefined entry counts as
  // zeros), as new tensors shaped like the parameters.
  std::vector<Tensor> operator()(const std::vector<Tensor>& grads);

  // Overlapped use (the train step): begin(); ready(i, g) as soon as gradient i is final (from
  // autograd's on_capture_ready), which may start its bucket's all-reduce; finish(grads) packs
  // whatever was not reported (grads[i], or zeros when undefined), waits, and returns the result.
  void begin();
  void ready(size_t index, const Tensor& grad);
  std::vector<Tensor> finish(const std::vector<Tensor>& grads);

  // Whether every gradient of the last reduction was finite on this rank (before reducing).
  // Host buckets only: on a GPU the caller checks the gradients there.
  bool local_finite() const;
  const GradReducerStats& stats() const { return stats_; }
  void add_sync_seconds(double s) { stats_.sync_seconds += s; }
  DType dtype() const { return dtype_; }
  bool mean() const { return mean_; }
  int degree() const { return degree_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // in the order they are laid out
    int64_t numel = 0;
    int ready = 0;
  };
  void pack(size_t index, const Tensor& grad);
  void start_ready_buckets();
  void poll();
  // What every rank must agree on before the first collective: parameters, buckets, context.
  std::vector<comm::JobSetting> layout_settings() const;

  std::vector<Tensor> params_;
  bool mean_;
  int degree_;
  DType dtype_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, int64_t>> slot_;  // per parameter: (bucket, offset)
  // Per reduction.
  bool in_progress_ = false;
  bool local_bad_ = false;
  bool on_device_ = false;
  std::vector<Tensor> buffers_;
  std::vector<comm::PendingReduce> pending_;
  std::vector<char> packed_;
  size_t next_start_ = 0;
  GradReducerStats stats_;
};

// Rank 0's parameters and buffers into every rank's `cell` (in place).
void broadcast_cell(Cell& cell, int root = 0);
// Averages the floating buffers (BatchNorm running statistics) of `cell` over the ranks, so that
// every rank holds the same ones; integer buffers are left alone.
void all_reduce_buffers(Cell& cell);

}  // namespace mixprec::nn
