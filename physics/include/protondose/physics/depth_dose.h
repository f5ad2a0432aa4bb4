#pragma once
/// \file depth_dose.h
/// Integrated depth doses (IDD) of proton pencil beams in water, kept as
/// cumulative tables (CIDD), from two sources:
///  - Bortfeld's analytical Bragg curve (T. Bortfeld, "An analytical
///    approximation of the Bragg curve for therapeutic proton beams",
///    Med. Phys. 24:2024–2033, 1997, Eqs. 26–29), with range straggling and the
///    beam's energy spread;
///  - tabulated IDDs (Monte Carlo or measured) read from CSV.
/// A DepthDoseLibrary gives the curve at any nominal energy of its range
/// (docs/physics/depth-dose.md).
///
/// Units: depth is water-equivalent depth (WEPL) in mm from the water surface;
/// IDD in MeV·cm²/g per proton (energy deposited per unit areal density,
/// integrated over the whole lateral plane); CIDD in MeV per proton. With water
/// density 1 g/cm³, 1 mm = 0.1 g/cm², so CIDD(w) = 0.1 · ∫₀^w IDD(d) dd[mm].

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace protondose::physics {

/// Depth at which the "entrance" IDD is read for peak-to-entrance ratios (mm):
/// the centre of the first 1 mm bin, as in the DCPT MC reference tables.
inline constexpr double kEntranceDepthMm = 0.5;

/// One energy's cumulative integrated depth dose in water.
///
/// Stored as IDD samples at nodes d_0 = 0 < d_1 < … < d_n (mm); the IDD is
/// linear between nodes and 0 beyond d_n, so CIDD is the exact integral of that
/// piecewise-linear IDD: continuous, monotone non-decreasing, constant past d_n.
/// Immutable; cheap to copy (a few thousand doubles).
class CumulativeDepthDose {
 public:
  CumulativeDepthDose() = default;

  /// Builds a curve from IDD samples at depths (mm): depths finite, ≥ 0 and
  /// strictly increasing, at least 2 samples; IDD values finite and ≥ 0 (MeV·cm²/g
  /// per proton), not all 0. If the first depth is > 0, a node at depth 0 is
  /// added by linear extrapolation of the first two samples (clamped at 0), so
  /// that tabulated bin averages at bin centres keep their meaning. The last
  /// sample is the end of the curve (IDD 0 beyond it).
  /// `nominal_energy_mev` labels the curve; `source` (file, model) appears in
  /// messages. Throws DataError naming source, sample index (1-based) and value.
  static CumulativeDepthDose from_idd_samples(const std::vector<double>& depth_mm,
                                              const std::vector<double>& idd_mev_cm2_g,
                                              double nominal_energy_mev, std::string source);

  /// Energy deposited per proton (MeV) between the surface and water-equivalent
  /// depth `wepl_mm` (mm). 0 for wepl_mm ≤ 0; total_energy_mev() for
  /// wepl_mm ≥ end_depth_mm(). Precondition: wepl_mm is not NaN.
  double cidd_mev(double wepl_mm) const;
  /// IDD (MeV·cm²/g per proton) at `wepl_mm` (mm): linear between nodes, 0 outside
  /// [0, end_depth_mm()].
  double idd_mev_cm2_g(double wepl_mm) const;

  /// Total energy deposited per proton (MeV) = CIDD at the end of the curve.
  double total_energy_mev() const { return cidd_.empty() ? 0.0 : cidd_.back(); }
  /// Depth (mm) beyond which the IDD is 0.
  double end_depth_mm() const { return depth_mm_.empty() ? 0.0 : depth_mm_.back(); }

  /// The curve's range (mm): the distal 80 % depth, R80 (what the engine uses
  /// to decide where a layer's pencils stop, with a margin).
  double range_mm() const { return r80_mm_; }
  /// Distal depth (mm) where the IDD falls to 80 % / 90 % / 20 % of the largest
  /// node value, by linear interpolation between nodes (the definition of the
  /// DCPT MC tables, idd_summary.csv).
  double r80_mm() const { return r80_mm_; }
  double r90_mm() const { return r90_mm_; }
  double r20_mm() const { return r20_mm_; }
  /// Distal depth (mm) of the IDD level `fraction` ∈ (0, 1) of the largest node.
  /// Throws InputError for a fraction outside (0, 1).
  double distal_depth_mm(double fraction) const;
  /// Depth of the maximum (mm): vertex of a least-squares parabola through the
  /// contiguous nodes with IDD ≥ 97 % of the largest node, at least the largest
  /// node and its two neighbours (as in idd_summary.csv); the largest node's
  /// depth if the fit has no maximum inside those nodes.
  double peak_depth_mm() const { return peak_depth_mm_; }
  /// IDD at the vertex of that parabola (MeV·cm²/g per proton), else the largest node.
  double peak_idd_mev_cm2_g() const { return peak_idd_; }
  /// Largest node IDD (MeV·cm²/g per proton), the reference of the R-levels.
  double max_node_idd_mev_cm2_g() const { return max_node_idd_; }
  /// IDD at kEntranceDepthMm (MeV·cm²/g per proton).
  double entrance_idd_mev_cm2_g() const { return idd_mev_cm2_g(kEntranceDepthMm); }
  /// peak_idd_mev_cm2_g() / entrance_idd_mev_cm2_g() (dimensionless).
  double peak_to_entrance() const;

  /// The same curve averaged over bins [k·bin_mm, (k+1)·bin_mm) and sampled at
  /// the bin centres (what a Monte Carlo scorer with that bin width reports),
  /// e.g. to compare an analytical curve with 1 mm MC tables. The bin averages
  /// are exact; the rebinned curve (linear between bin centres) keeps the total
  /// energy to second order in bin_mm. Throws InputError for bin_mm ≤ 0.
  CumulativeDepthDose rebinned(double bin_mm) const;

  double nominal_energy_mev() const { return nominal_energy_mev_; }
  const std::string& source() const { return source_; }
  /// Node depths (mm, first 0), node IDDs (MeV·cm²/g), node CIDDs (MeV).
  const std::vector<double>& depth_mm() const { return depth_mm_; }
  const std::vector<double>& idd_nodes_mev_cm2_g() const { return idd_; }
  const std::vector<double>& cidd_nodes_mev() const { return cidd_; }
  /// > 0 when the nodes d_1, d_2, … are equally spaced by this step (mm): the
  /// segment of a depth is then found by division (cidd_mev and the engine's kernels).
  double uniform_step_mm() const { return uniform_step_mm_; }
  bool empty() const { return depth_mm_.empty(); }

 private:
  std::size_t segment(double wepl_mm) const;
  void compute_metrics();
  std::vector<double> depth_mm_;
  std::vector<double> idd_;
  std::vector<double> cidd_;
  double uniform_step_mm_ = 0.0;  ///< > 0 when nodes d_1… are equally spaced (fast lookup)
  double nominal_energy_mev_ = 0.0;
  double r80_mm_ = 0.0, r90_mm_ = 0.0, r20_mm_ = 0.0;
  double peak_depth_mm_ = 0.0, peak_idd_ = 0.0, max_node_idd_ = 0.0;
  std::size_t peak_index_ = 0;
  std::string source_;
};

/// Parameters of Bortfeld's analytical Bragg curve (Bortfeld 1997).
struct BortfeldParameters {
  /// Fractional loss of primary fluence per cm by nonelastic nuclear
  /// interactions (cm⁻¹), Bortfeld 1997 Eq. 20: β = 0.012 cm⁻¹.
  double beta_per_cm = 0.012;
  /// Fraction of the energy released in nuclear interactions deposited
  /// locally (dimensionless), Bortfeld 1997: γ = 0.6.
  double gamma = 0.6;
  /// Water-equivalent thickness (mm) of the material between the plane where
  /// the beam's mean energy is defined and the water surface (e.g. the air
  /// between the nozzle's optics reference plane and the phantom). The model
  /// range is R0 = csda_range_scale · R_CSDA(E_mean) − upstream_wet_mm.
  double upstream_wet_mm = 0.0;
  /// Ratio of the water CSDA range of the beam data (a Monte Carlo code's
  /// stopping powers, or a measured water I-value) to PSTAR's (I = 75 eV);
  /// 1 = PSTAR. Scales R0 and dR/dE alike. A 1 % change of I moves ranges by
  /// about 0.12 % at 150 MeV.
  double csda_range_scale = 1.0;
  /// Depth step (mm) of the stored curve; the IDD is evaluated at these nodes.
  double depth_step_mm = 0.1;
};

/// Mass WET of air per mm of air path (mm water per mm air): ρ_air·(S/ρ)_air/(S/ρ)_water
/// = 1.20479e-3 g/cm³ (dry air, NIST) × 0.884 (PSTAR/ICRU 49 air-to-water mass
/// stopping-power ratio, 70–230 MeV).
inline constexpr double kAirWetPerMm = 1.20479e-3 * 0.884;

/// Range straggling of a monoenergetic beam (mm, 1σ) for range `r0_mm` (mm):
/// σ_mono = 0.012·R0^0.935 with R0 in cm (Bortfeld 1997 Eq. 18).
double bortfeld_straggling_mm(double r0_mm);

/// Bortfeld IDD (MeV·cm²/g per proton) at `depth_mm` (mm) for a range R0
/// (`r0_mm`) and total range spread σ (`sigma_mm`, > 0):
///   IDD(z) = σ^{1/p} / (ρ p α^{1/p} (1 + βR0)) · [ σ⁻¹ J(1/p − 1, ζ) + (β + γβp) J(1/p, ζ) ],
///   J(a, ζ) = (2π)^−½ ∫₀^∞ t^a exp(−(t − ζ)²/2) dt = Γ(a+1) (2π)^−½ e^{−ζ²/4} D_{−a−1}(−ζ),
/// ζ = (R0 − z)/σ, which is Bortfeld 1997 Eq. 29 (ε = 0) written with the
/// parabolic cylinder functions D_{−1/p} and D_{−1/p−1}. J is evaluated by its
/// power series (ζ < 10) and asymptotic series (ζ ≥ 10, and ζ < −4).
/// Throws InputError for r0_mm ≤ 0 or sigma_mm ≤ 0.
double bortfeld_idd_mev_cm2_g(double depth_mm, double r0_mm, double sigma_mm,
                              const BortfeldParameters& parameters);

/// Bortfeld's curve for a beam of mean energy `mean_energy_mev` (MeV, at the
/// plane upstream of `parameters.upstream_wet_mm`) and Gaussian energy spread
/// `energy_spread_mev` (MeV, 1σ ≥ 0): R0 = k·R_CSDA,PSTAR(E) − upstream WET
/// (k = csda_range_scale), σ² = σ_mono(R0)² + (σ_E · dR/dE)², dR/dE = k·10/S_PSTAR(E)
/// mm/MeV (Bortfeld Eq. 19 with the PSTAR slope in place of the power law). Sampled every
/// depth_step_mm up to R0 + 6σ. `nominal_energy_mev` labels the curve.
/// Throws InputError for energies outside PSTAR or a negative spread.
CumulativeDepthDose bortfeld_depth_dose(double nominal_energy_mev, double mean_energy_mev,
                                        double energy_spread_mev,
                                        const BortfeldParameters& parameters);

/// Reads one tabulated IDD: a CSV with columns `depth_mm` (strictly increasing,
/// ≥ 0) and `idd_MeV_cm2_per_g_per_proton` (≥ 0), found by name (other columns
/// ignored, '#' lines are comments) — the format of the DCPT v5 MC tables
/// (idd_E???.csv) and of the machine IDD files (docs/formats/machine-file.md).
/// Throws IoError (cannot read) or DataError naming file, row and value.
CumulativeDepthDose load_idd_csv(const std::filesystem::path& path, double nominal_energy_mev);

/// Nominal energy and the beam's mean energy and spread, for the analytical library.
struct BeamEnergySpectrum {
  double nominal_energy_mev = 0.0;  ///< nominal (requested) energy, MeV
  double mean_energy_mev = 0.0;     ///< mean kinetic energy at the optics plane, MeV
  double energy_spread_mev = 0.0;   ///< Gaussian energy spread, 1σ, MeV
};

/// The depth-dose curves of a machine, by nominal energy.
///
/// Tabulated: curves at nominal energies E_1 < … < E_n. At a tabulated energy the
/// stored curve is returned unchanged. Between E_i and E_{i+1} (f = (E − E_i)/(E_{i+1} − E_i))
/// the two neighbours are mapped to reduced depth w/R80 and mixed:
///   CIDD(w) = (1 − f)·CIDD_i(w·R_i/R) + f·CIDD_{i+1}(w·R_{i+1}/R),
/// with R = exp[(1 − f)·ln(R_i·ρ_i) + f·ln(R_{i+1}·ρ_{i+1})], ρ_j = R_CSDA(E)/R_CSDA(E_j)
/// (PSTAR; R_j the neighbours' R80). So R80 follows the PSTAR range–energy slope,
/// the IDD amplitude scales as R_j/R, and the total energy interpolates linearly.
/// Never nearest-neighbour.
/// Analytical: the mean energy and spread are interpolated linearly in nominal
/// energy between the given points and Bortfeld's curve is computed at E.
/// Energies outside [min_energy_mev, max_energy_mev] throw InputError naming
/// the energy and the range.
class DepthDoseLibrary {
 public:
  enum class Kind { kTabulated, kAnalyticalBortfeld };

  DepthDoseLibrary() = default;
  /// A tabulated library. Curves need distinct nominal energies (any order; sorted here).
  /// Throws DataError (naming `source` and the energy) if empty or duplicated.
  static DepthDoseLibrary tabulated(std::vector<CumulativeDepthDose> curves, std::string source);
  /// An analytical library over the given spectra (sorted here; ≥ 1 point,
  /// distinct nominal energies, mean energies > 0, spreads ≥ 0).
  /// Throws DataError naming `source` otherwise.
  static DepthDoseLibrary analytical(std::vector<BeamEnergySpectrum> spectra,
                                     const BortfeldParameters& parameters, std::string source);
  /// Reads a folder of tabulated IDDs: `index.csv` with columns
  /// nominal_energy_MeV,file (file relative to the folder), each file as load_idd_csv.
  /// Throws IoError / DataError (file, row, value).
  static DepthDoseLibrary load_idd_folder(const std::filesystem::path& folder);

  /// The curve at nominal energy `nominal_energy_mev` (MeV), as described above.
  /// Throws InputError if the energy is outside the library's range or not finite.
  CumulativeDepthDose curve(double nominal_energy_mev) const;

  Kind kind() const { return kind_; }
  double min_energy_mev() const;
  double max_energy_mev() const;
  /// Nominal energies of the stored curves / spectra (MeV, ascending).
  std::vector<double> energies_mev() const;
  /// The stored tabulated curves (empty for an analytical library).
  const std::vector<CumulativeDepthDose>& tabulated_curves() const { return curves_; }
  const BortfeldParameters& bortfeld_parameters() const { return parameters_; }
  /// One line: kind, source and energy range, for logs and reports.
  std::string description() const;
  bool empty() const { return curves_.empty() && spectra_.empty(); }

 private:
  Kind kind_ = Kind::kTabulated;
  std::vector<CumulativeDepthDose> curves_;
  std::vector<BeamEnergySpectrum> spectra_;
  BortfeldParameters parameters_;
  std::string source_;
};

}  // namespace protondose::physics
