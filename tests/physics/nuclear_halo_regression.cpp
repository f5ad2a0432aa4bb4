// Both nuclear-halo models against the MCsquare reference for the DCPT ProBeam
// (shared/reference/dcpt-v5-water-idd and dcpt-v5-water-sigma), per energy:
//   (a) the fraction of the integrated depth dose outside centred squares of
//       40, 80 and 120 mm (idd_lateral_containment.csv);
//   (b) the dose-weighted rms of the projected lateral profile over the MC's
//       160 mm box (sigma_E???.csv, rms_x_mm / rms_y_mm: core + halo).
// The core is the MC's own core fit (sigma_x_mm, sigma_y_mm), so only the
// halo model differs. Writes test-output/nuclear_halo_vs_mc.csv and prints the
// per-energy summary quoted in docs/validation/nuclear-halo.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "csv_fields.h"
#include "protondose/physics/nuclear_halo.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {
namespace {

const auto split = protondose::testing::split_csv_line;

const std::string kReference = std::string(PROTONDOSE_SHARED_DIR) + "/reference/";

// Mean energy of the DCPT v5 model at the nozzle (shared/reference/README.md,
// IDD table) and the energy at the water surface after the 600 mm of air that
// MCsquare crosses without scattering (air WET: 1.20479e-3 g/cm³ × 0.884).
double surface_energy_mev(int nominal_mev) {
  const std::map<int, double> mean = {{70, 70.138449}, {100, 100.1674}, {150, 150.1419}, {200, 200.0842},
                                      {230, 230.0429}};
  return residual_energy_mev(mean.at(nominal_mev), 600.0 * 1.20479e-3 * 0.884);
}

struct SigmaRow {
  double depth_mm, sigma_x_mm, sigma_y_mm, rms_x_mm, rms_y_mm;
};

std::vector<SigmaRow> read_sigma(int e) {
  std::ostringstream name;
  name << kReference << "dcpt-v5-water-sigma/sigma_E" << std::setw(3) << std::setfill('0') << e << ".csv";
  std::ifstream in(name.str());
  std::string line;
  std::getline(in, line);
  std::vector<SigmaRow> rows;
  while (std::getline(in, line)) {
    const auto f = split(line);
    rows.push_back({std::stod(f[0]), std::stod(f[2]), std::stod(f[3]), std::stod(f[4]), std::stod(f[5])});
  }
  return rows;
}

// Core σ (x, y) of the MC at a depth, linear between the table's rows.
std::pair<double, double> core_at(const std::vector<SigmaRow>& rows, double depth_mm) {
  for (std::size_t i = 1; i < rows.size(); ++i)
    if (rows[i].depth_mm >= depth_mm) {
      const double u = (depth_mm - rows[i - 1].depth_mm) / (rows[i].depth_mm - rows[i - 1].depth_mm);
      return {rows[i - 1].sigma_x_mm + u * (rows[i].sigma_x_mm - rows[i - 1].sigma_x_mm),
              rows[i - 1].sigma_y_mm + u * (rows[i].sigma_y_mm - rows[i - 1].sigma_y_mm)};
    }
  return {rows.back().sigma_x_mm, rows.back().sigma_y_mm};
}

// Zeroth and second moments of a unit Gaussian of σ s truncated to |u| ≤ a.
std::pair<double, double> truncated_moments(double s, double a) {
  const double m0 = std::erf(a / (std::sqrt(2.0) * s));
  const double phi = std::exp(-0.5 * (a / s) * (a / s)) / std::sqrt(2.0 * M_PI);
  return {m0, s * s * (m0 - 2.0 * (a / s) * phi)};
}

// rms of (1 − W) N(σc) + W N(σh) over |u| ≤ a, mm.
double box_rms_mm(double w, double sigma_core_mm, double sigma_halo_mm, double half_box_mm) {
  const auto c = truncated_moments(sigma_core_mm, half_box_mm);
  const auto h = truncated_moments(sigma_halo_mm, half_box_mm);
  return std::sqrt(((1 - w) * c.second + w * h.second) / ((1 - w) * c.first + w * h.first));
}

struct Summary {
  int points = 0;
  double worst_rms_mm = 0, worst_rms_depth_mm = 0, worst_rms_mc_mm = 1;  ///< largest |Δ| / rms_MC
  double worst_outside40_ratio = 1, worst_outside40_depth_mm = 0;
};

TEST(NuclearHaloRegression, BothModelsAgainstMonteCarloContainmentAndRms) {
  std::ofstream csv(std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/nuclear_halo_vs_mc.csv");
  csv << "model,energy_MeV,quantity,depth_mm,weight,sigma_halo_x_mm,model_value,mc_value\n";
  std::map<std::pair<HaloModel, int>, Summary> summary;
  std::vector<std::vector<std::string>> containment;
  {
    std::ifstream in(kReference + "dcpt-v5-water-idd/idd_lateral_containment.csv");
    ASSERT_TRUE(in.good());
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) containment.push_back(split(line));
  }
  ASSERT_GE(containment.size(), 80u);
  for (HaloModel model : {HaloModel::kSoukup2005, HaloModel::kMcsquareFit}) {
    const char* name = halo_model_name(model);
    for (int e : {70, 100, 150, 200, 230}) {
      const NuclearHalo halo(surface_energy_mev(e), model);
      const auto rows = read_sigma(e);
      ASSERT_GE(rows.size(), 9u) << e;
      Summary& s = summary[{model, e}];
      // (a) containment at 1/4, 1/2, 3/4 and 1 × the peak depth.
      for (const auto& f : containment) {
        if (std::stoi(f[0]) != e || std::stod(f[2]) < 0.2) continue;
        const double depth = std::stod(f[1]);
        const auto [sx, sy] = core_at(rows, depth);
        const double w = halo.weight_fraction(depth);
        const double hx = halo.sigma_with_core_mm(depth, sx), hy = halo.sigma_with_core_mm(depth, sy);
        for (const auto& [half_width, column] : {std::pair<double, int>{20.0, 3}, {40.0, 4}, {60.0, 5}}) {
          auto inside = [&](double sigma) { return std::erf(half_width / (std::sqrt(2.0) * sigma)); };
          const double model_out = 1.0 - ((1.0 - w) * inside(sx) * inside(sy) + w * inside(hx) * inside(hy));
          const double mc_out = std::stod(f[static_cast<std::size_t>(column)]);
          csv << name << ',' << e << ",outside_" << 2 * half_width << "mm," << depth << ',' << w << ',' << hx << ','
              << model_out << ',' << mc_out << '\n';
          if (half_width == 20.0 && mc_out > 0.002) {
            const double ratio = model_out / mc_out;
            if (std::abs(std::log(ratio)) > std::abs(std::log(s.worst_outside40_ratio)))
              s.worst_outside40_ratio = ratio, s.worst_outside40_depth_mm = depth;
          }
        }
      }
      // (b) rms over the 160 mm box at every MC depth, both axes.
      for (const SigmaRow& r : rows) {
        const double w = halo.weight_fraction(r.depth_mm);
        for (int axis = 0; axis < 2; ++axis) {
          const double core = axis == 0 ? r.sigma_x_mm : r.sigma_y_mm;
          const double mc = axis == 0 ? r.rms_x_mm : r.rms_y_mm;
          const double model_rms = box_rms_mm(w, core, halo.sigma_with_core_mm(r.depth_mm, core), 80.0);
          csv << name << ',' << e << ",rms_160mm_" << (axis == 0 ? 'x' : 'y') << ',' << r.depth_mm << ',' << w << ','
              << halo.sigma_with_core_mm(r.depth_mm, core) << ',' << model_rms << ',' << mc << '\n';
          if (std::abs(model_rms - mc) / mc > std::abs(s.worst_rms_mm) / s.worst_rms_mc_mm)
            s.worst_rms_mm = model_rms - mc, s.worst_rms_depth_mm = r.depth_mm, s.worst_rms_mc_mm = mc;
          ++s.points;
        }
      }
    }
  }
  std::printf("| model | E (MeV) | rms points | worst rms(model) - rms(MC), where | worst outside-40 mm ratio model/MC, where |\n");
  for (const auto& [key, s] : summary)
    std::printf("| %s | %d | %d | %+.2f mm at %.1f mm (MC %.2f mm) | %.2f at %.1f mm |\n", halo_model_name(key.first),
                key.second, s.points, s.worst_rms_mm, s.worst_rms_depth_mm, s.worst_rms_mc_mm,
                s.worst_outside40_ratio, s.worst_outside40_depth_mm);
  // Stated tolerances (docs/validation/nuclear-halo.md). The fit follows the
  // MC: rms within 12 % of the MC's at every depth (worst 10.5 %, 230 MeV at
  // 40 mm). The published Soukup halo is narrower than MCsquare's (it
  // was fitted to another Monte Carlo): rms within 35 % (worst 33 %), and it must stay
  // narrower than the MC's somewhere mid-range from 150 MeV up by more than
  // 0.5 mm (the documented finding; if it stops being true the page is wrong).
  for (const auto& [key, s] : summary) {
    const std::string where = std::string(halo_model_name(key.first)) + " " + std::to_string(key.second) + " MeV";
    EXPECT_GE(s.points, 18) << where;
    const double relative = std::abs(s.worst_rms_mm) / s.worst_rms_mc_mm;
    if (key.first == HaloModel::kMcsquareFit) {
      EXPECT_LE(relative, 0.12) << where;
    } else {
      EXPECT_LE(relative, 0.35) << where;
      if (key.second >= 150) {
        EXPECT_LT(s.worst_rms_mm, -0.5) << where;
      }
    }
  }
}

}  // namespace
}  // namespace protondose::physics
