#include "protondose/physics/beam_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "beam_io.h"
#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {

using detail::fmt;

namespace {

/// Validates one table row; `where(column)` names file, row and column for messages.
void validate_row(const BeamModelEnergy& e, const BeamModelEnergy* previous,
                  const std::function<std::string(const char*)>& where) {
  const auto require = [&](bool ok, const char* column, double value, const char* rule) {
    if (!ok || !std::isfinite(value))
      throw DataError(where(column) + ": " + fmt(value) + " " + rule);
  };
  require(e.nominal_energy_mev > 0.0, "nominal energy (MeV)", e.nominal_energy_mev, "must be > 0");
  if (previous != nullptr && !(e.nominal_energy_mev > previous->nominal_energy_mev))
    throw DataError(where("nominal energy (MeV)") + ": " + fmt(e.nominal_energy_mev) +
                    " MeV is not above the previous row's " + fmt(previous->nominal_energy_mev) +
                    " MeV (energies must increase strictly)");
  require(e.mean_energy_mev > 0.0, "mean energy (MeV)", e.mean_energy_mev, "must be > 0");
  require(e.energy_spread_mev >= 0.0, "energy spread (MeV)", e.energy_spread_mev, "must be >= 0");
  require(e.protons_per_mu > 0.0, "protons per MU", e.protons_per_mu, "must be > 0");
  require(e.x.sigma_mm > 0.0, "sigma x (mm)", e.x.sigma_mm, "must be > 0");
  require(e.y.sigma_mm > 0.0, "sigma y (mm)", e.y.sigma_mm, "must be > 0");
  require(e.x.sigma_theta_rad >= 0.0, "sigma theta x (rad)", e.x.sigma_theta_rad, "must be >= 0");
  require(e.y.sigma_theta_rad >= 0.0, "sigma theta y (rad)", e.y.sigma_theta_rad, "must be >= 0");
  require(std::abs(e.x.correlation) < 1.0, "correlation x", e.x.correlation, "must lie in (-1, 1)");
  require(std::abs(e.y.correlation) < 1.0, "correlation y", e.y.correlation, "must lie in (-1, 1)");
}

AxisEmittance lerp(const AxisEmittance& a, const AxisEmittance& b, double f) {
  return {a.sigma_mm + f * (b.sigma_mm - a.sigma_mm),
          a.sigma_theta_rad + f * (b.sigma_theta_rad - a.sigma_theta_rad),
          a.correlation + f * (b.correlation - a.correlation)};
}

const char* axis_name(Axis axis) { return axis == Axis::kX ? "X" : "Y"; }

/// The analytical depth-dose library of a model file without IDDs: Bortfeld
/// with the model's mean energies and spreads, the air of the optics-plane
/// distance as upstream WET.
DepthDoseLibrary analytical_library(const std::vector<BeamModelEnergy>& rows,
                                    double reference_plane_mm, const std::string& source,
                                    const std::optional<BortfeldParameters>& bortfeld) {
  std::vector<BeamEnergySpectrum> spectra;
  for (const auto& r : rows)
    spectra.push_back({r.nominal_energy_mev, r.mean_energy_mev, r.energy_spread_mev});
  BortfeldParameters p;
  p.upstream_wet_mm = kAirWetPerMm * reference_plane_mm;
  if (bortfeld.has_value()) p = *bortfeld;
  return DepthDoseLibrary::analytical(std::move(spectra), p, source);
}

}  // namespace

// ---------------------------------------------------------------------------
// BeamModel

BeamModel::BeamModel(std::string name, double vsad_x_mm, double vsad_y_mm,
                     double reference_plane_upstream_of_isocentre_mm,
                     std::vector<BeamModelEnergy> energies, DepthDoseLibrary depth_doses,
                     std::string source)
    : name_(std::move(name)),
      vsad_x_mm_(vsad_x_mm),
      vsad_y_mm_(vsad_y_mm),
      reference_plane_mm_(reference_plane_upstream_of_isocentre_mm),
      energies_(std::move(energies)),
      depth_doses_(std::move(depth_doses)),
      source_(std::move(source)) {
  if (name_.empty()) throw DataError(source_ + ": the machine has no name");
  const auto positive = [&](double v, const char* what) {
    if (!(v > 0.0) || !std::isfinite(v))
      throw DataError(source_ + ": " + what + " " + fmt(v) + " mm must be > 0");
  };
  positive(vsad_x_mm_, "VSAD x");
  positive(vsad_y_mm_, "VSAD y");
  positive(reference_plane_mm_, "optics reference plane distance upstream of the isocentre");
  if (energies_.empty()) throw DataError(source_ + ": the energy table has no rows");
  for (std::size_t i = 0; i < energies_.size(); ++i)
    validate_row(energies_[i], i > 0 ? &energies_[i - 1] : nullptr, [&](const char* column) {
      return source_ + ": energy row " + std::to_string(i + 1) + ", " + column;
    });
  if (depth_doses_.empty()) throw DataError(source_ + ": the machine has no depth-dose library");
  min_energy_mev_ = std::max(energies_.front().nominal_energy_mev, depth_doses_.min_energy_mev());
  max_energy_mev_ = std::min(energies_.back().nominal_energy_mev, depth_doses_.max_energy_mev());
  if (min_energy_mev_ > max_energy_mev_)
    throw DataError(source_ + ": the energy table (" + fmt(energies_.front().nominal_energy_mev) +
                    " to " + fmt(energies_.back().nominal_energy_mev) +
                    " MeV) and the depth-dose library (" + fmt(depth_doses_.min_energy_mev()) +
                    " to " + fmt(depth_doses_.max_energy_mev()) + " MeV) do not overlap");
}

void BeamModel::check_energy(double e, const char* what) const {
  if (!(e >= min_energy_mev_ && e <= max_energy_mev_))
    throw InputError(std::string(what) + ": nominal energy " + fmt(e) + " MeV is outside machine " +
                     name_ + " (accepted " + fmt(min_energy_mev_) + " to " + fmt(max_energy_mev_) +
                     " MeV: energy table " + fmt(energies_.front().nominal_energy_mev) + " to " +
                     fmt(energies_.back().nominal_energy_mev) + " MeV, depth doses " +
                     fmt(depth_doses_.min_energy_mev()) + " to " +
                     fmt(depth_doses_.max_energy_mev()) + " MeV)");
}

BeamModelEnergy BeamModel::energy_row(double e) const {
  check_energy(e, "beam model");
  const auto hi = std::lower_bound(energies_.begin(), energies_.end(), e,
                                   [](const auto& r, double v) { return r.nominal_energy_mev < v; });
  if (hi->nominal_energy_mev == e) return *hi;
  const BeamModelEnergy& a = *(hi - 1);
  const BeamModelEnergy& b = *hi;
  const double f = (e - a.nominal_energy_mev) / (b.nominal_energy_mev - a.nominal_energy_mev);
  BeamModelEnergy r;
  r.nominal_energy_mev = e;
  r.mean_energy_mev = a.mean_energy_mev + f * (b.mean_energy_mev - a.mean_energy_mev);
  r.energy_spread_mev = a.energy_spread_mev + f * (b.energy_spread_mev - a.energy_spread_mev);
  r.protons_per_mu = a.protons_per_mu + f * (b.protons_per_mu - a.protons_per_mu);
  r.x = lerp(a.x, b.x, f);
  r.y = lerp(a.y, b.y, f);
  return r;
}

double BeamModel::mean_energy_mev(double e) const { return energy_row(e).mean_energy_mev; }
double BeamModel::energy_spread_mev(double e) const { return energy_row(e).energy_spread_mev; }
double BeamModel::protons_per_mu(double e) const { return energy_row(e).protons_per_mu; }

AxisEmittance BeamModel::emittance(double e, Axis axis) const {
  const BeamModelEnergy r = energy_row(e);
  return axis == Axis::kX ? r.x : r.y;
}

double BeamModel::spot_sigma_in_air_mm(double e, Axis axis, double z_from_isocentre_mm) const {
  return sigma_in_air_at_z_from_isocentre_mm(emittance(e, axis), reference_plane_mm_,
                                             z_from_isocentre_mm);
}

AxisEmittance BeamModel::spot_emittance(double e, Axis axis, SpotSizePolicy policy,
                                        std::optional<double> plan_fwhm_at_isocentre_mm) const {
  const AxisEmittance model = emittance(e, axis);
  if (policy == SpotSizePolicy::kBeamModel) return model;
  if (!plan_fwhm_at_isocentre_mm.has_value())
    throw InputError("spot size policy " + std::string(spot_size_policy_name(policy)) + ": the plan " +
                     "states no ScanningSpotSize along " + axis_name(axis) + " for the layer at " +
                     fmt(e) + " MeV (use the beam-model policy for such plans)");
  const double fwhm = *plan_fwhm_at_isocentre_mm;
  if (!(fwhm > 0.0) || !std::isfinite(fwhm))
    throw InputError("spot size policy " + std::string(spot_size_policy_name(policy)) +
                     ": ScanningSpotSize " + axis_name(axis) + " = " + fmt(fwhm) + " mm at " +
                     fmt(e) + " MeV must be > 0");
  detail::note_once("spot-size-policy",
                    "spot size from the plan: DICOM ScanningSpotSize (FWHM at the isocentre) "
                    "replaces machine " + name_ + "'s in-air spot size; sigma0 at the optics plane is "
                    "rescaled so that sigma(isocentre) = FWHM / 2.3548, divergence and correlation "
                    "kept (docs/physics/spot-optics.md)");
  try {
    return with_sigma_at_isocentre(model, reference_plane_mm_, fwhm / kFwhmPerSigma);
  } catch (const InputError& err) {
    throw InputError("machine " + name_ + ", " + fmt(e) + " MeV, axis " + axis_name(axis) + ": " +
                     err.what());
  }
}

double BeamModel::spot_sigma_in_air_mm(double e, Axis axis, double z_from_isocentre_mm,
                                       SpotSizePolicy policy,
                                       std::optional<double> plan_fwhm_at_isocentre_mm) const {
  return sigma_in_air_at_z_from_isocentre_mm(
      spot_emittance(e, axis, policy, plan_fwhm_at_isocentre_mm), reference_plane_mm_,
      z_from_isocentre_mm);
}

CumulativeDepthDose BeamModel::depth_dose(double e) const {
  check_energy(e, "depth dose");
  return depth_doses_.curve(e);
}

BeamModel BeamModel::with_depth_doses(DepthDoseLibrary depth_doses) const {
  return BeamModel(name_, vsad_x_mm_, vsad_y_mm_, reference_plane_mm_, energies_,
                   std::move(depth_doses), source_);
}

// ---------------------------------------------------------------------------
// Loaders

std::vector<std::string> available_machines(const std::filesystem::path& machines_dir) {
  const auto dir = machines_dir.empty() ? shipped_data_dir() / "machines" : machines_dir;
  std::vector<std::string> names;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "machine.txt"))
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

/// Reads the energy table of a machine folder (docs/formats/machine-file.md).
std::vector<BeamModelEnergy> read_energy_table(const std::filesystem::path& path) {
  const detail::CsvTable csv = detail::read_csv(path);
  const char* names[] = {"nominal_energy_MeV", "mean_energy_MeV",   "energy_spread_sigma_MeV",
                         "protons_per_MU",     "sigma_x_mm",        "sigma_theta_x_rad",
                         "correlation_x",      "sigma_y_mm",        "sigma_theta_y_rad",
                         "correlation_y"};
  std::size_t c[10];
  for (int i = 0; i < 10; ++i) c[i] = csv.column(names[i]);
  const std::map<std::string, std::size_t> by_rule = {
      {"nominal energy (MeV)", c[0]}, {"mean energy (MeV)", c[1]}, {"energy spread (MeV)", c[2]},
      {"protons per MU", c[3]},       {"sigma x (mm)", c[4]},      {"sigma theta x (rad)", c[5]},
      {"correlation x", c[6]},        {"sigma y (mm)", c[7]},      {"sigma theta y (rad)", c[8]},
      {"correlation y", c[9]}};
  std::vector<BeamModelEnergy> rows;
  for (std::size_t r = 0; r < csv.rows.size(); ++r) {
    BeamModelEnergy e;
    e.nominal_energy_mev = csv.number(r, c[0]);
    e.mean_energy_mev = csv.number(r, c[1]);
    e.energy_spread_mev = csv.number(r, c[2]);
    e.protons_per_mu = csv.number(r, c[3]);
    e.x = {csv.number(r, c[4]), csv.number(r, c[5]), csv.number(r, c[6])};
    e.y = {csv.number(r, c[7]), csv.number(r, c[8]), csv.number(r, c[9])};
    validate_row(e, rows.empty() ? nullptr : &rows.back(),
                 [&](const char* column) { return csv.where(r, by_rule.at(column)); });
    rows.push_back(e);
  }
  if (rows.empty()) throw DataError(path.string() + ": the energy table has no rows");
  return rows;
}

}  // namespace

BeamModel load_machine_folder(const std::filesystem::path& path) {
  const auto folder = std::filesystem::is_directory(path) ? path : path.parent_path();
  const auto file = folder / "machine.txt";
  const detail::KeyValueFile kv = detail::read_key_value_file(file);
  if (kv.text("format") != "protondose-machine 1")
    throw DataError(kv.file + ": line " + std::to_string(kv.entries.at("format").second) +
                    ": format '" + kv.text("format") + "' is not 'protondose-machine 1'");
  const auto energies = read_energy_table(folder / kv.text("energy_table"));
  const std::string& kind = kv.text("depth_dose");
  DepthDoseLibrary library;
  if (kind == "tabulated") {
    library = DepthDoseLibrary::load_idd_folder(folder / kv.text("depth_dose_folder"));
  } else if (kind == "analytical-bortfeld") {
    std::vector<BeamEnergySpectrum> spectra;
    for (const auto& r : energies)
      spectra.push_back({r.nominal_energy_mev, r.mean_energy_mev, r.energy_spread_mev});
    BortfeldParameters p;
    p.beta_per_cm = kv.number("bortfeld_beta_per_cm");
    p.gamma = kv.number("bortfeld_gamma");
    p.upstream_wet_mm = kv.number("bortfeld_upstream_wet_mm");
    if (kv.has("bortfeld_depth_step_mm")) p.depth_step_mm = kv.number("bortfeld_depth_step_mm");
    library = DepthDoseLibrary::analytical(std::move(spectra), p, kv.file);
  } else {
    throw DataError(kv.file + ": line " + std::to_string(kv.entries.at("depth_dose").second) +
                    ": depth_dose = '" + kind + "' (accepted: tabulated, analytical-bortfeld)");
  }
  return BeamModel(kv.text("name"), kv.number("vsad_x_mm"), kv.number("vsad_y_mm"),
                   kv.number("reference_plane_upstream_of_isocentre_mm"), energies,
                   std::move(library), folder.string());
}

BeamModel load_dcpt_emittance_csv(const std::filesystem::path& path, const std::string& name,
                                  double vsad_x_mm, double vsad_y_mm,
                                  const std::optional<BortfeldParameters>& bortfeld) {
  const auto lines = detail::read_lines(path);
  detail::CsvTable csv;
  csv.file = path.string();
  double bmodpos_mm = 0.0;
  bool have_bmodpos = false;
  std::vector<std::string> header;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string line = detail::trim(lines[i]);
    if (line.empty()) continue;
    if (line[0] == '#') {
      const auto pos = line.find("BMODPOS");
      if (pos != std::string::npos) {
        std::istringstream in(line.substr(pos + 7));
        std::string value, unit;
        in >> value >> unit;
        if (!detail::parse_double(value, bmodpos_mm) || !(bmodpos_mm > 0.0) ||
            unit.rfind("mm", 0) != 0)
          throw DataError(csv.file + ": line " + std::to_string(i + 1) + ": BMODPOS '" +
                          detail::trim(line.substr(pos + 7)) + "' is not a positive distance in mm");
        have_bmodpos = true;
      }
      std::vector<std::string> cells = detail::split_csv_line(line);
      if (cells.size() == 10 && cells[0].find("Energy nominal") != std::string::npos) {
        header.clear();
        for (auto& c : cells) {
          const auto start = c.find_first_not_of("#\" ");
          header.push_back(start == std::string::npos ? c : detail::trim(c.substr(start)));
        }
      }
      continue;
    }
    if (header.empty())
      throw DataError(csv.file + ": line " + std::to_string(i + 1) +
                      ": data before the column header '#\"Energy nominal [MeV]\",...'");
    auto cells = detail::split_csv_line(line);
    if (cells.size() != 10)
      throw DataError(csv.file + ": row " + std::to_string(csv.rows.size() + 1) + " (line " +
                      std::to_string(i + 1) + ") has " + std::to_string(cells.size()) +
                      " cells, expected 10: '" + line + "'");
    csv.rows.push_back(std::move(cells));
    csv.line_numbers.push_back(i + 1);
  }
  if (!have_bmodpos)
    throw DataError(csv.file + ": no 'BMODPOS <distance> mm' header line (the optics reference "
                    "plane's distance upstream of the isocentre)");
  if (header.empty() || csv.rows.empty())
    throw DataError(csv.file + ": no column header or no data rows");
  csv.columns = header;
  // Column order of the DCPT files: E nominal, E real, E real sigma, protons/MU,
  // sigma x, sigma y, sigma x', sigma y', cor(x x'), cor(y y').
  std::vector<BeamModelEnergy> rows;
  const std::map<std::string, std::size_t> by_rule = {
      {"nominal energy (MeV)", 0}, {"mean energy (MeV)", 1}, {"energy spread (MeV)", 2},
      {"protons per MU", 3},       {"sigma x (mm)", 4},      {"sigma theta x (rad)", 6},
      {"correlation x", 8},        {"sigma y (mm)", 5},      {"sigma theta y (rad)", 7},
      {"correlation y", 9}};
  for (std::size_t r = 0; r < csv.rows.size(); ++r) {
    BeamModelEnergy e;
    e.nominal_energy_mev = csv.number(r, 0);
    e.mean_energy_mev = csv.number(r, 1);
    e.energy_spread_mev = csv.number(r, 2);
    e.protons_per_mu = csv.number(r, 3);
    e.x = {csv.number(r, 4), csv.number(r, 6), csv.number(r, 8)};
    e.y = {csv.number(r, 5), csv.number(r, 7), csv.number(r, 9)};
    validate_row(e, rows.empty() ? nullptr : &rows.back(),
                 [&](const char* column) { return csv.where(r, by_rule.at(column)); });
    rows.push_back(e);
  }
  DepthDoseLibrary library = analytical_library(rows, bmodpos_mm, csv.file, bortfeld);
  return BeamModel(name, vsad_x_mm, vsad_y_mm, bmodpos_mm, std::move(rows), std::move(library),
                   csv.file);
}

BeamModel load_mcsquare_bdl(const std::filesystem::path& path,
                            const std::optional<BortfeldParameters>& bortfeld) {
  const auto lines = detail::read_lines(path);
  const std::string file = path.string();
  std::size_t i = 0;
  const auto next_content = [&](std::size_t from) {
    while (from < lines.size() && detail::trim(lines[from]).empty()) ++from;
    return from;
  };
  i = next_content(0);
  if (i == lines.size() || detail::trim(lines[i]).rfind("--UPenn beam model", 0) != 0)
    throw DataError(file + ": line " + std::to_string(i + 1) +
                    ": not an MCsquare BDL (the first line must begin '--UPenn beam model')");
  std::map<std::string, double> scalars;
  std::size_t table_line = lines.size();
  for (; i < lines.size(); ++i) {
    const std::string line = detail::trim(lines[i]);
    for (const char* key : {"Nozzle exit to Isocenter distance", "SMX to Isocenter distance",
                            "SMY to Isocenter distance"}) {
      if (line == key) {
        const std::size_t v = next_content(i + 1);
        double value = 0.0;
        if (v == lines.size() || !detail::parse_double(lines[v], value))
          throw DataError(file + ": line " + std::to_string(v + 1) + ": '" + key +
                          "' must be followed by a number, got '" +
                          (v < lines.size() ? detail::trim(lines[v]) : std::string("end of file")) + "'");
        scalars[key] = value;
      }
    }
    if (line == "Beam parameters") {
      table_line = i;
      break;
    }
  }
  for (const char* key : {"Nozzle exit to Isocenter distance", "SMX to Isocenter distance",
                          "SMY to Isocenter distance"})
    if (!scalars.count(key)) throw DataError(file + ": no '" + key + "' entry");
  if (table_line == lines.size()) throw DataError(file + ": no 'Beam parameters' section");

  std::size_t k = next_content(table_line + 1);
  std::size_t declared = 0;
  {
    std::istringstream in(k < lines.size() ? lines[k] : std::string());
    double n = 0.0;
    std::string word;
    in >> n >> word;
    if (!(n >= 1.0) || n != std::floor(n) || word != "energies")
      throw DataError(file + ": line " + std::to_string(k + 1) + ": expected '<N> energies', got '" +
                      (k < lines.size() ? detail::trim(lines[k]) : std::string("end of file")) + "'");
    declared = static_cast<std::size_t>(n);
  }
  k = next_content(k + 1);
  detail::CsvTable table;
  table.file = file;
  const auto split_ws = [](const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> cells;
    std::string c;
    while (in >> c) cells.push_back(c);
    return cells;
  };
  if (k == lines.size()) throw DataError(file + ": no column header after 'Beam parameters'");
  table.columns = split_ws(lines[k]);
  for (std::size_t l = k + 1; l < lines.size(); ++l) {
    auto cells = split_ws(lines[l]);
    if (cells.empty()) continue;
    if (cells.size() != table.columns.size())
      throw DataError(file + ": row " + std::to_string(table.rows.size() + 1) + " (line " +
                      std::to_string(l + 1) + ") has " + std::to_string(cells.size()) +
                      " values, the header has " + std::to_string(table.columns.size()));
    table.rows.push_back(std::move(cells));
    table.line_numbers.push_back(l + 1);
  }
  if (table.rows.size() != declared)
    throw DataError(file + ": 'Beam parameters' declares " + std::to_string(declared) +
                    " energies but lists " + std::to_string(table.rows.size()));
  const std::size_t c_e = table.column("NominalEnergy"), c_m = table.column("MeanEnergy"),
                    c_s = table.column("EnergySpread"), c_p = table.column("ProtonsMU"),
                    c_sx = table.column("SpotSize1x"), c_dx = table.column("Divergence1x"),
                    c_rx = table.column("Correlation1x"), c_sy = table.column("SpotSize1y"),
                    c_dy = table.column("Divergence1y"), c_ry = table.column("Correlation1y");
  const bool has_weight2 =
      std::find(table.columns.begin(), table.columns.end(), "Weight2") != table.columns.end();
  const std::size_t c_w2 = has_weight2 ? table.column("Weight2") : 0;
  const std::map<std::string, std::size_t> by_rule = {
      {"nominal energy (MeV)", c_e}, {"mean energy (MeV)", c_m}, {"energy spread (MeV)", c_s},
      {"protons per MU", c_p},       {"sigma x (mm)", c_sx},     {"sigma theta x (rad)", c_dx},
      {"correlation x", c_rx},       {"sigma y (mm)", c_sy},     {"sigma theta y (rad)", c_dy},
      {"correlation y", c_ry}};
  std::vector<BeamModelEnergy> rows;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    if (has_weight2 && table.number(r, c_w2) != 0.0)
      throw UnavailableError(table.where(r, c_w2) + ": " + table.rows[r][c_w2] +
                             ": double-Gaussian spots (Weight2 > 0) are not supported; only "
                             "single-Gaussian BDLs can be read");
    BeamModelEnergy e;
    e.nominal_energy_mev = table.number(r, c_e);
    e.mean_energy_mev = table.number(r, c_m);
    // MCsquare's EnergySpread is a percentage of the nominal energy.
    e.energy_spread_mev = table.number(r, c_s) / 100.0 * e.nominal_energy_mev;
    e.protons_per_mu = table.number(r, c_p);
    e.x = {table.number(r, c_sx), table.number(r, c_dx), table.number(r, c_rx)};
    e.y = {table.number(r, c_sy), table.number(r, c_dy), table.number(r, c_ry)};
    validate_row(e, rows.empty() ? nullptr : &rows.back(),
                 [&](const char* column) { return table.where(r, by_rule.at(column)); });
    rows.push_back(e);
  }
  const double nozzle_mm = scalars.at("Nozzle exit to Isocenter distance");
  DepthDoseLibrary library = analytical_library(rows, nozzle_mm, file, bortfeld);
  return BeamModel(path.stem().string(), scalars.at("SMX to Isocenter distance"),
                   scalars.at("SMY to Isocenter distance"), nozzle_mm, std::move(rows),
                   std::move(library), file);
}

BeamModel load_machine(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  const fs::path p(name_or_path);
  std::error_code ec;
  const auto machines_dir = shipped_data_dir() / "machines";
  const auto list = [&]() {
    std::string names;
    for (const auto& n : available_machines(machines_dir)) names += (names.empty() ? "" : ", ") + n;
    return "machines available in " + machines_dir.string() + ": " + (names.empty() ? "none" : names);
  };
  if (fs::exists(p, ec)) {
    if (fs::is_directory(p, ec) || p.filename() == "machine.txt") return load_machine_folder(p);
    const auto lines = detail::read_lines(p);
    for (const auto& line : lines) {
      const std::string t = detail::trim(line);
      if (t.empty()) continue;
      if (t.rfind("--UPenn beam model", 0) == 0) return load_mcsquare_bdl(p);
      break;
    }
    for (std::size_t i = 0; i < std::min<std::size_t>(lines.size(), 20); ++i)
      if (lines[i].find("BMODPOS") != std::string::npos)
        throw DataError(p.string() + ": a DCPT emittance CSV carries no virtual source-axis "
                        "distances; load it with load_dcpt_emittance_csv(path, name, vsad_x_mm, vsad_y_mm)");
    throw DataError(p.string() + ": not a machine folder, machine.txt or MCsquare BDL");
  }
  const bool bare_name = name_or_path.find('/') == std::string::npos &&
                         name_or_path.find('\\') == std::string::npos && !name_or_path.empty();
  if (bare_name) {
    const auto folder = machines_dir / name_or_path;
    if (fs::exists(folder / "machine.txt", ec)) return load_machine_folder(folder);
    throw DataError("machine '" + name_or_path + "' not found (no " + (folder / "machine.txt").string() +
                    "); " + list());
  }
  throw DataError("machine file or folder '" + name_or_path + "' does not exist; " + list());
}

}  // namespace protondose::physics
