// Training-state checkpoints: everything needed to continue training bit for bit — the fp32
// weights and buffers (under their own names, so the file is also a deployable checkpoint that
// load_checkpoint / mixprec eval read), the optimizer's fp32 state and step count (the learning
// rate schedule's position), the loss-scaler state, the default RNG state and the position in
// the data order (epoch, next batch). Extra tensors live under "train_state/..." and the scalars
// in "__metadata__". Writes are crash-safe (io/safetensors.h). Data parallel: rank 0 alone
// writes (every rank holds the same state), every rank reads the file to resume, and a run
// resumes only with the number of ranks it was saved with ("data_parallel_ranks").
#pragma once

#include <filesystem>
#include <string>

#include "mixprec/io/safetensors.h"
#include "mixprec/train/callback.h"
#include "mixprec/train/model.h"

namespace mixprec::train {

inline constexpr const char* kTrainStatePrefix = "train_state/";

// Saves at the Model's current position (model.next_epoch(), next_batch(), global_step()).
// `extra` goes into the metadata (e.g. the command line that produced the run).
void save_training_state(const std::filesystem::path& path, Model& model, const io::Metadata& extra = {});

struct ResumeInfo {
  int64_t epoch = 0;        // the next epoch to run
  int64_t batch = 0;        // the next batch of that epoch
  int64_t global_step = 0;  // micro-batches trained so far
  io::Metadata metadata;    // everything stored, for callers that check their own fields
};

// Restores a state saved by save_training_state into `model` (whose network, loss, optimizer
// and options must be built the same way): weights, buffers, optimizer state and step, scaler
// state, default RNG, and the position. Throws naming the file and the mismatch otherwise, and
// naming the file and the field for a bad value (each parsed whole: counters and positions are
// integers in [0, 2^53], the loss scale finite and > 0) or for counters that disagree (skipped <=
// attempted <= global_step, batch and epoch <= global_step, consecutive <= total overflows);
// nothing is restored unless everything checks.
ResumeInfo load_training_state(const std::filesystem::path& path, Model& model);

// Saves the training state every `every_steps` steps (and at the end of training if
// `at_end`), to `path`.
class CheckpointSaver : public Callback {
 public:
  CheckpointSaver(std::filesystem::path path, int64_t every_steps, bool at_end = true,
                  io::Metadata extra = {});
  void on_step_end(RunContext& ctx) override;
  void on_train_end(RunContext& ctx) override;

 private:
  std::filesystem::path path_;
  int64_t every_;
  bool at_end_;
  io::Metadata extra_;
  int64_t last_saved_ = -1;
};

}  // namespace mixprec::train
