// CT series reader on the shared reference CTs (geometry from
// reference/README.md and case.json: 110 × 135 × 110 voxels of 2 mm, first
// voxel centre (−109, −119, −109), HU −1000 air, 0 water, 1300 bone, −720 lung).
#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dcrleerg.h>
#include <dcmtk/dcmdata/dctk.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"

namespace protondose::dicom {
namespace {

using test::shared;

TEST(CtSeriesReader, ReadsSlabReferenceGeometryAndHounsfieldUnits) {
  const CtImage ct = read_ct_series(shared("reference/slab_dcpt/ct"));
  const Grid3& g = ct.hu.grid;
  EXPECT_EQ(g.size, (std::array<int, 3>{110, 135, 110}));
  EXPECT_EQ(g.spacing_mm, (Vec3{2, 2, 2}));
  EXPECT_EQ(g.origin_mm, (Vec3{-109, -119, -109}));
  EXPECT_TRUE(g.axis_aligned());
  EXPECT_EQ(ct.patient_position, "HFS");
  EXPECT_EQ(ct.frame_of_reference_uid, "2.25.191645871060748269088958807794064710561");
  EXPECT_EQ(ct.series_instance_uid, "2.25.116095214205754986468433181173082821643");
  EXPECT_EQ(ct.study_instance_uid, "2.25.17559765141607678604801212031845712417");
  EXPECT_EQ(ct.patient_id, "PBDOSE-slab_dcpt");
  ASSERT_EQ(ct.hu.data.size(), g.voxel_count());
  // Voxel centres: x = −109 + 2i, y = −119 + 2j, z = −109 + 2k.
  auto hu_at = [&](double x, double y, double z) {
    const Vec3 ijk = g.continuous_index({x, y, z});
    return ct.hu.at(static_cast<int>(ijk[0] + 0.5), static_cast<int>(ijk[1] + 0.5),
                    static_cast<int>(ijk[2] + 0.5));
  };
  EXPECT_FLOAT_EQ(hu_at(-109, -119, -109), -1000.0F);  // air corner
  EXPECT_FLOAT_EQ(hu_at(1, 1, 1), 0.0F);               // water at the isocentre
  EXPECT_FLOAT_EQ(hu_at(-51, -71, 51), 1300.0F);       // bone slab, x < 0
  EXPECT_FLOAT_EQ(hu_at(51, -71, -51), -720.0F);       // lung slab, x ≥ 0
  EXPECT_FLOAT_EQ(hu_at(51, -101, -51), -1000.0F);     // air in front of the box (y < −100)
  const auto [lo, hi] = std::minmax_element(ct.hu.data.begin(), ct.hu.data.end());
  EXPECT_FLOAT_EQ(*lo, -1000.0F);
  EXPECT_FLOAT_EQ(*hi, 1300.0F);
}

TEST(CtSeriesReader, SkipsNonCtFilesInTheFolder) {
  // The water case's ct/ folder holds only CT; a folder that also holds the
  // plan and dose must give the same image.
  const std::string dir = test::scratch_dir();
  for (const auto& entry : std::filesystem::directory_iterator(shared("reference/water_dcpt/ct")))
    std::filesystem::copy_file(entry.path(), dir + "/" + entry.path().filename().string());
  std::filesystem::copy_file(shared("reference/water_dcpt/plan.dcm"), dir + "/plan.dcm");
  std::filesystem::copy_file(shared("reference/water_dcpt/rtstruct.dcm"), dir + "/rtstruct.dcm");
  std::filesystem::copy_file(shared("reference/water_dcpt/case.json"), dir + "/case.json");
  const CtImage with_extras = read_ct_series(dir);
  const CtImage plain = read_ct_series(shared("reference/water_dcpt/ct"));
  EXPECT_EQ(with_extras.hu.grid, plain.hu.grid);
  EXPECT_EQ(with_extras.hu.data, plain.hu.data);
}

TEST(CtSeriesReader, RejectsAFolderWithoutCt) {
  const std::string dir = test::scratch_dir();
  std::filesystem::copy_file(shared("reference/water_dcpt/plan.dcm"), dir + "/plan.dcm");
  EXPECT_THROW_WITH(read_ct_series(dir), InputError, "no CT Image Storage files", dir.c_str(),
                    "found 1 RTIonPlanStorage");
}

TEST(CtSeriesReader, RejectsAMissingFolder) {
  EXPECT_THROW_WITH(read_ct_series("/nonexistent/ct"), IoError, "/nonexistent/ct");
}

}  // namespace
}  // namespace protondose::dicom

namespace protondose::dicom {
namespace {

CtImage synthetic_ct(const std::array<Vec3, 3>& axes) {
  CtImage ct;
  Grid3 g;
  g.size = {7, 5, 4};
  g.spacing_mm = {1.5, 2.0, 2.5};
  g.origin_mm = {-10.25, 20.5, 3.0};
  g.axis = axes;
  ct.hu = Volume<float>(g);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 5; ++j)
      for (int i = 0; i < 7; ++i) ct.hu.at(i, j, k) = static_cast<float>(-1000 + 100 * i + 37 * j + 511 * k);
  ct.hu.at(0, 0, 0) = -1024.0F;
  ct.patient_position = "FFS";
  ct.patient_id = "PD-TEST";
  ct.patient_name = "PHANTOM^ROUNDTRIP";
  return ct;
}

TEST(CtSeriesWriter, RoundTripsSignedAndUnsignedPixelsThroughTheReader) {
  for (bool unsigned_pixels : {false, true}) {
    SCOPED_TRACE(unsigned_pixels ? "uint16" : "int16");
    const CtImage ct = synthetic_ct({{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}});
    const std::string dir = test::scratch_dir() + (unsigned_pixels ? "/u" : "/s");
    CtWriteOptions options;
    options.unsigned_pixels = unsigned_pixels;
    write_ct_series(ct, dir, options);
    const CtImage read = read_ct_series(dir);
    EXPECT_EQ(read.hu.grid, ct.hu.grid);
    EXPECT_EQ(read.hu.data, ct.hu.data);
    EXPECT_EQ(read.patient_position, "FFS");
    EXPECT_EQ(read.patient_id, "PD-TEST");
    EXPECT_EQ(read.patient_name, "PHANTOM^ROUNDTRIP");
    EXPECT_FALSE(read.series_instance_uid.empty());
    EXPECT_FALSE(read.frame_of_reference_uid.empty());
  }
}

TEST(CtSeriesWriter, RoundTripsAFlippedPronePatientOrientation) {
  // HFP: rows run to patient right (−x), columns anterior (−y); normal = +z.
  const CtImage ct = synthetic_ct({{{-1, 0, 0}, {0, -1, 0}, {0, 0, 1}}});
  const std::string dir = test::scratch_dir();
  write_ct_series(ct, dir);
  const CtImage read = read_ct_series(dir);
  EXPECT_EQ(read.hu.grid, ct.hu.grid);
  EXPECT_EQ(read.hu.data, ct.hu.data);
}

// Sets PROTONDOSE_NUM_THREADS, which default_thread_count() reads on every
// call, for one scope: the CT reader splits its files over that many threads.
class ScopedThreadCount {
 public:
  explicit ScopedThreadCount(int threads) {
    if (const char* old = std::getenv(kName)) saved_ = old;
    ::setenv(kName, std::to_string(threads).c_str(), 1);
  }
  ~ScopedThreadCount() {
    if (saved_) ::setenv(kName, saved_->c_str(), 1);
    else ::unsetenv(kName);
  }
  ScopedThreadCount(const ScopedThreadCount&) = delete;
  ScopedThreadCount& operator=(const ScopedThreadCount&) = delete;

 private:
  static constexpr const char* kName = "PROTONDOSE_NUM_THREADS";
  std::optional<std::string> saved_;
};

std::string slice_path(const std::string& dir, int n) {
  char name[32];
  std::snprintf(name, sizeof name, "/CT.%04d.dcm", n);
  return dir + name;
}

TEST(CtSeriesWriter, RoundTripsTheReferenceCtBitForBit) {
  // 110 slices: read back serially and split over several threads, the image
  // is the one written, bit for bit, with the slices in position order.
  const CtImage ct = read_ct_series(test::shared("reference/slab_dcpt/ct"));
  const std::string dir = test::scratch_dir();
  CtWriteOptions options;
  options.unsigned_pixels = true;
  write_ct_series(ct, dir, options);
  std::vector<std::string> files;
  for (int n = 1; n <= ct.hu.grid.size[2]; ++n) files.push_back(slice_path(dir, n));
  for (int threads : {1, 2, 3, 16}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const ScopedThreadCount scoped(threads);
    const CtSeriesReadResult result = read_ct_series_detailed(dir);
    const CtImage& read = result.ct;
    EXPECT_EQ(read.hu.grid, ct.hu.grid);
    ASSERT_EQ(read.hu.data.size(), ct.hu.data.size());
    EXPECT_EQ(std::memcmp(read.hu.data.data(), ct.hu.data.data(), ct.hu.data.size() * sizeof(float)), 0);
    EXPECT_EQ(result.slice_files, files);
    EXPECT_EQ(result.padding_voxels, 0u);
    EXPECT_EQ(read.series_instance_uid, ct.series_instance_uid);
    EXPECT_EQ(read.frame_of_reference_uid, ct.frame_of_reference_uid);
  }
}

// 40 slices of 64 × 48 (6 kB of pixels each: DCMTK loads them lazily, in the
// reader's second pass), the HU varying from voxel to voxel.
std::string forty_slice_series(const std::string& dir) {
  CtImage ct;
  Grid3 g;
  g.size = {64, 48, 40};
  g.spacing_mm = {1.0, 1.0, 2.0};
  ct.hu = Volume<float>(g);
  for (std::size_t p = 0; p < ct.hu.data.size(); ++p)
    ct.hu.data[p] = static_cast<float>(static_cast<int>(p % 4000) - 1000);
  write_ct_series(ct, dir);
  return dir;
}

// Reading `dir` with 1, 2, 3, 8 and 40 threads throws Error naming `first`
// (what a serial read reports), none of `later`, and saying `message`.
template <class Error>
void expect_the_same_error_at_every_thread_count(const std::string& dir, const char* first,
                                                 std::initializer_list<const char*> later, const char* message) {
  for (int threads : {1, 2, 3, 8, 40}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const ScopedThreadCount scoped(threads);
    try {
      read_ct_series(dir);
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(first), std::string::npos) << what;
      for (const char* name : later) EXPECT_EQ(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find(message), std::string::npos) << what;
    }
  }
}

// The corrupt slices of the tests below (1-based, as in CT.0012.dcm).
constexpr int kBadSlices[] = {12, 21, 27, 30};

TEST(CtSeriesReader, NamesTheFirstBadFileInPathOrderWhateverTheThreadCount) {
  // Slices 12, 21, 27 and 30 are truncated (the header pass fails on each);
  // a serial read stops at slice 12, and so must every split over threads.
  // 21 and 27 begin a thread's share at 2 and 3 threads: they fail first.
  const std::string dir = forty_slice_series(test::scratch_dir());
  for (int n : kBadSlices)
    std::filesystem::resize_file(slice_path(dir, n), std::filesystem::file_size(slice_path(dir, n)) - 10);
  expect_the_same_error_at_every_thread_count<InputError>(dir, "CT.0012.dcm", {"CT.0021", "CT.0027", "CT.0030"},
                                                          "not a readable DICOM file");
}

TEST(CtSeriesReader, NamesTheFirstBadSliceInPositionOrderWhateverTheThreadCount) {
  // The pixel pass fails on RLE-compressed slices, which the header pass
  // accepts. The names are reversed, so the bad slice first in position order
  // (CT.0012 → z_29) comes after the other bad ones (CT.0021, CT.0027,
  // CT.0030 → z_20, z_14, z_11) in path order; a serial read reports z_29,
  // and so must every split over threads.
  const std::string dir = forty_slice_series(test::scratch_dir());
  DcmRLEEncoderRegistration::registerCodecs();
  for (int n : kBadSlices) {
    DcmFileFormat file;
    ASSERT_TRUE(file.loadFile(slice_path(dir, n).c_str()).good());
    ASSERT_TRUE(file.getDataset()->chooseRepresentation(EXS_RLELossless, nullptr).good());
    ASSERT_TRUE(file.saveFile((dir + "/rle.dcm").c_str(), EXS_RLELossless).good());
    std::filesystem::rename(dir + "/rle.dcm", slice_path(dir, n));
  }
  for (int n = 1; n <= 40; ++n) {
    char name[32];
    std::snprintf(name, sizeof name, "/z_%02d.dcm", 41 - n);
    std::filesystem::rename(slice_path(dir, n), dir + name);
  }
  expect_the_same_error_at_every_thread_count<UnavailableError>(dir, "z_29.dcm", {"z_20", "z_14", "z_11"},
                                                                "compressed pixel data");
}

TEST(CtSeriesReader, SortsSlicesByPositionNotByFileName) {
  const CtImage ct = synthetic_ct({{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}});
  const std::string dir = test::scratch_dir();
  write_ct_series(ct, dir);
  // Reverse the names: CT.0001 (lowest z) becomes z_4.dcm, sorting last.
  for (int n = 1; n <= 4; ++n) {
    char from[32];
    std::snprintf(from, sizeof from, "/CT.%04d.dcm", n);
    std::filesystem::rename(dir + from, dir + "/z_" + std::to_string(5 - n) + ".dcm");
  }
  const CtImage read = read_ct_series(dir);
  EXPECT_EQ(read.hu.grid, ct.hu.grid);
  EXPECT_EQ(read.hu.data, ct.hu.data);
}

TEST(CtSeriesReader, SharedCasesAreConsistentWithTheirPlanStructuresAndDose) {
  // Every object of a reference case shares the CT's frame of reference, and
  // the Monte Carlo dose lies on the CT grid (reference/README.md).
  for (const std::string name : {"slab_dcpt", "water_dcpt"}) {
    SCOPED_TRACE(name);
    const std::string base = "reference/" + name;
    const CtImage ct = read_ct_series(test::shared(base + "/ct"));
    const IonPlan plan = read_ion_plan(test::shared(base + "/plan.dcm"));
    EXPECT_NO_THROW(check_same_frame_of_reference(ct, plan));
    const RtDose dose = read_rt_dose(test::shared(base + "/mc_dose.dcm"));
    EXPECT_EQ(dose.frame_of_reference_uid, ct.frame_of_reference_uid);
    EXPECT_EQ(dose.study_instance_uid, ct.study_instance_uid);
    EXPECT_EQ(dose.referenced_plan_uid, plan.sop_instance_uid);
    EXPECT_EQ(dose.dose_gy.grid, ct.hu.grid);
    EXPECT_EQ(read_rt_structure_set(test::shared(base + "/rtstruct.dcm")).frame_of_reference_uid,
              ct.frame_of_reference_uid);
  }
}

TEST(CtSeriesWriter, SlicesPassDciodvfyWithoutErrors) {
  if (std::system("command -v dciodvfy > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "dciodvfy not installed (apt-get install dicom3tools)";
  const std::string dir = test::scratch_dir();
  write_ct_series(synthetic_ct({{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}}), dir);
  const std::string log = dir + "/dciodvfy.log";
  std::system(("dciodvfy " + dir + "/CT.0002.dcm > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::string line, errors;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    if (line.rfind("Error", 0) == 0) errors += line + "\n";
  }
  EXPECT_GT(lines, 0);
  EXPECT_TRUE(errors.empty()) << errors;
}

TEST(CtSeriesWriter, RejectsHounsfieldUnitsOutsideThePixelRange) {
  CtImage ct = synthetic_ct({{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}});
  ct.hu.at(2, 3, 1) = -2000.0F;
  CtWriteOptions options;
  options.unsigned_pixels = true;
  EXPECT_THROW_WITH(write_ct_series(ct, test::scratch_dir(), options), InputError, "HU -2000",
                    "voxel (2, 3, 1)", "uint16");
}

}  // namespace
}  // namespace protondose::dicom
