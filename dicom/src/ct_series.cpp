// CT Image Storage series: reading (sorting, geometry checks, rescale) and writing.
#include "protondose/dicom/ct_series.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "dcmtk_util.h"
#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"

namespace protondose::dicom {

using detail::describe;
using detail::find_integer;
using detail::find_number;
using detail::find_string;
using detail::put_string;
using detail::put_u16;
using detail::require_integer;
using detail::require_number;
using detail::require_numbers;
using detail::require_string;
using detail::tag_label;
using detail::Where;

namespace {



// One slice's header, read in the first pass over the folder.
struct SliceHeader {
  std::string path;
  std::string series_uid;
  std::string study_uid;
  std::string frame_of_reference_uid;
  std::string patient_position;
  std::string patient_id;
  std::string patient_name;
  int rows = 0;
  int columns = 0;
  double row_spacing_mm = 0.0;     // PixelSpacing[0]: between rows (along the column direction)
  double column_spacing_mm = 0.0;  // PixelSpacing[1]: between columns (along the row direction)
  Vec3 position_mm{};              // ImagePositionPatient
  Vec3 row_cosines{};              // ImageOrientationPatient[0..2]
  Vec3 column_cosines{};           // ImageOrientationPatient[3..5]
  double slope = 1.0;
  double intercept = 0.0;
  double slice_thickness_mm = 0.0; // 0 when absent
  double gantry_tilt_deg = 0.0;
  int bits_allocated = 16;
  int bits_stored = 16;
  int pixel_representation = 0;
  double normal_position_mm = 0.0;  // position along the slice normal
  std::optional<long> padding_value;  // PixelPaddingValue (stored units), if stated
};

SliceHeader read_header(DcmFileFormat& file, const std::string& path) {
  DcmDataset& ds = *file.getDataset();
  const Where w{path, ""};
  SliceHeader h;
  h.path = path;
  h.series_uid = require_string(ds, DCM_SeriesInstanceUID, w);
  h.study_uid = find_string(ds, DCM_StudyInstanceUID, w).value_or("");
  h.frame_of_reference_uid = find_string(ds, DCM_FrameOfReferenceUID, w).value_or("");
  h.patient_position = find_string(ds, DCM_PatientPosition, w).value_or("");
  h.patient_id = find_string(ds, DCM_PatientID, w).value_or("");
  h.patient_name = find_string(ds, DCM_PatientName, w).value_or("");
  h.rows = static_cast<int>(require_integer(ds, DCM_Rows, w));
  h.columns = static_cast<int>(require_integer(ds, DCM_Columns, w));
  if (h.rows <= 0 || h.columns <= 0)
    throw InputError(w.prefix() + "image size " + std::to_string(h.rows) + " rows × " +
                     std::to_string(h.columns) + " columns; both must be > 0");
  const auto spacing = require_numbers(ds, DCM_PixelSpacing, 2, w);
  if (!(spacing[0] > 0.0) || !(spacing[1] > 0.0))
    throw InputError(w.prefix() + tag_label(DCM_PixelSpacing) + " " + describe(spacing[0]) + "\\" +
                     describe(spacing[1]) + " mm; must be > 0");
  h.row_spacing_mm = spacing[0];
  h.column_spacing_mm = spacing[1];
  const auto ipp = require_numbers(ds, DCM_ImagePositionPatient, 3, w);
  h.position_mm = {ipp[0], ipp[1], ipp[2]};
  const auto iop = require_numbers(ds, DCM_ImageOrientationPatient, 6, w);
  h.row_cosines = {iop[0], iop[1], iop[2]};
  h.column_cosines = {iop[3], iop[4], iop[5]};
  if (std::abs(dot(h.row_cosines, h.row_cosines) - 1.0) > 1e-3 ||
      std::abs(dot(h.column_cosines, h.column_cosines) - 1.0) > 1e-3 ||
      std::abs(dot(h.row_cosines, h.column_cosines)) > 1e-3)
    throw InputError(w.prefix() + tag_label(DCM_ImageOrientationPatient) +
                     ": row and column direction cosines are not orthonormal");
  h.slope = require_number(ds, DCM_RescaleSlope, w);
  h.intercept = require_number(ds, DCM_RescaleIntercept, w);
  if (h.slope == 0.0) throw InputError(w.prefix() + tag_label(DCM_RescaleSlope) + " is 0");
  h.slice_thickness_mm = find_number(ds, DCM_SliceThickness, w).value_or(0.0);
  h.padding_value = find_integer(ds, DCM_PixelPaddingValue, w);
  h.gantry_tilt_deg = find_number(ds, DCM_GantryDetectorTilt, w).value_or(0.0);
  h.bits_allocated = static_cast<int>(require_integer(ds, DCM_BitsAllocated, w));
  h.bits_stored = static_cast<int>(find_integer(ds, DCM_BitsStored, w).value_or(h.bits_allocated));
  h.pixel_representation = static_cast<int>(require_integer(ds, DCM_PixelRepresentation, w));
  if (h.bits_allocated != 16)
    throw UnavailableError(w.prefix() + tag_label(DCM_BitsAllocated) + " " +
                           std::to_string(h.bits_allocated) + ": only 16-bit CT pixels are supported");
  if (h.bits_stored < 1 || h.bits_stored > 16)
    throw InputError(w.prefix() + tag_label(DCM_BitsStored) + " " + std::to_string(h.bits_stored) +
                     "; must be 1..16");
  if (h.pixel_representation != 0 && h.pixel_representation != 1)
    throw InputError(w.prefix() + tag_label(DCM_PixelRepresentation) + " " +
                     std::to_string(h.pixel_representation) + "; must be 0 or 1");
  // PixelPaddingValue's VR (US or SS) follows PixelRepresentation; an
  // implicit-VR file gives it as US, so a signed padding arrives as 65536 + v.
  if (h.padding_value && h.pixel_representation == 1 && *h.padding_value > 32767) *h.padding_value -= 65536;
  if (const auto spp = find_integer(ds, DCM_SamplesPerPixel, w); spp && *spp != 1)
    throw UnavailableError(w.prefix() + tag_label(DCM_SamplesPerPixel) + " " + std::to_string(*spp) +
                           ": only single-sample (grey) CT images are supported");
  // The stored pixel data must hold the stated image: checked here, before
  // the series volume is allocated, so a corrupt Rows/Columns cannot ask for
  // more memory than the files hold.
  DcmElement* pixels = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, pixels).bad() || pixels == nullptr)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": missing");
  const double expected_bytes = 2.0 * h.rows * h.columns;
  if (!DcmXfer(ds.getOriginalXfer()).isEncapsulated() && static_cast<double>(pixels->getLength()) < expected_bytes)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": " + std::to_string(pixels->getLength()) +
                     " bytes, expected " + describe(expected_bytes) + " for " + std::to_string(h.rows) + " × " +
                     std::to_string(h.columns) + " 16-bit pixels (truncated?)");
  if (const auto frames = find_integer(ds, DCM_NumberOfFrames, w); frames && *frames != 1)
    throw UnavailableError(w.prefix() + tag_label(DCM_NumberOfFrames) + " " + std::to_string(*frames) +
                           ": multi-frame CT slices are not supported");
  return h;
}

// Reads the slice's stored pixels and converts them to HU into `out` (rows ×
// columns, column fastest); returns how many stored values equal the
// PixelPaddingValue.
std::size_t read_pixels(DcmFileFormat& file, const SliceHeader& h, float* out) {
  const Where w{h.path, ""};
  DcmDataset& ds = *file.getDataset();
  if (DcmXfer(ds.getOriginalXfer()).isEncapsulated())
    throw UnavailableError(w.prefix() + "compressed pixel data (transfer syntax " +
                           DcmXfer(ds.getOriginalXfer()).getXferName() +
                           ") is not supported; decompress first (e.g. dcmdjpeg)");
  DcmElement* element = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, element).bad() || element == nullptr)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": missing");
  const std::size_t count = static_cast<std::size_t>(h.rows) * h.columns;
  const Uint32 length = element->getLength();
  if (length < count * 2)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": " + std::to_string(length) +
                     " bytes, expected " + std::to_string(count * 2) + " for " + std::to_string(h.rows) +
                     " × " + std::to_string(h.columns) + " 16-bit pixels (truncated?)");
  Uint16* words = nullptr;
  const OFCondition status = element->getUint16Array(words);
  if (status.bad() || words == nullptr)
    throw InputError(w.prefix() + tag_label(DCM_PixelData) + ": cannot read 16-bit pixels (DCMTK: " +
                     status.text() + ")");
  const Uint16 mask = static_cast<Uint16>(h.bits_stored == 16 ? 0xFFFFu : ((1u << h.bits_stored) - 1u));
  const Uint16 sign_bit = static_cast<Uint16>(1u << (h.bits_stored - 1));
  std::size_t padded = 0;
  for (std::size_t p = 0; p < count; ++p) {
    const Uint16 raw = static_cast<Uint16>(words[p] & mask);
    double stored;
    if (h.pixel_representation == 1) {
      // Two's complement in bits_stored bits: sign-extend.
      stored = (raw & sign_bit) ? static_cast<double>(raw) - static_cast<double>(mask) - 1.0 : raw;
    } else {
      stored = raw;
    }
    out[p] = static_cast<float>(stored * h.slope + h.intercept);
    if (h.padding_value && stored == static_cast<double>(*h.padding_value)) ++padded;
  }
  return padded;
}

bool same(const Vec3& a, const Vec3& b, double tol) {
  return std::abs(a[0] - b[0]) <= tol && std::abs(a[1] - b[1]) <= tol && std::abs(a[2] - b[2]) <= tol;
}

bool axis_aligned(const Vec3& v) {
  int big = 0;
  for (double c : v) {
    if (std::abs(std::abs(c) - 1.0) <= CtSeriesTolerance::kDirectionCosine) ++big;
    else if (std::abs(c) > CtSeriesTolerance::kDirectionCosine) return false;
  }
  return big == 1;
}

std::string vec_text(const Vec3& v) {
  return describe(v[0]) + "\\" + describe(v[1]) + "\\" + describe(v[2]);
}

// Reading the series is on the critical path of a one-shot `protondose
// compute` process (a 340-slice CT takes 150–280 ms serially), and DCMTK
// parses separate files independently, so both passes over the files run on
// several threads; a handful of files is not worth starting threads for.
constexpr std::size_t kMinFilesForThreads = 8;
constexpr int kMaxReaderThreads = 16;

// Calls read(i) for every i in [0, count), on several threads, and returns per
// index the exception read(i) threw (null where it succeeded). The caller
// resolves them in index order, so the error thrown is the one the serial loop
// would throw, whichever thread failed first. Once index j failed, indices
// above j are skipped (the serial loop would never reach them); indices below
// the first failure are therefore always read.
std::vector<std::exception_ptr> read_each(std::size_t count, const std::function<void(std::size_t)>& read) {
  std::vector<std::exception_ptr> errors(count);
  int threads = 1;
  if (count >= kMinFilesForThreads)
    threads = static_cast<int>(std::min<std::size_t>(
        count, static_cast<std::size_t>(std::min(default_thread_count(), kMaxReaderThreads))));
  // DCMTK loads its global data dictionary on first use; load it here, once,
  // before the threads start, so that they only read it (under its lock).
  // Each thread parses its own files into its own DcmFileFormat.
  if (threads > 1) static_cast<void>(dcmDataDict.isDictionaryLoaded());
  std::atomic<std::size_t> first_failure{count};
  parallel_for_chunks(count, threads, [&](std::size_t begin, std::size_t end, int /*worker*/) {
    for (std::size_t i = begin; i < end && i < first_failure.load(std::memory_order_relaxed); ++i) {
      try {
        read(i);
      } catch (...) {
        errors[i] = std::current_exception();
        std::size_t seen = first_failure.load(std::memory_order_relaxed);
        while (i < seen && !first_failure.compare_exchange_weak(seen, i, std::memory_order_relaxed)) {
        }
      }
    }
  });
  return errors;
}

}  // namespace

CtImage read_ct_series(const std::string& folder, const std::string& series_uid) {
  return read_ct_series_detailed(folder, series_uid).ct;
}

CtSeriesReadResult read_ct_series_detailed(const std::string& folder, const std::string& series_uid) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw IoError("CT folder '" + folder + "' does not exist or is not a folder");
  std::vector<std::string> paths;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file()) paths.push_back(it->path().string());
  if (ec) throw IoError("cannot list CT folder '" + folder + "': " + ec.message());
  std::sort(paths.begin(), paths.end());

  // Pass 1: headers of every CT slice, grouped by series. Non-DICOM and
  // non-CT files are skipped (folders often hold the plan, dose and notes too).
  // The files are read in parallel; the grouping below is sequential, in path order.
  struct FolderFile {
    bool dicom = false;                // false: not DICOM, skipped
    std::optional<SliceHeader> slice;  // a CT Image Storage slice
    std::string other_class;           // else: its SOP Class UID
  };
  std::vector<FolderFile> files(paths.size());
  const auto file_errors = read_each(paths.size(), [&](std::size_t i) {
    if (!detail::looks_like_dicom(paths[i])) return;
    files[i].dicom = true;
    // A file that starts like DICOM but does not parse (truncated, corrupt)
    // is an error, not skipped: it may be a slice of the series.
    auto file = detail::load_file(paths[i], /*load_all=*/false);
    std::string sop_class = detail::sop_class_of(*file);
    if (sop_class != UID_CTImageStorage) {
      files[i].other_class = std::move(sop_class);
      return;
    }
    files[i].slice = read_header(*file, paths[i]);
  });
  std::map<std::string, std::vector<SliceHeader>> series;
  std::map<std::string, int> other_classes;  // SOP class name → files skipped
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (file_errors[i]) std::rethrow_exception(file_errors[i]);
    FolderFile& f = files[i];
    if (!f.dicom) continue;
    if (!f.slice) {
      const char* name = dcmFindNameOfUID(f.other_class.c_str());
      ++other_classes[name != nullptr ? name : f.other_class];
      continue;
    }
    series[f.slice->series_uid].push_back(std::move(*f.slice));
  }
  if (series.empty()) {
    std::string found;
    for (const auto& [name, n] : other_classes) found += (found.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    const std::string message = "no CT Image Storage files in '" + folder + "'" +
                                (found.empty() ? std::string(" (no DICOM files)") : " (found " + found + ")");
    // Enhanced (multi-frame) CT is a CT the reader cannot decode, not a missing one.
    if (other_classes.count("EnhancedCTImageStorage") || other_classes.count("LegacyConvertedEnhancedCTImageStorage"))
      throw UnavailableError(message + ": Enhanced CT is not supported; export single-frame CT Image Storage");
    throw InputError(message);
  }
  std::vector<SliceHeader>* chosen = nullptr;
  if (!series_uid.empty()) {
    const auto it = series.find(series_uid);
    if (it == series.end()) {
      std::string list;
      for (const auto& [uid, slices] : series) list += "\n  " + uid + " (" + std::to_string(slices.size()) + " slices)";
      throw InputError("CT folder '" + folder + "' has no series with SeriesInstanceUID (0020,000e) '" +
                       series_uid + "'; it has:" + list);
    }
    chosen = &it->second;
  } else if (series.size() > 1) {
    std::string list;
    for (const auto& [uid, slices] : series) list += "\n  " + uid + " (" + std::to_string(slices.size()) + " slices)";
    throw InputError("CT folder '" + folder + "' holds " + std::to_string(series.size()) +
                     " CT series; choose one by SeriesInstanceUID (0020,000e):" + list);
  } else {
    chosen = &series.begin()->second;
  }
  std::vector<SliceHeader>& slices = *chosen;

  // Consistency of every slice with the first one.
  const SliceHeader& first = slices.front();
  for (const auto& h : slices) {
    const Where w{h.path, ""};
    auto differs = [&](const DcmTagKey& key, const std::string& mine, const std::string& theirs) {
      throw InputError(w.prefix() + tag_label(key) + " is " + mine + " but '" + first.path + "' has " +
                       theirs + "; all slices of a series must agree");
    };
    if (h.rows != first.rows) differs(DCM_Rows, std::to_string(h.rows), std::to_string(first.rows));
    if (h.columns != first.columns) differs(DCM_Columns, std::to_string(h.columns), std::to_string(first.columns));
    if (std::abs(h.row_spacing_mm - first.row_spacing_mm) > 1e-4 ||
        std::abs(h.column_spacing_mm - first.column_spacing_mm) > 1e-4)
      differs(DCM_PixelSpacing, describe(h.row_spacing_mm) + "\\" + describe(h.column_spacing_mm),
              describe(first.row_spacing_mm) + "\\" + describe(first.column_spacing_mm));
    if (!same(h.row_cosines, first.row_cosines, CtSeriesTolerance::kDirectionCosine) ||
        !same(h.column_cosines, first.column_cosines, CtSeriesTolerance::kDirectionCosine))
      differs(DCM_ImageOrientationPatient, vec_text(h.row_cosines) + "\\" + vec_text(h.column_cosines),
              vec_text(first.row_cosines) + "\\" + vec_text(first.column_cosines));
    if (h.frame_of_reference_uid != first.frame_of_reference_uid)
      differs(DCM_FrameOfReferenceUID, "'" + h.frame_of_reference_uid + "'", "'" + first.frame_of_reference_uid + "'");
    if (h.patient_position != first.patient_position)
      differs(DCM_PatientPosition, "'" + h.patient_position + "'", "'" + first.patient_position + "'");
    if (h.bits_stored != first.bits_stored || h.pixel_representation != first.pixel_representation)
      differs(DCM_PixelRepresentation, std::to_string(h.pixel_representation), std::to_string(first.pixel_representation));
    if (std::abs(h.gantry_tilt_deg) > 1e-6)
      throw UnavailableError(w.prefix() + tag_label(DCM_GantryDetectorTilt) + " " + describe(h.gantry_tilt_deg) +
                             " deg: gantry-tilted CT is not supported; resample it to an axial grid first");
  }
  if (!axis_aligned(first.row_cosines) || !axis_aligned(first.column_cosines))
    throw UnavailableError("'" + first.path + "': " + tag_label(DCM_ImageOrientationPatient) + " " +
                           vec_text(first.row_cosines) + "\\" + vec_text(first.column_cosines) +
                           ": oblique CT is not supported (row and column directions must be along "
                           "patient axes within " + describe(CtSeriesTolerance::kDirectionCosine) + ")");

  const Vec3 normal = cross(first.row_cosines, first.column_cosines);
  for (auto& h : slices) h.normal_position_mm = dot(h.position_mm, normal);
  std::sort(slices.begin(), slices.end(),
            [](const SliceHeader& a, const SliceHeader& b) { return a.normal_position_mm < b.normal_position_mm; });

  double slice_spacing_mm = 0.0;
  if (slices.size() == 1) {
    if (!(first.slice_thickness_mm > 0.0))
      throw InputError("'" + slices[0].path + "': single-slice CT without a positive " +
                       tag_label(DCM_SliceThickness) + ": the slice spacing is unknown");
    slice_spacing_mm = slices[0].slice_thickness_mm;
  } else {
    for (std::size_t k = 1; k < slices.size(); ++k)
      if (slices[k].normal_position_mm - slices[k - 1].normal_position_mm < 1e-3)
        throw InputError("CT folder '" + folder + "': duplicate slice position " +
                         describe(slices[k].normal_position_mm) + " mm along the normal in '" +
                         slices[k - 1].path + "' and '" + slices[k].path + "' (" +
                         tag_label(DCM_ImagePositionPatient) + ")");
    // The median gap is the nominal spacing, so the message names the odd
    // gap (a missing slice) rather than the regular ones around it.
    std::vector<double> gaps;
    for (std::size_t k = 1; k < slices.size(); ++k)
      gaps.push_back(slices[k].normal_position_mm - slices[k - 1].normal_position_mm);
    std::vector<double> sorted_gaps = gaps;
    std::nth_element(sorted_gaps.begin(), sorted_gaps.begin() + sorted_gaps.size() / 2, sorted_gaps.end());
    const double median_gap = sorted_gaps[sorted_gaps.size() / 2];
    for (std::size_t k = 1; k < slices.size(); ++k) {
      const double gap = gaps[k - 1];
      if (std::abs(gap - median_gap) > CtSeriesTolerance::kSliceGapMm)
        throw InputError("CT folder '" + folder + "': non-uniform slice spacing: " + describe(gap) +
                         " mm between '" + slices[k - 1].path + "' and '" + slices[k].path +
                         "', typical " + describe(median_gap) + " mm (tolerance " +
                         describe(CtSeriesTolerance::kSliceGapMm) + " mm, " +
                         tag_label(DCM_ImagePositionPatient) + ")");
    }
    slice_spacing_mm = (slices.back().normal_position_mm - slices.front().normal_position_mm) /
                       static_cast<double>(slices.size() - 1);
    // Every slice origin must lie on the line through the first along the
    // normal; a shear means a tilted gantry even when GantryDetectorTilt is absent.
    for (const auto& h : slices) {
      const double s = h.normal_position_mm - slices.front().normal_position_mm;
      const Vec3 expected{slices.front().position_mm[0] + s * normal[0],
                          slices.front().position_mm[1] + s * normal[1],
                          slices.front().position_mm[2] + s * normal[2]};
      if (!same(h.position_mm, expected, CtSeriesTolerance::kSliceGapMm))
        throw UnavailableError("'" + h.path + "': " + tag_label(DCM_ImagePositionPatient) + " " +
                               vec_text(h.position_mm) + " is not on the slice normal through the first slice (" +
                               vec_text(expected) + " expected): gantry-tilted or sheared CT is not supported");
    }
  }

  CtSeriesReadResult result;
  CtImage& ct = result.ct;
  Grid3 grid;
  grid.size = {first.columns, first.rows, static_cast<int>(slices.size())};
  grid.spacing_mm = {first.column_spacing_mm, first.row_spacing_mm, slice_spacing_mm};
  grid.origin_mm = slices.front().position_mm;
  grid.axis = {first.row_cosines, first.column_cosines, normal};
  // Snap the cosines of an axis-aligned series to exact ±1/0 so that
  // Grid3::axis_aligned() and grid comparisons are exact.
  for (auto& axis : grid.axis)
    for (double& c : axis) c = std::abs(c) < 0.5 ? 0.0 : (c > 0 ? 1.0 : -1.0);
  grid.validate("CT series in '" + folder + "'");
  ct.hu = Volume<float>(grid);
  // Pass 2: each slice's pixels into its own part of the volume, in
  // parallel; errors and counts are resolved in slice order.
  const std::size_t slice_voxels = static_cast<std::size_t>(first.rows) * first.columns;
  std::vector<std::size_t> padded(slices.size(), 0);
  const auto slice_errors = read_each(slices.size(), [&](std::size_t k) {
    auto file = detail::load_file(slices[k].path, /*load_all=*/true);
    padded[k] = read_pixels(*file, slices[k], ct.hu.data.data() + k * slice_voxels);
  });
  for (std::size_t k = 0; k < slices.size(); ++k) {
    if (slice_errors[k]) std::rethrow_exception(slice_errors[k]);
    result.padding_voxels += padded[k];
    result.slice_files.push_back(slices[k].path);
  }
  if (first.padding_value)
    result.padding_hu = static_cast<float>(static_cast<double>(*first.padding_value) * first.slope + first.intercept);
  ct.patient_position = first.patient_position;
  ct.study_instance_uid = first.study_uid;
  ct.series_instance_uid = first.series_uid;
  ct.frame_of_reference_uid = first.frame_of_reference_uid;
  ct.patient_id = first.patient_id;
  ct.patient_name = first.patient_name;
  return result;
}

void write_ct_series(const CtImage& ct, const std::string& folder, const CtWriteOptions& options) {
  const Grid3& g = ct.hu.grid;
  const std::string what = "CT series for '" + folder + "'";
  g.validate(what);
  if (ct.hu.data.size() != g.voxel_count())
    throw InputError(what + ": " + std::to_string(ct.hu.data.size()) + " HU values for " +
                     std::to_string(g.voxel_count()) + " voxels");
  if (g.size[0] > 65535 || g.size[1] > 65535)
    throw InputError(what + ": slice size " + std::to_string(g.size[0]) + " × " + std::to_string(g.size[1]) +
                     " exceeds 65535 (Rows/Columns are US)");
  // Stored value = HU − intercept, in the pixel type's range.
  const double intercept = options.unsigned_pixels ? -1024.0 : 0.0;
  const double lowest = options.unsigned_pixels ? 0.0 : -32768.0;
  const double highest = options.unsigned_pixels ? 65535.0 : 32767.0;
  std::vector<double> stored(ct.hu.data.size());
  for (std::size_t p = 0; p < ct.hu.data.size(); ++p) {
    const double hu = ct.hu.data[p];
    const double value = std::floor(hu + 0.5) - intercept;
    if (!std::isfinite(hu) || value < lowest || value > highest) {
      const int i = static_cast<int>(p % g.size[0]);
      const int j = static_cast<int>((p / g.size[0]) % g.size[1]);
      const int k = static_cast<int>(p / (static_cast<std::size_t>(g.size[0]) * g.size[1]));
      throw InputError(what + ": HU " + describe(hu) + " at voxel (" + std::to_string(i) + ", " +
                       std::to_string(j) + ", " + std::to_string(k) + ") is outside the " +
                       (options.unsigned_pixels ? "uint16" : "int16") + " pixel range (HU " +
                       describe(lowest + intercept) + " … " + describe(highest + intercept) + ")");
    }
    stored[p] = value;
  }
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw IoError("cannot create CT folder '" + folder + "': " + ec.message());

  const std::string study_uid = ct.study_instance_uid.empty() ? detail::new_uid(SITE_STUDY_UID_ROOT) : ct.study_instance_uid;
  const std::string series_uid = ct.series_instance_uid.empty() ? detail::new_uid(SITE_SERIES_UID_ROOT) : ct.series_instance_uid;
  const std::string frame_uid = ct.frame_of_reference_uid.empty() ? detail::new_uid() : ct.frame_of_reference_uid;
  const std::string date = detail::today_da();
  const std::string time = detail::now_tm();
  const std::size_t slice_voxels = static_cast<std::size_t>(g.size[0]) * g.size[1];
  std::vector<Uint16> words(slice_voxels);
  for (int k = 0; k < g.size[2]; ++k) {
    DcmFileFormat file;
    DcmDataset& ds = *file.getDataset();
    const Vec3 position = g.position_mm(0, 0, k);
    detail::CommonModules common;
    common.sop_class_uid = UID_CTImageStorage;
    common.sop_instance_uid = detail::new_uid();
    common.modality = "CT";
    common.patient_name = ct.patient_name;
    common.patient_id = ct.patient_id;
    common.study_uid = study_uid;
    common.series_uid = series_uid;
    common.frame_uid = frame_uid;
    common.manufacturer = options.manufacturer;
    common.series_description = options.series_description;
    common.series_number = options.series_number;
    common.instance_number = k + 1;
    common.date = date;
    common.time = time;
    detail::put_common_modules(ds, common);
    detail::put_image_plane(ds, g, position);
    // CT Image and General Image elements the shared modules do not cover.
    put_string(ds, DCM_ImageType, "DERIVED\\SECONDARY\\AXIAL");
    put_string(ds, DCM_Laterality, "");
    put_string(ds, DCM_KVP, "");
    put_string(ds, DCM_PatientPosition, ct.patient_position);
    put_string(ds, DCM_AcquisitionNumber, "1");
    put_string(ds, DCM_PatientOrientation, "");
    put_u16(ds, DCM_SamplesPerPixel, 1);
    put_string(ds, DCM_PhotometricInterpretation, "MONOCHROME2");
    put_u16(ds, DCM_Rows, static_cast<Uint16>(g.size[1]));
    put_u16(ds, DCM_Columns, static_cast<Uint16>(g.size[0]));
    put_u16(ds, DCM_BitsAllocated, 16);
    put_u16(ds, DCM_BitsStored, 16);
    put_u16(ds, DCM_HighBit, 15);
    put_u16(ds, DCM_PixelRepresentation, options.unsigned_pixels ? 0 : 1);
    put_string(ds, DCM_RescaleIntercept, detail::format_ds(intercept));
    put_string(ds, DCM_RescaleSlope, "1");
    put_string(ds, DCM_RescaleType, "HU");
    for (std::size_t p = 0; p < slice_voxels; ++p) {
      const double v = stored[k * slice_voxels + p];
      // int16 two's complement bit pattern, or uint16 as is.
      words[p] = options.unsigned_pixels ? static_cast<Uint16>(v)
                                         : static_cast<Uint16>(static_cast<Sint16>(v));
    }
    detail::check_put(ds.putAndInsertUint16Array(DCM_PixelData, words.data(), static_cast<unsigned long>(slice_voxels)),
                      "set PixelData");
    char name[32];
    std::snprintf(name, sizeof name, "CT.%04d.dcm", k + 1);
    const std::string path = (std::filesystem::path(folder) / name).string();
    write_file_atomically(path, [&](const std::string& tmp) {
      const OFCondition status = file.saveFile(tmp.c_str(), EXS_LittleEndianExplicit);
      if (status.bad()) throw IoError("cannot write CT slice '" + path + "': " + status.text());
    });
  }
}

}  // namespace protondose::dicom
