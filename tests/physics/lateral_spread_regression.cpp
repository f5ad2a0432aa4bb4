// Lateral spread σ(z) of a single spot in water: in-air optics (emittance
// model, spot_optics.h) composed with Fermi–Eyges multiple Coulomb scattering
// in water (scattering.h), σ² = σ_air²(z) + A2(z), against the MCsquare core-σ
// fits of shared/reference/dcpt-v5-water-sigma (docs/validation/lateral-spread.md);
// and the same core with a nuclear halo, its whole profile fitted the way the
// MC's core σ was (lateral_profile.h). Requirement (shared/docs/physics-and-method.md §3): |Δσ| ≤ max(0.2 mm, 5 %)
// from the surface to the Bragg peak, for 70/100/150/200/230 MeV.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "csv_fields.h"
#include "protondose/physics/depth_dose.h"
#include "protondose/physics/lateral_profile.h"
#include "protondose/physics/materials.h"
#include "protondose/physics/nuclear_halo.h"
#include "protondose/physics/range_energy.h"
#include "protondose/physics/scattering.h"
#include "protondose/physics/spot_optics.h"

namespace protondose::physics {
namespace {

constexpr double kNozzleToIsocentreMm = 600.0;  // reference README: phase space 600 mm upstream
constexpr double kStepMm = 0.5;

struct SpotRow {
  double mean_energy_mev = 0.0;
  AxisEmittance x;
  AxisEmittance y;
};

const auto split = protondose::testing::split_csv_line;

std::map<std::string, std::size_t> header_index(const std::string& header) {
  std::map<std::string, std::size_t> index;
  const auto names = split(header);
  for (std::size_t i = 0; i < names.size(); ++i) index[names[i]] = i;
  return index;
}

SpotRow read_spot_model(int nominal_energy_mev) {
  const std::string path = std::string(PROTONDOSE_SHARED_DIR) + "/reference/spot_model_DCPT_ProBeam_v5.csv";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  std::getline(in, line);
  auto col = header_index(line);
  while (std::getline(in, line)) {
    const auto f = split(line);
    if (std::lround(std::stod(f[col.at("nominal_energy_MeV")])) != nominal_energy_mev) continue;
    SpotRow r;
    r.mean_energy_mev = std::stod(f[col.at("mean_energy_MeV")]);
    r.x = {std::stod(f[col.at("sigma_x_600_mm")]), std::stod(f[col.at("sigma_xp_rad")]),
           std::stod(f[col.at("corr_xxp")])};
    r.y = {std::stod(f[col.at("sigma_y_600_mm")]), std::stod(f[col.at("sigma_yp_rad")]),
           std::stod(f[col.at("corr_yyp")])};
    return r;
  }
  ADD_FAILURE() << "no row for " << nominal_energy_mev << " MeV in " << path;
  return {};
}

struct ReferenceSigma {
  double depth_mm;
  double sigma_x_mm;
  double sigma_y_mm;
};

std::vector<ReferenceSigma> read_reference(int e) {
  std::ostringstream name;
  name << PROTONDOSE_SHARED_DIR << "/reference/dcpt-v5-water-sigma/sigma_E" << std::setw(3) << std::setfill('0')
       << e << ".csv";
  std::ifstream in(name.str());
  EXPECT_TRUE(in.good()) << name.str();
  std::string line;
  std::getline(in, line);
  auto col = header_index(line);
  std::vector<ReferenceSigma> rows;
  while (std::getline(in, line)) {
    const auto f = split(line);
    rows.push_back({std::stod(f[col.at("depth_mm")]), std::stod(f[col.at("sigma_x_mm")]),
                    std::stod(f[col.at("sigma_y_mm")])});
  }
  return rows;
}

struct EnergyResult {
  int energy_mev = 0;
  double worst_ratio = 0.0;  // |Δ| / tolerance, worst over depths and axes
  double worst_delta_mm = 0.0;
  double worst_depth_mm = 0.0;
  char worst_axis = 'x';
  std::size_t rows = 0;
  double sigma_mcs_last_mm = 0.0;
  double largest_fit_widening_mm = 0.0;  // σ_model − σ_core, largest over depths (0 without a halo)
};

// What is compared with the MC core σ: the core Gaussian alone (in-air optics
// ⊕ Fermi–Eyges MCS), or — with a halo model — the core σ that the MC's own
// analysis would fit to the model's whole profile, core + nuclear halo
// (lateral_profile.h: a Gaussian least-squares fitted within ±2.5σ, iterated).
// Candidate variants of the Fermi–Rossi scattering power, tried for the
// record (docs/validation/lateral-spread.md) and not offered by scattering.h:
// each multiplies the kFermiRossiHighland A2(z) by a factor.
enum class FermiRossiVariant {
  kNone,
  // Rossi & Greisen, Rev Mod Phys 13:240 (1941): E_s = 21.2 MeV for the space
  // angle, 21.2/√2 = 15.0 MeV projected: factor (15.0/14.1)².
  kRossiGreisenEs15,
  // Highland, NIM 129:497 (1975), with his logarithmic term evaluated over the
  // whole path to the depth z, as in the generalised Highland formula for thick
  // targets (Gottschalk et al., NIM B 74:467, 1993): factor (1 + lg(z/X0)/9)².
  kHighlandLogOverWholePath,
  // Lynch & Dahl, NIM B 58:6 (1991) (the PDG form): 13.6 MeV and
  // 1 + 0.038 ln(z/(X0 β²)) over the whole path, β at the surface:
  // factor (13.6/14.1)² (1 + 0.038 ln(z/(X0 β²)))².
  kLynchDahlLogOverWholePath,
  // MCsquare's own multiple scattering (its source, e0404/MCsquare:
  // compute_EM_interaction.h CONST_MS_Fippel = 18.3 MeV, "tuned by Sheng Huang
  // at UPenn"; compute_hadron.c samples it as a Gaussian polar angle with a
  // uniform azimuth, so the projected width is θ0/√2): E_s = 18.3/√2 = 12.94 MeV
  // projected, factor (12.94/14.1)², assuming MCsquare's water X0 is 36.08 g/cm².
  // An emulation of the reference code, not a model to adopt.
  kMcsquareGaussianEs,
};

const char* fermi_rossi_variant_name(FermiRossiVariant v) {
  switch (v) {
    case FermiRossiVariant::kNone: return "";
    case FermiRossiVariant::kRossiGreisenEs15: return "-rossi-greisen-15.0";
    case FermiRossiVariant::kHighlandLogOverWholePath: return "-highland-log-whole-path";
    case FermiRossiVariant::kLynchDahlLogOverWholePath: return "-lynch-dahl-log-whole-path";
    case FermiRossiVariant::kMcsquareGaussianEs: return "-mcsquare-12.94";
  }
  return "-unknown";
}

double fermi_rossi_variant_factor(FermiRossiVariant v, double depth_mm, double surface_energy_mev) {
  constexpr double kHighlandEsMev = 14.1;
  const double thickness_x0 = std::max(depth_mm, 0.5) / 10.0 / kWaterRadiationLengthGCm2;  // ρ = 1 g/cm³
  switch (v) {
    case FermiRossiVariant::kNone: return 1.0;
    case FermiRossiVariant::kRossiGreisenEs15: return std::pow(15.0 / kHighlandEsMev, 2);
    case FermiRossiVariant::kHighlandLogOverWholePath: return std::pow(1.0 + std::log10(thickness_x0) / 9.0, 2);
    case FermiRossiVariant::kLynchDahlLogOverWholePath: {
      const double m = kScatteringProtonRestEnergyMev, e = surface_energy_mev;
      const double beta2 = e * (e + 2.0 * m) / ((e + m) * (e + m));
      return std::pow(13.6 / kHighlandEsMev, 2) * std::pow(1.0 + 0.038 * std::log(thickness_x0 / beta2), 2);
    }
    case FermiRossiVariant::kMcsquareGaussianEs: return std::pow(18.3 / std::sqrt(2.0) / kHighlandEsMev, 2);
  }
  return 1.0;
}

struct LateralModel {
  ScatteringPowerModel scattering = ScatteringPowerModel::kFermiRossiHighland;
  FermiRossiVariant variant = FermiRossiVariant::kNone;  // only with kFermiRossiHighland
  std::optional<HaloModel> halo;
  CoreFitWeighting weighting = CoreFitWeighting::kUniform;

  std::string name() const {
    std::string n = std::string(scattering_power_model_name(scattering)) + fermi_rossi_variant_name(variant);
    if (halo) n += std::string("+") + halo_model_name(*halo) + "-fitted-" + core_fit_weighting_name(weighting);
    return n;
  }
};

// Marches a ray through water from the surface and compares at every
// reference depth; writes the per-depth table to the test-output folder.
EnergyResult compare_energy(int nominal_energy_mev, const LateralModel& model, std::ofstream& table) {
  const SpotRow spot = read_spot_model(nominal_energy_mev);
  const std::vector<ReferenceSigma> reference = read_reference(nominal_energy_mev);
  // The optics plane's mean energy, less the air between it and the surface.
  const double surface_energy_mev =
      residual_energy_mev(spot.mean_energy_mev, kNozzleToIsocentreMm * kAirWetPerMm);
  const ScatteringOptions options = ScatteringOptions::make(model.scattering, surface_energy_mev);
  std::optional<NuclearHalo> halo;
  if (model.halo) halo.emplace(surface_energy_mev, *model.halo);
  CoreFitOptions fit;
  fit.weighting = model.weighting;
  EnergyResult result;
  result.energy_mev = nominal_energy_mev;
  FermiEygesMoments moments;
  double z = 0.0;
  for (const ReferenceSigma& ref : reference) {
    while (z + kStepMm <= ref.depth_mm + 1e-9) {
      const double e_mid = residual_energy_mev(surface_energy_mev, z + 0.5 * kStepMm);
      moments = advance(moments, kStepMm, 1.0, kWaterRadiationLengthGCm2, e_mid, options);
      z += kStepMm;
    }
    EXPECT_NEAR(z, ref.depth_mm, 1e-9) << "reference depths are on the 0.5 mm grid";
    const double mcs2 =
        moments.a2_mm2 * fermi_rossi_variant_factor(model.variant, ref.depth_mm, surface_energy_mev);
    for (const auto& [axis, emittance, mc] : {std::tuple<char, AxisEmittance, double>{'x', spot.x, ref.sigma_x_mm},
                                               {'y', spot.y, ref.sigma_y_mm}}) {
      const double air = sigma_in_air_mm(emittance, kNozzleToIsocentreMm + ref.depth_mm);
      const double core_sigma = std::sqrt(air * air + mcs2);
      double model_sigma = core_sigma, halo_weight = 0.0, halo_sigma = 0.0;
      if (halo) {
        const std::vector<LateralGaussian> profile = spot_lateral_profile(*halo, ref.depth_mm, core_sigma);
        halo_weight = profile[1].weight;
        halo_sigma = profile[1].sigma_mm;
        model_sigma = fitted_core_sigma_mm(profile, fit);
        result.largest_fit_widening_mm = std::max(result.largest_fit_widening_mm, model_sigma - core_sigma);
      }
      const double delta = model_sigma - mc;
      const double tolerance = std::max(0.2, 0.05 * mc);
      table << nominal_energy_mev << ',' << model.name() << ',' << ref.depth_mm << ',' << axis << ',' << air << ','
            << std::sqrt(mcs2) << ',' << core_sigma << ',' << halo_weight << ',' << halo_sigma << ',' << model_sigma
            << ',' << mc << ',' << delta << ',' << tolerance << '\n';
      if (std::abs(delta) / tolerance > result.worst_ratio) {
        result.worst_ratio = std::abs(delta) / tolerance;
        result.worst_delta_mm = delta;
        result.worst_depth_mm = ref.depth_mm;
        result.worst_axis = axis;
      }
    }
    ++result.rows;
  }
  result.sigma_mcs_last_mm =
      moments.sigma_mm() * std::sqrt(fermi_rossi_variant_factor(model.variant, z, surface_energy_mev));
  return result;
}

std::vector<EnergyResult> run_model(const LateralModel& model) {
  const std::string path = std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/lateral_spread_" + model.name() + ".csv";
  std::ofstream table(path);
  table << "nominal_energy_MeV,model,depth_mm,axis,sigma_air_mm,sigma_mcs_mm,sigma_core_mm,halo_weight,"
           "sigma_halo_mm,sigma_model_mm,sigma_mc_mm,delta_mm,tolerance_mm\n";
  std::vector<EnergyResult> results;
  for (int e : {70, 100, 150, 200, 230}) {
    results.push_back(compare_energy(e, model, table));
    const EnergyResult& r = results.back();
    std::cout << "[ sigma(z) ] " << model.name() << " " << e << " MeV: worst " << std::showpos << std::fixed
              << std::setprecision(3) << r.worst_delta_mm << std::noshowpos << " mm at " << std::setprecision(1)
              << r.worst_depth_mm << " mm (" << r.worst_axis << "), " << std::setprecision(2) << r.worst_ratio
              << " of tolerance; " << r.rows << " depths; MCS σ at peak " << std::setprecision(2)
              << r.sigma_mcs_last_mm << " mm\n";
  }
  std::cout << "[ sigma(z) ] per-depth table: " << path << "\n";
  return results;
}

std::vector<EnergyResult> run_model(ScatteringPowerModel scattering) {
  LateralModel model;
  model.scattering = scattering;
  return run_model(model);
}

// The default model (Fermi–Rossi with Highland's 14.1 MeV), its core σ
// compared as it is, meets the requirement at 70–200 MeV. At 230 MeV it does
// not: the MC core σ grows faster at mid-depth (the MC's core fit takes in part
// of the nuclear component; see MoliereCoreWithSoukupHaloFittedLikeTheMonteCarlo…
// below), and the worst point (155 mm) misses by 0.02 mm. That known deviation is
// pinned here so that it cannot grow unnoticed; docs/validation/lateral-spread.md.
constexpr double k230MeVKnownWorstRatio = 1.15;

TEST(LateralSpreadRegression, DefaultModelWithinTwoTenthsMmOrFivePercentOfMonteCarlo) {
  const ScatteringOptions default_options;
  ASSERT_EQ(default_options.model(), ScatteringPowerModel::kFermiRossiHighland);
  const std::vector<EnergyResult> results = run_model(default_options.model());
  ASSERT_EQ(results.size(), 5u);
  for (const EnergyResult& r : results) {
    ASSERT_GE(r.rows, 8u) << r.energy_mev << " MeV: too few reference depths";
    ASSERT_GT(r.sigma_mcs_last_mm, 0.5) << r.energy_mev << " MeV: scattering grew too little to test";
    const double limit = r.energy_mev == 230 ? k230MeVKnownWorstRatio : 1.0;
    EXPECT_LE(r.worst_ratio, limit) << r.energy_mev << " MeV: Δσ " << r.worst_delta_mm << " mm at "
                                    << r.worst_depth_mm << " mm (" << r.worst_axis << ")";
  }
  // The 230 MeV exception is real (not a loose test): it does exceed 1.
  EXPECT_GT(results.back().worst_ratio, 1.0) << "230 MeV now meets the requirement: drop the exception";
}

// Gottschalk's differential Highland meets the requirement at 70–200 MeV but
// overshoots at the Bragg peak at 230 MeV (+0.55 mm; docs/validation/lateral-spread.md).
// Gottschalk's differential Molière (with the scattering length X_S) scatters
// less than the Fermi–Rossi default in water (MCS σ at the peak ~7–12 % smaller):
// its core alone meets the requirement at 70 and 100 MeV and falls short of the
// MC core σ above (worst 1.6 × tolerance at 230 MeV) — until the nuclear halo
// inside the MC's fit window is accounted for (next test but one).
TEST(LateralSpreadRegression, DifferentialMoliereWithinRequirementUpTo100MeV) {
  for (const EnergyResult& r : run_model(ScatteringPowerModel::kDifferentialMoliere)) {
    ASSERT_GE(r.rows, 8u);
    EXPECT_LE(r.worst_ratio, r.energy_mev <= 100 ? 1.0 : 1.7) << r.energy_mev << " MeV";
  }
}

TEST(LateralSpreadRegression, DifferentialHighlandWithinRequirementUpTo200MeV) {
  for (const EnergyResult& r : run_model(ScatteringPowerModel::kDifferentialHighland)) {
    ASSERT_GE(r.rows, 8u);
    EXPECT_LE(r.worst_ratio, r.energy_mev <= 200 ? 1.0 : 1.5) << r.energy_mev << " MeV";
  }
}

// The MC core σ is a single Gaussian fitted within ±2.5σ to the whole
// projected profile, so it contains the part of the nuclear component that
// lies inside that window. Compared the same way — Gottschalk's differential
// Molière for the primaries' multiple scattering (Med Phys 37:352, 2010) plus
// the published nuclear component of Soukup, Fippel & Alber (PMB 50:5089, 2005)
// with its published composition σ_halo² = σ_core² + σ_N², the whole profile
// fitted like the MC — the model meets the requirement at every energy, 230 MeV
// included, from the surface to the Bragg peak. Nothing is tuned: every
// constant is published, the fit is the reference's (shared/reference/README.md).
// The README does not say how the MC fit weighted its voxels: both plain and
// 1/dose-weighted least squares are required to pass.
TEST(LateralSpreadRegression, MoliereCoreWithSoukupHaloFittedLikeTheMonteCarloMeetsRequirementAtAllEnergies) {
  for (CoreFitWeighting weighting : {CoreFitWeighting::kUniform, CoreFitWeighting::kInverseDose}) {
    LateralModel model;
    model.scattering = ScatteringPowerModel::kDifferentialMoliere;
    model.halo = HaloModel::kSoukup2005;
    model.weighting = weighting;
    const std::vector<EnergyResult> results = run_model(model);
    ASSERT_EQ(results.size(), 5u);
    for (const EnergyResult& r : results) {
      ASSERT_GE(r.rows, 8u) << r.energy_mev << " MeV: too few reference depths";
      EXPECT_LE(r.worst_ratio, 1.0) << model.name() << ", " << r.energy_mev << " MeV: Δσ " << r.worst_delta_mm
                                    << " mm at " << r.worst_depth_mm << " mm (" << r.worst_axis << ")";
    }
    // Not vacuous: the halo inside the window does widen the fit (by more than
    // half the 230 MeV tolerance at its largest), and 230 MeV is among the energies.
    EXPECT_EQ(results.back().energy_mev, 230);
    EXPECT_GT(results.back().largest_fit_widening_mm, 0.1) << model.name();
  }
}

// The combination above is not one of many that would pass: the other
// scattering models with the Soukup halo, and either core with the project's
// MCsquare-fitted halo (wide and light; nuclear_halo.h), all miss at 230 MeV
// when fitted like the MC (docs/validation/lateral-spread.md, candidates table).
TEST(LateralSpreadRegression, OtherCoreAndHaloPairsFittedLikeTheMonteCarloMissAt230MeV) {
  const std::pair<ScatteringPowerModel, HaloModel> pairs[] = {
      {ScatteringPowerModel::kFermiRossiHighland, HaloModel::kSoukup2005},
      {ScatteringPowerModel::kDifferentialHighland, HaloModel::kSoukup2005},
      {ScatteringPowerModel::kFermiRossiHighland, HaloModel::kMcsquareFit},
      {ScatteringPowerModel::kDifferentialMoliere, HaloModel::kMcsquareFit},
  };
  for (const auto& [scattering, halo] : pairs) {
    LateralModel model;
    model.scattering = scattering;
    model.halo = halo;
    const std::vector<EnergyResult> results = run_model(model);
    ASSERT_EQ(results.back().energy_mev, 230);
    EXPECT_GT(results.back().worst_ratio, 1.0) << model.name() << " now meets the requirement at 230 MeV";
  }
}

// Other published forms of the scattering power, the core alone: none meets
// the requirement at 230 MeV. Rossi–Greisen's 15.0 MeV helps at mid-depth and
// overshoots at the Bragg peak; Highland's and Lynch–Dahl's logarithmic terms
// over the whole path make the core narrower at mid-depth, where the MC is
// already wider (docs/validation/lateral-spread.md, candidates table).
TEST(LateralSpreadRegression, OtherScatteringPowerFormsMissAt230MeV) {
  for (FermiRossiVariant variant : {FermiRossiVariant::kRossiGreisenEs15, FermiRossiVariant::kHighlandLogOverWholePath,
                                    FermiRossiVariant::kLynchDahlLogOverWholePath}) {
    LateralModel model;
    model.variant = variant;
    const std::vector<EnergyResult> results = run_model(model);
    ASSERT_EQ(results.back().energy_mev, 230);
    EXPECT_GT(results.back().worst_ratio, 1.0) << model.name() << " now meets the requirement at 230 MeV";
  }
}

// Cross-check of the explanation: the reference code's own Gaussian multiple
// scattering (E_s = 12.94 MeV projected; see FermiRossiVariant) with the Soukup
// nuclear component, fitted like the MC, also meets the requirement at every
// energy; its core alone does not above 100 MeV. So the MC core σ is its
// multiple scattering plus the nuclear component inside the fit window.
TEST(LateralSpreadRegression, ReferenceCodesOwnScatteringWithSoukupHaloFittedLikeTheMonteCarlo) {
  LateralModel model;
  model.variant = FermiRossiVariant::kMcsquareGaussianEs;
  const std::vector<EnergyResult> alone = run_model(model);
  EXPECT_GT(alone.back().worst_ratio, 1.0);
  model.halo = HaloModel::kSoukup2005;
  for (const EnergyResult& r : run_model(model)) EXPECT_LE(r.worst_ratio, 1.0) << r.energy_mev << " MeV";
}

}  // namespace
}  // namespace protondose::physics
