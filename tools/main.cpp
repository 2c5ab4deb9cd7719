// Entry point of the `mixprec` tool: builds the subcommand table, parses, runs, and turns
// mixprec::Error into a message and exit status 1 (2 for command-line usage errors).
#include <cstdio>
#include <vector>

#include "commands.h"
#include "mixprec/error.h"
#include "mixprec/version.h"

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const mixprec::Error& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
