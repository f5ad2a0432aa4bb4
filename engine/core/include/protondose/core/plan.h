#pragma once
/// \file plan.h
/// A proton pencil-beam-scanning treatment plan, as the engine needs it:
/// beams → energy layers → spots, with per-fraction spot meterset.
/// Filled by the DICOM reader (dicom/) or built in memory (tests, phantoms).

#include <optional>
#include <string>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose {

/// The unit of spot metersets (DICOM PrimaryDosimeterUnit).
enum class MetersetUnit {
  kMonitorUnits,  ///< MU: protons = MU × (protons per MU of the beam model)
  kProtons,       ///< NP: the meterset is the number of protons
};

/// One scanned spot at the isocentre plane.
struct Spot {
  double x_mm = 0.0;   ///< position in IEC gantry X at the isocentre plane (mm)
  double y_mm = 0.0;   ///< position in IEC gantry Y at the isocentre plane (mm)
  double meterset = 0.0;  ///< meterset per fraction, in the beam's MetersetUnit (>= 0)
};

/// One energy layer: spots delivered at one nominal energy.
struct EnergyLayer {
  double nominal_energy_mev = 0.0;  ///< NominalBeamEnergy (MeV)
  /// ScanningSpotSize from the plan, FWHM in air at the isocentre (mm) along
  /// IEC gantry X and Y; absent when the plan does not state it.
  std::optional<double> spot_fwhm_x_mm;
  std::optional<double> spot_fwhm_y_mm;
  int number_of_paintings = 1;  ///< NumberOfPaintings (informational; dose uses total meterset)
  int control_point_index = 0;  ///< index of the first DICOM control point of this layer
  std::vector<Spot> spots;
};

/// A range shifter in the beam line.
struct RangeShifter {
  std::string id;                      ///< RangeShifterID
  double water_equivalent_thickness_mm = 0.0;  ///< WET (mm), > 0 when inserted
  /// Distance from the isocentre to the downstream face of the shifter (mm),
  /// IsocenterToRangeShifterDistance; absent if the plan does not state it.
  std::optional<double> isocenter_to_shifter_mm;
};

/// One treatment beam (an RT Ion Plan IonBeamSequence item).
struct IonBeam {
  int number = 0;                 ///< BeamNumber
  std::string name;               ///< BeamName (may be empty)
  std::string machine_name;       ///< TreatmentMachineName
  double gantry_angle_deg = 0.0;  ///< IEC 61217 gantry angle (deg)
  double couch_angle_deg = 0.0;   ///< IEC 61217 patient support angle (deg)
  Vec3 isocenter_mm{0, 0, 0};     ///< IsocenterPosition, DICOM patient frame (mm)
  /// VirtualSourceAxisDistances (mm) along IEC gantry X and Y; absent → take
  /// them from the beam model.
  std::optional<double> vsad_x_mm;
  std::optional<double> vsad_y_mm;
  std::optional<double> snout_position_mm;  ///< SnoutPosition (mm), if stated
  MetersetUnit meterset_unit = MetersetUnit::kMonitorUnits;
  double beam_meterset = 0.0;     ///< BeamMeterset per fraction (MU or protons)
  std::vector<RangeShifter> range_shifters;  ///< inserted shifters (may be empty)
  std::vector<EnergyLayer> layers;

  std::size_t spot_count() const;
  double total_meterset() const;  ///< Σ spot meterset over all layers
};

/// A whole plan.
struct IonPlan {
  std::string label;                     ///< RTPlanLabel
  std::string sop_instance_uid;          ///< SOPInstanceUID of the plan
  std::string study_instance_uid;
  std::string frame_of_reference_uid;
  std::string patient_id;
  std::string patient_name;
  int number_of_fractions = 1;           ///< NumberOfFractionsPlanned
  std::vector<IonBeam> beams;

  std::size_t spot_count() const;
};

/// A CT image: Hounsfield units on a patient-frame grid, and its identity.
struct CtImage {
  Volume<float> hu;                      ///< Hounsfield units (rescale applied)
  std::string patient_position = "HFS";  ///< PatientPosition (HFS, FFS, HFP, FFP, ...)
  std::string study_instance_uid;
  std::string series_instance_uid;
  std::string frame_of_reference_uid;
  std::string patient_id;
  std::string patient_name;
};

}  // namespace protondose
