#include "protondose/engine/resample.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/core/parallel.h"

namespace protondose::engine {
namespace {

/// Lower index and weight along one axis of n samples; false outside the
/// half-pixel border.
bool axis_lerp(double c, int n, int& i0, int& i1, double& f) {
  if (!(c >= -0.5) || !(c <= n - 0.5)) return false;
  const double x = std::clamp(c, 0.0, static_cast<double>(n - 1));
  i0 = std::min(static_cast<int>(std::floor(x)), std::max(n - 2, 0));
  i1 = std::min(i0 + 1, n - 1);
  f = n == 1 ? 0.0 : x - i0;
  return true;
}

}  // namespace

float sample_bev(const BevGrid& g, const std::vector<float>& v, double col, double row, double slice) {
  int c0, c1, r0, r1, s0, s1;
  double fc, fr, fs;
  if (!axis_lerp(col, g.cols, c0, c1, fc) || !axis_lerp(row, g.rows, r0, r1, fr) ||
      !axis_lerp(slice, g.slices, s0, s1, fs))
    return 0.0f;
  const auto at = [&](int s, int r, int c) { return static_cast<double>(v[g.index(s, r, c)]); };
  const double a0 = (at(s0, r0, c0) * (1 - fc) + at(s0, r0, c1) * fc) * (1 - fr) +
                    (at(s0, r1, c0) * (1 - fc) + at(s0, r1, c1) * fc) * fr;
  const double a1 = (at(s1, r0, c0) * (1 - fc) + at(s1, r0, c1) * fc) * (1 - fr) +
                    (at(s1, r1, c0) * (1 - fc) + at(s1, r1, c1) * fc) * fr;
  return static_cast<float>(a0 * (1 - fs) + a1 * fs);
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
  parallel_for_chunks(static_cast<std::size_t>(out.grid.size[2]), threads, [&](std::size_t b, std::size_t e, int) {
    for (std::size_t kk = b; kk < e; ++kk) {
      const int k = static_cast<int>(kk);
      for (int j = 0; j < out.grid.size[1]; ++j)
        for (int i = 0; i < out.grid.size[0]; ++i) {
          const Vec3 c = grid.continuous_index(frame.beam_from_patient(out.grid.position_mm(i, j, k)));
          const float v = sample_bev(grid, bev, c[0], c[1], c[2]);
          if (v != 0.0f) out.data[out.grid.index(i, j, k)] += static_cast<float>(scale * v);
        }
    }
  });
}

}  // namespace protondose::engine
