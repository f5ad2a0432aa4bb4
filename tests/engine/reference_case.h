#pragma once
// Helpers of the engine regression tests (header-only: the suite globs
// *_regression.cpp): the DCPT ProBeam v5 Monte Carlo reference cases of
// shared/reference (README there), read as a user would.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "protondose/core/error.h"
#include "protondose/core/grid.h"
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/engine/dose_engine.h"
#include "protondose/physics/beam_model.h"
#include "protondose/physics/depth_dose.h"
#include "protondose/physics/hu_curve.h"

namespace protondose::engine::testing {

inline std::string reference_dir() { return std::string(PROTONDOSE_SHARED_DIR) + "/reference"; }

/// The DCPT ProBeam v5 beam model as the references were computed: the MCsquare
/// BDL (optics, protons/MU, VSADs) with the Monte Carlo integrated depth doses
/// in water (dcpt-v5-water-idd, 70–230 MeV every 10 MeV) as its depth-dose
/// library — the commissioning data of this machine.
inline physics::BeamModel reference_machine() {
  const std::string dir = reference_dir();
  const physics::BeamModel bdl = physics::load_mcsquare_bdl(dir + "/BDL_DCPT_ProBeam_v5.txt");
  std::vector<physics::CumulativeDepthDose> curves;
  for (int e = 70; e <= 230; e += 10) {
    char name[64];
    std::snprintf(name, sizeof name, "/dcpt-v5-water-idd/idd_E%03d.csv", e);
    curves.push_back(physics::load_idd_csv(dir + name, e));
  }
  return bdl.with_depth_doses(physics::DepthDoseLibrary::tabulated(std::move(curves), dir + "/dcpt-v5-water-idd"));
}

/// Reads a float32 little-endian MetaImage (.mhd + .raw) with identity direction.
inline Volume<float> read_float_mhd(const std::string& mhd_path) {
  std::ifstream in(mhd_path);
  if (!in) throw IoError("cannot open " + mhd_path);
  Grid3 g;
  std::string line, raw;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(key.find_last_not_of(' ') + 1);
    std::istringstream v(line.substr(eq + 1));
    if (key == "DimSize") v >> g.size[0] >> g.size[1] >> g.size[2];
    if (key == "ElementSpacing") v >> g.spacing_mm[0] >> g.spacing_mm[1] >> g.spacing_mm[2];
    if (key == "Offset") v >> g.origin_mm[0] >> g.origin_mm[1] >> g.origin_mm[2];
    if (key == "ElementDataFile") v >> raw;
  }
  const std::string folder = mhd_path.substr(0, mhd_path.find_last_of('/') + 1);
  Volume<float> vol(g, 0.0f);
  std::ifstream data(folder + raw, std::ios::binary);
  data.read(reinterpret_cast<char*>(vol.data.data()), static_cast<std::streamsize>(vol.data.size() * sizeof(float)));
  if (!data) throw IoError("cannot read " + folder + raw);
  return vol;
}

/// Writes a float volume as MetaImage (to look at a failure).
inline void write_float_mhd(const std::string& mhd_path, const Volume<float>& v) {
  const std::string raw = mhd_path.substr(0, mhd_path.size() - 4) + ".raw";
  std::ofstream h(mhd_path);
  h << "ObjectType = Image\nNDims = 3\nDimSize = " << v.grid.size[0] << " " << v.grid.size[1] << " " << v.grid.size[2]
    << "\nElementSpacing = " << v.grid.spacing_mm[0] << " " << v.grid.spacing_mm[1] << " " << v.grid.spacing_mm[2]
    << "\nOffset = " << v.grid.origin_mm[0] << " " << v.grid.origin_mm[1] << " " << v.grid.origin_mm[2]
    << "\nTransformMatrix = 1 0 0 0 1 0 0 0 1\nElementType = MET_FLOAT\nElementByteOrderMSB = False\n"
    << "ElementDataFile = " << raw.substr(raw.find_last_of('/') + 1) << "\n";
  std::ofstream d(raw, std::ios::binary);
  d.write(reinterpret_cast<const char*>(v.data.data()), static_cast<std::streamsize>(v.data.size() * sizeof(float)));
}

/// Maximum and sum of the MC dose, and the sum of the engine's dose on the same
/// grid (integral dose), printed with the engine's maximum for the log.
/// A reference case computed by the CPU engine, and its Monte Carlo dose.
struct EngineCase {
  Volume<float> mc;
  DoseResult result;
};

/// The CPU engine's dose of shared/reference/<name> (its DICOM CT and plan,
/// the MC's own HU calibration, the default machine), read as a user would;
/// the engine dose is also written to the test output folder for inspection.
inline EngineCase compute_reference_case(const std::string& name) {
  const std::string dir = reference_dir() + "/" + name;
  const CtImage ct = dicom::read_ct_series(dir + "/ct");
  const IonPlan plan = dicom::read_ion_plan(dir + "/plan.dcm");
  DoseEngineOptions o;
  o.backend = Backend::kCpu;
  const DoseEngine engine(physics::load_machine("DCPT_ProBeam_v5"),
                          physics::load_hu_curve_csv(dir + "/hu_calibration.csv"), o);
  EngineCase c;
  c.result = engine.compute(ct, plan);
  c.mc = read_float_mhd(dir + "/mc_dose.mhd");
  write_float_mhd(std::string(PROTONDOSE_TEST_OUTPUT_DIR) + "/" + name + "_engine.mhd", c.result.dose_gy);
  const StageTimings& t = c.result.timings;
  std::printf("%s: %.2f s (rays %.2f, layers %.2f, KS %.2f, halo %.2f, resample %.2f), max %.5f Gy\n", name.c_str(),
              t.total_s, t.ray_tracing_s, t.layer_images_s, t.superposition_s, t.nuclear_halo_s, t.resampling_s,
              c.result.max_dose_gy);
  return c;
}

struct DoseTotals {
  double mc_max_gy = 0, mc_sum_gy = 0, engine_sum_gy = 0;
};

inline DoseTotals dose_totals(const Volume<float>& mc, const Volume<float>& engine, double engine_max_gy) {
  DoseTotals t;
  for (std::size_t i = 0; i < mc.data.size(); ++i) {
    t.mc_max_gy = std::max(t.mc_max_gy, static_cast<double>(mc.data[i]));
    t.mc_sum_gy += mc.data[i];
    t.engine_sum_gy += engine.data[i];
  }
  std::printf("max dose: MC %.5f Gy, engine %.5f Gy (%+.2f %%); integral dose %+.2f %%\n", t.mc_max_gy, engine_max_gy,
              100 * (engine_max_gy / t.mc_max_gy - 1), 100 * (t.engine_sum_gy / t.mc_sum_gy - 1));
  return t;
}

struct DepthSample {
  double depth_mm;
  double dose_gy;
};

/// Depth profile along patient +y, averaged over the voxels whose centres have
/// x ∈ [x_lo, x_hi] and z ∈ [z_lo, z_hi] (the profiles of profiles.csv), depth
/// measured from `surface_y_mm`.
inline std::vector<DepthSample> depth_profile(const Volume<float>& dose, double surface_y_mm, double x_lo,
                                              double x_hi, double z_lo, double z_hi) {
  std::vector<DepthSample> p;
  for (int j = 0; j < dose.grid.size[1]; ++j) {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < dose.grid.size[2]; ++k)
      for (int i = 0; i < dose.grid.size[0]; ++i) {
        const Vec3 c = dose.grid.position_mm(i, j, k);
        if (c[0] >= x_lo && c[0] <= x_hi && c[2] >= z_lo && c[2] <= z_hi) {
          sum += dose.at(i, j, k);
          ++n;
        }
      }
    p.push_back({dose.grid.position_mm(0, j, 0)[1] - surface_y_mm, n ? sum / n : 0.0});
  }
  return p;
}

/// Distal depth where the profile falls to `fraction` of its maximum (linear
/// interpolation between samples); −1 if it never does.
inline double distal_depth_mm(const std::vector<DepthSample>& p, double fraction) {
  std::size_t imax = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i].dose_gy > p[imax].dose_gy) imax = i;
  const double level = fraction * p[imax].dose_gy;
  for (std::size_t i = imax; i + 1 < p.size(); ++i)
    if (p[i].dose_gy >= level && p[i + 1].dose_gy < level)
      return p[i].depth_mm + (p[i].dose_gy - level) / (p[i].dose_gy - p[i + 1].dose_gy) * (p[i + 1].depth_mm - p[i].depth_mm);
  return -1;
}

/// Distal depth of `fraction` of the maximum found at depths ≤ max_depth_mm
/// (for one peak of several).
inline double distal_depth_before_mm(const std::vector<DepthSample>& p, double fraction, double max_depth_mm) {
  std::vector<DepthSample> q;
  for (const auto& s : p)
    if (s.depth_mm <= max_depth_mm) q.push_back(s);
  return distal_depth_mm(q, fraction);
}

}  // namespace protondose::engine::testing
