#pragma once
/// \file render.h
/// Comparison figures: a γ map or a dose difference over a grey background (CT
/// or reference dose) on one slice, with a colour bar, and cumulative DVH plots.
/// Text uses a built-in 5×7 pixel font (upper-case letters, digits, + - . % / : ( ) = _).

#include <string>
#include <vector>

#include "protondose/compare/dvh.h"
#include "protondose/compare/png.h"
#include "protondose/core/grid.h"

namespace protondose::compare {

/// Orientation of a slice through a grid (named for an HFS patient with
/// identity axes): axial = fixed k, shown i → right, j → down; coronal = fixed
/// j, i → right, k → up; sagittal = fixed i, j → right, k → up.
enum class SlicePlane { kAxial, kCoronal, kSagittal };

/// Lower-case name of a plane ("axial", ...), used in file names.
const char* plane_name(SlicePlane plane);

/// Grey background: `background` on the same grid as the overlay, shown from
/// black at `low` to white at `high` (e.g. HU −1000 … 1000, or 0 … max dose).
struct Background {
  const Volume<float>* volume = nullptr;
  double low = 0.0;
  double high = 1.0;
};

/// γ on one slice, colours from 0 (blue) through 1 (yellow: the pass limit) to
/// 2 and above (red); voxels holding kGammaNotEvaluated show only the
/// background. Throws InputError if the background is not on the γ grid or
/// the slice index is outside it.
RgbImage render_gamma_slice(const Background& background, const Volume<float>& gamma, SlicePlane plane,
                            int index, const std::string& title);

/// D_eval − D_ref (Gy) on one slice in % of `normalisation_dose_gy`, blue
/// (−range) through white (0) to red (+range); voxels where `show` is 0 (e.g.
/// below the low-dose threshold) show only the background. Throws as
/// render_gamma_slice, and if `show` is not on the same grid.
RgbImage render_difference_slice(const Background& background, const Volume<float>& difference_gy,
                                 const Volume<std::uint8_t>& show, double normalisation_dose_gy,
                                 double range_percent, SlicePlane plane, int index,
                                 const std::string& title);

/// Dose (Gy) on one slice as a colour wash over the background — blue at
/// `threshold_fraction` × `max_dose_gy` through green and yellow to red at the
/// maximum; voxels below the threshold show only the background. Throws as
/// render_gamma_slice, and InputError when max_dose_gy ≤ 0 or the threshold is
/// outside [0, 1).
RgbImage render_dose_slice(const Background& background, const Volume<float>& dose_gy, double max_dose_gy,
                           double threshold_fraction, SlicePlane plane, int index, const std::string& title);

/// Cumulative DVHs of reference (solid) and test (dashed) doses, one colour
/// per ROI, with axes, ticks and a legend. `reference` and `test` are paired
/// by position. Throws InputError if their sizes differ or both are empty.
RgbImage render_dvh(const std::vector<Dvh>& reference, const std::vector<Dvh>& test, const std::string& title);

/// Draws `text` with the built-in font at (x, y) (top-left), `scale` pixels
/// per font pixel; characters without a glyph are drawn as a box.
void draw_text(RgbImage& image, int x, int y, const std::string& text, int scale, std::uint8_t r,
               std::uint8_t g, std::uint8_t b);

}  // namespace protondose::compare
