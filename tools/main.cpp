// Entry point of the `mixprec` tool: builds the subcommand table, parses, runs, and turns
// mixprec::Error into a message and exit status 1; a bad command line exits 2, whether CLI11
// refuses it (unknown option, unparsable or empty value) or a command's own validation does
// (cli::UsageError: a value out of range, an unknown choice, conflicting options). No option
// accepts an empty value: "" is an error, never "not given". Data parallel (under mpirun): an
// error names its rank and ends the whole group (MPI_Abort), since the other ranks may be waiting
// for this one in a collective; a rank-consistency mismatch, which every rank reaches, is printed
// once by rank 0. Before a command runs, every MIXPREC_* switch is checked (env.h); after it,
// stdout is flushed and checked, so output that never arrived (a full disk, /dev/full) is not exit
// 0.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli_error.h"
#include "commands.h"
#include "mixprec/comm/collectives.h"
#include "mixprec/comm/communication.h"
#include "mixprec/env.h"
#include "mixprec/error.h"
#include "mixprec/version.h"
#include "output_file.h"

namespace mixprec::cli {

static std::vector<std::string> g_command_line;

const std::vector<std::string>& command_line() { return g_command_line; }

// Adds a check to every option of `cmd` that takes a value: the value must not be empty.
static void refuse_empty_values(CLI::App* cmd) {
  const CLI::Validator non_empty(
      [](std::string& v) {
        return v.empty() ? std::string("expected a value, got an empty string") : std::string();
      },
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

// The number of single-character edits (insert, delete, replace, swap two neighbours) from a to b.
static size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The first argument, when it is neither an option nor a command, is refused with the closest
// command's name (CLI11 alone would say "A subcommand is required").
static void check_command_name(int argc, char** argv, const std::vector<Command>& commands) {
  std::string names;
  for (const Command& c : commands) names += (names.empty() ? "" : ", ") + c.app->get_name();
  const Hint commands_hint{"the commands are " + names + "; `mixprec --help` describes them"};
  const std::string_view first(argc < 2 ? "" : argv[1]);
  if (first == "--help" || first == "-h" || first == "--version") return;
  as_usage_error([&] {  // CLI11 alone would say "A subcommand is required"
    MIXPREC_CHECK(argc >= 2, "expected a command (mixprec COMMAND [options])", commands_hint);
    MIXPREC_CHECK(first[0] != '-', "unknown option '", first,
                  "' before the command: options follow it ", "(mixprec COMMAND --option)",
                  commands_hint);
  });
  const std::string_view given(argv[1]);
  std::string closest;
  size_t best = 3;  // suggest only within two edits
  for (const Command& c : commands) {
    if (c.app->get_name() == given) return;
    if (const size_t d = edit_distance(given, c.app->get_name()); d < best)
      best = d, closest = c.app->get_name();
  }
  as_usage_error([&] {
    MIXPREC_CHECK(false, "unknown command '", given, "'",
                  closest.empty() ? "" : "; did you mean " + closest + "?", commands_hint);
  });
}

}  // namespace mixprec::cli

int main(int argc, char** argv) {
  mixprec::cli::g_command_line.assign(argv, argv + argc);
  CLI::App app{
      "mixprec " MIXPREC_VERSION
      ": automatic mixed-precision (AMP) training of neural networks in C++.\n"
      "Which 16-bit type (bf16, f16) is faster on this machine, and by how much, is measured,\n"
      "not assumed: `mixprec info` prints the rates; `mixprec train --dtype auto` (the default)\n"
      "trains in the faster one.",
      "mixprec"};
  app.require_subcommand(1);
  app.set_version_flag("--version", MIXPREC_VERSION);
  const std::vector<mixprec::cli::Command> commands{
      mixprec::cli::register_train(app),   mixprec::cli::register_eval(app),
      mixprec::cli::register_inspect(app), mixprec::cli::register_bench(app),
      mixprec::cli::register_report(app),  mixprec::cli::register_generate(app),
      mixprec::cli::register_info(app),
  };
  for (const auto& c : commands) mixprec::cli::refuse_empty_values(c.app);
  try {
    mixprec::cli::check_command_name(argc, argv, commands);
  } catch (const mixprec::cli::UsageError& e) {
    return mixprec::cli::fail(e, 2);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (app.exit(e) != 0) return 2;
    try {
      mixprec::cli::flush_stdout();  // --help and --version exit 0 once they are written
    } catch (const std::exception& failed) {
      return mixprec::cli::fail(failed, 1);
    }
    return 0;
  }
  try {
    mixprec::env::check_environment();  // here, not at first use: that may be in a worker thread
    for (const auto& c : commands)
      if (c.app->parsed()) {
        const int status = c.run();
        if (status == 0)
          mixprec::cli::flush_stdout();
        else if (std::fflush(stdout) != 0 ||
                 std::ferror(stdout))  // the failure's own status stands
          std::fprintf(stderr, "mixprec: error: stdout: write failed: %s\n", std::strerror(errno));
        mixprec::communication::release();  // a data-parallel run leaves its group (all ranks get
                                            // here)
        return status;
      }
  } catch (const mixprec::cli::UsageError& e) {
    return mixprec::cli::fail(e, 2);
  } catch (const std::exception& e) {
    return mixprec::cli::fail(e, 1);
  }
  return 0;
}
