// SIGINT/SIGTERM handling for `mixprec train` and the --resume command it prints (see
// train_signals.h). The handler is async-signal-safe: it stores to a lock-free atomic and, on the
// second signal, restores the default action and re-raises. A signal that was ignored when the
// process started (nohup, a background job of a non-interactive shell) is left ignored.
#include "train_signals.h"

#include <csignal>

#include <atomic>
#include <utility>

namespace mixprec::cli {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
struct sigaction g_old_int, g_old_term;

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) return;
  std::signal(sig, SIG_DFL);  // second signal: abort at once, as if there were no handler
  std::raise(sig);
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,+-@%") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out.append("'\\''");
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (auto [sig, old] : {std::pair{SIGINT, &g_old_int}, std::pair{SIGTERM, &g_old_term}}) {
    sigaction(sig, nullptr, old);
    if (old->sa_handler != SIG_IGN)
      sigaction(sig, &sa, nullptr);  // ignored at start (nohup, `cmd &`): stays so
  }
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::received() { return g_signal.load(); }

const char* StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

std::string resume_command(const std::vector<std::string>& args, const std::string& checkpoint) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--overwrite" || a.rfind("--resume=", 0) == 0) continue;
    if (a == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (!out.empty()) out.push_back(' ');
    out.append(shell_quote(a));
  }
  out.append(" --resume ").append(shell_quote(checkpoint));
  return out;
}

}  // namespace mixprec::cli
