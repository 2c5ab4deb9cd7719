// Entry point of the `mixprec` tool: builds the subcommand table, parses, runs, and turns
// mixprec::Error into a message and exit status 1; a bad command line exits 2, whether CLI11
// refuses it (unknown option, unparsable or empty value) or a command's own validation does
// (cli::UsageError: a value out of range, an unknown choice, conflicting options). No option
// accepts an empty value: "" is an error, never "not given". Data parallel (under mpirun): an
// error names its rank and ends the whole group (MPI_Abort), since the other ranks may be waiting
// for this one in a collective; a rank-consistency mismatch, which every rank reaches, is printed
// once by rank 0.
#include <cstdio>
#include <string>
#include <vector>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/error.h"
#include "mixprec/version.h"

namespace mixprec::cli {

static std::vector<std::string> g_command_line;

const std::vector<std::string>& command_line() { return g_command_line; }

// Adds a check to every option of `cmd` that takes a value: the value must not be empty.
static void refuse_empty_values(CLI::App* cmd) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("expected a value, got an empty string") : std::string(); },
      "", "NonEmpty");
  for (CLI::Option* opt : cmd->get_options())
    if (opt->get_expected_min() > 0) opt->check(non_empty);
}

// Prints `e` and returns `status`; in a data-parallel run of several ranks, ends the group.
static int fail(const std::exception& e, int status) {
  namespace communication = mixprec::communication;
  const int ranks = communication::get_group_size();
  if (!communication::is_initialized() || ranks == 1) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    communication::release();
    return status;
  }
  const int rank = communication::get_rank();
  if (dynamic_cast<const mixprec::comm::RankMismatchError*>(&e)) {  // every rank is here
    if (rank == 0) std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    std::fflush(stderr);
    mixprec::comm::barrier();
    communication::release();
    return status;
  }
  std::fprintf(stderr, "mixprec: error (rank %d of %d): %s\n", rank, ranks, e.what());
  std::fflush(stderr);
  std::fflush(stdout);
  communication::abort_group(status);
}

}  // namespace mixprec::cli

int main(int argc, char** argv) {
  mixprec::cli::g_command_line.assign(argv, argv + argc);
  CLI::App app{"mixprec " MIXPREC_VERSION
               ": automatic mixed-precision (AMP) training of neural networks in C++.\n"
               "On this CPU bf16 is the fast low-precision type; f16 is emulated exactly\n"
               "(fp32 compute, every op output rounded to f16) and is not faster.",
               "mixprec"};
  app.require_subcommand(1);
  app.set_version_flag("--version", MIXPREC_VERSION);
  const std::vector<mixprec::cli::Command> commands{
      mixprec::cli::register_train(app),
      mixprec::cli::register_eval(app),
      mixprec::cli::register_inspect(app),
      mixprec::cli::register_bench(app),
      mixprec::cli::register_report(app),
      mixprec::cli::register_info(app),
  };
  for (const auto& c : commands) mixprec::cli::refuse_empty_values(c.app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version exit 0
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) {
        const int status = c.run();
        mixprec::communication::release();  // a data-parallel run leaves its group (all ranks get here)
        return status;
      }
  } catch (const mixprec::cli::UsageError& e) {
    return mixprec::cli::fail(e, 2);
  } catch (const std::exception& e) {
    return mixprec::cli::fail(e, 1);
  }
  return 0;
}
