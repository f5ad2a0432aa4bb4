// `protondose inspect FILE|DIR [--json]`: what a physicist checks before
// computing — CT geometry and HU range, plan beams/layers/spots/MU, dose grid
// and maximum, structure set ROIs. Keys of --json: docs/formats/inspect-json.md.
#include <iostream>
#include <memory>
#include <string>

#include "command_registry.h"
#include "protondose/dicom/inspect.h"

namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

void add_inspect(CLI::App& app, protondose::cli::CliContext& ctx) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Summarise DICOM inputs (CT series, RT Ion Plan, RT Dose, RT Structure Set)");
  cmd->add_option("path", args->path, "A DICOM file or a folder (searched recursively)")->required();
  cmd->add_flag("--json", args->json, "Print JSON (docs/formats/inspect-json.md) instead of a table");
  cmd->callback([args, &ctx]() {
    const nlohmann::json summary = protondose::dicom::inspect_path(args->path);
    if (args->json)
      std::cout << summary.dump(2) << "\n";
    else
      std::cout << protondose::dicom::format_inspect_text(summary);
    // An object that could not be read, or a plan that could only be read
    // by relaxing a rule (see its warnings), is a failed check, not a crash:
    // everything is still shown, and exit code 1 says something needs a look.
    for (const auto& object : summary.at("objects"))
      if (object.contains("error") || object.value("computable", true) == false) ctx.exit_code = 1;
  });
}

const protondose::cli::CommandRegistration kInspectRegistration{"inspect", &add_inspect};

}  // namespace
