#pragma once
/// \file beam_model.h
/// A treatment machine's beam model: per nominal energy the beam's mean energy
/// and spread, protons per MU and the in-air optics (emittance per axis at a
/// reference plane), the virtual source–axis distances, and its depth-dose
/// library. Loaders for protondose's machine folders (docs/formats/machine-file.md),
/// the DCPT emittance CSV and MCsquare BDL files (docs/physics/beam-model.md).
///
/// Units: energies MeV; lengths mm; angles rad. Nominal energy is the energy
/// requested in the plan (DICOM NominalBeamEnergy). Axes are IEC 61217 gantry
/// X and Y (the DICOM spot axes).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "protondose/physics/depth_dose.h"
#include "protondose/physics/spot_optics.h"

namespace protondose::physics {

/// One row of a beam model's energy table.
struct BeamModelEnergy {
  double nominal_energy_mev = 0.0;  ///< nominal energy (MeV), > 0
  double mean_energy_mev = 0.0;     ///< mean kinetic energy at the optics plane (MeV), > 0
  double energy_spread_mev = 0.0;   ///< Gaussian energy spread, 1σ (MeV), ≥ 0
  double protons_per_mu = 0.0;      ///< protons per monitor unit, > 0
  AxisEmittance x;                  ///< optics of IEC X at the reference plane
  AxisEmittance y;                  ///< optics of IEC Y at the reference plane
};

/// A validated, immutable beam model.
///
/// Every per-energy quantity is interpolated linearly in nominal energy between
/// the table rows (σ0, σθ and ρ each linearly). The accepted energies are
/// [min_energy_mev, max_energy_mev]: the overlap of the energy table and the
/// depth-dose library. Outside it every accessor throws InputError naming the
/// energy and that range — nothing is clamped or extrapolated.
class BeamModel {
 public:
  /// Validates and builds a model. Requirements: non-empty name; VSADs > 0;
  /// reference plane distance > 0; ≥ 1 energy row; nominal energies strictly
  /// increasing; mean energy > 0, spread ≥ 0, protons/MU > 0, σ0 > 0, σθ ≥ 0,
  /// |ρ| < 1 per row; a non-empty depth-dose library whose range overlaps the
  /// table. `source` (file or folder) names the origin in messages.
  /// Throws DataError (source, row 1-based, column, value) otherwise.
  BeamModel(std::string name, double vsad_x_mm, double vsad_y_mm,
            double reference_plane_upstream_of_isocentre_mm, std::vector<BeamModelEnergy> energies,
            DepthDoseLibrary depth_doses, std::string source);

  const std::string& name() const { return name_; }
  /// File or folder the model was read from (or a description).
  const std::string& source() const { return source_; }
  /// Virtual source–axis distance along IEC X / Y (mm).
  double vsad_x_mm() const { return vsad_x_mm_; }
  double vsad_y_mm() const { return vsad_y_mm_; }
  double vsad_mm(Axis axis) const { return axis == Axis::kX ? vsad_x_mm_ : vsad_y_mm_; }
  /// Distance (mm) of the optics reference plane upstream of the isocentre.
  double reference_plane_upstream_of_isocentre_mm() const { return reference_plane_mm_; }

  /// Accepted nominal energies (MeV).
  double min_energy_mev() const { return min_energy_mev_; }
  double max_energy_mev() const { return max_energy_mev_; }

  /// Mean kinetic energy (MeV) at the optics plane for nominal energy `nominal_energy_mev`.
  double mean_energy_mev(double nominal_energy_mev) const;
  /// Energy spread (MeV, 1σ).
  double energy_spread_mev(double nominal_energy_mev) const;
  /// Protons per MU (absolute dose: protons = MU × protons_per_mu).
  double protons_per_mu(double nominal_energy_mev) const;
  /// The interpolated table row at `nominal_energy_mev`.
  BeamModelEnergy energy_row(double nominal_energy_mev) const;
  /// The beam model's emittance of `axis` at the reference plane.
  AxisEmittance emittance(double nominal_energy_mev, Axis axis) const;

  /// In-air spot σ (mm) of the beam model at `z_from_isocentre_mm` (mm, positive
  /// downstream of the isocentre) — policy SpotSizePolicy::kBeamModel.
  double spot_sigma_in_air_mm(double nominal_energy_mev, Axis axis,
                              double z_from_isocentre_mm) const;

  /// The emittance of `axis` under `policy`. For kPlanSpotSizeAtIsocentre,
  /// `plan_fwhm_at_isocentre_mm` (DICOM ScanningSpotSize of that axis, mm) must
  /// be given and > 0; σ0 is rescaled so that the in-air σ at the isocentre is
  /// FWHM/kFwhmPerSigma (with_sigma_at_isocentre), logged once per process.
  /// For kBeamModel the FWHM is ignored. Throws InputError (energy, axis, FWHM)
  /// for a missing or non-positive FWHM under the plan policy or one the
  /// model's divergence cannot reach.
  AxisEmittance spot_emittance(double nominal_energy_mev, Axis axis, SpotSizePolicy policy,
                               std::optional<double> plan_fwhm_at_isocentre_mm) const;
  /// In-air σ (mm) at `z_from_isocentre_mm` under `policy` (see spot_emittance).
  double spot_sigma_in_air_mm(double nominal_energy_mev, Axis axis, double z_from_isocentre_mm,
                              SpotSizePolicy policy,
                              std::optional<double> plan_fwhm_at_isocentre_mm) const;

  /// The cumulative depth dose in water at `nominal_energy_mev`
  /// (DepthDoseLibrary::curve). Depth from the water surface; the curve
  /// includes the energy lost between the optics plane and a water surface at
  /// the isocentre plane (as in the machine's commissioning data).
  CumulativeDepthDose depth_dose(double nominal_energy_mev) const;
  const DepthDoseLibrary& depth_dose_library() const { return depth_doses_; }
  /// The energy table as given (ascending nominal energy).
  const std::vector<BeamModelEnergy>& energy_table() const { return energies_; }

  /// A copy with another depth-dose library (validated as in the constructor).
  BeamModel with_depth_doses(DepthDoseLibrary depth_doses) const;

 private:
  void check_energy(double nominal_energy_mev, const char* what) const;
  std::string name_;
  double vsad_x_mm_ = 0.0, vsad_y_mm_ = 0.0, reference_plane_mm_ = 0.0;
  std::vector<BeamModelEnergy> energies_;
  DepthDoseLibrary depth_doses_;
  std::string source_;
  double min_energy_mev_ = 0.0, max_energy_mev_ = 0.0;
};

/// Loads a machine. `name_or_path`: an existing file or folder is loaded by its
/// format (a protondose machine folder or its machine.txt, an MCsquare BDL
/// beginning "--UPenn beam model", or a DCPT emittance CSV — the latter needs
/// VSADs, so use load_dcpt_emittance_csv); a bare name (no '/') is looked up as
/// <shipped_data_dir()>/machines/<name>/. Throws DataError listing the machines
/// available when nothing matches (never a generic fallback), and the loaders'
/// errors otherwise.
BeamModel load_machine(const std::string& name_or_path);

/// Names of the machine folders in `machines_dir` (default
/// <shipped_data_dir()>/machines), sorted; folders without machine.txt are skipped.
std::vector<std::string> available_machines(const std::filesystem::path& machines_dir = {});

/// Reads a protondose machine folder (machine.txt + energy table + depth
/// doses; docs/formats/machine-file.md). `path` is the folder or its machine.txt.
/// Throws IoError / DataError (file, row, key or column, value).
BeamModel load_machine_folder(const std::filesystem::path& path);

/// Reads a DCPT emittance beam-model CSV (APTG/2022_DCPT_LET,
/// DCPT_beam_model__v?.csv): header comments with "BMODPOS <mm> mm" (reference
/// plane upstream of the isocentre), then rows of nominal E, E real, E real σ,
/// protons/MU, σx, σy, σx', σy', ρx, ρy. The file carries no VSADs, so they
/// are arguments (mm, > 0). The depth-dose library is the analytical Bortfeld
/// model over the file's mean energies and spreads, with `bortfeld` when given
/// (used as is), else Bortfeld's published β, γ, PSTAR ranges and the air of the
/// BMODPOS distance as upstream WET (kAirWetPerMm). Throws IoError / DataError.
BeamModel load_dcpt_emittance_csv(const std::filesystem::path& path, const std::string& name,
                                  double vsad_x_mm, double vsad_y_mm,
                                  const std::optional<BortfeldParameters>& bortfeld = std::nullopt);

/// Reads an MCsquare beam data library ("--UPenn beam model (double gaussian)--"):
/// nozzle-exit-to-isocentre distance (the reference plane), SMX/SMY (VSADs),
/// and per energy MeanEnergy, EnergySpread (% of the nominal energy, MCsquare's
/// convention: σ_E = spread/100 · E_nominal), ProtonsMU and the first Gaussian's
/// optics. Double-Gaussian rows (Weight2 > 0) throw UnavailableError. Range-shifter
/// blocks are skipped. The machine name is the file stem. The depth-dose
/// library is analytical, as for load_dcpt_emittance_csv (upstream WET: the air
/// of the nozzle-exit distance unless `bortfeld` is given).
/// Throws IoError / DataError (file, line, value).
BeamModel load_mcsquare_bdl(const std::filesystem::path& path,
                            const std::optional<BortfeldParameters>& bortfeld = std::nullopt);

}  // namespace protondose::physics
