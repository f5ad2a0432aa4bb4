#pragma once
/// \file range_energy.h
/// Range–energy relation and stopping power of protons in liquid water.
///
/// Two models:
///  - the NIST PSTAR table (ICRU Report 49; liquid water, I = 75 eV, density
///    1.000 g/cm³): total mass stopping power and CSDA range, shipped as
///    data/physics/pstar_water.csv and interpolated log–log (docs/physics/range-energy.md);
///  - the Bragg–Kleeman rule R = α·E^p with α = 0.0022 cm·MeV^−p and p = 1.77
///    (T. Bortfeld, Med. Phys. 24:2024, 1997, Eq. 8), used by the analytical
///    depth dose of depth_dose.h.
///
/// Lengths are water-equivalent and in mm (water density 1 g/cm³, so
/// 1 g/cm² = 10 mm); energies are proton kinetic energies in MeV.

#include <filesystem>
#include <string>
#include <vector>

namespace protondose::physics {

/// Density of liquid water used to turn g/cm² into mm (PSTAR: 1.000 g/cm³).
inline constexpr double kWaterDensityGPerCm3 = 1.0;
/// Bragg–Kleeman α for water (cm·MeV^−p), Bortfeld 1997 Eq. 8 / Table I.
inline constexpr double kBraggKleemanAlphaCm = 0.0022;
/// Bragg–Kleeman exponent p for water (dimensionless), Bortfeld 1997.
inline constexpr double kBraggKleemanP = 1.77;

/// A tabulated range–energy relation for one material (here: PSTAR water).
///
/// Rows hold kinetic energy (MeV), total mass stopping power (MeV·cm²/g) and
/// CSDA range (g/cm²). Values between rows are interpolated linearly in
/// (ln E, ln S) and (ln E, ln R). Immutable after construction.
class RangeEnergyTable {
 public:
  /// Builds a table from columns of equal length ≥ 2: energies strictly
  /// increasing and > 0, stopping powers > 0, ranges strictly increasing and > 0.
  /// `source` names where the numbers came from (a file path) for messages.
  /// Throws DataError naming `source`, the row (1-based) and the value otherwise.
  RangeEnergyTable(std::vector<double> energy_mev, std::vector<double> stopping_power_mev_cm2_g,
                   std::vector<double> csda_range_g_cm2, std::string source);

  /// Reads a CSV with the columns energy_MeV, total_stopping_power_MeV_cm2_per_g,
  /// csda_range_g_per_cm2 (found by name, any order, other columns ignored;
  /// lines starting with '#' are comments; see docs/physics/range-energy.md).
  /// Throws IoError if the file cannot be read, DataError (file, row, value)
  /// if a column is missing, a number is malformed or the rows are not monotone.
  static RangeEnergyTable load_csv(const std::filesystem::path& path);

  /// Lowest / highest tabulated energy (MeV).
  double min_energy_mev() const { return energy_mev_.front(); }
  double max_energy_mev() const { return energy_mev_.back(); }

  /// Total mass stopping power (MeV·cm²/g) at `energy_mev`.
  /// Throws InputError if the energy is outside [min_energy_mev, max_energy_mev].
  double stopping_power_mev_cm2_g(double energy_mev) const;
  /// CSDA range (g/cm²) at `energy_mev`. Throws InputError outside the table.
  double csda_range_g_cm2(double energy_mev) const;
  /// Inverse of csda_range_g_cm2: the energy (MeV) whose CSDA range is
  /// `range_g_cm2`. Throws InputError if the range lies outside the table's ranges.
  double energy_from_csda_range_mev(double range_g_cm2) const;

  const std::vector<double>& energy_mev() const { return energy_mev_; }
  const std::vector<double>& stopping_power_mev_cm2_g() const { return stopping_power_mev_cm2_g_; }
  const std::vector<double>& csda_range_g_cm2() const { return csda_range_g_cm2_; }
  const std::string& source() const { return source_; }

 private:
  void check_energy(double energy_mev, const char* what) const;
  std::vector<double> energy_mev_;
  std::vector<double> stopping_power_mev_cm2_g_;
  std::vector<double> csda_range_g_cm2_;
  std::vector<double> log_energy_, log_stopping_power_, log_range_;
  std::string source_;
};

/// The PSTAR water table shipped in <data dir>/physics/pstar_water.csv, loaded
/// once on first use (thread-safe) from shipped_data_dir().
/// Throws IoError / DataError if the shipped file is missing or invalid.
const RangeEnergyTable& pstar_water();

/// The folder with protondose's shipped data (machines/, physics/): the
/// environment variable PROTONDOSE_DATA_DIR when set and non-empty, else the
/// data/ folder of the source tree compiled in as PROTONDOSE_DATA_DIR.
std::filesystem::path shipped_data_dir();

/// CSDA range in water (mm, water density 1 g/cm³) of a proton of kinetic
/// energy `energy_mev` (MeV), from PSTAR. Throws InputError (value and the
/// table's energy range) if the energy is outside the PSTAR table.
double csda_range_mm(double energy_mev);

/// Kinetic energy (MeV) of a proton whose CSDA range in water is `range_mm` (mm),
/// from PSTAR. Throws InputError if the range is outside the table.
double energy_from_csda_range_mev(double range_mm);

/// Total mass stopping power of water (MeV·cm²/g) at `energy_mev` (MeV), PSTAR.
/// Throws InputError outside the table.
double stopping_power_water_mev_cm2_g(double energy_mev);

/// Mean kinetic energy (MeV) left to a proton of initial energy `energy_mev`
/// after `wepl_mm` (mm, ≥ 0) of water-equivalent path (continuous slowing down,
/// PSTAR): E(R(E0) − w). Returns 0 when wepl_mm ≥ the CSDA range.
/// Throws InputError if energy_mev is outside the PSTAR table (message gives the
/// accepted range) or wepl_mm is negative or not finite.
double residual_energy_mev(double energy_mev, double wepl_mm);

/// Bragg–Kleeman range (mm) R = α·E^p of a proton of `energy_mev` (MeV) in water,
/// α = kBraggKleemanAlphaCm, p = kBraggKleemanP (Bortfeld 1997 Eq. 8).
/// Throws InputError for a negative or non-finite energy.
double bragg_kleeman_range_mm(double energy_mev);

/// Inverse Bragg–Kleeman rule: E = (R/α)^(1/p) in MeV for `range_mm` (mm ≥ 0).
/// Throws InputError for a negative or non-finite range.
double bragg_kleeman_energy_mev(double range_mm);

}  // namespace protondose::physics
