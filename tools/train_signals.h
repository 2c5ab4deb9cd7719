// Graceful stop for `mixprec train` (and `generate`, which stops after the current byte): while a
// StopSignals is alive, the first SIGINT or SIGTERM only sets a flag (the handler does nothing
// else); the training loop sees it at the end of the current step and stops, and the command
// then saves what it was asked to save and exits with 128 + the signal (130, 143). A second
// signal ends the process at once, with the default action. A signal ignored when the process
// started (`nohup`, `cmd &` in a script) stays ignored, as the user or the shell asked. The flag
// is checked after training and again after each final phase (evaluation, checkpoint, report),
// so a signal that arrives while those run is not lost.
#pragma once

#include <string>
#include <vector>

namespace mixprec::cli {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (except for a signal that is ignored)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // 0, or the first signal received (SIGINT, SIGTERM).
  static int received();
  static const char* name(int signal);  // "SIGINT", "SIGTERM"
};

// `args` (a command line, argv[0] first) without any --resume/--overwrite, plus
// `--resume checkpoint`, quoted for a POSIX shell.
std::string resume_command(const std::vector<std::string>& args, const std::string& checkpoint);

}  // namespace mixprec::cli
