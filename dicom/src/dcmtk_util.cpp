#include "dcmtk_util.h"

#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/oflog/oflog.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::dicom::detail {

std::string tag_label(const DcmTagKey& key) {
  DcmTag tag(key);
  const char* name = tag.getTagName();
  std::string label = (name != nullptr && std::string(name) != DcmTag_ERROR_TagName) ? name : "Unknown";
  return label + " " + key.toString().c_str();
}

std::string Where::prefix() const {
  std::string p = "'" + file + "'";
  if (!context.empty()) p += ", " + context;
  return p + ": ";
}

Where Where::with(const std::string& more) const {
  Where w = *this;
  w.context = context.empty() ? more : context + ", " + more;
  return w;
}

namespace {

// DCMTK logs every parse problem ("E: DcmElement: ... larger than remaining
// bytes") to stderr; the same reason is in the exception we throw, so the log
// is noise on the terminal. dicom/ is the only DCMTK user, so it owns this
// setting: DCMTK's logger is set to FATAL once, unless PROTONDOSE_DCMTK_LOG
// is set (then DCMTK's default, for debugging a file).
void configure_dcmtk_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("PROTONDOSE_DCMTK_LOG") == nullptr) OFLog::configure(OFLogger::FATAL_LOG_LEVEL);
  });
}

}  // namespace

std::unique_ptr<DcmFileFormat> load_file(const std::string& path, bool load_all) {
  configure_dcmtk_logging();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw IoError("cannot open '" + path + "': no such file");
  if (std::filesystem::is_directory(path, ec))
    throw InputError("'" + path + "' is a folder; expected a DICOM file");
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw IoError("cannot open '" + path + "': " + std::strerror(errno));
  }
  auto file = std::make_unique<DcmFileFormat>();
  OFCondition status = file->loadFile(path.c_str());
  if (status.bad()) {
    throw InputError("'" + path + "' is not a readable DICOM file (DCMTK: " +
                     std::string(status.text()) + ")");
  }
  if (load_all) {
    // Elements larger than DCMTK's read threshold (pixel data) are loaded
    // lazily; load them now so a truncated file fails here, not mid-use.
    status = file->loadAllDataIntoMemory();
    if (status.bad())
      throw InputError("'" + path + "' is truncated or malformed (DCMTK: " +
                       std::string(status.text()) + ")");
  }
  return file;
}

bool looks_like_dicom(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[132] = {};
  in.read(head, sizeof head);
  const auto got = in.gcount();
  if (got >= 132 && std::string(head + 128, 4) == "DICM") return true;
  return got >= 8 && (head[0] == 0x08 || head[0] == 0x02) && head[1] == 0x00;
}

std::string sop_class_of(DcmFileFormat& file) {
  OFString value;
  if (file.getDataset()->findAndGetOFString(DCM_SOPClassUID, value).good() && !value.empty())
    return value.c_str();
  if (file.getMetaInfo()->findAndGetOFString(DCM_MediaStorageSOPClassUID, value).good())
    return value.c_str();
  return "";
}

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

[[noreturn]] void throw_bad(const Where& where, const DcmTagKey& key, const std::string& why) {
  throw InputError(where.prefix() + tag_label(key) + ": " + why);
}

}  // namespace

std::optional<std::string> find_string(DcmItem& item, const DcmTagKey& key, const Where& where) {
  DcmElement* element = nullptr;
  if (item.findAndGetElement(key, element, OFFalse).bad() || element == nullptr) return std::nullopt;
  if (element->getLength() == 0) return std::nullopt;
  OFString value;
  const OFCondition status = element->getOFStringArray(value);
  if (status.bad()) throw_bad(where, key, std::string("cannot read value (DCMTK: ") + status.text() + ")");
  std::string text = trim(value.c_str());
  if (text.empty()) return std::nullopt;
  return text;
}

std::string require_string(DcmItem& item, const DcmTagKey& key, const Where& where) {
  auto value = find_string(item, key, where);
  if (!value) throw_bad(where, key, "required element is missing or empty");
  return *value;
}

namespace {

/// Value i of a binary-VR element (FL, FD, SL, UL, SS, US) through its typed getter, as a double.
template <class T>
OFCondition get_binary(DcmElement& element, OFCondition (DcmElement::*getter)(T&, const unsigned long),
                       unsigned long i, double& value) {
  T typed{};
  const OFCondition status = (element.*getter)(typed, i);
  value = static_cast<double>(typed);
  return status;
}

}  // namespace

std::vector<double> find_numbers(DcmItem& item, const DcmTagKey& key, const Where& where) {
  DcmElement* element = nullptr;
  std::vector<double> values;
  if (item.findAndGetElement(key, element, OFFalse).bad() || element == nullptr) return values;
  if (element->getLength() == 0) return values;
  const unsigned long count = element->getVM();
  values.reserve(count);
  const DcmEVR vr = element->ident();
  for (unsigned long i = 0; i < count; ++i) {
    double v = 0.0;
    OFCondition status;
    switch (vr) {
      case EVR_FL: case EVR_OF: status = get_binary<Float32>(*element, &DcmElement::getFloat32, i, v); break;
      case EVR_FD: case EVR_OD: status = get_binary<Float64>(*element, &DcmElement::getFloat64, i, v); break;
      case EVR_SL: status = get_binary<Sint32>(*element, &DcmElement::getSint32, i, v); break;
      case EVR_UL: status = get_binary<Uint32>(*element, &DcmElement::getUint32, i, v); break;
      case EVR_SS: status = get_binary<Sint16>(*element, &DcmElement::getSint16, i, v); break;
      case EVR_US: status = get_binary<Uint16>(*element, &DcmElement::getUint16, i, v); break;
      case EVR_DS: case EVR_IS: {
        // Parse the text ourselves: DCMTK's conversion accepts a valid
        // prefix ("12O.5" → 12), which would hide a corrupted value.
        OFString text;
        status = element->getOFString(text, i);
        if (status.good()) {
          const std::string t = trim(text.c_str());
          char* end = nullptr;
          v = std::strtod(t.c_str(), &end);
          if (t.empty() || end != t.c_str() + t.size())
            throw_bad(where, key, "value " + std::to_string(i + 1) + " of " + std::to_string(count) + " ('" + t +
                                      "') is not a valid number");
          if (vr == EVR_IS && std::floor(v) != v)
            throw_bad(where, key, "value '" + t + "' is not an integer");
        }
        break;
      }
      default:
        throw_bad(where, key, std::string("has VR ") + DcmVR(vr).getVRName() + ", expected a number");
    }
    if (status.bad())
      throw_bad(where, key, "value " + std::to_string(i + 1) + " of " + std::to_string(count) +
                                " is not a valid number (DCMTK: " + status.text() + ")");
    if (!std::isfinite(v))
      throw_bad(where, key, "value " + std::to_string(i + 1) + " is not finite");
    values.push_back(v);
  }
  return values;
}

std::optional<double> find_number(DcmItem& item, const DcmTagKey& key, const Where& where) {
  const auto values = find_numbers(item, key, where);
  if (values.empty()) return std::nullopt;
  if (values.size() != 1)
    throw_bad(where, key, "expected 1 value, found " + std::to_string(values.size()));
  return values.front();
}

double require_number(DcmItem& item, const DcmTagKey& key, const Where& where) {
  const auto value = find_number(item, key, where);
  if (!value) throw_bad(where, key, "required element is missing or empty");
  return *value;
}

std::vector<double> require_numbers(DcmItem& item, const DcmTagKey& key, std::size_t count,
                                    const Where& where) {
  auto values = find_numbers(item, key, where);
  if (values.empty()) throw_bad(where, key, "required element is missing or empty");
  if (values.size() != count)
    throw_bad(where, key, "expected " + std::to_string(count) + " values, found " +
                              std::to_string(values.size()));
  return values;
}

std::optional<long> find_integer(DcmItem& item, const DcmTagKey& key, const Where& where) {
  const auto value = find_number(item, key, where);
  if (!value) return std::nullopt;
  if (std::floor(*value) != *value || std::abs(*value) > 2147483647.0) {
    std::ostringstream m;
    m << "value " << *value << " is not an integer";
    throw_bad(where, key, m.str());
  }
  return static_cast<long>(*value);
}

long require_integer(DcmItem& item, const DcmTagKey& key, const Where& where) {
  const auto value = find_integer(item, key, where);
  if (!value) throw_bad(where, key, "required element is missing or empty");
  return *value;
}

std::vector<DcmItem*> sequence_items(DcmItem& item, const DcmTagKey& key) {
  std::vector<DcmItem*> items;
  DcmSequenceOfItems* sequence = nullptr;
  if (item.findAndGetSequence(key, sequence, OFFalse).bad() || sequence == nullptr) return items;
  const unsigned long n = sequence->card();
  for (unsigned long i = 0; i < n; ++i) {
    DcmItem* child = sequence->getItem(i);
    if (child != nullptr) items.push_back(child);
  }
  return items;
}

std::string format_ds(double value) {
  if (!std::isfinite(value)) throw InternalError("format_ds: non-finite value");
  if (value == 0.0) return "0";
  char buffer[64];
  for (int precision = 15; precision >= 1; --precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strlen(buffer) <= 16) return buffer;
  }
  throw InternalError("format_ds: cannot fit value in 16 characters");
}

std::string format_ds(const std::vector<double>& values) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += '\\';
    text += format_ds(values[i]);
  }
  return text;
}

void check_put(const OFCondition& status, const std::string& what) {
  if (status.bad()) throw InternalError("DCMTK failed to " + what + ": " + status.text());
}

std::string new_uid(const char* root) {
  char buffer[100];
  if (dcmGenerateUniqueIdentifier(buffer, root) == nullptr)
    throw InternalError("dcmGenerateUniqueIdentifier failed");
  return buffer;
}

namespace {

std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, format, &tm);
  return buffer;
}

}  // namespace

std::string today_da() { return utc_now("%Y%m%d"); }
std::string now_tm() { return utc_now("%H%M%S"); }

void put_string(DcmItem& item, const DcmTagKey& key, const std::string& value) {
  check_put(item.putAndInsertString(key, value.c_str()), "set " + tag_label(key));
}

void put_u16(DcmItem& item, const DcmTagKey& key, Uint16 value) {
  check_put(item.putAndInsertUint16(key, value), "set " + tag_label(key));
}

void put_common_modules(DcmItem& item, const CommonModules& m) {
  put_string(item, DCM_SpecificCharacterSet, "ISO_IR 100");
  put_string(item, DCM_InstanceCreationDate, m.date);
  put_string(item, DCM_InstanceCreationTime, m.time);
  put_string(item, DCM_SOPClassUID, m.sop_class_uid);
  put_string(item, DCM_SOPInstanceUID, m.sop_instance_uid);
  put_string(item, DCM_StudyDate, "");
  put_string(item, DCM_StudyTime, "");
  put_string(item, DCM_ContentDate, m.date);
  put_string(item, DCM_ContentTime, m.time);
  put_string(item, DCM_AccessionNumber, "");
  put_string(item, DCM_Modality, m.modality);
  put_string(item, DCM_Manufacturer, m.manufacturer);
  put_string(item, DCM_ReferringPhysicianName, "");
  put_string(item, DCM_SeriesDescription, m.series_description);
  put_string(item, DCM_OperatorsName, "");
  put_string(item, DCM_PatientName, m.patient_name);
  put_string(item, DCM_PatientID, m.patient_id);
  put_string(item, DCM_PatientBirthDate, "");
  put_string(item, DCM_PatientSex, "");
  put_string(item, DCM_StudyInstanceUID, m.study_uid);
  put_string(item, DCM_SeriesInstanceUID, m.series_uid);
  put_string(item, DCM_StudyID, "");
  put_string(item, DCM_SeriesNumber, std::to_string(m.series_number));
  put_string(item, DCM_InstanceNumber, std::to_string(m.instance_number));
  put_string(item, DCM_FrameOfReferenceUID, m.frame_uid);
  put_string(item, DCM_PositionReferenceIndicator, "");
}

void put_image_plane(DcmItem& item, const Grid3& g, const Vec3& position_mm) {
  put_string(item, DCM_SliceThickness, format_ds(g.spacing_mm[2]));
  put_string(item, DCM_ImagePositionPatient, format_ds(std::vector<double>(position_mm.begin(), position_mm.end())));
  put_string(item, DCM_ImageOrientationPatient,
             format_ds({g.axis[0][0], g.axis[0][1], g.axis[0][2], g.axis[1][0], g.axis[1][1], g.axis[1][2]}));
  put_string(item, DCM_PixelSpacing, format_ds(std::vector<double>{g.spacing_mm[1], g.spacing_mm[0]}));
}

std::string describe(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

}  // namespace protondose::dicom::detail
