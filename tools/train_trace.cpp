// The --trace CSV writer (see train_trace.h).
#include "train_trace.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mixprec/error.h"

namespace mixprec::cli {
namespace {

constexpr const char* kHeader =
    "step,epoch,loss,scale,skipped,overflow,lr,casts,cast_bytes,low_flops_fraction,offending_op,"
    "phase,cell\n";

std::string csv_safe(std::string v) {
  for (char& ch : v)
    if (ch == ',' || ch == '\n' || ch == '"') ch = ' ';
  return v;
}

// The bytes of an existing trace to keep when resuming after `step`: the header and the complete
// rows whose step is <= `step` (< `step` when `replace_last`: that row is rewritten). -1 when there
// is no file, or it is not a regular file (a pipe, /dev/stdout): start a new trace.
int64_t bytes_to_keep(const std::string& path, int64_t step, bool replace_last) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return -1;
  std::ifstream in(path, std::ios::binary);
  MIXPREC_CHECK(in.good(), "--trace ", path, ": cannot read the trace to continue it");
  std::string line;
  const bool has_header = std::getline(in, line) && line + "\n" == kHeader && !in.eof();
  MIXPREC_CHECK(has_header, "--trace ", path,
                ": the file exists but does not start with mixprec's trace header; "
                "a resumed run continues its trace there",
                Hint{"pass the trace file of the run you resume, or another path"});
  int64_t keep = static_cast<int64_t>(line.size()) + 1;
  while (std::getline(in, line) && !in.eof()) {  // eof: the last line has no newline (cut short)
    long long row_step = 0;
    std::istringstream fields(line);
    if (!(fields >> row_step) || fields.peek() != ',' || row_step > step ||
        (replace_last && row_step == step))
      break;
    keep += static_cast<int64_t>(line.size()) + 1;
  }
  return keep;
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, int64_t resume_step,
                         const std::string& resume_row) {
  const bool replace = !resume_row.empty() &&
                       resume_row.rfind(std::to_string(resume_step) + ",", 0) == 0 &&
                       resume_row.back() == '\n';
  const int64_t keep = resume_step >= 0 ? bytes_to_keep(path, resume_step, replace) : -1;
  file_ = std::make_unique<LineFile>(path, "--trace", keep >= 0, keep);
  if (keep < 0) file_->write(kHeader);
  if (keep >= 0 && replace) file_->write(resume_row);
}

void TraceWriter::on_step_end(train::RunContext& c) {
  const amp::StepInfo& s = c.step;
  std::ostringstream row;
  row << c.global_step << ',' << c.epoch + 1 << ',' << s.loss << ',' << s.loss_scale << ','
      << (s.skipped ? 1 : 0) << ',' << (s.overflow ? 1 : 0) << ',' << s.lr << ',' << s.casts << ','
      << s.cast_bytes << ',' << s.low_flops_fraction << ',' << (s.event ? s.event->op_name : "")
      << ',' << (s.event ? s.event->phase : "") << ',' << (s.event ? csv_safe(s.event->cell) : "")
      << '\n';
  last_row_ =
      row.str();  // after a failed write too: the checkpoint stores it for the resumed trace
  if (!error_.empty()) return;
  try {
    file_->write(last_row_);
  } catch (const Error& e) {
    error_ = e.message();
    c.stop_requested = true;
  }
}

void TraceWriter::on_train_end(train::RunContext&) {
  if (!error_.empty()) return;
  try {
    file_->close();
  } catch (const Error& e) {
    error_ = e.message();
  }
}

}  // namespace mixprec::cli
