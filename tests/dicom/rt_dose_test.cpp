// RT Dose reading (RayStation 5 export, MCsquare reference) and writing
// (round trip through DCMTK, pydicom and dciodvfy when they are installed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>

#include "dicom_test_util.h"
#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"

namespace protondose::dicom {
namespace {

using test::shared;

TEST(RtDoseReader, ReadsRayStationExport) {
  // Independent numbers: dcmdump header (44 rows × 32 columns × 5 frames,
  // PixelSpacing 3\3, GridFrameOffsetVector 0\3\6\9\12, IPP -34.7103\157.0439\-94.25,
  // DoseGridScaling 7.6315095971E-05) and the pixel data written out by
  // `dcmdump +W` and summed in Python: max pixel 65535, Σ pixels × scaling =
  // 12518.0038 Gy, 4004 non-zero voxels.
  const RtDose dose = read_rt_dose(shared("data/rt-dose/raystation5-abdomen-rtdose.dcm"));
  const Grid3& g = dose.dose_gy.grid;
  EXPECT_EQ(g.size, (std::array<int, 3>{32, 44, 5}));
  EXPECT_EQ(g.spacing_mm, (Vec3{3, 3, 3}));
  EXPECT_EQ(g.origin_mm, (Vec3{-34.7103, 157.0439, -94.25}));
  EXPECT_TRUE(g.axis_aligned());
  EXPECT_EQ(dose.units, "GY");
  EXPECT_EQ(dose.type, "PHYSICAL");
  EXPECT_EQ(dose.summation_type, "PLAN");
  EXPECT_EQ(dose.referenced_plan_uid, "1.2.826.0.1.3680043.8.176.20170420171226020.2600.41022");
  EXPECT_EQ(dose.frame_of_reference_uid, "1.2.826.0.1.3680043.8.176.20170420165406296.1600.12280");
  const float max = *std::max_element(dose.dose_gy.data.begin(), dose.dose_gy.data.end());
  EXPECT_NEAR(max, 65535 * 7.6315095971E-05, 1e-5);
  const double sum = std::accumulate(dose.dose_gy.data.begin(), dose.dose_gy.data.end(), 0.0);
  EXPECT_NEAR(sum, 12518.0038, 0.01);
  EXPECT_EQ(std::count_if(dose.dose_gy.data.begin(), dose.dose_gy.data.end(), [](float v) { return v > 0; }), 4004);
}

std::vector<float> read_raw_floats(const std::string& path, std::size_t count) {
  std::vector<float> values(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_EQ(static_cast<std::size_t>(in.gcount()), count * sizeof(float)) << path;
  return values;
}

TEST(RtDoseReader, MatchesTheMetaImageCopyOfTheMonteCarloDoseWithinOneQuantum) {
  const RtDose dose = read_rt_dose(shared("reference/water_dcpt/mc_dose.dcm"));
  const Grid3& g = dose.dose_gy.grid;
  // mc_dose.mhd: DimSize 110 135 110, spacing 2, Offset -109 -119 -109, identity.
  EXPECT_EQ(g.size, (std::array<int, 3>{110, 135, 110}));
  EXPECT_EQ(g.spacing_mm, (Vec3{2, 2, 2}));
  EXPECT_EQ(g.origin_mm, (Vec3{-109, -119, -109}));
  EXPECT_TRUE(g.axis_aligned());
  const auto raw = read_raw_floats(shared("reference/water_dcpt/mc_dose.raw"), g.voxel_count());
  const float raw_max = *std::max_element(raw.begin(), raw.end());
  ASSERT_GT(raw_max, 0.05F);  // README: max dose 0.06299 Gy
  // Below one quantum of the 32-bit pixels (1.47e-11 Gy), plus the float32
  // rounding of both copies (2^-24 relative each): at 0.063 Gy a float's
  // resolution (3.7e-9 Gy) is far coarser than the 32-bit quantum.
  double max_excess = 0.0;
  for (std::size_t p = 0; p < raw.size(); ++p) {
    const double error = std::abs(static_cast<double>(dose.dose_gy.data[p]) - raw[p]);
    const double allowed = dose.dose_grid_scaling + std::ldexp(std::abs(static_cast<double>(raw[p])), -23);
    max_excess = std::max(max_excess, error - allowed);
  }
  EXPECT_LE(max_excess, 0.0) << "quantum " << dose.dose_grid_scaling << " Gy";
}

Volume<float> sample_dose(unsigned seed) {
  // A non-cubic, off-origin grid with a smooth peak and an exact zero corner.
  Grid3 g;
  g.size = {23, 17, 9};
  g.spacing_mm = {2.5, 2.0, 3.0};
  g.origin_mm = {-30.25, 12.5, -7.0};
  Volume<float> dose(g);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> noise(0.0F, 0.05F);
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i)
        dose.at(i, j, k) = 2.0F * std::exp(-0.01F * ((i - 11) * (i - 11) + (j - 8) * (j - 8) + (k - 4) * (k - 4))) +
                           noise(rng);
  dose.at(0, 0, 0) = 0.0F;
  return dose;
}

IonPlan slab_plan() { return read_ion_plan(shared("reference/slab_dcpt/plan.dcm")); }

void expect_round_trip(const Volume<float>& written, const RtDose& read) {
  EXPECT_EQ(read.dose_gy.grid, written.grid);
  ASSERT_EQ(read.dose_gy.data.size(), written.data.size());
  double max_error = 0.0;
  for (std::size_t p = 0; p < written.data.size(); ++p)
    max_error = std::max(max_error, std::abs(static_cast<double>(read.dose_gy.data[p]) - written.data[p]));
  const float max = *std::max_element(written.data.begin(), written.data.end());
  ASSERT_GT(max, 1.0F);
  // Rounding to the nearest pixel gives at most half a quantum, plus the
  // float32 rounding of the value read back (2^-24 relative).
  EXPECT_LE(max_error, 0.5 * read.dose_grid_scaling + std::ldexp(static_cast<double>(max), -23))
      << "quantum " << read.dose_grid_scaling;
  EXPECT_EQ(read.dose_gy.data[0], 0.0F);
}

TEST(RtDoseWriter, RoundTrips32BitThroughTheReaderWithinHalfAQuantum) {
  const unsigned seed = 20261123;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Volume<float> dose = sample_dose(seed);
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  const std::string path = test::scratch_dir() + "/dose32.dcm";
  write_rt_dose(path, dose, options);
  const RtDose read = read_rt_dose(path);
  expect_round_trip(dose, read);
  const float max = *std::max_element(dose.data.begin(), dose.data.end());
  EXPECT_NEAR(read.dose_grid_scaling, max / 4294967295.0, 1e-9 * max / 4294967295.0);
  EXPECT_EQ(read.units, "GY");
  EXPECT_EQ(read.type, "PHYSICAL");
  EXPECT_EQ(read.summation_type, "PLAN");
  EXPECT_EQ(read.referenced_plan_uid, plan.sop_instance_uid);
  EXPECT_EQ(read.frame_of_reference_uid, plan.frame_of_reference_uid);
  EXPECT_EQ(read.study_instance_uid, plan.study_instance_uid);
}

TEST(RtDoseWriter, RoundTrips16BitThroughTheReaderWithinHalfAQuantum) {
  const Volume<float> dose = sample_dose(7);
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.sixteen_bit = true;
  options.summation = DoseSummationOption::kBeam;
  options.referenced_beam_number = 1;
  options.dose_type = DoseTypeOption::kEffective;
  options.rbe_factor = 1.1;
  const std::string path = test::scratch_dir() + "/dose16.dcm";
  write_rt_dose(path, dose, options);
  const RtDose read = read_rt_dose(path);
  expect_round_trip(dose, read);
  EXPECT_EQ(read.type, "EFFECTIVE");
  EXPECT_EQ(read.summation_type, "BEAM");
}

TEST(RtDoseWriter, WritesAFlippedGridWithNegativeFrameOffsets) {
  // Slices ordered against the row × column normal (as for some FFS exports).
  Volume<float> dose = sample_dose(3);
  dose.grid.axis = {{{1, 0, 0}, {0, 1, 0}, {0, 0, -1}}};
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  const std::string path = test::scratch_dir() + "/flipped.dcm";
  write_rt_dose(path, dose, options);
  expect_round_trip(dose, read_rt_dose(path));
}

int run(const std::string& command) { return std::system(command.c_str()); }

TEST(RtDoseWriter, SixteenBitFilePassesDciodvfyWithoutErrors) {
  if (run("command -v dciodvfy > /dev/null 2>&1") != 0) GTEST_SKIP() << "dciodvfy not installed (apt-get install dicom3tools)";
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.sixteen_bit = true;
  const std::string dir = test::scratch_dir();
  write_rt_dose(dir + "/dose16.dcm", sample_dose(11), options);
  const std::string log = dir + "/dciodvfy.log";
  run("dciodvfy " + dir + "/dose16.dcm > " + log + " 2>&1");
  std::ifstream in(log);
  std::string line, errors;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    if (line.rfind("Error", 0) == 0) errors += line + "\n";
  }
  EXPECT_GT(lines, 0) << "dciodvfy printed nothing";
  EXPECT_TRUE(errors.empty()) << errors;
}

TEST(RtDoseWriter, BothPixelDepthsReadBackThroughPydicomWithTheSameValues) {
  const std::string python = "/usr/bin/python3";
  if (run(python + " -c 'import pydicom' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with pydicom not available (apt-get install python3-pydicom)";
  const IonPlan plan = slab_plan();
  const Volume<float> dose = sample_dose(5);
  const std::string dir = test::scratch_dir();
  for (bool sixteen : {false, true}) {
    SCOPED_TRACE(sixteen ? "16-bit" : "32-bit");
    RtDoseWriteOptions options;
    options.plan = &plan;
    options.sixteen_bit = sixteen;
    const std::string path = dir + (sixteen ? "/d16.dcm" : "/d32.dcm");
    write_rt_dose(path, dose, options);
    // pydicom: dose = pixel_array × DoseGridScaling, frames k, rows j, columns i.
    const std::string out = path + ".f32";
    const std::string script =
        "import sys, numpy, pydicom\n"
        "ds = pydicom.dcmread(sys.argv[1])\n"
        "a = ds.pixel_array.astype(numpy.float64) * float(ds.DoseGridScaling)\n"
        "assert ds.DoseUnits == 'GY' and ds.Modality == 'RTDOSE'\n"
        "assert list(map(float, ds.GridFrameOffsetVector))[1] > 0\n"
        "a.astype(numpy.float32).tofile(sys.argv[2])\n";
    std::ofstream(dir + "/read.py") << script;
    ASSERT_EQ(run(python + " " + dir + "/read.py " + path + " " + out), 0);
    const auto values = read_raw_floats(out, dose.data.size());
    const RtDose dcmtk = read_rt_dose(path);
    double max_error = 0.0;
    for (std::size_t p = 0; p < values.size(); ++p) {
      max_error = std::max(max_error, std::abs(static_cast<double>(values[p]) - dose.data[p]));
      ASSERT_NEAR(values[p], dcmtk.dose_gy.data[p], 1e-6 * 2.1) << "voxel " << p;
    }
    EXPECT_LE(max_error, 0.5 * dcmtk.dose_grid_scaling + 1e-6 * 2.1);
  }
}

TEST(RtDoseWriter, TakesStudyAndFrameFromTheCtAndPatientFromThePlan) {
  const IonPlan plan = slab_plan();
  CtImage ct;  // identity only; the writer does not use the pixels
  ct.frame_of_reference_uid = plan.frame_of_reference_uid;
  ct.study_instance_uid = "1.2.826.0.1.3680043.2.1125.77";
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.ct = &ct;
  const std::string path = test::scratch_dir() + "/dose.dcm";
  write_rt_dose(path, sample_dose(2), options);
  const RtDose read = read_rt_dose(path);
  EXPECT_EQ(read.study_instance_uid, "1.2.826.0.1.3680043.2.1125.77");
  EXPECT_EQ(read.frame_of_reference_uid, plan.frame_of_reference_uid);
  EXPECT_EQ(read.referenced_plan_uid, plan.sop_instance_uid);
}

TEST(RtDoseWriter, WithThePlanAsIdentitySourceIsOneEntityWithCtAndPlanForDcentvfy) {
  if (run("command -v dcentvfy > /dev/null 2>&1") != 0) GTEST_SKIP() << "dcentvfy not installed (apt-get install dicom3tools)";
  const std::string base = shared("reference/slab_dcpt");
  const CtImage ct = read_ct_series(base + "/ct");
  const IonPlan plan = read_ion_plan(base + "/plan.dcm");
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.ct = &ct;
  options.sixteen_bit = true;
  options.copy_patient_and_study_from = base + "/plan.dcm";
  const std::string dir = test::scratch_dir();
  write_rt_dose(dir + "/dose.dcm", read_rt_dose(base + "/mc_dose.dcm").dose_gy, options);
  const std::string log = dir + "/dcentvfy.log";
  run("dcentvfy " + base + "/ct/CT.slab_dcpt.001.dcm " + base + "/ct/CT.slab_dcpt.002.dcm " + base + "/plan.dcm " +
      dir + "/dose.dcm > " + log + " 2>&1");
  std::ifstream in(log);
  std::string line, findings;
  while (std::getline(in, line)) findings += line + "\n";
  // dcentvfy prints nothing when patient, study and frame of reference agree.
  EXPECT_TRUE(findings.empty()) << findings;
}

TEST(RtDoseWriter, RejectsAnIdentitySourceFromAnotherStudy) {
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.copy_patient_and_study_from = shared("reference/water_dcpt/plan.dcm");
  EXPECT_THROW_WITH(write_rt_dose(test::scratch_dir() + "/x.dcm", sample_dose(1), options), InputError,
                    "StudyInstanceUID (0020,000d)", "water_dcpt/plan.dcm");
}

TEST(RtDoseWriter, RejectsNegativeDoseNamingTheVoxel) {
  Volume<float> dose = sample_dose(1);
  dose.at(3, 2, 1) = -0.5F;
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  const std::string path = test::scratch_dir() + "/neg.dcm";
  EXPECT_THROW_WITH(write_rt_dose(path, dose, options), InputError, "voxel (3, 2, 1)", "-0.5 Gy");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RtDoseWriter, ALargeGridIsCheckedAndConvertedInChunksWithTheSameResultAndTheFirstBadVoxelNamed) {
  // From 2^22 voxels on, the writer checks and converts in parallel chunks:
  // the values must round-trip as on the serial path, and of two bad voxels
  // in different chunks the first in memory order is the one reported.
  Grid3 g;
  g.size = {256, 128, 129};
  g.spacing_mm = {1.0, 1.0, 1.0};
  g.origin_mm = {-128.0, -64.0, -64.0};
  ASSERT_GE(g.voxel_count(), std::size_t{1} << 22);
  Volume<float> dose(g);
  for (std::size_t p = 0; p < dose.data.size(); ++p)
    dose.data[p] = static_cast<float>((p * 2654435761u) % 1000003u) * 1e-5F;
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  for (bool sixteen_bit : {false, true}) {
    options.sixteen_bit = sixteen_bit;
    const std::string path = test::scratch_dir() + "/large" + (sixteen_bit ? "16" : "32") + ".dcm";
    write_rt_dose(path, dose, options);
    const RtDose read = read_rt_dose(path);
    ASSERT_EQ(read.dose_gy.data.size(), dose.data.size());
    double max_error = 0.0;
    for (std::size_t p = 0; p < dose.data.size(); ++p)
      max_error = std::max(max_error, std::abs(static_cast<double>(read.dose_gy.data[p]) - dose.data[p]));
    EXPECT_LE(max_error, 0.5 * read.dose_grid_scaling + std::ldexp(10.0, -23)) << (sixteen_bit ? 16 : 32);
  }
  const std::size_t early = dose.data.size() * 2 / 5, late = dose.data.size() * 9 / 10;
  dose.data[late] = std::numeric_limits<float>::quiet_NaN();
  const std::string bad = test::scratch_dir() + "/large_bad.dcm";
  const auto voxel = [&](std::size_t p) {
    return "voxel (" + std::to_string(p % 256) + ", " + std::to_string(p / 256 % 128) + ", " +
           std::to_string(p / (256 * 128)) + ")";
  };
  const std::string late_voxel = voxel(late), early_voxel = voxel(early);
  EXPECT_THROW_WITH(write_rt_dose(bad, dose, options), InputError, late_voxel.c_str(), "nan");
  dose.data[early] = -0.5F;
  EXPECT_THROW_WITH(write_rt_dose(bad, dose, options), InputError, early_voxel.c_str(), "-0.5 Gy");
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST(RtDoseWriter, RejectsMissingPlan) {
  EXPECT_THROW_WITH(write_rt_dose(test::scratch_dir() + "/x.dcm", sample_dose(1), {}), InputError, "no plan");
}

TEST(RtDoseWriter, RejectsEffectiveDoseWithoutRbe) {
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.dose_type = DoseTypeOption::kEffective;
  EXPECT_THROW_WITH(write_rt_dose(test::scratch_dir() + "/x.dcm", sample_dose(1), options), InputError,
                    "EFFECTIVE", "rbe_factor");
}

TEST(RtDoseWriter, RejectsBeamSummationForAnUnknownBeam) {
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.summation = DoseSummationOption::kBeam;
  options.referenced_beam_number = 7;
  EXPECT_THROW_WITH(write_rt_dose(test::scratch_dir() + "/x.dcm", sample_dose(1), options), InputError,
                    "BEAM", "got 7");
}

TEST(RtDoseWriter, RejectsCtInAnotherFrameOfReference) {
  const IonPlan plan = slab_plan();
  CtImage ct;
  ct.frame_of_reference_uid = "1.2.3";
  RtDoseWriteOptions options;
  options.plan = &plan;
  options.ct = &ct;
  EXPECT_THROW_WITH(write_rt_dose(test::scratch_dir() + "/x.dcm", sample_dose(1), options), InputError,
                    "differs from the CT's '1.2.3'");
}

TEST(RtDoseWriter, ReportsAnUnwritableDestinationAsIoError) {
  const IonPlan plan = slab_plan();
  RtDoseWriteOptions options;
  options.plan = &plan;
  EXPECT_THROW_WITH(write_rt_dose("/nonexistent-dir/dose.dcm", sample_dose(1), options), IoError,
                    "/nonexistent-dir/dose.dcm");
}

TEST(RtDoseReader, RejectsAPlanFile) {
  EXPECT_THROW_WITH(read_rt_dose(shared("reference/slab_dcpt/plan.dcm")), InputError, "not an RT Dose",
                    "SOPClassUID (0008,0016)");
}

}  // namespace
}  // namespace protondose::dicom
