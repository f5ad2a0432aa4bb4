#include "protondose/core/metaimage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>

#include "protondose/core/error.h"
#include "test_support.h"

namespace protondose {
namespace {

using compare::testing::fresh_dir;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(MetaImage, RoundTripPreservesGridAxesAndValues) {
  const auto dir = fresh_dir("metaimage_round_trip");
  Grid3 g;
  g.size = {4, 3, 2};
  g.spacing_mm = {1.5, 2.0, 2.5};
  g.origin_mm = {-10.25, 3.5, 100.125};
  g.axis = {{{0.0, 1.0, 0.0}, {-1.0, 0.0, 0.0}, {0.0, 0.0, 1.0}}};  // rotated 90° about z
  Volume<float> v(g);
  for (std::size_t n = 0; n < v.data.size(); ++n) v.data[n] = 0.001f * static_cast<float>(n * n) - 0.3f;
  const std::string path = (dir / "dose.mhd").string();
  write_metaimage(path, v);
  EXPECT_TRUE(std::filesystem::exists(dir / "dose.raw"));
  const Volume<float> back = read_metaimage(path);
  EXPECT_EQ(back.grid, g);
  EXPECT_EQ(back.data, v.data);
  // Only the two files: no temporaries left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 2);
}

TEST(MetaImage, ReadsBigEndianShortWithLocalData) {
  const auto dir = fresh_dir("metaimage_local");
  const std::string path = (dir / "local.mhd").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "ObjectType = Image\nNDims = 3\nDimSize = 2 1 1\nElementSpacing = 1 1 1\n"
           "ElementType = MET_SHORT\nElementByteOrderMSB = True\nElementDataFile = LOCAL\n";
    const unsigned char data[4] = {0x01, 0x02, 0xFF, 0xFE};  // 258, -2 big-endian
    out.write(reinterpret_cast<const char*>(data), 4);
  }
  const Volume<float> v = read_metaimage(path);
  ASSERT_EQ(v.data.size(), 2u);
  EXPECT_EQ(v.data[0], 258.0f);
  EXPECT_EQ(v.data[1], -2.0f);
  EXPECT_EQ(v.grid.origin_mm, (Vec3{0.0, 0.0, 0.0}));
}

TEST(MetaImage, ReadsTheSharedMonteCarloDose) {
  const std::string path = std::string(PROTONDOSE_SHARED_DIR) + "/reference/water_dcpt/mc_dose.mhd";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared reference not present: " << path;
  const Volume<float> v = read_metaimage(path);
  EXPECT_EQ(v.grid.size, (std::array<int, 3>{110, 135, 110}));
  EXPECT_EQ(v.grid.origin_mm, (Vec3{-109.0, -119.0, -109.0}));
  float max = 0.0f;
  for (float x : v.data) max = std::max(max, x);
  EXPECT_NEAR(max, 0.06299, 0.00001);  // README: max dose 0.06299 Gy
}

void write_header(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(MetaImage, RejectsTwoDimensionalImageNamingFileAndKey) {
  const auto dir = fresh_dir("metaimage_bad_ndims");
  const std::string path = (dir / "bad.mhd").string();
  write_header(path, "NDims = 2\nDimSize = 2 2\nElementType = MET_FLOAT\nElementDataFile = bad.raw\n");
  const std::string msg = message_of([&] { read_metaimage(path); });
  EXPECT_THROW(read_metaimage(path), InputError);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("NDims = 2"), std::string::npos) << msg;
}

TEST(MetaImage, RejectsMissingDimSize) {
  const auto dir = fresh_dir("metaimage_no_dims");
  const std::string path = (dir / "bad.mhd").string();
  write_header(path, "NDims = 3\nElementType = MET_FLOAT\nElementDataFile = bad.raw\n");
  EXPECT_THROW(read_metaimage(path), InputError);
  EXPECT_NE(message_of([&] { read_metaimage(path); }).find("DimSize is missing"), std::string::npos);
}

TEST(MetaImage, RejectsMalformedLineAndUnknownType) {
  const auto dir = fresh_dir("metaimage_bad_line");
  const std::string path = (dir / "bad.mhd").string();
  write_header(path, "NDims = 3\nthis is not a header line\n");
  EXPECT_THROW(read_metaimage(path), InputError);
  EXPECT_NE(message_of([&] { read_metaimage(path); }).find("'this is not a header line'"),
            std::string::npos);
  write_header(path, "NDims = 3\nDimSize = 1 1 1\nElementType = MET_COMPLEX\nElementDataFile = x.raw\n");
  EXPECT_THROW(read_metaimage(path), InputError);
  EXPECT_NE(message_of([&] { read_metaimage(path); }).find("ElementType = MET_COMPLEX"), std::string::npos);
}

TEST(MetaImage, RejectsTruncatedDataFileWithSizes) {
  const auto dir = fresh_dir("metaimage_truncated");
  const std::string path = (dir / "short.mhd").string();
  write_header(path, "NDims = 3\nDimSize = 2 2 2\nElementType = MET_FLOAT\nElementDataFile = short.raw\n");
  std::ofstream(dir / "short.raw", std::ios::binary) << "0123456789";  // 10 bytes, needs 32
  EXPECT_THROW(read_metaimage(path), InputError);
  const std::string msg = message_of([&] { read_metaimage(path); });
  EXPECT_NE(msg.find("has 10 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 32"), std::string::npos) << msg;
}

TEST(MetaImage, MissingFilesAreIoErrors) {
  const auto dir = fresh_dir("metaimage_missing");
  EXPECT_THROW(read_metaimage((dir / "none.mhd").string()), IoError);
  const std::string path = (dir / "nodata.mhd").string();
  write_header(path, "NDims = 3\nDimSize = 1 1 1\nElementType = MET_FLOAT\nElementDataFile = gone.raw\n");
  EXPECT_THROW(read_metaimage(path), IoError);
  EXPECT_NE(message_of([&] { read_metaimage(path); }).find("gone.raw"), std::string::npos);
}

TEST(MetaImage, CompressedDataIsUnavailable) {
  const auto dir = fresh_dir("metaimage_compressed");
  const std::string path = (dir / "z.mhd").string();
  write_header(path, "NDims = 3\nDimSize = 1 1 1\nCompressedData = True\nElementType = MET_FLOAT\n"
                     "ElementDataFile = z.zraw\n");
  EXPECT_THROW(read_metaimage(path), UnavailableError);
  EXPECT_NE(message_of([&] { read_metaimage(path); }).find("CompressedData"), std::string::npos);
}

TEST(MetaImage, WriterRejectsWrongExtensionAndMismatchedData) {
  const auto dir = fresh_dir("metaimage_writer_bad");
  Volume<float> v(compare::testing::cube_grid(2, 1.0));
  EXPECT_THROW(write_metaimage((dir / "dose.raw").string(), v), InputError);
  EXPECT_NE(message_of([&] { write_metaimage((dir / "dose.raw").string(), v); }).find("must end in .mhd"),
            std::string::npos);
  v.data.pop_back();
  EXPECT_THROW(write_metaimage((dir / "dose.mhd").string(), v), InputError);
  EXPECT_NE(message_of([&] { write_metaimage((dir / "dose.mhd").string(), v); }).find("holds 7 values"),
            std::string::npos);
}

}  // namespace
}  // namespace protondose
