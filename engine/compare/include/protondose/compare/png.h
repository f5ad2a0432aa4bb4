#pragma once
/// \file png.h
/// A minimal PNG writer (8-bit RGB, no interlace; IHDR, one zlib IDAT, IEND,
/// each chunk with its CRC-32), enough for comparison figures.

#include <cstdint>
#include <string>
#include <vector>

namespace protondose::compare {

/// An 8-bit RGB image, rows top to bottom, pixels left to right.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;  ///< rgb[3·(y·width + x) + c]

  RgbImage() = default;
  /// A width × height image filled with one colour.
  RgbImage(int w, int h, std::uint8_t r = 255, std::uint8_t g = 255, std::uint8_t b = 255);
  /// Sets pixel (x, y); pixels outside the image are ignored (clipping).
  void set(int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b);
};

/// The PNG file bytes of `image`. Throws InputError for an empty image or a
/// pixel buffer that does not match width × height × 3; InternalError if zlib fails.
std::vector<std::uint8_t> encode_png(const RgbImage& image);

/// Writes encode_png(image) to `path` atomically. Throws as encode_png, and
/// IoError when the file cannot be written.
void write_png(const std::string& path, const RgbImage& image);

}  // namespace protondose::compare
