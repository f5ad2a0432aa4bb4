#include "protondose/physics/depth_dose.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "beam_io.h"
#include "protondose/core/error.h"
#include "protondose/physics/range_energy.h"

namespace protondose::physics {

using detail::fmt;

namespace {

constexpr double kGCm2PerMm = 0.1 * kWaterDensityGPerCm3;  // areal density of 1 mm of water
constexpr double kPi = 3.14159265358979323846;

std::string energy_label(double e) { return fmt(e) + " MeV"; }

}  // namespace

// ---------------------------------------------------------------------------
// CumulativeDepthDose

CumulativeDepthDose CumulativeDepthDose::from_idd_samples(const std::vector<double>& depth_mm,
                                                          const std::vector<double>& idd_mev_cm2_g,
                                                          double nominal_energy_mev,
                                                          std::string source) {
  const std::string who = source + " (" + energy_label(nominal_energy_mev) + ")";
  if (depth_mm.size() != idd_mev_cm2_g.size())
    throw DataError(who + ": " + std::to_string(depth_mm.size()) + " depths but " +
                    std::to_string(idd_mev_cm2_g.size()) + " IDD values");
  if (depth_mm.size() < 2)
    throw DataError(who + ": a depth-dose curve needs at least 2 samples, got " +
                    std::to_string(depth_mm.size()));
  double peak = 0.0;
  for (std::size_t i = 0; i < depth_mm.size(); ++i) {
    const auto at = [&] { return who + ": sample " + std::to_string(i + 1) + ": "; };
    if (!std::isfinite(depth_mm[i]) || depth_mm[i] < 0.0)
      throw DataError(at() + "depth " + fmt(depth_mm[i]) + " mm must be finite and >= 0");
    if (i > 0 && !(depth_mm[i] > depth_mm[i - 1]))
      throw DataError(at() + "depth " + fmt(depth_mm[i]) + " mm is not above the previous " +
                      fmt(depth_mm[i - 1]) + " mm (depths must increase strictly)");
    if (!std::isfinite(idd_mev_cm2_g[i]) || idd_mev_cm2_g[i] < 0.0)
      throw DataError(at() + "IDD " + fmt(idd_mev_cm2_g[i]) + " MeV cm2/g must be finite and >= 0");
    peak = std::max(peak, idd_mev_cm2_g[i]);
  }
  if (!(peak > 0.0)) throw DataError(who + ": every IDD value is 0");
  if (idd_mev_cm2_g.back() > 0.2 * peak)
    throw DataError(who + ": the curve ends at " + fmt(depth_mm.back()) + " mm with IDD " +
                    fmt(idd_mev_cm2_g.back()) + " MeV cm2/g, " +
                    fmt(100.0 * idd_mev_cm2_g.back() / peak) +
                    " % of its maximum: truncated before the distal fall-off (must end <= 20 %)");

  CumulativeDepthDose c;
  c.nominal_energy_mev_ = nominal_energy_mev;
  c.source_ = std::move(source);
  if (depth_mm.front() > 0.0) {
    // Linear extrapolation of the first two samples to the surface.
    const double slope = (idd_mev_cm2_g[1] - idd_mev_cm2_g[0]) / (depth_mm[1] - depth_mm[0]);
    c.depth_mm_.push_back(0.0);
    c.idd_.push_back(std::max(0.0, idd_mev_cm2_g[0] - slope * depth_mm[0]));
  }
  c.depth_mm_.insert(c.depth_mm_.end(), depth_mm.begin(), depth_mm.end());
  c.idd_.insert(c.idd_.end(), idd_mev_cm2_g.begin(), idd_mev_cm2_g.end());

  const std::size_t n = c.depth_mm_.size();
  c.cidd_.assign(n, 0.0);
  for (std::size_t i = 1; i < n; ++i)
    c.cidd_[i] = c.cidd_[i - 1] +
                 kGCm2PerMm * (c.depth_mm_[i] - c.depth_mm_[i - 1]) * 0.5 * (c.idd_[i - 1] + c.idd_[i]);

  if (n >= 3) {
    const double h = c.depth_mm_[2] - c.depth_mm_[1];
    bool uniform = true;
    for (std::size_t i = 2; i + 1 < n && uniform; ++i)
      uniform = std::abs((c.depth_mm_[i + 1] - c.depth_mm_[i]) - h) <= 1e-9 * std::max(1.0, h);
    if (uniform) c.uniform_step_mm_ = h;
  }
  c.compute_metrics();
  return c;
}

std::size_t CumulativeDepthDose::segment(double wepl_mm) const {
  // Precondition: depth_mm_[0] = 0 <= wepl_mm < end_depth_mm().
  const std::size_t last = depth_mm_.size() - 2;
  if (uniform_step_mm_ > 0.0) {
    if (wepl_mm < depth_mm_[1]) return 0;
    const auto i = static_cast<std::size_t>((wepl_mm - depth_mm_[1]) / uniform_step_mm_) + 1;
    return std::min(i, last);
  }
  const auto it = std::upper_bound(depth_mm_.begin(), depth_mm_.end(), wepl_mm);
  return std::min(static_cast<std::size_t>(it - depth_mm_.begin()) - 1, last);
}

double CumulativeDepthDose::cidd_mev(double wepl_mm) const {
  if (depth_mm_.empty() || wepl_mm <= 0.0) return 0.0;
  if (wepl_mm >= depth_mm_.back()) return cidd_.back();
  const std::size_t i = segment(wepl_mm);
  const double h = depth_mm_[i + 1] - depth_mm_[i];
  const double t = wepl_mm - depth_mm_[i];
  const double slope = (idd_[i + 1] - idd_[i]) / h;
  return cidd_[i] + kGCm2PerMm * t * (idd_[i] + 0.5 * slope * t);
}

double CumulativeDepthDose::idd_mev_cm2_g(double wepl_mm) const {
  if (depth_mm_.empty() || wepl_mm < 0.0 || wepl_mm > depth_mm_.back()) return 0.0;
  if (wepl_mm == depth_mm_.back()) return idd_.back();
  const std::size_t i = segment(wepl_mm);
  const double t = (wepl_mm - depth_mm_[i]) / (depth_mm_[i + 1] - depth_mm_[i]);
  return idd_[i] + t * (idd_[i + 1] - idd_[i]);
}

double CumulativeDepthDose::distal_depth_mm(double fraction) const {
  if (!(fraction > 0.0 && fraction < 1.0))
    throw InputError("distal depth: level " + fmt(fraction) + " must lie in (0, 1)");
  const double level = fraction * max_node_idd_;
  for (std::size_t j = peak_index_ + 1; j < idd_.size(); ++j) {
    if (idd_[j] < level) {
      const double t = (idd_[j - 1] - level) / (idd_[j - 1] - idd_[j]);
      return depth_mm_[j - 1] + t * (depth_mm_[j] - depth_mm_[j - 1]);
    }
  }
  return depth_mm_.back();  // the curve ends at or above the level (not for validated curves)
}

void CumulativeDepthDose::compute_metrics() {
  peak_index_ = static_cast<std::size_t>(std::max_element(idd_.begin(), idd_.end()) - idd_.begin());
  max_node_idd_ = idd_[peak_index_];
  r80_mm_ = distal_depth_mm(0.8);
  r90_mm_ = distal_depth_mm(0.9);
  r20_mm_ = distal_depth_mm(0.2);
  // Peak: least-squares parabola through the contiguous nodes >= 97 % of the
  // largest, at least the largest node and its neighbours.
  std::size_t lo = peak_index_, hi = peak_index_;
  while (lo > 0 && idd_[lo - 1] >= 0.97 * max_node_idd_) --lo;
  while (hi + 1 < idd_.size() && idd_[hi + 1] >= 0.97 * max_node_idd_) ++hi;
  if (hi - lo < 2) {
    lo = peak_index_ > 0 ? peak_index_ - 1 : 0;
    hi = std::min(peak_index_ + 1, idd_.size() - 1);
  }
  peak_depth_mm_ = depth_mm_[peak_index_];
  peak_idd_ = max_node_idd_;
  if (hi - lo < 2) return;
  const double x0 = depth_mm_[peak_index_];
  double s[5] = {0, 0, 0, 0, 0}, sy[3] = {0, 0, 0};
  for (std::size_t i = lo; i <= hi; ++i) {
    const double x = depth_mm_[i] - x0;
    double p = 1.0;
    for (int k = 0; k < 5; ++k) {
      if (k < 3) sy[k] += p * idd_[i];
      s[k] += p;
      p *= x;
    }
  }
  // Normal equations [s0 s1 s2; s1 s2 s3; s2 s3 s4] (a b c) = (sy0 sy1 sy2), Cramer's rule.
  const auto det3 = [](double a, double b, double c, double d, double e, double f, double g,
                       double h, double i) {
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  };
  const double det = det3(s[0], s[1], s[2], s[1], s[2], s[3], s[2], s[3], s[4]);
  if (det == 0.0) return;
  const double a = det3(sy[0], s[1], s[2], sy[1], s[2], s[3], sy[2], s[3], s[4]) / det;
  const double b = det3(s[0], sy[0], s[2], s[1], sy[1], s[3], s[2], sy[2], s[4]) / det;
  const double c = det3(s[0], s[1], sy[0], s[1], s[2], sy[1], s[2], s[3], sy[2]) / det;
  if (!(c < 0.0)) return;
  const double v = -b / (2.0 * c);
  if (x0 + v < depth_mm_[lo] || x0 + v > depth_mm_[hi]) return;
  peak_depth_mm_ = x0 + v;
  peak_idd_ = a + b * v + c * v * v;
}

double CumulativeDepthDose::peak_to_entrance() const {
  const double entrance = entrance_idd_mev_cm2_g();
  if (!(entrance > 0.0))
    throw NumericalError(source_ + " (" + energy_label(nominal_energy_mev_) +
                         "): entrance IDD is 0, no peak-to-entrance ratio");
  return peak_idd_ / entrance;
}

CumulativeDepthDose CumulativeDepthDose::rebinned(double bin_mm) const {
  if (!(bin_mm > 0.0) || !std::isfinite(bin_mm))
    throw InputError("rebinned: bin width " + fmt(bin_mm) + " mm must be > 0");
  const auto bins = static_cast<std::size_t>(std::ceil(end_depth_mm() / bin_mm - 1e-9));
  std::vector<double> centre, mean;
  for (std::size_t k = 0; k < bins; ++k) {
    centre.push_back((static_cast<double>(k) + 0.5) * bin_mm);
    mean.push_back((cidd_mev((k + 1.0) * bin_mm) - cidd_mev(k * bin_mm)) / (kGCm2PerMm * bin_mm));
  }
  centre.push_back(static_cast<double>(bins) * bin_mm);
  mean.push_back(0.0);
  return from_idd_samples(centre, mean, nominal_energy_mev_,
                          source_ + ", rebinned to " + fmt(bin_mm) + " mm");
}

// ---------------------------------------------------------------------------
// Bortfeld 1997

namespace {

/// J(a, ζ) = (2π)^−½ ∫₀^∞ t^a exp(−(t − ζ)²/2) dt for a > −1 (the mean of X₊^a, X ~ N(ζ, 1)).
double bortfeld_j(double a, double zeta) {
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * kPi);
  if (zeta >= 10.0) {
    // E[(ζ + Y)^a] = ζ^a Σ_k a(a−1)…(a−2k+1) / (2^k k!) ζ^(−2k)  (asymptotic; the mass at t < 0 is e^−50).
    double term = 1.0, sum = 1.0;
    const double z2 = zeta * zeta;
    for (int k = 1; k <= 30; ++k) {
      const double next = term * (a - 2.0 * k + 2.0) * (a - 2.0 * k + 1.0) / (2.0 * k * z2);
      if (std::abs(next) >= std::abs(term)) break;
      term = next;
      sum += term;
      if (std::abs(term) < 1e-17 * std::abs(sum)) break;
    }
    return std::pow(zeta, a) * sum;
  }
  if (zeta < -4.0) {
    // e^{−ζ²/2} Σ_m (−1)^m Γ(a+2m+1) / (2^m m! |ζ|^{a+2m+1})  (asymptotic, far beyond the range).
    const double x = -zeta;
    double term = std::exp(std::lgamma(a + 1.0) - (a + 1.0) * std::log(x));
    double sum = term;
    for (int m = 1; m <= 30; ++m) {
      const double next =
          -term * (a + 2.0 * m - 1.0) * (a + 2.0 * m) / (2.0 * m * x * x);
      if (std::abs(next) >= std::abs(term)) break;
      term = next;
      sum += term;
    }
    return inv_sqrt_2pi * std::exp(-0.5 * zeta * zeta) * sum;
  }
  // Power series: e^{−ζ²/2} Σ_n ζ^n/n! · 2^{(a+n−1)/2} Γ((a+n+1)/2); T_n = T_{n−2} ζ²(a+n−1)/(n(n−1)).
  double t_even = std::exp(0.5 * (a - 1.0) * std::log(2.0) + std::lgamma(0.5 * (a + 1.0)));
  double t_odd = zeta * std::exp(0.5 * a * std::log(2.0) + std::lgamma(0.5 * a + 1.0));
  double sum = t_even + t_odd;
  const double z2 = zeta * zeta;
  for (int n = 2; n < 2000; n += 2) {
    t_even *= z2 * (a + n - 1.0) / (n * (n - 1.0));
    t_odd *= z2 * (a + n) / ((n + 1.0) * n);
    sum += t_even + t_odd;
    if (n > z2 + 4.0 && std::abs(t_even) + std::abs(t_odd) < 1e-17 * std::abs(sum)) break;
  }
  return inv_sqrt_2pi * std::exp(-0.5 * z2) * sum;
}

void check_bortfeld_parameters(const BortfeldParameters& p) {
  if (!(p.beta_per_cm >= 0.0) || !std::isfinite(p.beta_per_cm))
    throw InputError("Bortfeld model: beta " + fmt(p.beta_per_cm) + " /cm must be >= 0");
  if (!(p.gamma >= 0.0 && p.gamma <= 1.0))
    throw InputError("Bortfeld model: gamma " + fmt(p.gamma) + " must lie in [0, 1]");
  if (!(p.upstream_wet_mm >= 0.0) || !std::isfinite(p.upstream_wet_mm))
    throw InputError("Bortfeld model: upstream WET " + fmt(p.upstream_wet_mm) + " mm must be >= 0");
  if (!(p.csda_range_scale > 0.5 && p.csda_range_scale < 1.5))
    throw InputError("Bortfeld model: CSDA range scale " + fmt(p.csda_range_scale) +
                     " must lie in (0.5, 1.5)");
  if (!(p.depth_step_mm > 0.0) || !std::isfinite(p.depth_step_mm))
    throw InputError("Bortfeld model: depth step " + fmt(p.depth_step_mm) + " mm must be > 0");
}

}  // namespace

double bortfeld_straggling_mm(double r0_mm) {
  if (!(r0_mm > 0.0) || !std::isfinite(r0_mm))
    throw InputError("Bortfeld straggling: range " + fmt(r0_mm) + " mm must be > 0");
  return 10.0 * 0.012 * std::pow(r0_mm / 10.0, 0.935);
}

double bortfeld_idd_mev_cm2_g(double depth_mm, double r0_mm, double sigma_mm,
                              const BortfeldParameters& parameters) {
  if (!(r0_mm > 0.0) || !std::isfinite(r0_mm))
    throw InputError("Bortfeld IDD: range R0 " + fmt(r0_mm) + " mm must be > 0");
  if (!(sigma_mm > 0.0) || !std::isfinite(sigma_mm))
    throw InputError("Bortfeld IDD: range spread sigma " + fmt(sigma_mm) + " mm must be > 0");
  const double p = kBraggKleemanP;
  const double r0_cm = 0.1 * r0_mm, sigma_cm = 0.1 * sigma_mm;
  const double zeta = (r0_mm - depth_mm) / sigma_mm;
  const double beta = parameters.beta_per_cm;
  const double prefactor = std::pow(sigma_cm, 1.0 / p) /
                           (kWaterDensityGPerCm3 * p * std::pow(kBraggKleemanAlphaCm, 1.0 / p) *
                            (1.0 + beta * r0_cm));
  return prefactor * (bortfeld_j(1.0 / p - 1.0, zeta) / sigma_cm +
                      (beta + parameters.gamma * beta * p) * bortfeld_j(1.0 / p, zeta));
}

CumulativeDepthDose bortfeld_depth_dose(double nominal_energy_mev, double mean_energy_mev,
                                        double energy_spread_mev,
                                        const BortfeldParameters& parameters) {
  check_bortfeld_parameters(parameters);
  if (!(energy_spread_mev >= 0.0) || !std::isfinite(energy_spread_mev))
    throw InputError("Bortfeld depth dose at " + energy_label(nominal_energy_mev) +
                     ": energy spread " + fmt(energy_spread_mev) + " MeV must be >= 0");
  const double r_csda_mm = parameters.csda_range_scale * csda_range_mm(mean_energy_mev);
  const double r0_mm = r_csda_mm - parameters.upstream_wet_mm;
  if (!(r0_mm > 0.0))
    throw InputError("Bortfeld depth dose at " + energy_label(nominal_energy_mev) +
                     ": upstream WET " + fmt(parameters.upstream_wet_mm) +
                     " mm exceeds the CSDA range " + fmt(r_csda_mm) + " mm");
  const double sigma_mono_mm = bortfeld_straggling_mm(r0_mm);
  const double dr_de_mm_per_mev =
      parameters.csda_range_scale * 10.0 / stopping_power_water_mev_cm2_g(mean_energy_mev);
  const double sigma_spread_mm = energy_spread_mev * dr_de_mm_per_mev;
  const double sigma_mm = std::sqrt(sigma_mono_mm * sigma_mono_mm + sigma_spread_mm * sigma_spread_mm);

  const double h = parameters.depth_step_mm;
  const auto nodes = static_cast<std::size_t>(std::ceil((r0_mm + 6.0 * sigma_mm) / h)) + 1;
  std::vector<double> depth(nodes), idd(nodes);
  for (std::size_t i = 0; i < nodes; ++i) {
    depth[i] = static_cast<double>(i) * h;
    idd[i] = bortfeld_idd_mev_cm2_g(depth[i], r0_mm, sigma_mm, parameters);
  }
  idd.back() = 0.0;  // end of the curve at R0 + 6σ (the IDD there is ~1e−8 of the peak)
  return CumulativeDepthDose::from_idd_samples(
      depth, idd, nominal_energy_mev,
      "Bortfeld 1997 (E mean " + fmt(mean_energy_mev) + " MeV, sigma E " + fmt(energy_spread_mev) +
          " MeV, R0 " + fmt(r0_mm) + " mm, sigma " + fmt(sigma_mm) + " mm)");
}

CumulativeDepthDose load_idd_csv(const std::filesystem::path& path, double nominal_energy_mev) {
  const detail::CsvTable csv = detail::read_csv(path);
  const std::size_t cd = csv.column("depth_mm");
  const std::size_t ci = csv.column("idd_MeV_cm2_per_g_per_proton");
  std::vector<double> depth, idd;
  for (std::size_t r = 0; r < csv.rows.size(); ++r) {
    const double d = csv.number(r, cd);
    const double v = csv.number(r, ci);
    if (d < 0.0) throw DataError(csv.where(r, cd) + ": depth " + fmt(d) + " mm must be >= 0");
    if (!depth.empty() && !(d > depth.back()))
      throw DataError(csv.where(r, cd) + ": depth " + fmt(d) + " mm is not above the previous row's " +
                      fmt(depth.back()) + " mm (depths must increase strictly)");
    if (v < 0.0)
      throw DataError(csv.where(r, ci) + ": IDD " + fmt(v) + " MeV cm2/g must be >= 0");
    depth.push_back(d);
    idd.push_back(v);
  }
  return CumulativeDepthDose::from_idd_samples(depth, idd, nominal_energy_mev, path.string());
}

// ---------------------------------------------------------------------------
// DepthDoseLibrary

DepthDoseLibrary DepthDoseLibrary::tabulated(std::vector<CumulativeDepthDose> curves,
                                             std::string source) {
  if (curves.empty()) throw DataError(source + ": the depth-dose library has no curves");
  std::sort(curves.begin(), curves.end(), [](const auto& a, const auto& b) {
    return a.nominal_energy_mev() < b.nominal_energy_mev();
  });
  for (std::size_t i = 0; i < curves.size(); ++i) {
    if (curves[i].empty()) throw DataError(source + ": curve " + std::to_string(i + 1) + " is empty");
    if (!(curves[i].nominal_energy_mev() > 0.0))
      throw DataError(source + ": nominal energy " + energy_label(curves[i].nominal_energy_mev()) +
                      " must be > 0");
    if (i > 0 && curves[i].nominal_energy_mev() == curves[i - 1].nominal_energy_mev())
      throw DataError(source + ": two depth-dose curves for " +
                      energy_label(curves[i].nominal_energy_mev()));
  }
  DepthDoseLibrary lib;
  lib.kind_ = Kind::kTabulated;
  lib.curves_ = std::move(curves);
  lib.source_ = std::move(source);
  return lib;
}

DepthDoseLibrary DepthDoseLibrary::analytical(std::vector<BeamEnergySpectrum> spectra,
                                              const BortfeldParameters& parameters,
                                              std::string source) {
  if (spectra.empty()) throw DataError(source + ": the analytical depth-dose library has no energies");
  try {
    check_bortfeld_parameters(parameters);
  } catch (const InputError& e) {
    throw DataError(source + ": " + e.what());
  }
  std::sort(spectra.begin(), spectra.end(), [](const auto& a, const auto& b) {
    return a.nominal_energy_mev < b.nominal_energy_mev;
  });
  for (std::size_t i = 0; i < spectra.size(); ++i) {
    const auto& s = spectra[i];
    const auto at = [&] { return source + ": energy " + energy_label(s.nominal_energy_mev) + ": "; };
    if (!(s.nominal_energy_mev > 0.0) || !std::isfinite(s.nominal_energy_mev))
      throw DataError(at() + "nominal energy must be > 0");
    if (!(s.mean_energy_mev > 0.0) || !std::isfinite(s.mean_energy_mev))
      throw DataError(at() + "mean energy " + fmt(s.mean_energy_mev) + " MeV must be > 0");
    if (!(s.energy_spread_mev >= 0.0) || !std::isfinite(s.energy_spread_mev))
      throw DataError(at() + "energy spread " + fmt(s.energy_spread_mev) + " MeV must be >= 0");
    if (i > 0 && s.nominal_energy_mev == spectra[i - 1].nominal_energy_mev)
      throw DataError(at() + "listed twice");
  }
  DepthDoseLibrary lib;
  lib.kind_ = Kind::kAnalyticalBortfeld;
  lib.spectra_ = std::move(spectra);
  lib.parameters_ = parameters;
  lib.source_ = std::move(source);
  return lib;
}

DepthDoseLibrary DepthDoseLibrary::load_idd_folder(const std::filesystem::path& folder) {
  const auto index_path = folder / "index.csv";
  const detail::CsvTable index = detail::read_csv(index_path);
  const std::size_t ce = index.column("nominal_energy_MeV");
  const std::size_t cf = index.column("file");
  std::vector<CumulativeDepthDose> curves;
  for (std::size_t r = 0; r < index.rows.size(); ++r) {
    const double e = index.number(r, ce);
    if (!(e > 0.0))
      throw DataError(index.where(r, ce) + ": nominal energy " + fmt(e) + " MeV must be > 0");
    if (!curves.empty() && !(e > curves.back().nominal_energy_mev()))
      throw DataError(index.where(r, ce) + ": nominal energy " + fmt(e) +
                      " MeV is not above the previous row's " +
                      fmt(curves.back().nominal_energy_mev()) + " MeV (energies must increase)");
    if (index.rows[r][cf].empty()) throw DataError(index.where(r, cf) + ": empty file name");
    curves.push_back(load_idd_csv(folder / index.rows[r][cf], e));
  }
  return tabulated(std::move(curves), folder.string());
}

double DepthDoseLibrary::min_energy_mev() const {
  if (kind_ == Kind::kTabulated) return curves_.empty() ? 0.0 : curves_.front().nominal_energy_mev();
  return spectra_.empty() ? 0.0 : spectra_.front().nominal_energy_mev;
}

double DepthDoseLibrary::max_energy_mev() const {
  if (kind_ == Kind::kTabulated) return curves_.empty() ? 0.0 : curves_.back().nominal_energy_mev();
  return spectra_.empty() ? 0.0 : spectra_.back().nominal_energy_mev;
}

std::vector<double> DepthDoseLibrary::energies_mev() const {
  std::vector<double> e;
  for (const auto& c : curves_) e.push_back(c.nominal_energy_mev());
  for (const auto& s : spectra_) e.push_back(s.nominal_energy_mev);
  return e;
}

std::string DepthDoseLibrary::description() const {
  const std::string kind = kind_ == Kind::kTabulated ? "tabulated IDDs" : "analytical Bortfeld 1997";
  return kind + " from " + source_ + ", " + std::to_string(energies_mev().size()) +
         " energies, " + fmt(min_energy_mev()) + " to " + fmt(max_energy_mev()) + " MeV";
}

CumulativeDepthDose DepthDoseLibrary::curve(double nominal_energy_mev) const {
  if (empty()) throw InputError("depth dose: the depth-dose library is empty");
  const double e = nominal_energy_mev;
  if (!(e >= min_energy_mev() && e <= max_energy_mev()))
    throw InputError("depth dose: nominal energy " + fmt(e) + " MeV is outside the depth-dose library " +
                     source_ + " (accepted " + fmt(min_energy_mev()) + " to " +
                     fmt(max_energy_mev()) + " MeV)");
  if (kind_ == Kind::kAnalyticalBortfeld) {
    auto hi = std::lower_bound(spectra_.begin(), spectra_.end(), e,
                               [](const auto& s, double v) { return s.nominal_energy_mev < v; });
    if (hi->nominal_energy_mev == e)
      return bortfeld_depth_dose(e, hi->mean_energy_mev, hi->energy_spread_mev, parameters_);
    const auto lo = hi - 1;
    const double f = (e - lo->nominal_energy_mev) / (hi->nominal_energy_mev - lo->nominal_energy_mev);
    return bortfeld_depth_dose(e, lo->mean_energy_mev + f * (hi->mean_energy_mev - lo->mean_energy_mev),
                               lo->energy_spread_mev + f * (hi->energy_spread_mev - lo->energy_spread_mev),
                               parameters_);
  }
  auto hi = std::lower_bound(curves_.begin(), curves_.end(), e,
                             [](const auto& c, double v) { return c.nominal_energy_mev() < v; });
  if (hi->nominal_energy_mev() == e) return *hi;
  const CumulativeDepthDose& c1 = *(hi - 1);
  const CumulativeDepthDose& c2 = *hi;
  const double e1 = c1.nominal_energy_mev(), e2 = c2.nominal_energy_mev();
  const double f = (e - e1) / (e2 - e1);
  // Target R80: the neighbours' R80 scaled by the PSTAR range ratio, mixed geometrically.
  const double r_csda = csda_range_mm(e);
  const double r1 = c1.r80_mm(), r2 = c2.r80_mm();
  const double r = std::exp((1.0 - f) * std::log(r1 * r_csda / csda_range_mm(e1)) +
                            f * std::log(r2 * r_csda / csda_range_mm(e2)));
  const double s1 = r1 / r, s2 = r2 / r;  // depth w of the result ↔ depth w·s_j of curve j
  // The mixture is exactly piecewise linear on the union of both curves' mapped nodes.
  std::vector<double> w;
  for (double d : c1.depth_mm()) w.push_back(d / s1);
  for (double d : c2.depth_mm()) w.push_back(d / s2);
  std::sort(w.begin(), w.end());
  std::vector<double> nodes;
  for (double x : w)
    if (nodes.empty() || x > nodes.back() + 1e-9) nodes.push_back(x);
  std::vector<double> idd(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i)
    idd[i] = (1.0 - f) * s1 * c1.idd_mev_cm2_g(nodes[i] * s1) + f * s2 * c2.idd_mev_cm2_g(nodes[i] * s2);
  return CumulativeDepthDose::from_idd_samples(
      nodes, idd, e,
      source_ + " interpolated between " + energy_label(e1) + " and " + energy_label(e2));
}

}  // namespace protondose::physics
