#include "protondose/core/metaimage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"

namespace protondose {
namespace {

namespace fs = std::filesystem;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Parses exactly `count` numbers from a header value; InputError otherwise.
std::vector<double> parse_numbers(const std::string& path, const std::string& key,
                                  const std::string& value, std::size_t count) {
  std::istringstream in(value);
  std::vector<double> out;
  double x = 0.0;
  while (in >> x) out.push_back(x);
  if (!in.eof() || out.size() != count) {
    std::ostringstream m;
    m << "MetaImage " << path << ": " << key << " = '" << value << "' must be " << count
      << " numbers";
    throw InputError(m.str());
  }
  for (double v : out) {
    if (!std::isfinite(v)) {
      std::ostringstream m;
      m << "MetaImage " << path << ": " << key << " = '" << value << "' is not finite";
      throw InputError(m.str());
    }
  }
  return out;
}

bool parse_bool(const std::string& path, const std::string& key, const std::string& value) {
  const std::string v = lower(value);
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw InputError("MetaImage " + path + ": " + key + " = '" + value +
                   "' must be True or False");
}

/// Bytes per element and a converter to float for each supported ElementType.
struct ElementType {
  std::size_t bytes;
  double (*to_double)(const unsigned char* p);
};

template <class T>
double load_as_double(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}

const std::map<std::string, ElementType>& element_types() {
  static const std::map<std::string, ElementType> types{
      {"MET_FLOAT", {4, &load_as_double<float>}},   {"MET_DOUBLE", {8, &load_as_double<double>}},
      {"MET_SHORT", {2, &load_as_double<int16_t>}}, {"MET_USHORT", {2, &load_as_double<uint16_t>}},
      {"MET_INT", {4, &load_as_double<int32_t>}},   {"MET_UINT", {4, &load_as_double<uint32_t>}},
      {"MET_CHAR", {1, &load_as_double<int8_t>}},   {"MET_UCHAR", {1, &load_as_double<uint8_t>}},
  };
  return types;
}

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

Volume<float> read_metaimage(const std::string& mhd_path) {
  std::ifstream in(mhd_path, std::ios::binary);
  if (!in) throw IoError("MetaImage " + mhd_path + ": cannot open file for reading");

  // Header: "Key = Value" lines up to and including ElementDataFile, which the
  // format requires to be the last key (LOCAL data follows it directly).
  std::map<std::string, std::string> header;  // lower-case key -> value
  std::string line;
  bool found_data_file = false;
  while (std::getline(in, line)) {
    if (trim(line).empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw InputError("MetaImage " + mhd_path + ": header line '" + trim(line) +
                       "' is not of the form 'Key = Value'");
    }
    const std::string key = trim(line.substr(0, eq));
    header[lower(key)] = trim(line.substr(eq + 1));
    if (lower(key) == "elementdatafile") {
      found_data_file = true;
      break;
    }
  }
  auto require = [&](const std::string& key) -> const std::string& {
    const auto it = header.find(lower(key));
    if (it == header.end()) {
      throw InputError("MetaImage " + mhd_path + ": required header key " + key + " is missing");
    }
    return it->second;
  };
  auto optional = [&](const std::string& key) -> const std::string* {
    const auto it = header.find(lower(key));
    return it == header.end() ? nullptr : &it->second;
  };
  if (!found_data_file) require("ElementDataFile");

  const auto ndims = parse_numbers(mhd_path, "NDims", require("NDims"), 1);
  if (ndims[0] != 3.0) {
    std::ostringstream m;
    m << "MetaImage " << mhd_path << ": NDims = " << ndims[0] << "; only 3D images are supported";
    throw InputError(m.str());
  }
  if (const auto* c = optional("CompressedData"); c && parse_bool(mhd_path, "CompressedData", *c)) {
    throw UnavailableError("MetaImage " + mhd_path +
                           ": CompressedData = True is not supported; write uncompressed data");
  }
  if (const auto* b = optional("BinaryData"); b && !parse_bool(mhd_path, "BinaryData", *b)) {
    throw UnavailableError("MetaImage " + mhd_path + ": BinaryData = False (ASCII data) is not supported");
  }
  if (const auto* ch = optional("ElementNumberOfChannels")) {
    if (parse_numbers(mhd_path, "ElementNumberOfChannels", *ch, 1)[0] != 1.0) {
      throw InputError("MetaImage " + mhd_path + ": ElementNumberOfChannels = " + *ch +
                       "; only scalar (1-channel) images are supported");
    }
  }

  Grid3 grid;
  const auto dims = parse_numbers(mhd_path, "DimSize", require("DimSize"), 3);
  for (int a = 0; a < 3; ++a) {
    if (dims[a] < 1 || dims[a] != std::floor(dims[a]) || dims[a] > 1e6) {
      throw InputError("MetaImage " + mhd_path + ": DimSize = '" + require("DimSize") +
                       "' must be three positive integers");
    }
    grid.size[a] = static_cast<int>(dims[a]);
  }
  const std::string* spacing = optional("ElementSpacing");
  if (!spacing) spacing = optional("ElementSize");
  if (spacing) {
    const auto s = parse_numbers(mhd_path, "ElementSpacing", *spacing, 3);
    for (int a = 0; a < 3; ++a) grid.spacing_mm[a] = s[a];
  }
  const std::string* offset = optional("Offset");
  if (!offset) offset = optional("Origin");
  if (!offset) offset = optional("Position");
  if (offset) {
    const auto o = parse_numbers(mhd_path, "Offset", *offset, 3);
    for (int a = 0; a < 3; ++a) grid.origin_mm[a] = o[a];
  }
  const std::string* matrix = optional("TransformMatrix");
  if (!matrix) matrix = optional("Rotation");
  if (!matrix) matrix = optional("Orientation");
  if (matrix) {
    // ITK writes the direction matrix column by column: the first three numbers
    // are the direction of the i axis, and so on.
    const auto t = parse_numbers(mhd_path, "TransformMatrix", *matrix, 9);
    for (int a = 0; a < 3; ++a)
      for (int c = 0; c < 3; ++c) grid.axis[a][c] = t[3 * a + c];
  }
  grid.validate("MetaImage " + mhd_path);

  const std::string& type_name = require("ElementType");
  const auto type_it = element_types().find(type_name);
  if (type_it == element_types().end()) {
    throw InputError("MetaImage " + mhd_path + ": ElementType = " + type_name +
                     " is not supported (MET_FLOAT, MET_DOUBLE, MET_SHORT, MET_USHORT, MET_INT, "
                     "MET_UINT, MET_CHAR, MET_UCHAR)");
  }
  const ElementType type = type_it->second;
  bool msb = false;
  if (const auto* o = optional("ElementByteOrderMSB")) msb = parse_bool(mhd_path, "ElementByteOrderMSB", *o);
  else if (const auto* o2 = optional("BinaryDataByteOrderMSB"))
    msb = parse_bool(mhd_path, "BinaryDataByteOrderMSB", *o2);
  const bool swap = type.bytes > 1 && (msb == host_is_little_endian());

  const std::size_t count = grid.voxel_count();
  const std::size_t bytes = count * type.bytes;
  std::vector<unsigned char> raw(bytes);
  const std::string& data_file = require("ElementDataFile");
  std::string data_path;
  if (lower(data_file) == "local") {
    data_path = mhd_path;
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
    if (static_cast<std::size_t>(in.gcount()) != bytes) {
      std::ostringstream m;
      m << "MetaImage " << mhd_path << ": LOCAL data has " << in.gcount() << " bytes; DimSize "
        << grid.size[0] << "x" << grid.size[1] << "x" << grid.size[2] << " of " << type_name
        << " needs " << bytes;
      throw InputError(m.str());
    }
  } else {
    if (lower(data_file) == "list" || data_file.find('%') != std::string::npos) {
      throw UnavailableError("MetaImage " + mhd_path + ": ElementDataFile = " + data_file +
                             " (one file per slice) is not supported");
    }
    fs::path p(data_file);
    if (p.is_relative()) p = fs::path(mhd_path).parent_path() / p;
    data_path = p.string();
    std::ifstream din(data_path, std::ios::binary);
    if (!din) {
      throw IoError("MetaImage " + mhd_path + ": cannot open data file " + data_path +
                    " (ElementDataFile)");
    }
    din.seekg(0, std::ios::end);
    const auto file_size = static_cast<std::size_t>(din.tellg());
    std::size_t skip = 0;
    if (const auto* hs = optional("HeaderSize")) {
      const double h = parse_numbers(mhd_path, "HeaderSize", *hs, 1)[0];
      if (h == -1.0) skip = file_size >= bytes ? file_size - bytes : 0;  // data at the end
      else if (h >= 0.0 && h == std::floor(h)) skip = static_cast<std::size_t>(h);
      else throw InputError("MetaImage " + mhd_path + ": HeaderSize = " + *hs + " must be >= 0 or -1");
    }
    if (file_size < skip + bytes) {
      std::ostringstream m;
      m << "MetaImage " << mhd_path << ": data file " << data_path << " has " << file_size
        << " bytes; DimSize " << grid.size[0] << "x" << grid.size[1] << "x" << grid.size[2]
        << " of " << type_name << " needs " << bytes << (skip ? " after the header" : "");
      throw InputError(m.str());
    }
    din.seekg(static_cast<std::streamoff>(skip));
    din.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
    if (!din) throw IoError("MetaImage " + mhd_path + ": reading data file " + data_path + " failed");
  }

  Volume<float> volume(grid);
  unsigned char element[8];
  for (std::size_t n = 0; n < count; ++n) {
    const unsigned char* src = raw.data() + n * type.bytes;
    if (swap) {
      for (std::size_t b = 0; b < type.bytes; ++b) element[b] = src[type.bytes - 1 - b];
      src = element;
    }
    volume.data[n] = static_cast<float>(type.to_double(src));
  }
  return volume;
}

void write_metaimage(const std::string& mhd_path, const Volume<float>& volume) {
  const fs::path header_path(mhd_path);
  if (header_path.extension() != ".mhd") {
    throw InputError("MetaImage output " + mhd_path + ": the header path must end in .mhd");
  }
  if (volume.data.size() != volume.grid.voxel_count()) {
    std::ostringstream m;
    m << "MetaImage output " << mhd_path << ": volume holds " << volume.data.size()
      << " values but its grid has " << volume.grid.voxel_count() << " voxels";
    throw InputError(m.str());
  }
  volume.grid.validate("MetaImage output " + mhd_path);
  fs::path raw_path = header_path;
  raw_path.replace_extension(".raw");

  write_file_atomically(raw_path.string(), [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw IoError("MetaImage output " + raw_path.string() + ": cannot open " + tmp);
    if (host_is_little_endian()) {
      out.write(reinterpret_cast<const char*>(volume.data.data()),
                static_cast<std::streamsize>(volume.data.size() * sizeof(float)));
    } else {
      for (float v : volume.data) {
        unsigned char b[4];
        std::memcpy(b, &v, 4);
        std::reverse(b, b + 4);
        out.write(reinterpret_cast<const char*>(b), 4);
      }
    }
    out.flush();
    if (!out) throw IoError("MetaImage output " + raw_path.string() + ": write failed (disk full?)");
  });

  const Grid3& g = volume.grid;
  std::ostringstream h;
  h << std::setprecision(17);
  h << "ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
    << "CompressedData = False\n";
  h << "TransformMatrix =";
  for (int a = 0; a < 3; ++a)
    for (int c = 0; c < 3; ++c) h << ' ' << g.axis[a][c];
  h << "\nOffset = " << g.origin_mm[0] << ' ' << g.origin_mm[1] << ' ' << g.origin_mm[2] << '\n';
  h << "ElementSpacing = " << g.spacing_mm[0] << ' ' << g.spacing_mm[1] << ' ' << g.spacing_mm[2]
    << '\n';
  h << "DimSize = " << g.size[0] << ' ' << g.size[1] << ' ' << g.size[2] << '\n';
  h << "ElementType = MET_FLOAT\nElementDataFile = " << raw_path.filename().string() << '\n';
  write_text_atomically(mhd_path, h.str());
}

}  // namespace protondose
