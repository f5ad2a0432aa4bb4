#pragma once
/// \file ion_plan.h
/// Reading RT Ion Plans (proton pencil-beam scanning) into protondose::IonPlan.

#include <string>
#include <vector>

#include "protondose/core/plan.h"

namespace protondose::dicom {

/// Relaxations for non-conforming or partly supported plans. The defaults are
/// strict: every relaxation must be asked for, and each use is recorded in
/// IonPlanReadResult::warnings.
struct IonPlanReadOptions {
  /// Beams with an IonBlockSequence (aperture/block) are normally refused
  /// (UnavailableError: the engine does not model apertures). true: load the
  /// beam and drop the aperture, with a warning — dose will be wrong outside
  /// the aperture's shadow.
  bool drop_apertures = false;
  /// A range shifter declared in RangeShifterSequence without a
  /// RangeShifterSettingsSequence on the first control point (DICOM requires
  /// it; the TOPAS demo plan omits it) is normally an InputError. true: treat
  /// it as not inserted, with a warning.
  bool allow_range_shifter_without_settings = false;
};

/// Per-beam facts the core IonBeam does not carry.
struct IonBeamDetails {
  int beam_number = 0;
  std::string patient_position;   ///< PatientSetupSequence PatientPosition (HFS, ...); may be empty
  std::string treatment_delivery_type;  ///< TREATMENT, VERIFICATION, ...
  int number_of_control_points = 0;
  /// RangeShifterSetting per inserted shifter, parallel to IonBeam::range_shifters.
  std::vector<std::string> range_shifter_settings;
  /// Range shifters declared but stated OUT (or without settings when allowed).
  std::vector<std::string> range_shifters_not_inserted;
  bool aperture_dropped = false;  ///< an IonBlockSequence was present and ignored
};

/// The plan plus what the reader noticed.
struct IonPlanReadResult {
  IonPlan plan;
  std::vector<IonBeamDetails> beams;  ///< parallel to plan.beams
  std::string rt_plan_geometry;       ///< RTPlanGeometry (PATIENT / TREATMENT_DEVICE)
  std::vector<std::string> warnings;  ///< one line per relaxation used (IonPlanReadOptions)
  /// BeamNumbers of beams with TreatmentDeliveryType SETUP (imaging/setup
  /// fields that deliver no dose): not read, not in plan.beams.
  std::vector<int> setup_beams_skipped;
};

/// Reads an RT Ion Plan (PBS, ScanMode MODULATED, protons).
///
/// Per spot, meterset per fraction = ScanSpotMetersetWeights[i] ×
/// BeamMeterset / FinalCumulativeMetersetWeight (BeamMeterset from the
/// FractionGroupSequence's ReferencedBeamSequence), in the beam's
/// PrimaryDosimeterUnit (MU or NP). Control points whose weights are all zero
/// (the "off" half of each pair) contribute nothing; contributing control
/// points at the same NominalBeamEnergy as the previous contributing one join
/// its EnergyLayer (a layer split over several pairs), a change of energy
/// starts a new one. Gantry, couch and isocentre are taken from the
/// first control point; a later control point that states a different gantry
/// or couch angle is an arc → UnavailableError. NominalBeamEnergy and
/// IsocenterPosition are inherited from earlier control points where absent.
/// Beams with TreatmentDeliveryType SETUP are skipped (listed in
/// setup_beams_skipped). Range shifters: RangeShifterSettingsSequence of the first control point,
/// setting IN → RangeShifter with RangeShifterWaterEquivalentThickness and
/// IsocenterToRangeShifterDistance.
///
/// Throws IoError (unreadable file), InputError (not an RT Ion Plan, missing
/// or inconsistent element — message names file, beam, control point and tag
/// keyword (gggg,eeee): spot-count/weight-count mismatch, negative spot
/// weight, BeamMeterset or FinalCumulativeMetersetWeight ≤ 0, missing energy,
/// beam without a FractionGroupSequence entry), UnavailableError (naming beam
/// and feature: RadiationType other than PROTON, ScanMode other than
/// MODULATED, compensators, wedges, blocks/apertures, range modulators, arcs).
IonPlanReadResult read_ion_plan_detailed(const std::string& path,
                                         const IonPlanReadOptions& options = {});

/// read_ion_plan_detailed(path, {}).plan: strict defaults.
IonPlan read_ion_plan(const std::string& path);

/// Throws InputError naming both UIDs when the CT and the plan have different
/// (or empty) FrameOfReferenceUIDs: the plan's isocentre would be placed in
/// the wrong coordinate system.
void check_same_frame_of_reference(const CtImage& ct, const IonPlan& plan);

}  // namespace protondose::dicom
