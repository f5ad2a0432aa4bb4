#pragma once
/// \file command_registry.h
/// Subcommands of `protondose` register themselves here, one file each
/// (cli/<name>_command.cpp), so main.cpp never changes when one is added:
///
///   namespace { const protondose::cli::CommandRegistration kReg{"inspect", &add_inspect}; }
///
/// add_X(app, ctx) creates the CLI11 subcommand and its callback. Callbacks
/// throw protondose::Error on failure (main maps the category to the exit
/// code) and may set ctx.exit_code (e.g. 1 when a requested check failed).

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace protondose::cli {

/// State shared between main() and the subcommand callbacks.
struct CliContext {
  int exit_code = 0;   ///< set by a callback for non-error outcomes (1 = check failed)
  bool quiet = false;  ///< --quiet: no progress or summaries on the terminal
};

using AddCommand = std::function<void(CLI::App& app, CliContext& ctx)>;

struct CommandEntry {
  std::string name;
  AddCommand add;
};

/// All registered subcommands, in registration order.
std::vector<CommandEntry>& command_registry();

/// Registers a subcommand at static-initialisation time.
struct CommandRegistration {
  CommandRegistration(std::string name, AddCommand add) {
    command_registry().push_back({std::move(name), std::move(add)});
  }
};

}  // namespace protondose::cli
