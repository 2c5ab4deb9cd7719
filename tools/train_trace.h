// `mixprec train --trace FILE`: the per-step CSV (step, epoch, loss, scale, skipped, overflow,
// lr, casts, ...), streamed one flushed row per step. A resumed run continues the trace of the run
// it resumes: the header and the rows up to the resumed step are kept, later rows (written after
// the checkpoint by a run that then died) are cut off, and new rows are appended. A failed write
// stops training after the current step (the checkpoint and report are still written) and the
// command then fails with the path and the reason.
#pragma once

#include <memory>
#include <string>

#include "mixprec/train/callback.h"
#include "output_file.h"

namespace mixprec::cli {

class TraceWriter : public train::Callback {
 public:
  // `resume_step` < 0: a fresh trace (the file is created or truncated). Otherwise the existing
  // trace at `path`, if any, is continued after step `resume_step`.
  TraceWriter(const std::string& path, int64_t resume_step);
  void on_step_end(train::RunContext& c) override;
  void on_train_end(train::RunContext& c) override;
  bool may_lag() const override { return true; }  // writes the RunContext only
  // The write error that stopped training ("" if none).
  const std::string& error() const { return error_; }

 private:
  std::unique_ptr<LineFile> file_;
  std::string error_;
};

}  // namespace mixprec::cli
