#include "protondose/compare/png.h"

#include <zlib.h>

#include <fstream>
#include <sstream>

#include "protondose/core/atomic_file.h"
#include "protondose/core/error.h"

namespace protondose::compare {

RgbImage::RgbImage(int w, int h, std::uint8_t r, std::uint8_t g, std::uint8_t b)
    : width(w), height(h), rgb(static_cast<std::size_t>(w > 0 ? w : 0) * (h > 0 ? h : 0) * 3) {
  for (std::size_t n = 0; n < rgb.size(); n += 3) {
    rgb[n] = r;
    rgb[n + 1] = g;
    rgb[n + 2] = b;
  }
}

void RgbImage::set(int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  const std::size_t n = 3 * (static_cast<std::size_t>(y) * width + x);
  rgb[n] = r;
  rgb[n + 1] = g;
  rgb[n + 2] = b;
}

namespace {

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {  // PNG integers are big-endian
  out.push_back(static_cast<std::uint8_t>(v >> 24));
  out.push_back(static_cast<std::uint8_t>(v >> 16));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
  out.push_back(static_cast<std::uint8_t>(v));
}

/// Appends a chunk: length, type, data, CRC-32 over type and data.
void put_chunk(std::vector<std::uint8_t>& out, const char type[4], const std::vector<std::uint8_t>& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), out.data() + type_at, static_cast<uInt>(4 + data.size()));
  put_u32(out, static_cast<std::uint32_t>(crc));
}

}  // namespace

std::vector<std::uint8_t> encode_png(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<std::size_t>(image.width) * image.height * 3) {
    std::ostringstream m;
    m << "PNG: image " << image.width << "x" << image.height << " with " << image.rgb.size()
      << " bytes of pixels is empty or inconsistent (needs width × height × 3)";
    throw InputError(m.str());
  }
  // Scanlines, each preceded by filter type 0 (none).
  const std::size_t row = static_cast<std::size_t>(image.width) * 3;
  std::vector<std::uint8_t> raw;
  raw.reserve((row + 1) * image.height);
  for (int y = 0; y < image.height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), image.rgb.begin() + static_cast<std::ptrdiff_t>(y * row),
               image.rgb.begin() + static_cast<std::ptrdiff_t>((y + 1) * row));
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<std::uint8_t> packed(packed_size);
  if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw InternalError("PNG: zlib compress2 failed");
  packed.resize(packed_size);

  std::vector<std::uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<std::uint8_t> ihdr;
  put_u32(ihdr, static_cast<std::uint32_t>(image.width));
  put_u32(ihdr, static_cast<std::uint32_t>(image.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png(const std::string& path, const RgbImage& image) {
  const std::vector<std::uint8_t> bytes = encode_png(image);
  write_file_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw IoError("PNG " + path + ": writing " + tmp + " failed (disk full?)");
  });
}

}  // namespace protondose::compare
