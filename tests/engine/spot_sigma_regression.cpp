// Lateral spread of one spot in water against the MCsquare reference
// (shared/reference/dcpt-v5-water-sigma): the core σ of the projected lateral
// profile vs depth, for 100, 150 and 200 MeV, with the nuclear halo switched
// off so the engine's profile is its core Gaussian (the MC fit follows the core).
// Criterion (shared/docs/physics-and-method.md §3): within 0.2 mm or 5 %.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/hu_curve.h"
#include "reference_case.h"

namespace pe = protondose::engine;
namespace pt = protondose::engine::testing;
using protondose::Grid3;
using protondose::Volume;

namespace {

struct SigmaRow {
  double depth_mm, sigma_x_mm, sigma_y_mm;
};

std::vector<SigmaRow> read_mc_sigma(int energy) {
  char name[96];
  std::snprintf(name, sizeof name, "/dcpt-v5-water-sigma/sigma_E%03d.csv", energy);
  std::ifstream in(pt::reference_dir() + name);
  std::string line;
  std::getline(in, line);
  std::vector<SigmaRow> rows;
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string depth, note, sx, sy;
    std::getline(s, depth, ',');
    std::getline(s, note, ',');
    std::getline(s, sx, ',');
    std::getline(s, sy, ',');
    if (note == "peak") continue;
    rows.push_back({std::stod(depth), std::stod(sx), std::stod(sy)});
  }
  return rows;
}

/// Water from y = 0 (the isocentre plane, as in the MC) to y = 360 mm; 1 mm voxels laterally over ±40 mm.
protondose::CtImage water_tank() {
  protondose::CtImage ct;
  Grid3 g;
  g.size = {81, 181, 81};
  g.spacing_mm = {1, 2, 1};
  g.origin_mm = {-40, -1, -40};  // y voxel faces at −2, 0, 2, …: the surface at y = 0
  ct.hu = Volume<float>(g, 0.0f);
  for (int k = 0; k < 81; ++k)
    for (int i = 0; i < 81; ++i) ct.hu.at(i, 0, k) = -1000.0f;
  ct.patient_position = "HFS";
  return ct;
}

/// σ of the profile along one axis at output row j: a Gaussian core fit as in the
/// MC table — iterated rms restricted to |u − μ| ≤ 2.5 σ, corrected for the truncation.
double core_sigma_mm(const Volume<float>& d, int j, int axis) {
  const int n = d.grid.size[axis == 0 ? 0 : 2];
  std::vector<double> p(static_cast<std::size_t>(n), 0.0);
  for (int k = 0; k < d.grid.size[2]; ++k)
    for (int i = 0; i < d.grid.size[0]; ++i) p[static_cast<std::size_t>(axis == 0 ? i : k)] += d.at(i, j, k);
  double sigma = 5, mu = 0;
  for (int it = 0; it < 30; ++it) {
    double s0 = 0, s1 = 0, s2 = 0;
    for (int u = 0; u < n; ++u) {
      const double x = u - (n - 1) / 2.0;
      if (std::abs(x - mu) > 2.5 * sigma) continue;
      s0 += p[static_cast<std::size_t>(u)];
      s1 += p[static_cast<std::size_t>(u)] * x;
      s2 += p[static_cast<std::size_t>(u)] * x * x;
    }
    mu = s1 / s0;
    // Variance of a Gaussian truncated at ±2.5σ is 0.9189 σ² (sampled on 1 mm voxels).
    sigma = std::sqrt(std::max(s2 / s0 - mu * mu, 1e-6) / 0.9189);
  }
  return sigma;
}

}  // namespace

TEST(SpotSigmaRegression, CoreSigmaVersusDepthFollowsMonteCarlo) {
  const protondose::CtImage ct = water_tank();
  protondose::IonPlan plan;
  plan.label = "single spot";
  protondose::IonBeam b;
  b.number = 1;
  b.machine_name = "DCPT_ProBeam_v5";
  protondose::EnergyLayer layer;
  layer.spots.push_back({0, 0, 1.0});
  b.layers.push_back(layer);
  plan.beams.push_back(b);
  pe::DoseEngineOptions o;
  o.nuclear_halo = false;
  o.spot_size_policy = protondose::physics::SpotSizePolicy::kBeamModel;
  // The Monte Carlo's own calibration (HU 0 -> water), named: the comparison must
  // not depend on which curve is the default.
  const pe::DoseEngine engine(protondose::physics::load_machine("DCPT_ProBeam_v5"),
                              protondose::physics::monte_carlo_reference_hu_curve(), o);
  int compared = 0;
  for (int energy : {100, 150, 200}) {
    plan.beams[0].layers[0].nominal_energy_mev = energy;
    const pe::DoseResult r = engine.compute(ct, plan);
    const auto mc = read_mc_sigma(energy);
    double worst_mm = 0;
    for (const SigmaRow& row : mc) {
      const int j = static_cast<int>(std::lround((row.depth_mm + 1) / 2.0));  // voxel centre y = 2j − 1
      if (j < 1 || j >= r.dose_gy.grid.size[1]) continue;
      const double sx = core_sigma_mm(r.dose_gy, j, 0), sy = core_sigma_mm(r.dose_gy, j, 2);
      const double dx = sx - row.sigma_x_mm, dy = sy - row.sigma_y_mm;
      worst_mm = std::max({worst_mm, std::abs(dx), std::abs(dy)});
      if (static_cast<int>(row.depth_mm) % 25 == 0 || row.depth_mm < 1)
        std::printf("  %d MeV depth %5.1f mm: sigma x %.3f (MC %.3f), y %.3f (MC %.3f)\n", energy, row.depth_mm, sx,
                    row.sigma_x_mm, sy, row.sigma_y_mm);
      EXPECT_LE(std::abs(dx), std::max(0.2, 0.05 * row.sigma_x_mm)) << energy << " MeV, depth " << row.depth_mm;
      EXPECT_LE(std::abs(dy), std::max(0.2, 0.05 * row.sigma_y_mm)) << energy << " MeV, depth " << row.depth_mm;
      ++compared;
    }
    std::printf("%d MeV: worst |sigma - sigma_MC| = %.3f mm\n", energy, worst_mm);
  }
  EXPECT_GE(compared, 60);
}
