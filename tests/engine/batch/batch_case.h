#pragma once
// A tiny batch case for the batch and robust tests: a water box CT written as
// a real DICOM series, and "plan files" that are one line of text
// ("energy_mev=100") read by a test plan reader into a one-beam, one-layer,
// 5 x 5-spot plan. CT reading and RT Dose writing use the real DICOM hooks
// (batch_dicom_io.h); only the plan reader is the test's (there is no RT Ion
// Plan writer in dicom/, and a tiny plan keeps the suite fast).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "protondose/core/error.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/engine/batch.h"
#include "protondose/engine/batch_dicom_io.h"
#include "protondose/engine/phantom.h"

namespace batch_test {

namespace fs = std::filesystem;

inline constexpr const char* kFrameUid = "2.25.424242";

/// One beam from gantry `gantry_deg`, one layer at `energy_mev`, 5 x 5 spots on a 4 mm grid.
inline protondose::IonPlan tiny_plan(double energy_mev, double gantry_deg = 0.0) {
  protondose::IonPlan plan;
  plan.label = "batch-test";
  plan.sop_instance_uid = "2.25.424243";
  plan.study_instance_uid = "2.25.424244";
  plan.frame_of_reference_uid = kFrameUid;
  plan.patient_id = "BATCH";
  plan.patient_name = "Batch^Test";
  protondose::IonBeam b;
  b.number = 1;
  b.name = "B1";
  b.machine_name = "DCPT_ProBeam_v5";
  b.gantry_angle_deg = gantry_deg;
  protondose::EnergyLayer layer;
  layer.nominal_energy_mev = energy_mev;
  for (int iy = -2; iy <= 2; ++iy)
    for (int ix = -2; ix <= 2; ++ix) layer.spots.push_back({4.0 * ix, 4.0 * iy, 1.0});
  b.layers.push_back(layer);
  b.beam_meterset = 25;
  plan.beams.push_back(b);
  return plan;
}

/// A water box box_x_mm x 120 x 80 mm (patient x, y, z) with 8 mm air margin, 4 mm voxels.
inline protondose::CtImage tiny_ct(double box_x_mm = 80) {
  protondose::engine::PhantomSpec spec;
  spec.box_size_mm = {box_x_mm, 120, 80};
  spec.margin_mm = 8;
  spec.spacing_mm = 4;
  return protondose::engine::make_box_phantom(tiny_plan(100), spec);
}

/// A fresh folder under the test output folder, named after the running test.
inline fs::path fresh_dir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(PROTONDOSE_TEST_OUTPUT_DIR) / "batch" /
                 (std::string(info->test_suite_name()) + "." + info->name() + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

/// Reads a test plan file "energy_mev=E[ gantry_deg=G]".
inline protondose::IonPlan read_test_plan(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  double energy = 0, gantry = 0;
  if (std::sscanf(line.c_str(), "energy_mev=%lf gantry_deg=%lf", &energy, &gantry) < 1)
    throw protondose::InputError(path + ": not a test plan file");
  return tiny_plan(energy, gantry);
}

/// The real DICOM hooks with the test plan reader.
inline protondose::engine::BatchIo test_io() {
  protondose::engine::BatchIo io = protondose::engine::dicom_io::make_batch_io();
  io.read_plan = [](const protondose::engine::BatchJob& job, protondose::CtImage& ct) {
    protondose::IonPlan plan = read_test_plan(job.plan_path);
    // With a registration the frames differ by design (BatchIo::read_plan).
    if (job.registration_path.empty() && plan.frame_of_reference_uid != ct.frame_of_reference_uid)
      throw protondose::InputError(job.plan_path + ": frame of reference differs from the CT's");
    return plan;
  };
  return io;
}

/// Fast engine settings for every test batch.
inline protondose::engine::BatchOptions fast_options(const fs::path& dir) {
  protondose::engine::BatchOptions o;
  o.ray_pitch_mm = 2;
  o.depth_step_mm = 2;
  o.threads_per_worker = 1;
  o.version = "test";
  o.records_path = (dir / "records.jsonl").string();
  return o;
}

/// A case folder: ct/ (DICOM), plan100.txt, plan500.txt (energy outside the machine), badct/ (garbage).
struct TinyCase {
  fs::path dir;
  explicit TinyCase(const fs::path& d) : dir(d) {
    protondose::dicom::write_ct_series(tiny_ct(), (dir / "ct").string());
    write_text(dir / "plan100.txt", "energy_mev=100\n");
    write_text(dir / "plan120.txt", "energy_mev=120\n");
    write_text(dir / "plan500.txt", "energy_mev=500\n");
    fs::create_directories(dir / "badct");
    write_text(dir / "badct" / "CT.0001.dcm", "this is not DICOM");
    fs::create_directories(dir / "out");
  }
  protondose::engine::BatchJob job(const std::string& id, const std::string& plan = "plan100.txt",
                                   const std::string& ct = "ct") const {
    protondose::engine::BatchJob j;
    j.id = id;
    j.ct_dir = (dir / ct).string();
    j.plan_path = (dir / plan).string();
    j.out_path = (dir / "out" / (id + ".dcm")).string();
    return j;
  }
};

inline std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

/// A manifest of `jobs` in `dir`, numbered in order (as the manifest reader does).
inline protondose::engine::Manifest manifest_of(const fs::path& dir, std::vector<protondose::engine::BatchJob> jobs) {
  protondose::engine::Manifest m;
  m.path = (dir / "manifest.json").string();
  m.folder = dir.string();
  int position = 0;
  for (auto& j : jobs) j.position = ++position;
  m.jobs = std::move(jobs);
  return m;
}

}  // namespace batch_test
