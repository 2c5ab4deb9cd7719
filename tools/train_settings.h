// The settings of `mixprec train`: the parsed options, their validation (a nonsensical value is
// refused before anything runs), and the settings that decide a run's trajectory, which every
// checkpoint records and a --resume must match exactly (numbers compared as numbers, at full
// precision), with a message naming the option, the stored value and the new one; and the
// settings every rank of a data-parallel run must share (job_settings).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/comm/collectives.h"
#include "mixprec/io/safetensors.h"
#include "train_common.h"

namespace mixprec::cli {

// The model's own settings (data, batch size, optimizer, warm-up, clipping, AMP level) start
// empty: apply_model_defaults (zoo_recipe.h) fills each one the command line did not give from
// the model's registry row (nn::zoo()).
struct TrainArgs {
  std::string model = "simplenet";
  std::string data;
  int64_t epochs = 2;
  int64_t max_steps = -1;
  int64_t batch_size = 0;
  int64_t train_samples = -1;
  OptimizerSpec opt;
  double warmup_fraction = 0.0;  // > 0: warm-up over this share of the planned updates (not a flag)
  double max_grad_norm = 0.0;    // > 0: clip by global norm (TrainStepOptions::max_grad_norm)
  int64_t accumulation_steps =
      1;  // micro-batches per update (TrainStepOptions::accumulation_steps)
  uint64_t seed = 1;
  int threads = 0;
  std::string device = "cpu";     // --device (train_common.h, use_device)
  std::string mode = "pynative";  // execution mode: pynative (eager) | graph (set_context)
  std::string amp_level;
  bool amp_level_given = false;  // --amp-level was on the command line (a custom list replaces it)
  // Custom mixed precision (amp::custom_mixed_precision), comma-separated names; at most one.
  std::string white_list, black_list;
  bool custom_lists() const { return !white_list.empty() || !black_list.empty(); }
  std::string dtype = "auto";  // auto | bf16 | f16 (auto: resolved by measuring, train's parse())
  std::string keep_bn = "default";
  std::string loss_scale = "default";
  std::string report, checkpoint, trace, resume;
  bool overwrite = false;
  bool allow_nonfinite_weights = false;  // --resume a checkpoint whose tensors hold NaN/inf
  int64_t save_every = 0;
  bool show_precision = false;
  bool no_eval = false;
  bool eval_every_epoch = true;
  bool check_numerics = false;
  std::string on_overflow = "warn";
  int64_t grad_stats_every = 0;
  double max_skip_rate = 0.05;
  int64_t print_every = 100;
  // Data parallel (under mpirun).
  int64_t check_ranks = 0;                   // compare the ranks' state every N steps (0: off)
  std::string grad_allreduce_dtype = "f32";  // f32 | bf16
  bool grad_overlap = true;                  // start all-reduces during backward
  double grad_bucket_mb = 25.0;              // all-reduce bucket size
};

// Throws naming the option for a value out of its range, an unknown choice (--amp-level,
// --dtype, --loss-scale, --keep-batchnorm-fp32) or a combination that makes no sense
// (--save-every without --checkpoint, a --checkpoint that exists in a fresh run without
// --overwrite, a --resume file that does not exist). The caller makes these usage errors.
void validate(const TrainArgs& a);

// The names of a comma-separated --white-list / --black-list ("" for none: an empty list).
std::vector<std::string> split_list(const std::string& list);

// The settings that change the trajectory, as checkpoint metadata ("cli.<name>").
io::Metadata trajectory_settings(const TrainArgs& a, int threads);  // threads: the count in use

// Refuses a resume whose settings differ from the stored ones, naming the option and both values.
// `threads` is informational: a different thread count only prints a note.
void check_same_settings(const io::Metadata& stored, const io::Metadata& now,
                         const std::string& resume);

// What every rank of a data-parallel run must share, each named by its flag: the settings a
// --resume compares (without --threads), the run's length, the data-parallel options, the
// options that decide collective calls (--check-ranks, evaluation, --on-overflow, --resume) and
// the data's identity ("--data" normalised, and its size in bytes). Outputs are rank 0's alone.
std::vector<comm::JobSetting> job_settings(const TrainArgs& a);

}  // namespace mixprec::cli
