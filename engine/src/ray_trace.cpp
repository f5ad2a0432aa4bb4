#include "protondose/engine/ray_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "beam_geometry.h"
#include "beam_kernels.h"

namespace protondose::engine {

float sample_trilinear(const Volume<float>& v, const Vec3& p_mm) {
  const Vec3 c = v.grid.continuous_index(p_mm);
  return kernels::sample_volume(v.data.data(), v.grid.size.data(), c[0], c[1], c[2]);
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
  // The engine's own per-ray tracing (beam_kernels.h), on host vectors.
  RayTrace t;
  t.grid = grid;
  t.rsp.assign(grid.pixel_count(), 0.0f);
  t.density_g_cm3.assign(grid.pixel_count(), 0.0f);
  t.wepl_far_mm.assign(grid.pixel_count(), 0.0f);
  t.step_mm.assign(grid.rays(), 0.0f);
  t.wepl_start_mm.assign(grid.rays(), 0.0f);
  t.entry_slice.assign(grid.rays(), -1);
  std::vector<float> rho_over_x(grid.pixel_count(), 0.0f);  // not part of RayTrace
  const double no_scattering[2] = {0.0, 0.0};
  kernels::TraceInput in{};
  in.grid = geometry_of(grid);
  in.ct_index_from_beam = ct_index_from_beam(rsp.grid, frame);
  in.rsp = rsp.data.data();
  in.density_g_cm3 = density.data.data();
  for (int a = 0; a < 3; ++a) in.ct_size[a] = rsp.grid.size[a];
  in.inverse_length_table = no_scattering;
  in.inverse_length_nodes = 2;
  in.inv_density_step = 1.0;
  const kernels::TraceOutput out{t.rsp.data(), t.density_g_cm3.data(), t.wepl_far_mm.data(), rho_over_x.data(),
                                 t.step_mm.data()};
  parallel_for_chunks(static_cast<std::size_t>(grid.rows), threads, [&](std::size_t begin, std::size_t end, int) {
    for (std::size_t r = begin; r < end; ++r)
      for (int col = 0; col < grid.cols; ++col) {
        int first_material = -1;
        kernels::trace_ray(in, out, col, static_cast<int>(r), &t.entry_slice[r * static_cast<std::size_t>(grid.cols) + col],
                           &first_material);
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
