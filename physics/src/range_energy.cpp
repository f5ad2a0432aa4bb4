#include "protondose/physics/range_energy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "beam_io.h"
#include "protondose/core/error.h"

#ifndef PROTONDOSE_DATA_DIR
#error "PROTONDOSE_DATA_DIR must be defined for protondose_physics (physics/CMakeLists.txt)"
#endif

namespace protondose::physics {

using detail::fmt;

namespace {

constexpr double kMmPerGCm2 = 10.0 / kWaterDensityGPerCm3;  // 1 g/cm² of water = 10 mm

/// Index i with x[i] <= v <= x[i+1] for ascending x (v inside the table).
std::size_t bracket(const std::vector<double>& x, double v) {
  auto it = std::upper_bound(x.begin(), x.end(), v);
  std::size_t i = it == x.begin() ? 0 : static_cast<std::size_t>(it - x.begin()) - 1;
  return std::min(i, x.size() - 2);
}

/// Linear interpolation in (log x, log y).
double loglog(const std::vector<double>& lx, const std::vector<double>& ly, double x) {
  const double l = std::log(x);
  const std::size_t i = bracket(lx, l);
  const double t = (l - lx[i]) / (lx[i + 1] - lx[i]);
  return std::exp(ly[i] + t * (ly[i + 1] - ly[i]));
}

std::vector<double> logs(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](double x) { return std::log(x); });
  return out;
}

}  // namespace

RangeEnergyTable::RangeEnergyTable(std::vector<double> energy_mev,
                                   std::vector<double> stopping_power_mev_cm2_g,
                                   std::vector<double> csda_range_g_cm2, std::string source)
    : energy_mev_(std::move(energy_mev)),
      stopping_power_mev_cm2_g_(std::move(stopping_power_mev_cm2_g)),
      csda_range_g_cm2_(std::move(csda_range_g_cm2)),
      source_(std::move(source)) {
  const std::size_t n = energy_mev_.size();
  if (n < 2 || stopping_power_mev_cm2_g_.size() != n || csda_range_g_cm2_.size() != n)
    throw DataError(source_ + ": a range-energy table needs >= 2 rows and columns of equal length (" +
                    std::to_string(n) + " energies, " +
                    std::to_string(stopping_power_mev_cm2_g_.size()) + " stopping powers, " +
                    std::to_string(csda_range_g_cm2_.size()) + " ranges)");
  for (std::size_t i = 0; i < n; ++i) {
    const std::string row = source_ + ": row " + std::to_string(i + 1) + ": ";
    if (!(energy_mev_[i] > 0.0) || !std::isfinite(energy_mev_[i]))
      throw DataError(row + "energy " + fmt(energy_mev_[i]) + " MeV must be > 0");
    if (i > 0 && !(energy_mev_[i] > energy_mev_[i - 1]))
      throw DataError(row + "energy " + fmt(energy_mev_[i]) + " MeV is not above the previous row's " +
                      fmt(energy_mev_[i - 1]) + " MeV (energies must increase strictly)");
    if (!(stopping_power_mev_cm2_g_[i] > 0.0) || !std::isfinite(stopping_power_mev_cm2_g_[i]))
      throw DataError(row + "stopping power " + fmt(stopping_power_mev_cm2_g_[i]) +
                      " MeV cm2/g must be > 0");
    if (!(csda_range_g_cm2_[i] > 0.0) || !std::isfinite(csda_range_g_cm2_[i]))
      throw DataError(row + "CSDA range " + fmt(csda_range_g_cm2_[i]) + " g/cm2 must be > 0");
    if (i > 0 && !(csda_range_g_cm2_[i] > csda_range_g_cm2_[i - 1]))
      throw DataError(row + "CSDA range " + fmt(csda_range_g_cm2_[i]) +
                      " g/cm2 is not above the previous row's " + fmt(csda_range_g_cm2_[i - 1]) +
                      " g/cm2 (ranges must increase with energy)");
  }
  log_energy_ = logs(energy_mev_);
  log_stopping_power_ = logs(stopping_power_mev_cm2_g_);
  log_range_ = logs(csda_range_g_cm2_);
}

RangeEnergyTable RangeEnergyTable::load_csv(const std::filesystem::path& path) {
  const detail::CsvTable csv = detail::read_csv(path);
  const std::size_t ce = csv.column("energy_MeV");
  const std::size_t cs = csv.column("total_stopping_power_MeV_cm2_per_g");
  const std::size_t cr = csv.column("csda_range_g_per_cm2");
  std::vector<double> e, s, r;
  for (std::size_t i = 0; i < csv.rows.size(); ++i) {
    e.push_back(csv.number(i, ce));
    s.push_back(csv.number(i, cs));
    r.push_back(csv.number(i, cr));
  }
  return RangeEnergyTable(std::move(e), std::move(s), std::move(r), path.string());
}

void RangeEnergyTable::check_energy(double energy_mev, const char* what) const {
  if (!(energy_mev >= min_energy_mev() && energy_mev <= max_energy_mev()))
    throw InputError(std::string(what) + ": proton energy " + fmt(energy_mev) +
                     " MeV is outside the range-energy table " + source_ + " (accepted " +
                     fmt(min_energy_mev()) + " to " + fmt(max_energy_mev()) + " MeV)");
}

double RangeEnergyTable::stopping_power_mev_cm2_g(double energy_mev) const {
  check_energy(energy_mev, "stopping power");
  return loglog(log_energy_, log_stopping_power_, energy_mev);
}

double RangeEnergyTable::csda_range_g_cm2(double energy_mev) const {
  check_energy(energy_mev, "CSDA range");
  return loglog(log_energy_, log_range_, energy_mev);
}

double RangeEnergyTable::energy_from_csda_range_mev(double range_g_cm2) const {
  if (!(range_g_cm2 >= csda_range_g_cm2_.front() && range_g_cm2 <= csda_range_g_cm2_.back()))
    throw InputError("energy from range: CSDA range " + fmt(range_g_cm2) +
                     " g/cm2 is outside the range-energy table " + source_ + " (accepted " +
                     fmt(csda_range_g_cm2_.front()) + " to " + fmt(csda_range_g_cm2_.back()) +
                     " g/cm2)");
  return loglog(log_range_, log_energy_, range_g_cm2);
}

std::filesystem::path shipped_data_dir() {
  const char* env = std::getenv("PROTONDOSE_DATA_DIR");
  if (env != nullptr && env[0] != '\0') return std::filesystem::path(env);
  return std::filesystem::path(PROTONDOSE_DATA_DIR);
}

const RangeEnergyTable& pstar_water() {
  static const RangeEnergyTable table =
      RangeEnergyTable::load_csv(shipped_data_dir() / "physics" / "pstar_water.csv");
  return table;
}

double csda_range_mm(double energy_mev) {
  return pstar_water().csda_range_g_cm2(energy_mev) * kMmPerGCm2;
}

double energy_from_csda_range_mev(double range_mm) {
  return pstar_water().energy_from_csda_range_mev(range_mm / kMmPerGCm2);
}

double stopping_power_water_mev_cm2_g(double energy_mev) {
  return pstar_water().stopping_power_mev_cm2_g(energy_mev);
}

double residual_energy_mev(double energy_mev, double wepl_mm) {
  if (!(wepl_mm >= 0.0) || !std::isfinite(wepl_mm))
    throw InputError("residual energy: water-equivalent path length " + fmt(wepl_mm) +
                     " mm must be finite and >= 0");
  const RangeEnergyTable& t = pstar_water();
  const double residual_range_g_cm2 = t.csda_range_g_cm2(energy_mev) - wepl_mm / kMmPerGCm2;
  if (residual_range_g_cm2 <= 0.0) return 0.0;
  const double r_min = t.csda_range_g_cm2().front();
  // Below the table's lowest range (6e-6 g/cm², 1 keV) the energy goes linearly to 0.
  if (residual_range_g_cm2 < r_min) return t.min_energy_mev() * residual_range_g_cm2 / r_min;
  return t.energy_from_csda_range_mev(residual_range_g_cm2);
}

double bragg_kleeman_range_mm(double energy_mev) {
  if (!(energy_mev >= 0.0) || !std::isfinite(energy_mev))
    throw InputError("Bragg-Kleeman range: energy " + fmt(energy_mev) +
                     " MeV must be finite and >= 0");
  return 10.0 * kBraggKleemanAlphaCm * std::pow(energy_mev, kBraggKleemanP);
}

double bragg_kleeman_energy_mev(double range_mm) {
  if (!(range_mm >= 0.0) || !std::isfinite(range_mm))
    throw InputError("Bragg-Kleeman energy: range " + fmt(range_mm) + " mm must be finite and >= 0");
  return std::pow(range_mm / (10.0 * kBraggKleemanAlphaCm), 1.0 / kBraggKleemanP);
}

}  // namespace protondose::physics
