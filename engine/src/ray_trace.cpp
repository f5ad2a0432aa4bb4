#include "protondose/engine/ray_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/core/parallel.h"

namespace protondose::engine {

float sample_trilinear(const Volume<float>& v, const Vec3& p_mm) {
  const Vec3 c = v.grid.continuous_index(p_mm);
  int i0[3];
  double f[3];
  for (int a = 0; a < 3; ++a) {
    const int n = v.grid.size[a];
    // Outside the outer voxel faces: no material.
    if (!(c[a] >= -0.5) || !(c[a] <= n - 0.5)) return 0.0f;
    const double x = std::clamp(c[a], 0.0, static_cast<double>(n - 1));
    int i = static_cast<int>(std::floor(x));
    if (i >= n - 1) i = std::max(n - 2, 0);
    i0[a] = i;
    f[a] = n == 1 ? 0.0 : x - i;
  }
  const int i1[3] = {std::min(i0[0] + 1, v.grid.size[0] - 1), std::min(i0[1] + 1, v.grid.size[1] - 1),
                     std::min(i0[2] + 1, v.grid.size[2] - 1)};
  const auto at = [&](int i, int j, int k) { return static_cast<double>(v.data[v.grid.index(i, j, k)]); };
  const double c00 = at(i0[0], i0[1], i0[2]) * (1 - f[0]) + at(i1[0], i0[1], i0[2]) * f[0];
  const double c10 = at(i0[0], i1[1], i0[2]) * (1 - f[0]) + at(i1[0], i1[1], i0[2]) * f[0];
  const double c01 = at(i0[0], i0[1], i1[2]) * (1 - f[0]) + at(i1[0], i0[1], i1[2]) * f[0];
  const double c11 = at(i0[0], i1[1], i1[2]) * (1 - f[0]) + at(i1[0], i1[1], i1[2]) * f[0];
  const double c0 = c00 * (1 - f[1]) + c10 * f[1];
  const double c1 = c01 * (1 - f[1]) + c11 * f[1];
  return static_cast<float>(c0 * (1 - f[2]) + c1 * f[2]);
}

void box_depth_range(const Grid3& grid, const BeamFrame& frame, double& begin_mm, double& end_mm) {
  begin_mm = std::numeric_limits<double>::infinity();
  end_mm = -std::numeric_limits<double>::infinity();
  for (int corner = 0; corner < 8; ++corner) {
    const double i = (corner & 1) ? grid.size[0] - 0.5 : -0.5;
    const double j = (corner & 2) ? grid.size[1] - 0.5 : -0.5;
    const double k = (corner & 4) ? grid.size[2] - 0.5 : -0.5;
    const double d = frame.beam_from_patient(grid.position_mm(i, j, k))[2];
    begin_mm = std::min(begin_mm, d);
    end_mm = std::max(end_mm, d);
  }
}

RayTrace trace_rays(const BevGrid& grid, const BeamFrame& frame, const Volume<float>& rsp,
                    const Volume<float>& density, int threads) {
  grid.validate("ray tracing");
  if (rsp.grid != density.grid) throw InputError("ray tracing: the RSP and density volumes are on different grids");
  if (rsp.data.size() != rsp.grid.voxel_count() || density.data.size() != density.grid.voxel_count()) {
    std::ostringstream m;
    m << "ray tracing: volume sizes (" << rsp.data.size() << ", " << density.data.size()
      << " values) do not match the CT grid (" << rsp.grid.voxel_count() << " voxels)";
    throw InputError(m.str());
  }
  RayTrace t;
  t.grid = grid;
  t.rsp.assign(grid.pixel_count(), 0.0f);
  t.density_g_cm3.assign(grid.pixel_count(), 0.0f);
  t.wepl_far_mm.assign(grid.pixel_count(), 0.0f);
  t.step_mm.assign(grid.rays(), 0.0f);
  t.wepl_start_mm.assign(grid.rays(), 0.0f);
  t.entry_slice.assign(grid.rays(), -1);
  parallel_for_chunks(static_cast<std::size_t>(grid.rows), threads, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t r = begin; r < end; ++r) {
      const int row = static_cast<int>(r);
      for (int col = 0; col < grid.cols; ++col) {
        const std::size_t ray = static_cast<std::size_t>(row) * grid.cols + col;
        const double step_mm = grid.depth_step_mm * grid.path_per_depth(col, row);
        t.step_mm[ray] = static_cast<float>(step_mm);
        double wepl_mm = 0.0;
        for (int k = 0; k < grid.slices; ++k) {
          const Vec3 p = frame.patient_from_beam(grid.beam_point_mm(col, row, k));
          const float s = sample_trilinear(rsp, p);
          const float rho = sample_trilinear(density, p);
          const std::size_t idx = grid.index(k, row, col);
          t.rsp[idx] = s;
          t.density_g_cm3[idx] = rho;
          wepl_mm += static_cast<double>(s) * step_mm;
          t.wepl_far_mm[idx] = static_cast<float>(wepl_mm);
          if (t.entry_slice[ray] < 0 && rho >= kPatientDensityThresholdGcm3) t.entry_slice[ray] = k;
        }
      }
    }
  });
  return t;
}

RayTrace crop_slices(const RayTrace& in, int first, int count) {
  if (first < 0 || count < 1 || first + count > in.grid.slices) {
    std::ostringstream m;
    m << "ray trace crop: slices [" << first << ", " << first + count << ") are outside [0, " << in.grid.slices << ")";
    throw InputError(m.str());
  }
  RayTrace out;
  out.grid = in.grid;
  out.grid.depth0_mm = in.grid.depth_mm(first);
  out.grid.slices = count;
  const std::size_t plane = in.grid.rays();
  const auto copy = [&](const std::vector<float>& src, std::vector<float>& dst) {
    dst.assign(src.begin() + static_cast<std::ptrdiff_t>(first * plane),
               src.begin() + static_cast<std::ptrdiff_t>((first + count) * plane));
  };
  copy(in.rsp, out.rsp);
  copy(in.density_g_cm3, out.density_g_cm3);
  copy(in.wepl_far_mm, out.wepl_far_mm);
  out.step_mm = in.step_mm;
  out.wepl_start_mm.resize(plane);
  for (std::size_t r = 0; r < plane; ++r)
    out.wepl_start_mm[r] = first == 0 ? in.wepl_start_mm[r] : in.wepl_far_mm[(first - 1) * plane + r];
  out.entry_slice.resize(plane);
  for (std::size_t r = 0; r < plane; ++r) {
    const int e = in.entry_slice[r];
    out.entry_slice[r] = (e < 0 || e >= first + count) ? -1 : std::max(e - first, 0);
  }
  return out;
}

}  // namespace protondose::engine
