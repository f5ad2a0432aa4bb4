// `protondose phantom --plan FILE --out DIR [...]`: a CT series of a box
// phantom (water, or with slabs of other HU) in the plan's frame of reference,
// centred on its isocentres — to check a plan or the engine against a known geometry.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "command_registry.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/engine/phantom.h"

namespace {

struct PhantomArgs {
  std::string plan_path;
  std::string out_dir;
  std::vector<double> box_mm{200, 200, 200};
  double margin_mm = 20;
  double spacing_mm = 2;
  float box_hu = 0;
  std::vector<std::string> slabs;
};

void add_phantom(CLI::App& app, protondose::cli::CliContext& ctx) {
  auto a = std::make_shared<PhantomArgs>();
  CLI::App* cmd = app.add_subcommand("phantom", "Write a CT series of a box phantom around a plan's isocentres");
  cmd->add_option("--plan", a->plan_path, "RT Ion Plan whose frame of reference and isocentres to use")->required();
  cmd->add_option("--out", a->out_dir, "Folder for the CT series (created)")->required();
  cmd->add_option("--box", a->box_mm, "Box size along patient x y z (mm)")->expected(3)->capture_default_str();
  cmd->add_option("--margin", a->margin_mm, "Air around the box (mm)")->capture_default_str();
  cmd->add_option("--spacing", a->spacing_mm, "Voxel pitch (mm)")->capture_default_str();
  cmd->add_option("--hu", a->box_hu, "CT number of the box")->capture_default_str();
  cmd->add_option("--slab", a->slabs, "AXIS:FROM:TO:HU slab across the box, mm from its centre (repeatable)");
  cmd->callback([a, &ctx]() {
    const protondose::IonPlan plan = protondose::dicom::read_ion_plan(a->plan_path);
    protondose::engine::PhantomSpec spec;
    spec.box_size_mm = {a->box_mm[0], a->box_mm[1], a->box_mm[2]};
    spec.margin_mm = a->margin_mm;
    spec.spacing_mm = a->spacing_mm;
    spec.box_hu = a->box_hu;
    for (const std::string& s : a->slabs) spec.slabs.push_back(protondose::engine::parse_phantom_slab(s));
    const protondose::CtImage ct = protondose::engine::make_box_phantom(plan, spec);
    protondose::dicom::write_ct_series(ct, a->out_dir);
    if (!ctx.quiet)
      spdlog::info("phantom: {} x {} x {} voxels of {} mm written to {}", ct.hu.grid.size[0], ct.hu.grid.size[1],
                   ct.hu.grid.size[2], a->spacing_mm, a->out_dir);
  });
}

const protondose::cli::CommandRegistration kPhantomRegistration{"phantom", &add_phantom};

}  // namespace
