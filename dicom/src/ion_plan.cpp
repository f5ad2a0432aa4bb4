// RT Ion Plan reader: PBS (ScanMode MODULATED) proton plans → IonPlan.
#include "protondose/dicom/ion_plan.h"

#include <cmath>
#include <map>
#include <sstream>

#include "dcmtk_util.h"
#include "protondose/core/error.h"

namespace protondose::dicom {

using detail::find_integer;
using detail::find_number;
using detail::find_numbers;
using detail::find_string;
using detail::require_integer;
using detail::require_number;
using detail::require_numbers;
using detail::require_string;
using detail::sequence_items;
using detail::tag_label;
using detail::Where;

namespace {

// Angles that differ by less than this between control points are the same
// (DS values are printed with a few decimals).
constexpr double kAngleToleranceDeg = 1e-3;
// Isocentre positions that differ by less than this are the same.
constexpr double kIsocenterToleranceMm = 1e-3;
// Σ ScanSpotMetersetWeights must match FinalCumulativeMetersetWeight to this
// relative tolerance: vendors print weights with ~7 significant digits, so a
// real plan agrees to ~1e-6; a larger gap means weights are missing or altered.
constexpr double kWeightSumRelTolerance = 1e-3;

std::string describe(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] void unavailable(const Where& where, const std::string& feature) {
  throw UnavailableError(where.prefix() + feature + " is not supported by protondose");
}

[[noreturn]] void bad(const Where& where, const DcmTagKey& key, const std::string& why) {
  throw InputError(where.prefix() + tag_label(key) + ": " + why);
}

// A "count" element (NumberOfWedges, ...) stating > 0, or a non-empty
// sequence of the device: the beam uses a device protondose does not model.
bool has_device(DcmItem& beam, const DcmTagKey& count_key, const DcmTagKey& sequence_key,
                const Where& where) {
  const auto count = find_integer(beam, count_key, where);
  return (count && *count > 0) || !sequence_items(beam, sequence_key).empty();
}

struct ReferencedBeam {
  double beam_meterset = 0.0;
};

IonBeam read_beam(DcmItem& item, const Where& file_where,
                  const std::map<long, ReferencedBeam>& referenced,
                  const std::map<long, std::string>& setup_positions,
                  const IonPlanReadOptions& options, IonBeamDetails& details,
                  std::vector<std::string>& warnings) {
  IonBeam beam;
  const long number = require_integer(item, DCM_BeamNumber, file_where.with("IonBeamSequence item"));
  beam.number = static_cast<int>(number);
  beam.name = find_string(item, DCM_BeamName, file_where).value_or("");
  const Where where = file_where.with("beam " + std::to_string(number) +
                                      (beam.name.empty() ? "" : " '" + beam.name + "'"));
  details.beam_number = beam.number;

  const std::string radiation = require_string(item, DCM_RadiationType, where);
  if (radiation != "PROTON") unavailable(where, "RadiationType " + radiation);
  const std::string scan_mode = require_string(item, DCM_ScanMode, where);
  if (scan_mode != "MODULATED")
    unavailable(where, "ScanMode " + scan_mode + " (only MODULATED pencil-beam scanning)");
  if (has_device(item, DCM_NumberOfWedges, DCM_IonWedgeSequence, where))
    unavailable(where, "a wedge (IonWedgeSequence)");
  if (has_device(item, DCM_NumberOfCompensators, DCM_IonRangeCompensatorSequence, where))
    unavailable(where, "a range compensator (IonRangeCompensatorSequence)");
  if (has_device(item, DCM_NumberOfBoli, DCM_ReferencedBolusSequence, where))
    unavailable(where, "a bolus (ReferencedBolusSequence)");
  if (has_device(item, DCM_NumberOfRangeModulators, DCM_RangeModulatorSequence, where))
    unavailable(where, "a range modulator (RangeModulatorSequence)");
  if (has_device(item, DCM_NumberOfBlocks, DCM_IonBlockSequence, where)) {
    if (!options.drop_apertures) unavailable(where, "an aperture/block (IonBlockSequence)");
    details.aperture_dropped = true;
    warnings.push_back(where.prefix() + "aperture (IonBlockSequence) ignored: dose outside its "
                                        "shadow is not collimated");
  }

  beam.machine_name = find_string(item, DCM_TreatmentMachineName, where).value_or("");
  const std::string unit = require_string(item, DCM_PrimaryDosimeterUnit, where);
  if (unit == "MU") {
    beam.meterset_unit = MetersetUnit::kMonitorUnits;
  } else if (unit == "NP") {
    beam.meterset_unit = MetersetUnit::kProtons;
  } else {
    bad(where, DCM_PrimaryDosimeterUnit, "value '" + unit + "'; expected MU or NP");
  }
  details.treatment_delivery_type = find_string(item, DCM_TreatmentDeliveryType, where).value_or("");
  if (const auto setup = find_integer(item, DCM_ReferencedPatientSetupNumber, where)) {
    const auto it = setup_positions.find(*setup);
    if (it != setup_positions.end()) details.patient_position = it->second;
  }

  const auto vsad = find_numbers(item, DCM_VirtualSourceAxisDistances, where);
  if (!vsad.empty()) {
    if (vsad.size() != 2) bad(where, DCM_VirtualSourceAxisDistances,
                              "expected 2 values (x, y), found " + std::to_string(vsad.size()));
    if (!(vsad[0] > 0.0) || !(vsad[1] > 0.0))
      bad(where, DCM_VirtualSourceAxisDistances,
          describe(vsad[0]) + "\\" + describe(vsad[1]) + " mm; must be > 0");
    beam.vsad_x_mm = vsad[0];
    beam.vsad_y_mm = vsad[1];
  }

  const auto ref = referenced.find(number);
  if (ref == referenced.end())
    throw InputError(where.prefix() + "no ReferencedBeamSequence item in FractionGroupSequence " +
                     tag_label(DCM_ReferencedBeamNumber) + " refers to this beam, so its "
                     "BeamMeterset is unknown");
  beam.beam_meterset = ref->second.beam_meterset;
  if (!(beam.beam_meterset > 0.0))
    throw InputError(where.prefix() + tag_label(DCM_BeamMeterset) + " is " +
                     describe(beam.beam_meterset) + " " + unit + "; must be > 0");
  const double final_weight = require_number(item, DCM_FinalCumulativeMetersetWeight, where);
  if (!(final_weight > 0.0))
    bad(where, DCM_FinalCumulativeMetersetWeight, describe(final_weight) + "; must be > 0");
  const double meterset_per_weight = beam.beam_meterset / final_weight;

  // Range shifters declared for the beam: RangeShifterNumber → ID.
  std::map<long, std::string> shifter_ids;
  for (DcmItem* rs : sequence_items(item, DCM_RangeShifterSequence)) {
    const long rs_number = require_integer(*rs, DCM_RangeShifterNumber, where.with("RangeShifterSequence"));
    shifter_ids[rs_number] = find_string(*rs, DCM_RangeShifterID, where).value_or(std::to_string(rs_number));
  }

  const auto control_points = sequence_items(item, DCM_IonControlPointSequence);
  details.number_of_control_points = static_cast<int>(control_points.size());
  if (control_points.empty())
    bad(where, DCM_IonControlPointSequence, "missing or empty");
  if (const auto declared = find_integer(item, DCM_NumberOfControlPoints, where)) {
    if (*declared != static_cast<long>(control_points.size()))
      bad(where, DCM_NumberOfControlPoints,
          "states " + std::to_string(*declared) + " but IonControlPointSequence has " +
              std::to_string(control_points.size()) + " items");
  }

  std::optional<double> energy_mev;
  std::optional<double> fwhm_x, fwhm_y;
  int paintings = 1;
  double weight_sum = 0.0;
  for (std::size_t c = 0; c < control_points.size(); ++c) {
    DcmItem& cp = *control_points[c];
    const Where cpw = where.with("control point " + std::to_string(c));
    if (c == 0) {
      beam.gantry_angle_deg = require_number(cp, DCM_GantryAngle, cpw);
      beam.couch_angle_deg = require_number(cp, DCM_PatientSupportAngle, cpw);
      const auto iso = require_numbers(cp, DCM_IsocenterPosition, 3, cpw);
      beam.isocenter_mm = {iso[0], iso[1], iso[2]};
      if (const auto snout = find_number(cp, DCM_SnoutPosition, cpw)) beam.snout_position_mm = *snout;
      const auto settings = sequence_items(cp, DCM_RangeShifterSettingsSequence);
      if (settings.empty() && !shifter_ids.empty()) {
        if (!options.allow_range_shifter_without_settings)
          throw InputError(cpw.prefix() + "the beam declares " + std::to_string(shifter_ids.size()) +
                           " range shifter(s) (RangeShifterSequence) but the first control point "
                           "has no " + tag_label(DCM_RangeShifterSettingsSequence) +
                           ", so whether it is inserted and its water-equivalent thickness are unknown");
        for (const auto& [n, id] : shifter_ids) {
          details.range_shifters_not_inserted.push_back(id);
          warnings.push_back(cpw.prefix() + "range shifter '" + id +
                             "' has no RangeShifterSettingsSequence; treated as not inserted");
        }
      }
      for (DcmItem* setting : settings) {
        const Where sw = cpw.with("RangeShifterSettingsSequence");
        const long ref_number = require_integer(*setting, DCM_ReferencedRangeShifterNumber, sw);
        const auto id_it = shifter_ids.find(ref_number);
        if (id_it == shifter_ids.end())
          bad(sw, DCM_ReferencedRangeShifterNumber,
              std::to_string(ref_number) + " is not a RangeShifterNumber of this beam");
        const std::string setting_text = require_string(*setting, DCM_RangeShifterSetting, sw);
        if (setting_text == "OUT") {
          details.range_shifters_not_inserted.push_back(id_it->second);
          continue;
        }
        RangeShifter shifter;
        shifter.id = id_it->second;
        const auto wet = find_number(*setting, DCM_RangeShifterWaterEquivalentThickness, sw);
        if (!wet)
          bad(sw, DCM_RangeShifterWaterEquivalentThickness,
              "missing for inserted range shifter '" + shifter.id + "' (setting '" + setting_text + "')");
        if (!(*wet > 0.0))
          bad(sw, DCM_RangeShifterWaterEquivalentThickness,
              describe(*wet) + " mm for inserted range shifter '" + shifter.id + "'; must be > 0");
        shifter.water_equivalent_thickness_mm = *wet;
        if (const auto d = find_number(*setting, DCM_IsocenterToRangeShifterDistance, sw))
          shifter.isocenter_to_shifter_mm = *d;
        details.range_shifter_settings.push_back(setting_text);
        beam.range_shifters.push_back(shifter);
      }
    } else {
      if (const auto g = find_number(cp, DCM_GantryAngle, cpw);
          g && std::abs(*g - beam.gantry_angle_deg) > kAngleToleranceDeg)
        unavailable(cpw, "a gantry angle change within the beam (arc: " +
                             describe(beam.gantry_angle_deg) + " → " + describe(*g) + " deg, " +
                             tag_label(DCM_GantryAngle) + ")");
      if (const auto a = find_number(cp, DCM_PatientSupportAngle, cpw);
          a && std::abs(*a - beam.couch_angle_deg) > kAngleToleranceDeg)
        unavailable(cpw, "a couch angle change within the beam (" + describe(beam.couch_angle_deg) +
                             " → " + describe(*a) + " deg, " + tag_label(DCM_PatientSupportAngle) + ")");
      const auto iso = find_numbers(cp, DCM_IsocenterPosition, cpw);
      if (!iso.empty()) {
        if (iso.size() != 3) bad(cpw, DCM_IsocenterPosition, "expected 3 values, found " + std::to_string(iso.size()));
        for (int a = 0; a < 3; ++a)
          if (std::abs(iso[a] - beam.isocenter_mm[a]) > kIsocenterToleranceMm)
            unavailable(cpw, "an isocentre change within the beam (" + tag_label(DCM_IsocenterPosition) + ")");
      }
      if (!sequence_items(cp, DCM_RangeShifterSettingsSequence).empty())
        unavailable(cpw, "range shifter settings after the first control point (" +
                             tag_label(DCM_RangeShifterSettingsSequence) + ")");
    }

    if (const auto unit_text = find_string(cp, DCM_NominalBeamEnergyUnit, cpw);
        unit_text && *unit_text != "MEV")
      unavailable(cpw, "NominalBeamEnergyUnit " + *unit_text + " (only MEV)");
    if (const auto e = find_number(cp, DCM_NominalBeamEnergy, cpw)) {
      if (!(*e > 0.0)) bad(cpw, DCM_NominalBeamEnergy, describe(*e) + " MeV; must be > 0");
      if (energy_mev && std::abs(*e - *energy_mev) > 1e-6) {
        // A new energy: spot size and paintings of the previous layer no longer apply.
        fwhm_x.reset();
        fwhm_y.reset();
        paintings = 1;
      }
      energy_mev = *e;
    }
    const auto size = find_numbers(cp, DCM_ScanningSpotSize, cpw);
    if (!size.empty()) {
      if (size.size() != 2) bad(cpw, DCM_ScanningSpotSize, "expected 2 values, found " + std::to_string(size.size()));
      if (!(size[0] > 0.0) || !(size[1] > 0.0))
        bad(cpw, DCM_ScanningSpotSize, describe(size[0]) + "\\" + describe(size[1]) + " mm; must be > 0");
      fwhm_x = size[0];
      fwhm_y = size[1];
    }
    if (const auto p = find_integer(cp, DCM_NumberOfPaintings, cpw)) {
      if (*p < 1) bad(cpw, DCM_NumberOfPaintings, std::to_string(*p) + "; must be >= 1");
      paintings = static_cast<int>(*p);
    }

    const auto weights = find_numbers(cp, DCM_ScanSpotMetersetWeights, cpw);
    const auto positions = find_numbers(cp, DCM_ScanSpotPositionMap, cpw);
    const auto declared_spots = find_integer(cp, DCM_NumberOfScanSpotPositions, cpw);
    if (declared_spots && *declared_spots != static_cast<long>(weights.size()))
      bad(cpw, DCM_ScanSpotMetersetWeights,
          std::to_string(weights.size()) + " weights but " + tag_label(DCM_NumberOfScanSpotPositions) +
              " is " + std::to_string(*declared_spots));
    if (positions.size() != 2 * weights.size())
      bad(cpw, DCM_ScanSpotPositionMap,
          std::to_string(positions.size()) + " values for " + std::to_string(weights.size()) +
              " spot weights; expected 2 per spot (x, y)");
    bool contributes = false;
    for (std::size_t s = 0; s < weights.size(); ++s) {
      if (weights[s] < 0.0)
        bad(cpw, DCM_ScanSpotMetersetWeights,
            "spot " + std::to_string(s) + " has weight " + describe(weights[s]) + "; must be >= 0");
      if (weights[s] > 0.0) contributes = true;
    }
    if (!contributes) continue;
    if (!energy_mev)
      bad(cpw, DCM_NominalBeamEnergy, "missing: no energy stated on this or an earlier control point");
    // A layer per energy change: a control-point pair that repeats the
    // previous layer's energy (a layer split over several pairs) extends it.
    const bool same_layer = !beam.layers.empty() &&
                            std::abs(beam.layers.back().nominal_energy_mev - *energy_mev) <= 1e-6;
    if (!same_layer) {
      EnergyLayer layer;
      layer.nominal_energy_mev = *energy_mev;
      layer.spot_fwhm_x_mm = fwhm_x;
      layer.spot_fwhm_y_mm = fwhm_y;
      layer.number_of_paintings = paintings;
      layer.control_point_index = static_cast<int>(c);
      beam.layers.push_back(layer);
    }
    EnergyLayer& layer = beam.layers.back();
    for (std::size_t s = 0; s < weights.size(); ++s) {
      weight_sum += weights[s];
      layer.spots.push_back({positions[2 * s], positions[2 * s + 1], weights[s] * meterset_per_weight});
    }
  }
  if (beam.layers.empty())
    throw InputError(where.prefix() + "every " + tag_label(DCM_ScanSpotMetersetWeights) +
                     " is zero: the beam delivers no meterset");
  if (std::abs(weight_sum - final_weight) > kWeightSumRelTolerance * final_weight)
    bad(where, DCM_FinalCumulativeMetersetWeight,
        describe(final_weight) + " but the spot weights sum to " + describe(weight_sum) +
            " (relative tolerance " + describe(kWeightSumRelTolerance) + ")");
  return beam;
}

}  // namespace

IonPlanReadResult read_ion_plan_detailed(const std::string& path, const IonPlanReadOptions& options) {
  auto file = detail::load_file(path);
  const Where where{path, ""};
  const std::string sop_class = detail::sop_class_of(*file);
  if (sop_class != UID_RTIonPlanStorage)
    throw InputError(where.prefix() + "not an RT Ion Plan (" + tag_label(DCM_SOPClassUID) + " is '" +
                     sop_class + "', expected " + UID_RTIonPlanStorage + ")");
  DcmDataset& ds = *file->getDataset();

  IonPlanReadResult result;
  IonPlan& plan = result.plan;
  plan.label = find_string(ds, DCM_RTPlanLabel, where).value_or("");
  plan.sop_instance_uid = find_string(ds, DCM_SOPInstanceUID, where).value_or("");
  plan.study_instance_uid = find_string(ds, DCM_StudyInstanceUID, where).value_or("");
  plan.frame_of_reference_uid = find_string(ds, DCM_FrameOfReferenceUID, where).value_or("");
  plan.patient_id = find_string(ds, DCM_PatientID, where).value_or("");
  plan.patient_name = find_string(ds, DCM_PatientName, where).value_or("");
  result.rt_plan_geometry = find_string(ds, DCM_RTPlanGeometry, where).value_or("");

  const auto groups = sequence_items(ds, DCM_FractionGroupSequence);
  if (groups.empty()) throw InputError(where.prefix() + tag_label(DCM_FractionGroupSequence) + ": missing or empty");
  if (groups.size() > 1)
    throw UnavailableError(where.prefix() + std::to_string(groups.size()) + " fraction groups (" +
                           tag_label(DCM_FractionGroupSequence) + "): only single-fraction-group plans are supported");
  const Where fg = where.with("FractionGroupSequence");
  const long fractions = require_integer(*groups[0], DCM_NumberOfFractionsPlanned, fg);
  if (fractions < 1) bad(fg, DCM_NumberOfFractionsPlanned, std::to_string(fractions) + "; must be >= 1");
  plan.number_of_fractions = static_cast<int>(fractions);
  std::map<long, ReferencedBeam> referenced;
  for (DcmItem* rb : sequence_items(*groups[0], DCM_ReferencedBeamSequence)) {
    const long n = require_integer(*rb, DCM_ReferencedBeamNumber, fg.with("ReferencedBeamSequence"));
    const Where rbw = fg.with("ReferencedBeamSequence beam " + std::to_string(n));
    referenced[n].beam_meterset = require_number(*rb, DCM_BeamMeterset, rbw);
  }

  std::map<long, std::string> setup_positions;
  for (DcmItem* setup : sequence_items(ds, DCM_PatientSetupSequence)) {
    const auto n = find_integer(*setup, DCM_PatientSetupNumber, where.with("PatientSetupSequence"));
    const auto position = find_string(*setup, DCM_PatientPosition, where.with("PatientSetupSequence"));
    if (n && position) setup_positions[*n] = *position;
  }

  const auto beams = sequence_items(ds, DCM_IonBeamSequence);
  if (beams.empty()) throw InputError(where.prefix() + tag_label(DCM_IonBeamSequence) + ": missing or empty");
  for (DcmItem* item : beams) {
    if (find_string(*item, DCM_TreatmentDeliveryType, where).value_or("") == "SETUP") {
      result.setup_beams_skipped.push_back(
          static_cast<int>(require_integer(*item, DCM_BeamNumber, where.with("IonBeamSequence item"))));
      continue;
    }
    IonBeamDetails details;
    IonBeam beam = read_beam(*item, where, referenced, setup_positions, options, details, result.warnings);
    for (const auto& other : plan.beams)
      if (other.number == beam.number)
        bad(where, DCM_BeamNumber, "beam number " + std::to_string(beam.number) + " appears twice");
    plan.beams.push_back(std::move(beam));
    result.beams.push_back(std::move(details));
  }
  if (plan.beams.empty())
    throw InputError(where.prefix() + tag_label(DCM_IonBeamSequence) + " holds only SETUP beams (" +
                     tag_label(DCM_TreatmentDeliveryType) + "): nothing delivers dose");
  return result;
}

IonPlan read_ion_plan(const std::string& path) { return read_ion_plan_detailed(path, {}).plan; }

void check_same_frame_of_reference(const CtImage& ct, const IonPlan& plan) {
  if (ct.frame_of_reference_uid.empty() || plan.frame_of_reference_uid.empty() ||
      ct.frame_of_reference_uid != plan.frame_of_reference_uid)
    throw InputError("CT and plan are in different frames of reference: CT series '" +
                     ct.series_instance_uid + "' has FrameOfReferenceUID (0020,0052) '" +
                     ct.frame_of_reference_uid + "', plan '" + plan.label + "' (" +
                     plan.sop_instance_uid + ") has '" + plan.frame_of_reference_uid +
                     "'; the isocentre cannot be placed in the CT");
}

}  // namespace protondose::dicom
