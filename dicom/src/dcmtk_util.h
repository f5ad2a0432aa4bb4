#pragma once
// Private helpers shared by the dicom/ sources: loading files, reading typed
// values with messages that name file, context (beam, control point) and tag,
// and formatting DS values. Not installed; DCMTK types stay inside dicom/src.

#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dctk.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protondose/core/grid.h"

namespace protondose::dicom::detail {

/// "ScanSpotMetersetWeights (300a,0396)": the keyword and the tag, as error
/// messages name them.
std::string tag_label(const DcmTagKey& key);

/// Where a value was read: the file, then optional beam / control point /
/// ROI context ("beam 1 'G000', control point 3"). Used as message prefix.
struct Where {
  std::string file;
  std::string context;
  /// "file 'x': beam 1, control point 3: " (the context only when set).
  std::string prefix() const;
  Where with(const std::string& more) const;
};

/// Loads a DICOM file (with or without meta header) fully into memory.
/// Throws IoError when the file is missing or unreadable, InputError when it
/// is not DICOM or truncated (naming the file and DCMTK's reason).
std::unique_ptr<DcmFileFormat> load_file(const std::string& path, bool load_all = true);

/// True when the file starts like DICOM: a Part 10 preamble with "DICM" at
/// byte 128, or a raw little-endian dataset whose first tag is in group 0x0002
/// or 0x0008. Lets folder scans skip notes and images without handing them
/// to DCMTK.
bool looks_like_dicom(const std::string& path);

/// The SOP Class UID (dataset SOPClassUID, else MediaStorageSOPClassUID); "" if neither.
std::string sop_class_of(DcmFileFormat& file);

/// String value (all values joined with '\\' when multi-valued), trimmed.
/// Absent or empty → std::nullopt. A DCMTK failure other than "absent" → InputError.
std::optional<std::string> find_string(DcmItem& item, const DcmTagKey& key, const Where& where);
std::string require_string(DcmItem& item, const DcmTagKey& key, const Where& where);

/// Numeric values of DS, IS, FL, FD, US, SS, UL, SL elements as double.
/// Absent or zero-length → empty vector / nullopt. Malformed numbers (e.g. a
/// DS that does not parse) or non-finite values → InputError naming the tag.
std::vector<double> find_numbers(DcmItem& item, const DcmTagKey& key, const Where& where);
std::optional<double> find_number(DcmItem& item, const DcmTagKey& key, const Where& where);
double require_number(DcmItem& item, const DcmTagKey& key, const Where& where);
/// Exactly `count` values required (InputError naming the actual count otherwise).
std::vector<double> require_numbers(DcmItem& item, const DcmTagKey& key, std::size_t count,
                                    const Where& where);
/// An integer value (IS, US, ...); non-integral → InputError.
std::optional<long> find_integer(DcmItem& item, const DcmTagKey& key, const Where& where);
long require_integer(DcmItem& item, const DcmTagKey& key, const Where& where);

/// Items of a sequence; absent → empty vector.
std::vector<DcmItem*> sequence_items(DcmItem& item, const DcmTagKey& key);

/// Decimal String text for `value`: the most precise %g form that fits DS's
/// 16 characters. Non-finite → InternalError.
std::string format_ds(double value);
/// A number as a message shows it (default ostream formatting: "0.5", "1e-05").
std::string describe(double value);
/// Multi-valued DS ("a\\b\\c").
std::string format_ds(const std::vector<double>& values);

/// Checks a DCMTK status while building or writing a dataset; InternalError
/// (for put/insert) or IoError (for save) naming what was attempted.
void check_put(const OFCondition& status, const std::string& what);

/// Puts a string / US element; check_put names the tag on failure.
void put_string(DcmItem& item, const DcmTagKey& key, const std::string& value);
void put_u16(DcmItem& item, const DcmTagKey& key, Uint16 value);

/// What the modules shared by every object protondose writes need: SOP
/// Common, Patient, General Study, General Series, Frame of Reference and
/// General Equipment (PS3.3), their type 2 elements left empty.
struct CommonModules {
  const char* sop_class_uid = nullptr;
  std::string sop_instance_uid;
  std::string modality;
  std::string patient_name, patient_id;
  std::string study_uid, series_uid, frame_uid;
  std::string manufacturer, series_description;
  int series_number = 1;
  int instance_number = 1;
  std::string date, time;  ///< instance creation and content stamps (today_da(), now_tm())
};
void put_common_modules(DcmItem& item, const CommonModules& m);

/// Image Plane module of a slice of `grid` whose first pixel is at `position_mm`:
/// SliceThickness, ImagePositionPatient, ImageOrientationPatient, PixelSpacing (row\\column).
void put_image_plane(DcmItem& item, const Grid3& grid, const Vec3& position_mm);

/// A fresh UID from DCMTK's dcmGenerateUniqueIdentifier (site root
/// SITE_INSTANCE_UID_ROOT).
std::string new_uid(const char* root = SITE_INSTANCE_UID_ROOT);

/// Today's date (YYYYMMDD) and time (HHMMSS) for creation stamps.
std::string today_da();
std::string now_tm();

}  // namespace protondose::dicom::detail
