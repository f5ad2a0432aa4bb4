// RT Dose reading and writing.
#include "protondose/dicom/rt_dose.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "dcmtk_util.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"

namespace protondose::dicom {

using detail::check_put;
using detail::find_integer;
using detail::find_number;
using detail::find_numbers;
using detail::find_string;
using detail::describe;
using detail::format_ds;
using detail::put_string;
using detail::put_u16;
using detail::require_integer;
using detail::require_number;
using detail::require_numbers;
using detail::require_string;
using detail::sequence_items;
using detail::tag_label;
using detail::Where;

namespace {

// Frame offsets may deviate from a uniform step by this much (mm): DS values
// carry ~6 significant digits in some exports.
constexpr double kFrameGapToleranceMm = 0.01;
// Direction cosines within this of ±1/0 count as axis-aligned.
constexpr double kCosineTolerance = 1e-4;
// Grids from this many voxels on are validated and converted on all cores.
constexpr std::size_t kParallelVoxels = std::size_t{1} << 22;



bool axis_aligned(const Vec3& v) {
  int big = 0;
  for (double c : v) {
    if (std::abs(std::abs(c) - 1.0) <= kCosineTolerance) ++big;
    else if (std::abs(c) > kCosineTolerance) return false;
  }
  return big == 1;
}

}  // namespace

RtDose read_rt_dose(const std::string& path) {
  auto file = detail::load_file(path);
  const Where w{path, ""};
  const std::string sop_class = detail::sop_class_of(*file);
  if (sop_class != UID_RTDoseStorage)
    throw InputError(w.prefix() + "not an RT Dose (" + tag_label(DCM_SOPClassUID) + " is '" + sop_class +
                     "', expected " + UID_RTDoseStorage + ")");
  DcmDataset& ds = *file->getDataset();
  RtDose dose;
  dose.units = require_string(ds, DCM_DoseUnits, w);
  dose.type = require_string(ds, DCM_DoseType, w);
  dose.summation_type = require_string(ds, DCM_DoseSummationType, w);
  dose.frame_of_reference_uid = find_string(ds, DCM_FrameOfReferenceUID, w).value_or("");
  dose.study_instance_uid = find_string(ds, DCM_StudyInstanceUID, w).value_or("");
  const auto plans = sequence_items(ds, DCM_ReferencedRTPlanSequence);
  if (!plans.empty())
    dose.referenced_plan_uid = find_string(*plans[0], DCM_ReferencedSOPInstanceUID, w).value_or("");

  const int rows = static_cast<int>(require_integer(ds, DCM_Rows, w));
  const int columns = static_cast<int>(require_integer(ds, DCM_Columns, w));
  const long frames = find_integer(ds, DCM_NumberOfFrames, w).value_or(1);
  if (rows <= 0 || columns <= 0 || frames <= 0)
    throw InputError(w.prefix() + "grid size " + std::to_string(columns) + " columns × " +
                     std::to_string(rows) + " rows × " + std::to_string(frames) +
                     " frames (Columns, Rows, NumberOfFrames); all must be > 0");
  const auto spacing = require_numbers(ds, DCM_PixelSpacing, 2, w);
  if (!(spacing[0] > 0.0) || !(spacing[1] > 0.0))
    throw InputError(w.prefix() + tag_label(DCM_PixelSpacing) + " " + describe(spacing[0]) + "\\" +
                     describe(spacing[1]) + " mm; must be > 0");
  const auto ipp = require_numbers(ds, DCM_ImagePositionPatient, 3, w);
  const auto iop = require_numbers(ds, DCM_ImageOrientationPatient, 6, w);
  const Vec3 row{iop[0], iop[1], iop[2]};
  const Vec3 col{iop[3], iop[4], iop[5]};
  if (!axis_aligned(row) || !axis_aligned(col) || std::abs(dot(row, col)) > kCosineTolerance)
    throw UnavailableError(w.prefix() + tag_label(DCM_ImageOrientationPatient) +
                           ": oblique dose grids are not supported");
  const Vec3 normal = cross(row, col);
  const double scaling = require_number(ds, DCM_DoseGridScaling, w);
  if (!(scaling > 0.0))
    throw InputError(w.prefix() + tag_label(DCM_DoseGridScaling) + " " + describe(scaling) + "; must be > 0");
  dose.dose_grid_scaling = scaling;

  double frame_spacing_mm = 0.0;
  bool frames_descend = false;
  if (frames > 1) {
    auto offsets = find_numbers(ds, DCM_GridFrameOffsetVector, w);
    if (offsets.size() != static_cast<std::size_t>(frames))
      throw InputError(w.prefix() + tag_label(DCM_GridFrameOffsetVector) + ": " +
                       std::to_string(offsets.size()) + " values for " + std::to_string(frames) +
                       " frames (NumberOfFrames)");
    // Relative when the first offset is 0; otherwise absolute positions
    // along the normal, whose first value must be ImagePositionPatient's.
    if (offsets[0] != 0.0) {
      const double first = dot(Vec3{ipp[0], ipp[1], ipp[2]}, normal);
      if (std::abs(offsets[0] - first) > kFrameGapToleranceMm)
        throw InputError(w.prefix() + tag_label(DCM_GridFrameOffsetVector) + " starts at " +
                         describe(offsets[0]) + " mm: neither 0 (relative) nor the first frame's position " +
                         describe(first) + " mm along the normal (absolute)");
      const double base = offsets[0];
      for (double& o : offsets) o -= base;
    }
    frame_spacing_mm = (offsets.back() - offsets.front()) / static_cast<double>(frames - 1);
    if (std::abs(frame_spacing_mm) < 1e-6)
      throw InputError(w.prefix() + tag_label(DCM_GridFrameOffsetVector) + ": all frames at one position");
    for (long k = 1; k < frames; ++k) {
      const double gap = offsets[k] - offsets[k - 1];
      if (std::abs(gap - frame_spacing_mm) > kFrameGapToleranceMm)
        throw InputError(w.prefix() + tag_label(DCM_GridFrameOffsetVector) + ": non-uniform frame spacing (" +
                         describe(gap) + " mm between frames " + std::to_string(k - 1) + " and " +
                         std::to_string(k) + ", mean " + describe(frame_spacing_mm) + " mm, tolerance " +
                         describe(kFrameGapToleranceMm) + " mm)");
    }
    frames_descend = frame_spacing_mm < 0.0;
    frame_spacing_mm = std::abs(frame_spacing_mm);
  } else {
    // A single plane: the spacing across it only sets the voxel depth.
    frame_spacing_mm = find_number(ds, DCM_SliceThickness, w).value_or(0.0);
    if (!(frame_spacing_mm > 0.0))
      throw InputError(w.prefix() + "single-frame RT Dose without a positive " +
                       tag_label(DCM_SliceThickness) + ": the plane thickness is unknown");
  }

  const long bits = require_integer(ds, DCM_BitsAllocated, w);
  const long representation = require_integer(ds, DCM_PixelRepresentation, w);
  if (bits != 16 && bits != 32)
    throw UnavailableError(w.prefix() + tag_label(DCM_BitsAllocated) + " " + std::to_string(bits) +
                           ": only 16- and 32-bit dose pixels are supported");
  if (representation != 0)
    throw UnavailableError(w.prefix() + tag_label(DCM_PixelRepresentation) + " " +
                           std::to_string(representation) + ": signed dose pixels are not supported");
  if (const auto spp = find_integer(ds, DCM_SamplesPerPixel, w); spp && *spp != 1)
    throw InputError(w.prefix() + tag_label(DCM_SamplesPerPixel) + " " + std::to_string(*spp) + "; must be 1");
  if (DcmXfer(ds.getOriginalXfer()).isEncapsulated())
    throw UnavailableError(w.prefix() + "compressed pixel data (transfer syntax " +
                           DcmXfer(ds.getOriginalXfer()).getXferName() + ") is not supported");
  if (DcmXfer(ds.getOriginalXfer()).isBigEndian() && bits == 32)
    throw UnavailableError(w.prefix() + "32-bit pixels in a big-endian transfer syntax are not supported");

  Grid3 grid;
  grid.size = {columns, rows, static_cast<int>(frames)};
  grid.spacing_mm = {spacing[1], spacing[0], frame_spacing_mm};
  grid.origin_mm = {ipp[0], ipp[1], ipp[2]};
  grid.axis = {row, col, frames_descend ? Vec3{-normal[0], -normal[1], -normal[2]} : normal};
  for (auto& axis : grid.axis)
    for (double& c : axis) c = std::abs(c) < 0.5 ? 0.0 : (c > 0 ? 1.0 : -1.0);
  grid.validate("RT Dose '" + path + "'");

  DcmElement* pixels = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, pixels).bad() || pixels == nullptr)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": missing");
  // Compared in double: Rows × Columns × NumberOfFrames × bytes can exceed
  // 64 bits in a corrupt file, and must be checked before allocating.
  const std::size_t count = grid.voxel_count();
  const double expected_bytes = static_cast<double>(columns) * rows * static_cast<double>(frames) * (bits / 8);
  if (static_cast<double>(pixels->getLength()) < expected_bytes)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": " + std::to_string(pixels->getLength()) +
                     " bytes, expected " + describe(expected_bytes) + " for " + describe(static_cast<double>(count)) +
                     " " + std::to_string(bits) + "-bit pixels (truncated?)");
  Uint16* words = nullptr;
  Uint8* bytes = nullptr;
  OFCondition status;
  if (pixels->ident() == EVR_OB)
    status = pixels->getUint8Array(bytes);
  else
    status = pixels->getUint16Array(words);
  if (status.bad() || (words == nullptr && bytes == nullptr))
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": cannot read pixels (DCMTK: " + status.text() + ")");
  dose.dose_gy = Volume<float>(grid);
  for (std::size_t p = 0; p < count; ++p) {
    std::uint32_t stored;
    if (bits == 16) {
      stored = words ? words[p] : static_cast<std::uint32_t>(bytes[2 * p] | (bytes[2 * p + 1] << 8));
    } else if (words) {
      // Little-endian 32-bit values as 16-bit words (DCMTK keeps OW in host
      // order per word): low word first.
      stored = static_cast<std::uint32_t>(words[2 * p]) | (static_cast<std::uint32_t>(words[2 * p + 1]) << 16);
    } else {
      stored = static_cast<std::uint32_t>(bytes[4 * p]) | (static_cast<std::uint32_t>(bytes[4 * p + 1]) << 8) |
               (static_cast<std::uint32_t>(bytes[4 * p + 2]) << 16) |
               (static_cast<std::uint32_t>(bytes[4 * p + 3]) << 24);
    }
    dose.dose_gy.data[p] = static_cast<float>(stored * scaling);
  }
  return dose;
}

namespace {

// The DS text for DoseGridScaling, and its value as any reader will parse it:
// the smallest printed value ≥ max / max_pixel, so the maximum still fits.
std::pair<std::string, double> scaling_for(double max_gy, double max_pixel) {
  if (!(max_gy > 0.0)) return {"1", 1.0};
  double target = max_gy / max_pixel;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::string text = format_ds(target);
    const double parsed = std::strtod(text.c_str(), nullptr);
    if (parsed * max_pixel >= max_gy) return {text, parsed};
    target *= 1.0 + 1e-12 * (1 << std::min(attempt, 30));
  }
  throw InternalError("cannot find a DS DoseGridScaling for maximum " + describe(max_gy) + " Gy");
}

}  // namespace

void write_rt_dose(const std::string& path, const Volume<float>& dose_gy, const RtDoseWriteOptions& options) {
  const std::string where = "RT Dose '" + path + "': ";
  if (options.plan == nullptr)
    throw InputError(where + "no plan given (RtDoseWriteOptions::plan): the RT Dose must reference its RT Ion Plan");
  const IonPlan& plan = *options.plan;
  if (plan.sop_instance_uid.empty())
    throw InputError(where + "the plan has no SOPInstanceUID to reference");
  dose_gy.grid.validate(where + "dose grid");
  if (dose_gy.data.size() != dose_gy.grid.voxel_count())
    throw InputError(where + "dose volume has " + std::to_string(dose_gy.data.size()) + " values for " +
                     std::to_string(dose_gy.grid.voxel_count()) + " voxels");
  for (int a = 0; a < 3; ++a)
    if (dose_gy.grid.size[a] > 65535 && a < 2)
      throw InputError(where + "grid size " + std::to_string(dose_gy.grid.size[a]) + " along axis " +
                       std::to_string(a) + " exceeds 65535 (Rows/Columns are US)");
  std::string study_uid = plan.study_instance_uid;
  std::string frame_uid = plan.frame_of_reference_uid;
  std::string patient_id = plan.patient_id;
  std::string patient_name = plan.patient_name;
  if (options.ct != nullptr) {
    const CtImage& ct = *options.ct;
    if (!ct.frame_of_reference_uid.empty() && !frame_uid.empty() && ct.frame_of_reference_uid != frame_uid)
      throw InputError(where + "plan FrameOfReferenceUID '" + frame_uid + "' differs from the CT's '" +
                       ct.frame_of_reference_uid + "'");
    if (!ct.study_instance_uid.empty()) study_uid = ct.study_instance_uid;
    if (!ct.frame_of_reference_uid.empty()) frame_uid = ct.frame_of_reference_uid;
    if (patient_id.empty()) patient_id = ct.patient_id;
    if (patient_name.empty()) patient_name = ct.patient_name;
  }
  if (frame_uid.empty())
    throw InputError(where + "neither plan nor CT has a FrameOfReferenceUID: the dose grid would float");
  if (study_uid.empty()) study_uid = detail::new_uid(SITE_STUDY_UID_ROOT);
  if (options.dose_type == DoseTypeOption::kEffective &&
      (!options.rbe_factor || !(*options.rbe_factor > 0.0)))
    throw InputError(where + "DoseType EFFECTIVE needs the constant RBE the caller applied (rbe_factor > 0)");
  if (options.summation == DoseSummationOption::kBeam) {
    const bool known = std::any_of(plan.beams.begin(), plan.beams.end(),
                                   [&](const IonBeam& b) { return b.number == options.referenced_beam_number; });
    if (options.referenced_beam_number <= 0 || !known)
      throw InputError(where + "DoseSummationType BEAM needs referenced_beam_number of a beam in the plan (got " +
                       std::to_string(options.referenced_beam_number) + ")");
  }

  // Validate and find the maximum before any DICOM is built: in chunks on
  // threads of their own for a large grid (a 1 mm dose is ~30 M voxels);
  // the error names the first bad voxel in memory order, whatever the chunks.
  const Grid3& g = dose_gy.grid;
  const std::size_t count = dose_gy.data.size();
  const int threads = count >= kParallelVoxels ? default_thread_count() : 1;
  std::vector<float> chunk_max_gy(static_cast<std::size_t>(threads), 0.0F);
  std::vector<std::size_t> chunk_first_bad(static_cast<std::size_t>(threads), count);
  parallel_for_chunks(count, threads, [&](std::size_t begin, std::size_t end, int worker) {
    float max_v = 0.0F;
    for (std::size_t p = begin; p < end; ++p) {
      const float v = dose_gy.data[p];
      if (!(v >= 0.0F && v <= std::numeric_limits<float>::max())) {  // NaN, ±Inf, negative
        chunk_first_bad[static_cast<std::size_t>(worker)] = p;
        break;
      }
      max_v = std::max(max_v, v);
    }
    chunk_max_gy[static_cast<std::size_t>(worker)] = max_v;
  });
  const std::size_t first_bad = *std::min_element(chunk_first_bad.begin(), chunk_first_bad.end());
  if (first_bad < count) {
    const std::size_t p = first_bad;
    const float v = dose_gy.data[p];
    const int i = static_cast<int>(p % g.size[0]);
    const int j = static_cast<int>((p / g.size[0]) % g.size[1]);
    const int k = static_cast<int>(p / (static_cast<std::size_t>(g.size[0]) * g.size[1]));
    throw InputError(where + "dose " + describe(v) + " Gy at voxel (" + std::to_string(i) + ", " +
                     std::to_string(j) + ", " + std::to_string(k) + "); must be finite and >= 0");
  }
  const double max_gy = *std::max_element(chunk_max_gy.begin(), chunk_max_gy.end());
  const int bits = options.sixteen_bit ? 16 : 32;
  const double max_pixel = options.sixteen_bit ? 65535.0 : 4294967295.0;
  const auto [scaling_text, scaling] = scaling_for(max_gy, max_pixel);

  DcmFileFormat file;
  DcmDataset& ds = *file.getDataset();
  const std::string sop_uid = detail::new_uid();
  const std::string date = detail::today_da();
  const std::string time = detail::now_tm();
  // SOP Common, Patient, General Study, RT Series, Frame of Reference, General Equipment.
  detail::CommonModules common;
  common.sop_class_uid = UID_RTDoseStorage;
  common.sop_instance_uid = sop_uid;
  common.modality = "RTDOSE";
  common.patient_name = patient_name;
  common.patient_id = patient_id;
  common.study_uid = study_uid;
  common.series_uid = detail::new_uid();
  common.frame_uid = frame_uid;
  common.manufacturer = options.manufacturer;
  common.series_description = options.series_description;
  common.date = date;
  common.time = time;
  detail::put_common_modules(ds, common);
  // Image Plane / Image Pixel / Multi-frame.
  detail::put_image_plane(ds, g, g.origin_mm);
  put_u16(ds, DCM_SamplesPerPixel, 1);
  put_string(ds, DCM_PhotometricInterpretation, "MONOCHROME2");
  put_string(ds, DCM_NumberOfFrames, std::to_string(g.size[2]));
  check_put(ds.putAndInsertTagKey(DCM_FrameIncrementPointer, DCM_GridFrameOffsetVector), "set FrameIncrementPointer");
  put_u16(ds, DCM_Rows, static_cast<Uint16>(g.size[1]));
  put_u16(ds, DCM_Columns, static_cast<Uint16>(g.size[0]));
  put_u16(ds, DCM_BitsAllocated, static_cast<Uint16>(bits));
  put_u16(ds, DCM_BitsStored, static_cast<Uint16>(bits));
  put_u16(ds, DCM_HighBit, static_cast<Uint16>(bits - 1));
  put_u16(ds, DCM_PixelRepresentation, 0);
  // RT Dose module. Frame k lies at k·spacing along axis[2]; the offsets are
  // relative to ImagePositionPatient along the normal row × column, so they
  // are negative when axis[2] points against that normal.
  const Vec3 normal = cross(g.axis[0], g.axis[1]);
  const double direction = dot(normal, g.axis[2]) >= 0.0 ? 1.0 : -1.0;
  std::vector<double> offsets(static_cast<std::size_t>(g.size[2]));
  for (int k = 0; k < g.size[2]; ++k) offsets[k] = direction * k * g.spacing_mm[2];
  put_string(ds, DCM_DoseUnits, "GY");
  put_string(ds, DCM_DoseType, options.dose_type == DoseTypeOption::kPhysical ? "PHYSICAL" : "EFFECTIVE");
  if (options.dose_type == DoseTypeOption::kEffective)
    put_string(ds, DCM_DoseComment, "RBE-weighted dose, constant RBE " + format_ds(*options.rbe_factor));
  put_string(ds, DCM_DoseSummationType, options.summation == DoseSummationOption::kPlan ? "PLAN" : "BEAM");
  put_string(ds, DCM_GridFrameOffsetVector, format_ds(offsets));
  put_string(ds, DCM_DoseGridScaling, scaling_text);
  put_string(ds, DCM_TissueHeterogeneityCorrection, "IMAGE");
  DcmItem* plan_ref = nullptr;
  check_put(ds.findOrCreateSequenceItem(DCM_ReferencedRTPlanSequence, plan_ref, -2), "create ReferencedRTPlanSequence");
  put_string(*plan_ref, DCM_ReferencedSOPClassUID, UID_RTIonPlanStorage);
  put_string(*plan_ref, DCM_ReferencedSOPInstanceUID, plan.sop_instance_uid);
  if (options.summation == DoseSummationOption::kBeam) {
    DcmItem* group = nullptr;
    check_put(plan_ref->findOrCreateSequenceItem(DCM_ReferencedFractionGroupSequence, group, -2),
              "create ReferencedFractionGroupSequence");
    put_string(*group, DCM_ReferencedFractionGroupNumber, "1");
    DcmItem* beam_ref = nullptr;
    check_put(group->findOrCreateSequenceItem(DCM_ReferencedBeamSequence, beam_ref, -2),
              "create ReferencedBeamSequence");
    put_string(*beam_ref, DCM_ReferencedBeamNumber, std::to_string(options.referenced_beam_number));
  }

  if (!options.copy_patient_and_study_from.empty()) {
    const std::string& source_path = options.copy_patient_and_study_from;
    auto source = detail::load_file(source_path, /*load_all=*/false);
    DcmDataset& src = *source->getDataset();
    const Where sw{source_path, ""};
    const auto source_study = find_string(src, DCM_StudyInstanceUID, sw).value_or("");
    if (source_study != study_uid)
      throw InputError(where + "copy_patient_and_study_from '" + source_path + "' has " +
                       tag_label(DCM_StudyInstanceUID) + " '" + source_study + "', the dose's study is '" +
                       study_uid + "'");
    for (const DcmTagKey& key : {DCM_PatientName, DCM_PatientID, DCM_PatientBirthDate, DCM_PatientSex,
                                 DCM_StudyDate, DCM_StudyTime, DCM_StudyID, DCM_StudyDescription,
                                 DCM_ReferringPhysicianName, DCM_AccessionNumber}) {
      DcmElement* element = nullptr;
      if (src.findAndGetElement(key, element).good() && element != nullptr) {
        DcmElement* copy = OFstatic_cast(DcmElement*, element->clone());
        const OFCondition inserted = ds.insert(copy, OFTrue);
        if (inserted.bad()) {
          delete copy;
          check_put(inserted, "copy " + tag_label(key) + " from '" + source_path + "'");
        }
      }
    }
  }

  // Pixels: round(dose / scaling), little-endian, as 16-bit words (OW),
  // written straight into the element's own buffer (no second copy of a
  // 100 MB volume). The quotient is ≥ 0, so truncating q + ½ after the clamp
  // is round-half-up, as floor(q + ½) would be, without a libm call.
  const std::size_t word_count = options.sixteen_bit ? count : 2 * count;
  auto pixel_data = std::make_unique<DcmPixelData>(DCM_PixelData);
  check_put(pixel_data->setVR(EVR_OW), "set PixelData VR");
  Uint16* words = nullptr;
  check_put(pixel_data->createUint16Array(static_cast<Uint32>(word_count), words), "create PixelData");
  const bool sixteen_bit = options.sixteen_bit;
  parallel_for_chunks(count, threads, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t p = begin; p < end; ++p) {
      const double q = std::min(max_pixel, static_cast<double>(dose_gy.data[p]) / scaling + 0.5);
      const auto v = static_cast<std::uint32_t>(q);
      if (sixteen_bit) {
        words[p] = static_cast<Uint16>(v);
      } else {
        words[2 * p] = static_cast<Uint16>(v & 0xFFFFu);
        words[2 * p + 1] = static_cast<Uint16>(v >> 16);
      }
    }
  });
  check_put(ds.insert(pixel_data.get(), OFTrue), "insert PixelData");
  pixel_data.release();  // the dataset owns it now

  write_file_atomically(path, [&](const std::string& tmp) {
    const OFCondition status = file.saveFile(tmp.c_str(), EXS_LittleEndianExplicit);
    if (status.bad()) throw IoError("cannot write RT Dose '" + path + "': " + status.text());
  });
}

}  // namespace protondose::dicom
