// Batch jobs with a DICOM Spatial Registration (key `registration`): the plan,
// made in its own frame of reference, computed on a CT in another frame.
// Identity, a translation against the equivalent setup shift, a 90 degree
// rotation against the nominal dose turned with the anatomy, resume on a
// changed registration, and the refusals recorded per job.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "batch_case.h"
#include "protondose/core/rigid_transform.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/registration.h"
#include "registration_writer.h"

namespace pe = protondose::engine;
namespace fs = std::filesystem;
using batch_test::manifest_of;
using batch_test::TinyCase;
using protondose::RigidTransform;
using protondose::Vec3;
using protondose::testing::reg_rotation_z;
using protondose::testing::reg_translation;

namespace {

/// The new CT's frame: differs from the plan's (batch_test::kFrameUid).
constexpr const char* kNewCtFrame = "2.25.515151";

const pe::JobRecord& record(const pe::BatchSummary& s, const std::string& id) {
  for (const auto& r : s.records)
    if (r.id == id) return r;
  throw std::runtime_error("no record for " + id);
}

protondose::Volume<float> read_dose(const std::string& path) { return protondose::dicom::read_rt_dose(path).dose_gy; }

float max_of(const protondose::Volume<float>& v) { return *std::max_element(v.data.begin(), v.data.end()); }

/// The CT `ct` (plan frame) as a new scan in frame kNewCtFrame related by
/// ct_from_plan, which must map voxel centres onto an axis-aligned grid of the
/// same spacing (translations by whole voxels, rotations by 90 degrees): every
/// new voxel takes the value of the plan-frame voxel at the same anatomical point.
protondose::CtImage ct_moved_by(const protondose::CtImage& ct, const RigidTransform& ct_from_plan) {
  const protondose::Grid3& g = ct.hu.grid;
  Vec3 lo{1e300, 1e300, 1e300};
  std::array<int, 3> size{};
  for (int a = 0; a < 3; ++a) {
    const Vec3 mapped_axis = ct_from_plan.rotate(g.axis[a]);
    for (int c = 0; c < 3; ++c)
      if (std::abs(mapped_axis[c]) > 0.5) size[c] = g.size[a];
  }
  for (int corner = 0; corner < 8; ++corner) {
    const Vec3 p = ct_from_plan.apply(g.position_mm((corner & 1) ? g.size[0] - 1 : 0, (corner & 2) ? g.size[1] - 1 : 0,
                                                    (corner & 4) ? g.size[2] - 1 : 0));
    for (int c = 0; c < 3; ++c) lo[c] = std::min(lo[c], p[c]);
  }
  protondose::CtImage out = ct;
  out.frame_of_reference_uid = kNewCtFrame;
  out.hu.grid = protondose::Grid3{};
  out.hu.grid.size = size;
  out.hu.grid.spacing_mm = g.spacing_mm;
  out.hu.grid.origin_mm = lo;
  out.hu.data.assign(out.hu.grid.voxel_count(), -1000.0f);
  const RigidTransform plan_from_ct = ct_from_plan.inverse();
  for (int k = 0; k < size[2]; ++k)
    for (int j = 0; j < size[1]; ++j)
      for (int i = 0; i < size[0]; ++i) {
        const Vec3 idx = g.continuous_index(plan_from_ct.apply(out.hu.grid.position_mm(i, j, k)));
        int n[3];
        for (int a = 0; a < 3; ++a) {
          n[a] = static_cast<int>(std::lround(idx[a]));
          if (std::abs(idx[a] - n[a]) > 1e-9) throw std::runtime_error("ct_moved_by: not a voxel-to-voxel map");
        }
        out.hu.at(i, j, k) = ct.hu.at(n[0], n[1], n[2]);
      }
  return out;
}

/// A case with the plan-frame CT (ct/, the plan's frame), a new CT (ct_new/, frame
/// kNewCtFrame) and reg.dcm registering the plan's frame onto the new CT's by
/// `matrix` (Registered RCS = the new CT's frame, with its identity item). The
/// new CT shows the anatomy moved by the registration (move_anatomy, voxel to
/// voxel maps only) or, to try any map, the plan-frame CT's voxels as they are.
struct RegisteredCase : TinyCase {
  RigidTransform ct_from_plan;
  RegisteredCase(const fs::path& d, const std::array<double, 16>& matrix, bool move_anatomy = true)
      : TinyCase(d), ct_from_plan(protondose::rigid_transform_from_matrix(matrix, "test")) {
    protondose::CtImage new_ct = batch_test::tiny_ct();
    if (move_anatomy) new_ct = ct_moved_by(new_ct, ct_from_plan);
    new_ct.frame_of_reference_uid = kNewCtFrame;
    protondose::dicom::write_ct_series(new_ct, (dir / "ct_new").string());
    protondose::testing::write_registration((dir / "reg.dcm").string(), kNewCtFrame,
                                            {{kNewCtFrame, {{reg_translation(0, 0, 0)}}},
                                             {batch_test::kFrameUid, {{matrix}}}});
  }
  pe::BatchJob registered_job(const std::string& id, const std::string& reg = "reg.dcm") const {
    pe::BatchJob j = job(id, "plan100.txt", "ct_new");
    j.registration_path = (dir / reg).string();
    return j;
  }
};

}  // namespace

TEST(BatchRegistration, AnIdentityRegistrationGivesTheSameFrameDoseBitwise) {
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_translation(0, 0, 0));
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {c.job("same_frame"), c.registered_job("registered")}),
                                           batch_test::fast_options(dir), batch_test::test_io());
  ASSERT_TRUE(s.all_succeeded()) << pe::format_summary_table(s);
  const auto nominal = read_dose(c.job("same_frame").out_path);
  const auto registered = read_dose(c.registered_job("registered").out_path);
  ASSERT_GT(max_of(nominal), 0.0f);
  EXPECT_EQ(registered.grid, nominal.grid);
  EXPECT_EQ(registered.data, nominal.data);
  // The output is in the new CT's frame, and says so.
  EXPECT_EQ(protondose::dicom::read_rt_dose(c.registered_job("registered").out_path).frame_of_reference_uid, kNewCtFrame);
}

TEST(BatchRegistration, ATranslationMovesTheDoseExactlyLikeTheEquivalentSetupShift) {
  // ct_from_plan = +t: the planned isocentre lies at iso + t in the new CT.
  // On a CT with the same voxels in the plan's own frame, that is the setup
  // shift shift_mm = −t (the engine computes with the isocentre at iso −
  // shift_mm; docs/formats/batch-manifest.md). Two cases: whole voxels with
  // the anatomy moved by t in the new CT (the dose must then also equal the
  // nominal dose carried by t), and a fractional t on unmoved voxels.
  struct Case {
    const char* name;
    Vec3 t;
    bool move_anatomy;
  };
  for (const Case& k : {Case{"whole_voxels", {8, -4, 4}, true}, Case{"fractional", {2.5, -3, 6.25}, false}}) {
    SCOPED_TRACE(k.name);
    const Vec3 t = k.t;
    const auto dir = batch_test::fresh_dir(std::string(".") + k.name);
    const RegisteredCase c(dir, reg_translation(t[0], t[1], t[2]), k.move_anatomy);
    // The shift job's CT: the new CT's voxels in the plan's frame.
    protondose::CtImage same_voxels = batch_test::tiny_ct();
    if (k.move_anatomy) same_voxels = ct_moved_by(same_voxels, c.ct_from_plan);
    same_voxels.frame_of_reference_uid = batch_test::kFrameUid;
    protondose::dicom::write_ct_series(same_voxels, (dir / "ct_same_voxels").string());
    pe::BatchJob shifted = c.job("shifted", "plan100.txt", "ct_same_voxels");
    shifted.shift_mm = {-t[0], -t[1], -t[2]};
    const pe::BatchSummary s =
        pe::run_batch(manifest_of(dir, {c.job("nominal"), shifted, c.registered_job("registered")}),
                      batch_test::fast_options(dir), batch_test::test_io());
    ASSERT_TRUE(s.all_succeeded()) << pe::format_summary_table(s);
    const auto by_shift = read_dose(shifted.out_path);
    const auto by_registration = read_dose(c.registered_job("registered").out_path);
    const auto nominal = read_dose(c.job("nominal").out_path);
    const float dmax = max_of(by_shift);
    ASSERT_GT(dmax, 0.0f);
    ASSERT_EQ(by_registration.grid.size, by_shift.grid.size);
    for (int a = 0; a < 3; ++a) EXPECT_NEAR(by_registration.grid.origin_mm[a], by_shift.grid.origin_mm[a], 1e-9);
    double worst = 0;
    std::size_t above = 0;
    for (std::size_t v = 0; v < by_shift.data.size(); ++v) {
      worst = std::max(worst, static_cast<double>(std::abs(by_registration.data[v] - by_shift.data[v])));
      if (by_shift.data[v] > 0.1f * dmax) ++above;
    }
    EXPECT_GT(above, 100u);
    EXPECT_LE(worst, 1e-5 * dmax) << "largest difference " << worst << " Gy of a maximum " << dmax << " Gy";
    if (k.move_anatomy) {
      // The dose follows the anatomy: voxel for voxel the nominal dose, its grid moved by t.
      for (int a = 0; a < 3; ++a) EXPECT_EQ(by_registration.grid.origin_mm[a], nominal.grid.origin_mm[a] + t[a]);
      double worst_nominal = 0;
      for (std::size_t v = 0; v < nominal.data.size(); ++v)
        worst_nominal = std::max(worst_nominal, static_cast<double>(std::abs(by_registration.data[v] - nominal.data[v])));
      EXPECT_LE(worst_nominal, 1e-5 * dmax);
    } else {
      // Not vacuous: relative to unmoved anatomy, the dose moved.
      double moved = 0;
      for (std::size_t v = 0; v < nominal.data.size(); ++v)
        moved = std::max(moved, static_cast<double>(std::abs(by_registration.data[v] - nominal.data[v])));
      EXPECT_GT(moved, 0.1 * dmax);
    }
    // The record and the sidecar carry the registration's checksum and matrix.
    const pe::JobRecord& r = record(s, "registered");
    ASSERT_TRUE(r.registration.is_object()) << pe::to_json(r).dump();
    EXPECT_EQ(r.registration["file"], (dir / "reg.dcm").string());
    EXPECT_EQ(r.registration["checksum"], pe::hex64(pe::hash_path((dir / "reg.dcm").string())));
    EXPECT_EQ(r.registration["ct_from_plan"][3], t[0]);
    EXPECT_EQ(r.registration["ct_from_plan"][7], t[1]);
    EXPECT_EQ(r.registration["ct_from_plan"][11], t[2]);
    EXPECT_EQ(pe::to_json(r)["registration"], r.registration);
    std::ifstream side_in(pe::sidecar_path(c.registered_job("registered").out_path));
    const nlohmann::json side = nlohmann::json::parse(side_in);
    EXPECT_EQ(side["inputs"]["registration"], r.registration["checksum"]);
    EXPECT_EQ(side["record"]["registration"], r.registration);
    EXPECT_FALSE(record(s, "shifted").registration.is_object());
  }
}

TEST(BatchRegistration, ARotationBy90DegreesTurnsTheBeamWithTheAnatomy) {
  // The new CT is the water box turned by +90 deg about z and moved: the
  // beam, along +y (gantry 0, HFS) in the plan's frame, must run along
  // R·(0,1,0) = (−1,0,0) in the new CT, and the whole dose must be the
  // nominal dose carried voxel by voxel by the same map.
  const Vec3 t{12, -8, 4};
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_rotation_z(90, t[0], t[1], t[2]));
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {c.job("nominal"), c.registered_job("turned")}),
                                           batch_test::fast_options(dir), batch_test::test_io());
  ASSERT_TRUE(s.all_succeeded()) << pe::format_summary_table(s);
  const auto nominal = read_dose(c.job("nominal").out_path);
  const auto turned = read_dose(c.registered_job("turned").out_path);
  const float dmax = max_of(nominal);
  ASSERT_GT(dmax, 0.0f);
  EXPECT_EQ(turned.grid.size[0], nominal.grid.size[1]);
  EXPECT_EQ(turned.grid.size[1], nominal.grid.size[0]);
  EXPECT_TRUE(turned.grid.axis_aligned());
  double worst = 0;
  std::size_t compared = 0;
  const RigidTransform plan_from_ct = c.ct_from_plan.inverse();
  for (int k = 0; k < turned.grid.size[2]; ++k)
    for (int j = 0; j < turned.grid.size[1]; ++j)
      for (int i = 0; i < turned.grid.size[0]; ++i) {
        const Vec3 idx = nominal.grid.continuous_index(plan_from_ct.apply(turned.grid.position_mm(i, j, k)));
        const int n0 = static_cast<int>(std::lround(idx[0])), n1 = static_cast<int>(std::lround(idx[1])),
                  n2 = static_cast<int>(std::lround(idx[2]));
        ASSERT_NEAR(idx[0], n0, 1e-6);
        ASSERT_NEAR(idx[1], n1, 1e-6);
        ASSERT_NEAR(idx[2], n2, 1e-6);
        const float want = nominal.at(n0, n1, n2);
        if (want > 0.1f * dmax) ++compared;
        worst = std::max(worst, static_cast<double>(std::abs(turned.at(i, j, k) - want)));
      }
  EXPECT_GT(compared, 100u);
  EXPECT_LE(worst, 1e-5 * dmax) << "largest difference " << worst << " Gy of a maximum " << dmax << " Gy";
  // Geometry spelled out: the integrated depth dose in the new CT runs along −x.
  // The beam enters the 120 mm box at x = t_x + 60 and the 100 MeV Bragg peak
  // (about 77 mm of water) lies near x = t_x − 17.
  std::vector<double> along_x(static_cast<std::size_t>(turned.grid.size[0]), 0.0);
  for (int k = 0; k < turned.grid.size[2]; ++k)
    for (int j = 0; j < turned.grid.size[1]; ++j)
      for (int i = 0; i < turned.grid.size[0]; ++i) along_x[static_cast<std::size_t>(i)] += turned.at(i, j, k);
  const int peak = static_cast<int>(std::max_element(along_x.begin(), along_x.end()) - along_x.begin());
  const double peak_x = turned.grid.position_mm(peak, 0, 0)[0];
  EXPECT_GT(peak_x, t[0] - 30) << "Bragg peak at x = " << peak_x << " mm";
  EXPECT_LT(peak_x, t[0] - 5) << "Bragg peak at x = " << peak_x << " mm";
  const double entrance = along_x[static_cast<std::size_t>(turned.grid.continuous_index({t[0] + 50, 0, 0})[0])];
  const double beyond = along_x[static_cast<std::size_t>(turned.grid.continuous_index({t[0] - 50, 0, 0})[0])];
  EXPECT_GT(entrance, 0.2 * along_x[static_cast<std::size_t>(peak)]);
  EXPECT_EQ(beyond, 0.0);
}

TEST(BatchRegistration, ACoarserDoseGridIsTheCtsOutputGridInTheCtsFrame) {
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_rotation_z(90, 12, -8, 4));
  pe::BatchJob coarse = c.registered_job("coarse");
  coarse.grid_mm = 6;
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {coarse}), batch_test::fast_options(dir), batch_test::test_io());
  ASSERT_TRUE(s.all_succeeded()) << pe::format_summary_table(s);
  const protondose::CtImage new_ct = protondose::dicom::read_ct_series((dir / "ct_new").string());
  const auto dose = read_dose(coarse.out_path);
  const protondose::Grid3 expected = pe::output_grid(new_ct.hu.grid, 6.0);
  EXPECT_EQ(dose.grid.size, expected.size);
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(dose.grid.origin_mm[a], expected.origin_mm[a], 1e-6);
  EXPECT_TRUE(dose.grid.axis_aligned());
  EXPECT_GT(max_of(dose), 0.0f);
}

TEST(BatchRegistration, AComparisonInputInThePlansFrameIsRefusedNotComparedAcrossFrames) {
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_translation(4, 0, 0));
  // The planned dose (plan's frame) and a dose in the new CT's frame, as references.
  ASSERT_TRUE(pe::run_batch(manifest_of(dir, {c.job("planned"), c.registered_job("earlier")}),
                            batch_test::fast_options(dir), batch_test::test_io())
                  .all_succeeded());
  fs::create_directories(dir / "refs");
  fs::copy_file(c.job("planned").out_path, dir / "refs" / "planned.dcm");
  fs::copy_file(c.registered_job("earlier").out_path, dir / "refs" / "earlier.dcm");
  pe::BatchJob across = c.registered_job("across");
  across.reference_dose_path = (dir / "refs" / "planned.dcm").string();
  pe::BatchJob same = c.registered_job("same");
  same.reference_dose_path = (dir / "refs" / "earlier.dcm").string();
  const pe::BatchSummary s =
      pe::run_batch(manifest_of(dir, {across, same}), batch_test::fast_options(dir), batch_test::test_io());
  const pe::JobRecord& bad = record(s, "across");
  EXPECT_EQ(bad.status, "failed");
  EXPECT_EQ(bad.category, "input");
  EXPECT_NE(bad.message.find("key 'reference_dose': '" + across.reference_dose_path +
                             "' is in frame of reference '2.25.424242', the dose in the CT's '2.25.515151'"),
            std::string::npos)
      << bad.message;
  const pe::JobRecord& good = record(s, "same");
  EXPECT_EQ(good.status, "ok") << good.message;
  EXPECT_DOUBLE_EQ(good.metrics["gamma"]["pass_rate_percent"].get<double>(), 100.0);
}

TEST(BatchRegistration, AnObliqueRotationWrittenWithSixDecimalsIsComputedOnTheCtsGrid) {
  // A clinical-looking REG: 30 deg about z, the values rounded to six decimals
  // (R^T R off the identity by ~1e-7); the dose must come back on the CT's grid.
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, {0.866025, -0.5, 0, 3.25, 0.5, 0.866025, 0, -1.5, 0, 0, 1, 2, 0, 0, 0, 1}, false);
  pe::BatchJob coarse = c.registered_job("oblique_coarse");
  coarse.grid_mm = 5;
  const pe::BatchSummary s = pe::run_batch(manifest_of(dir, {c.registered_job("oblique"), coarse}),
                                           batch_test::fast_options(dir), batch_test::test_io());
  ASSERT_TRUE(s.all_succeeded()) << pe::format_summary_table(s);
  const protondose::CtImage new_ct = protondose::dicom::read_ct_series((dir / "ct_new").string());
  const auto dose = read_dose(c.registered_job("oblique").out_path);
  EXPECT_EQ(dose.grid.size, new_ct.hu.grid.size);
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(dose.grid.origin_mm[a], new_ct.hu.grid.origin_mm[a], 1e-6);
  EXPECT_GT(max_of(dose), 0.0f);
  EXPECT_EQ(read_dose(coarse.out_path).grid.size, pe::output_grid(new_ct.hu.grid, 5.0).size);
}

TEST(BatchRegistration, AChangedRegistrationIsRecomputedOnTheRerun) {
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_translation(4, 0, 0));
  const pe::Manifest m = manifest_of(dir, {c.registered_job("registered")});
  ASSERT_EQ(pe::run_batch(m, batch_test::fast_options(dir), batch_test::test_io()).ok, 1u);
  const pe::BatchSummary again = pe::run_batch(m, batch_test::fast_options(dir), batch_test::test_io());
  EXPECT_EQ(record(again, "registered").status, "skipped");
  EXPECT_TRUE(record(again, "registered").registration.is_object());  // from the sidecar's record
  protondose::testing::write_registration((dir / "reg.dcm").string(), kNewCtFrame,
                                          {{batch_test::kFrameUid, {{reg_translation(8, 0, 0)}}}});
  const pe::BatchSummary changed = pe::run_batch(m, batch_test::fast_options(dir), batch_test::test_io());
  EXPECT_EQ(record(changed, "registered").status, "ok");
  EXPECT_EQ(record(changed, "registered").registration["ct_from_plan"][3], 8.0);
}

TEST(BatchRegistration, BadRegistrationsFailTheirJobWithCategoryAndMessageAndTheBatchGoesOn) {
  const auto dir = batch_test::fresh_dir();
  const RegisteredCase c(dir, reg_translation(4, 0, 0));
  auto scaled = reg_translation(4, 0, 0);
  scaled[5] = 1.05;
  protondose::testing::write_registration((dir / "scaled.dcm").string(), kNewCtFrame,
                                          {{batch_test::kFrameUid, {{scaled}}}});
  protondose::testing::write_registration((dir / "affine.dcm").string(), kNewCtFrame,
                                          {{batch_test::kFrameUid, {{reg_translation(4, 0, 0), "AFFINE"}}}});
  protondose::testing::write_registration((dir / "unrelated.dcm").string(), kNewCtFrame,
                                          {{"2.25.999", {{reg_translation(4, 0, 0)}}}});
  auto file = protondose::testing::make_registration(kNewCtFrame, {{batch_test::kFrameUid, {{reg_translation(4, 0, 0)}}}});
  protondose::testing::registration_matrix_item(*file)->findAndDeleteElement(DCM_FrameOfReferenceTransformationMatrix);
  protondose::testing::save_registration(*file, (dir / "no_matrix.dcm").string());
  const pe::BatchSummary s = pe::run_batch(
      manifest_of(dir, {c.registered_job("scaled", "scaled.dcm"), c.registered_job("affine", "affine.dcm"),
                        c.registered_job("unrelated", "unrelated.dcm"), c.registered_job("no_matrix", "no_matrix.dcm"),
                        c.registered_job("good")}),
      batch_test::fast_options(dir), batch_test::test_io());
  EXPECT_EQ(s.ok, 1u);
  EXPECT_EQ(s.failed, 4u);
  EXPECT_EQ(record(s, "good").status, "ok");
  struct Want {
    const char* id;
    const char* category;
    std::vector<std::string> fragments;
  };
  const Want wants[] = {
      {"scaled", "input", {"scaled.dcm", "FrameOfReferenceTransformationMatrix (3006,00c6)", "not a rotation"}},
      {"affine", "unavailable", {"affine.dcm", "FrameOfReferenceTransformationMatrixType (0070,030c) is 'AFFINE'"}},
      {"unrelated", "input", {"unrelated.dcm", "does not relate the plan's frame of reference '2.25.424242' to the CT's '2.25.515151'"}},
      {"no_matrix", "input", {"no_matrix.dcm", "FrameOfReferenceTransformationMatrix (3006,00c6)", "missing"}},
  };
  for (const Want& w : wants) {
    const pe::JobRecord& r = record(s, w.id);
    EXPECT_EQ(r.status, "failed") << w.id;
    EXPECT_EQ(r.category, w.category) << w.id << ": " << r.message;
    for (const auto& f : w.fragments) EXPECT_NE(r.message.find(f), std::string::npos) << w.id << ": " << r.message;
    EXPECT_FALSE(fs::exists(c.registered_job(w.id).out_path));
    EXPECT_TRUE(r.registration.is_object());  // the checksum of the file that failed
  }
}

TEST(Registration, TheDoseGridMustMapBackOntoTheCtGrid) {
  const protondose::CtImage ct = batch_test::tiny_ct();
  const RigidTransform turn = protondose::rigid_transform_from_matrix(reg_rotation_z(90, 1, 2, 3), "turn");
  const protondose::CtImage in_plan = pe::ct_in_plan_frame(ct, turn, "2.25.1", "FFS");
  EXPECT_EQ(in_plan.frame_of_reference_uid, "2.25.1");
  EXPECT_EQ(in_plan.patient_position, "FFS");
  EXPECT_EQ(in_plan.hu.data, ct.hu.data);
  protondose::Volume<float> dose(in_plan.hu.grid, 1.0f);
  const protondose::Volume<float> back = pe::dose_in_ct_frame(dose, turn, ct.hu.grid);
  EXPECT_EQ(back.grid, ct.hu.grid);
  protondose::Grid3 other = ct.hu.grid;
  other.origin_mm[0] += 0.5;
  EXPECT_THROW(pe::dose_in_ct_frame(dose, turn, other), protondose::InternalError);
}

TEST(BatchRegistration, ARegisteredPlanTakesItsOwnSetupPositionAndIsNotFrameCheckedAgainstTheCt) {
  const std::string plan_path = std::string(PROTONDOSE_SHARED_DIR) +
                                "/data/ion-plans/dcpt/plan02_mono/RN.1.2.246.352.71.5.37402163639.178320.20221207095327.dcm";
  const auto detailed = protondose::dicom::read_ion_plan_detailed(plan_path);
  ASSERT_FALSE(detailed.beams.empty());
  const std::string plan_position = detailed.beams[0].patient_position;
  ASSERT_FALSE(plan_position.empty());
  protondose::CtImage ct;
  ct.frame_of_reference_uid = kNewCtFrame;
  ct.patient_position = plan_position == "FFS" ? "HFS" : "FFS";  // the new CT scanned otherwise
  protondose::CtImage registered = ct;
  const protondose::IonPlan plan = pe::dicom_io::read_plan_for_ct(plan_path, "ct_new", registered, true);
  EXPECT_NE(plan.frame_of_reference_uid, kNewCtFrame);
  EXPECT_EQ(registered.patient_position, plan_position);
  // Without a registration, the same inputs are a frame-of-reference mismatch.
  protondose::CtImage plain = ct;
  EXPECT_THROW(pe::dicom_io::read_plan_for_ct(plan_path, "ct_new", plain), protondose::InputError);
  EXPECT_EQ(plain.patient_position, ct.patient_position);
}
