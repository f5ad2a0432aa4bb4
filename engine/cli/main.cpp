// protondose: the command-line application. Subcommands register themselves
// (command_registry.h); main() parses, runs, and turns exceptions into exit
// codes by category (docs/exit-codes.md). This is the only place that catches.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <iostream>

#include "command_registry.h"
#include "protondose/core/error.h"

namespace protondose::cli {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

}  // namespace protondose::cli

int main(int argc, char** argv) {
  using namespace protondose;
  CLI::App app{"protondose " PROTONDOSE_VERSION
               " - proton pencil-beam-scanning dose engine (DICOM in, DICOM out)"};
  app.set_version_flag("--version", std::string(PROTONDOSE_VERSION));
  app.require_subcommand(1);
  cli::CliContext ctx;
  app.add_flag("-q,--quiet", ctx.quiet, "No progress output; errors still go to stderr");

  auto& registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& entry : registry) entry.add(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a bad command line is a config error.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : exit_code(ErrorCategory::kConfig);
  } catch (const Error& e) {
    spdlog::error("[{}] {}", category_name(e.category()), e.what());
    return exit_code(e.category());
  } catch (const std::bad_alloc&) {
    spdlog::error("[io] out of host memory");
    return exit_code(ErrorCategory::kIo);
  } catch (const std::exception& e) {
    spdlog::error("[internal] {}", e.what());
    return exit_code(ErrorCategory::kInternal);
  }
  return ctx.exit_code;
}
