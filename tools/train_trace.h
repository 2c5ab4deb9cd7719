// `mixprec train --trace FILE`: the per-step CSV (step, epoch, loss, scale, skipped, overflow,
// lr, casts, ...), streamed one flushed row per step. A resumed run continues the trace of the run
// it resumes: the header and the rows up to the resumed step are kept, later rows (written after
// the checkpoint by a run that then died) are cut off, and new rows are appended. When a write
// failed (a full disk), the checkpoint saved at the end stores the last step's row (kTraceRowKey;
// only then, so that a trace leaves the checkpoint byte-identical), and the resumed trace rewrites
// that step's row from it: a row cut short is replaced, not dropped. A failed write
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
  // trace at `path`, if any, is continued after step `resume_step`, whose row is `resume_row`
  // (the checkpoint's kTraceRowKey; "": keep the file's row).
  TraceWriter(const std::string& path, int64_t resume_step, const std::string& resume_row = "");
  void on_step_end(train::RunContext& c) override;
  void on_train_end(train::RunContext& c) override;
  bool may_lag() const override { return true; }  // writes the RunContext only
  // The write error that stopped training ("" if none).
  const std::string& error() const { return error_; }
  // The row of the last step, written or not (after a failed write a checkpoint stores it under
  // kTraceRowKey).
  const std::string& last_row() const { return last_row_; }
  static constexpr const char* kTraceRowKey = "cli.trace_row";

 private:
  std::unique_ptr<LineFile> file_;
  std::string error_;
  std::string last_row_;
};

}  // namespace mixprec::cli
