#include "protondose/compare/png.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <iterator>

#include "protondose/compare/gamma.h"
#include "protondose/compare/render.h"
#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose::compare {
namespace {

std::uint32_t be32(const std::vector<std::uint8_t>& b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) | (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
}

// Walks the chunks, checks every CRC, and inflates the IDAT back to the pixels.
TEST(Png, EncodedFileHasValidChunksAndDecodesToThePixels) {
  RgbImage img(3, 2, 0, 0, 0);
  img.set(0, 0, 255, 0, 0);
  img.set(2, 1, 1, 2, 3);
  img.set(5, 5, 9, 9, 9);  // outside: ignored
  const std::vector<std::uint8_t> png = encode_png(img);
  const std::uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  ASSERT_TRUE(std::equal(signature, signature + 8, png.begin()));
  std::size_t at = 8;
  std::vector<std::string> types;
  std::vector<std::uint8_t> idat;
  while (at < png.size()) {
    const std::uint32_t len = be32(png, at);
    const std::string type(png.begin() + static_cast<std::ptrdiff_t>(at + 4), png.begin() + static_cast<std::ptrdiff_t>(at + 8));
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), png.data() + at + 4, 4 + len);
    EXPECT_EQ(be32(png, at + 8 + len), crc) << type;
    if (type == "IHDR") {
      EXPECT_EQ(be32(png, at + 8), 3u);
      EXPECT_EQ(be32(png, at + 12), 2u);
      EXPECT_EQ(png[at + 16], 8);  // bit depth
      EXPECT_EQ(png[at + 17], 2);  // RGB
    }
    if (type == "IDAT") idat.insert(idat.end(), png.begin() + static_cast<std::ptrdiff_t>(at + 8), png.begin() + static_cast<std::ptrdiff_t>(at + 8 + len));
    types.push_back(type);
    at += 12 + len;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::vector<std::uint8_t> raw(2 * (1 + 9));
  uLongf raw_size = static_cast<uLongf>(raw.size());
  ASSERT_EQ(uncompress(raw.data(), &raw_size, idat.data(), static_cast<uLong>(idat.size())), Z_OK);
  ASSERT_EQ(raw_size, 20u);
  EXPECT_EQ(raw[0], 0);  // filter byte
  EXPECT_EQ(raw[1], 255);
  EXPECT_EQ(raw[10], 0);
  EXPECT_EQ(raw[10 + 1 + 6], 1);
  EXPECT_EQ(raw[10 + 1 + 8], 3);
}

TEST(Png, InconsistentImageIsAnInputError) {
  RgbImage img(4, 4);
  img.rgb.pop_back();
  try {
    encode_png(img);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("4x4 with 47 bytes"), std::string::npos) << e.what();
  }
}

TEST(Render, GammaSliceIsWrittenAndOutOfRangeSliceIsAnInputError) {
  const Grid3 g = testing::cube_grid(20, 2.0);
  Volume<float> gamma(g, kGammaNotEvaluated), dose(g, 1.0f);
  for (int j = 5; j < 15; ++j)
    for (int i = 5; i < 15; ++i) gamma.at(i, j, 10) = 0.1f * static_cast<float>(i - 5);
  const RgbImage img = render_gamma_slice({&dose, 0.0, 1.0}, gamma, SlicePlane::kAxial, 10, "GAMMA TEST");
  EXPECT_GT(img.width, 480);
  const auto dir = testing::fresh_dir("render");
  write_png((dir / "gamma.png").string(), img);
  EXPECT_GT(std::filesystem::file_size(dir / "gamma.png"), 100u);
  try {
    render_gamma_slice({&dose, 0.0, 1.0}, gamma, SlicePlane::kCoronal, 20, "X");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("coronal slice 20 is outside the grid (0 … 19)"), std::string::npos)
        << e.what();
  }
}

// Pixels whose colour is not a grey level (the background is grey).
int coloured_pixels(const RgbImage& img) {
  int n = 0;
  for (std::size_t p = 0; p + 2 < img.rgb.size(); p += 3) n += img.rgb[p] != img.rgb[p + 1] || img.rgb[p + 1] != img.rgb[p + 2];
  return n;
}

TEST(Render, DoseSliceColoursOnlyVoxelsAboveTheThreshold) {
  const Grid3 g = testing::cube_grid(20, 2.0);
  Volume<float> hu(g, 0.0f), none(g, 0.0f), dose(g, 0.05f);  // 0.05 Gy: below 10 % of 2 Gy
  for (int j = 5; j < 15; ++j)
    for (int i = 5; i < 15; ++i) dose.at(i, j, 10) = 2.0f;  // 100 voxels above the threshold
  const Background ct{&hu, -1000.0, 1000.0};
  const int bar_only = coloured_pixels(render_dose_slice(ct, none, 2.0, 0.1, SlicePlane::kAxial, 10, "DOSE"));
  const RgbImage img = render_dose_slice(ct, dose, 2.0, 0.1, SlicePlane::kAxial, 10, "DOSE");
  // Each voxel is drawn as a block of pixels; 100 hot voxels must add at least 100.
  EXPECT_GE(coloured_pixels(img) - bar_only, 100);
  const int low_only = coloured_pixels(render_dose_slice(ct, dose, 2.0, 0.1, SlicePlane::kAxial, 2, "DOSE"));
  EXPECT_EQ(low_only, bar_only) << "a slice below the threshold everywhere shows only the CT";
  try {
    render_dose_slice(ct, dose, 0.0, 0.1, SlicePlane::kAxial, 10, "DOSE");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("maximum dose 0 Gy must be > 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace protondose::compare
