#include "protondose/engine/resample.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "beam_geometry.h"
#include "beam_kernels.h"

namespace protondose::engine {

float sample_bev(const BevGrid& g, const std::vector<float>& v, double col, double row, double slice) {
  return kernels::sample_bev_index(geometry_of(g), v.data(), col, row, slice);
}

void add_bev_to_patient(const BevGrid& grid, const BeamFrame& frame, const std::vector<float>& bev, double scale,
                        Volume<float>& out, int threads) {
  grid.validate("BEV resampling");
  if (bev.size() != grid.pixel_count()) {
    std::ostringstream m;
    m << "BEV resampling: " << bev.size() << " BEV values for a grid of " << grid.pixel_count() << " pixels";
    throw InputError(m.str());
  }
  if (out.data.size() != out.grid.voxel_count())
    throw InputError("BEV resampling: output volume size does not match its grid");
  // The engine's own resampling (beam_kernels.h), on host arrays.
  const kernels::BevGeometry g = geometry_of(grid);
  const kernels::Affine3 beam_from_index = beam_from_voxel_index(out.grid, frame);
  parallel_for_chunks(static_cast<std::size_t>(out.grid.size[2]), threads, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t kk = b; kk < e; ++kk)
      for (int j = 0; j < out.grid.size[1]; ++j)
        for (int i = 0; i < out.grid.size[0]; ++i) {
          double p[3];
          beam_from_index.apply(i, j, static_cast<double>(kk), p);
          const float v = kernels::sample_bev_at(g, bev.data(), p[0], p[1], p[2]);
          if (v != 0.0f) out.data[out.grid.index(i, j, static_cast<int>(kk))] += static_cast<float>(scale * v);
        }
  });
}

}  // namespace protondose::engine
