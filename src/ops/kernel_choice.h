// Measured kernel choice (dispatch's half is in dispatch.h): for a problem type that opts in
// (`static constexpr bool kMeasured = true`: the GEMMs and convolutions), when more than one CPU
// kernel accepts a problem, dispatch times each on the problem's own shapes (a warm-up run, then
// the best of 3, on fresh outputs, so the real outputs are written once) and keeps the fastest,
// like FFTW's wisdom or cudnn.benchmark. Choices are keyed by a signature (threads, op, phase,
// shapes, dtypes, strides), kept for the process, and persisted in a versioned cache file keyed by
// the CPU (model and features) and the library version: $MIXPREC_CACHE_DIR/kernels.json, else
// $XDG_CACHE_HOME/mixprec/, else ~/.cache/mixprec/. Writers merge under a lock and rename
// atomically (for a signature, the entry merged from more runs stands, else the first written);
// a corrupt file or one of another format or library version is ignored with a warning and
// rewritten.
// A measurement can be wrong the way timings are: too slow, never too fast (the machine was busy,
// a core was taken away, the page cache was cold), and a wrong choice would stand for every later
// run. So a choice is not trusted until kConfirmRuns processes have measured it: the first run
// that finds an unconfirmed choice in the file times the candidates again and keeps, for each, the
// best time of both runs (noise only ever adds time), then the kernel with the best of those.
// From then on the signature is never timed again on this machine. MIXPREC_KERNEL_CHOICE=
// measure-once trusts the first run's measurement instead.
// MIXPREC_KERNEL_CHOICE=first restores the fixed registration order (reproducible across
// machines); measure is the default, except in data-parallel runs, which keep the fixed order (the
// ranks must run the same kernels; each timing its own could choose differently). Every candidate
// keeps the AMP contract (inputs in their storage dtype, f32 accumulation, one rounding of each
// output), so a choice changes speed and the order of additions, never the contract.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixprec::ops {

enum class KernelChoice { first, measure };

// MIXPREC_KERNEL_CHOICE (first | measure | measure-once, default measure; measure-once measures
// as measure does; another value is an error naming the variable), unless a KernelChoiceScope on
// this thread says otherwise.
KernelChoice kernel_choice();

// Sets the choice mode for this thread while alive (tests; `first` for runs that must be
// reproducible whatever the machine).
class KernelChoiceScope {
 public:
  explicit KernelChoiceScope(KernelChoice mode);
  ~KernelChoiceScope();
  KernelChoiceScope(const KernelChoiceScope&) = delete;
  KernelChoiceScope& operator=(const KernelChoiceScope&) = delete;

 private:
  std::optional<KernelChoice> prev_;
};

namespace choice {

// One signature's choice: the kernel, and the seconds each candidate took (best of the runs;
// empty when it was pinned rather than measured).
struct Choice {
  std::string kernel;
  std::vector<std::pair<std::string, double>> seconds;
  bool pinned = false;
  int runs = 0;            // how many processes' timings `seconds` merges (a file without it: 1)
  bool from_file = false;  // lookup found it in the cache file, not in this process's table
  // Measured (here or by an earlier run) or pinned, rather than the only candidate.
  bool chosen() const { return pinned || !seconds.empty(); }
  // A measured choice from the file that another run must time again before it is trusted.
  bool to_confirm() const;
};
inline constexpr int kConfirmRuns = 2;
// How many runs a choice merges before it is trusted: kConfirmRuns, or 1 with
// MIXPREC_KERNEL_CHOICE=measure-once (the first run's measurement stands, so that every run on the
// machine takes the kernels the first one took: runs compared bit for bit from the first one).
int confirm_runs();
// `now`'s timings merged with `before`'s (the same signature, an earlier run): per candidate the
// best of both (candidates `now` did not time are left out), the kernel with the best time, runs
// added.
Choice merge_runs(const Choice& before, const Choice& now);

// The choice for `sig`: pinned first (pin), then this process's, then (unless with_file is false)
// the cache file's (read once).
std::optional<Choice> lookup(const std::string& sig, bool with_file = true);
// Records a measured choice for this process and merges it into the cache file.
void store(const std::string& sig, const Choice& c);
// Takes a choice read from the file into this process's table as it is (nothing written).
void adopt(const std::string& sig, const Choice& c);
// Choices that win over every other source (a resumed run's, from its checkpoint).
void pin(const std::map<std::string, std::string>& kernels);
// Every choice this process used, by signature (for reports and checkpoints).
std::map<std::string, Choice> used();
void note_used(const std::string& sig, const Choice& c);
// While alive, this thread's dispatches are left out of used(): work that is not the run's own
// (a measurement of the machine), so that a checkpoint records the same kernels whether or not
// its run did that work.
class UnrecordedScope {
 public:
  UnrecordedScope();
  ~UnrecordedScope();
  UnrecordedScope(const UnrecordedScope&) = delete;
  UnrecordedScope& operator=(const UnrecordedScope&) = delete;

 private:
  bool prev_;
};

// The cache file ("" when there is no home for it: then choices live for the process only).
std::string cache_path();
// The number of signatures this process has timed (a run with a warm cache times none).
int64_t measurements();
void count_measurement();
// Forgets this process's table, pins and counters; the next lookup reads the file again (tests).
void reset_for_testing();

// "[threads] op phase | problem" and the strides of its tensors: what a choice is keyed by.
std::string signature_prefix(std::string_view op, std::string_view phase);

}  // namespace choice
}  // namespace mixprec::ops
