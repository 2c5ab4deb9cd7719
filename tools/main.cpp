// Entry point of the `mixprec` tool: builds the subcommand table, parses, runs, and turns
// mixprec::Error into a message and exit status 1; a bad command line exits 2, whether CLI11
// refuses it (unknown option, unparsable or empty value) or a command's own validation does
// (cli::UsageError: a value out of range, an unknown choice, conflicting options). No option
// accepts an empty value: "" is an error, never "not given".
#include <cstdio>
#include <string>
#include <vector>

#include "cli_error.h"
#include "commands.h"
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
      if (c.app->parsed()) return c.run();
  } catch (const mixprec::cli::UsageError& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 2;
  } catch (const mixprec::Error& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
