// The mixprec CLI's subcommands. Each registers itself on the CLI11 app and returns the action
// to run when it is selected; main() parses, runs the chosen action and prints mixprec::Error.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mixprec::cli {

using Action = std::function<int()>;

struct Command {
  CLI::App* app;
  Action run;
};

// The command line as main() received it (argv[0] first), for messages that repeat it.
const std::vector<std::string>& command_line();

Command register_info(CLI::App& app);
Command register_train(CLI::App& app);
Command register_eval(CLI::App& app);
Command register_inspect(CLI::App& app);
Command register_bench(CLI::App& app);
Command register_report(CLI::App& app);
Command register_generate(CLI::App& app);

}  // namespace mixprec::cli
