#include "protondose/compare/render.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "protondose/compare/gamma.h"
#include "protondose/core/error.h"

namespace protondose::compare {
namespace {

/// 5×7 glyphs, one string of 7 rows × 5 columns ('#' = ink) per character.
const std::map<char, const char*>& font() {
  static const std::map<char, const char*> glyphs{
      {'0', " ### #   ##  ### # ###  ##   # ### "}, {'1', "  #   ##    #    #    #    #   ### "},
      {'2', " ### #   #    #   #   #   #   #####"}, {'3', "#####   #   #     #     ##   # ### "},
      {'4', "   #   ##  # # #  # #####   #    # "}, {'5', "######    ####     #    ##   # ### "},
      {'6', "  ##  #   #    #### #   ##   # ### "}, {'7', "#####    #   #   #   #    #    #   "},
      {'8', " ### #   ##   # ### #   ##   # ### "}, {'9', " ### #   ##   # ####    #   #  ##  "},
      {'A', " ### #   ##   #######   ##   ##   #"}, {'B', "#### #   ##   ##### #   ##   ##### "},
      {'C', " ### #   ##    #    #    #   # ### "}, {'D', "###  #  # #   ##   ##   ##  # ###  "},
      {'E', "######    #    #### #    #    #####"}, {'F', "######    #    #### #    #    #    "},
      {'G', " ### #   ##    # ####   ##   # ####"}, {'H', "#   ##   ##   #######   ##   ##   #"},
      {'I', " ###   #    #    #    #    #   ### "}, {'J', "  ###   #    #    #    # #  #  ##  "},
      {'K', "#   ##  # # #  ##   # #  #  # #   #"}, {'L', "#    #    #    #    #    #    #####"},
      {'M', "#   ### ### # ##   ##   ##   ##   #"}, {'N', "#   ##   ###  ## # ##  ###   ##   #"},
      {'O', " ### #   ##   ##   ##   ##   # ### "}, {'P', "#### #   ##   ##### #    #    #    "},
      {'Q', " ### #   ##   ##   ## # ##  #  ## #"}, {'R', "#### #   ##   ##### # #  #  # #   #"},
      {'S', " #####    #     ###     #    ##### "}, {'T', "#####  #    #    #    #    #    #  "},
      {'U', "#   ##   ##   ##   ##   ##   # ### "}, {'V', "#   ##   ##   ##   ##   # # #   #  "},
      {'W', "#   ##   ##   ## # ## # ## # # # # "}, {'X', "#   ##   # # #   #   # # #   ##   #"},
      {'Y', "#   ##   # # #   #    #    #    #  "}, {'Z', "#####    #   #   #   #   #    #####"},
      {'.', "                          ##   ##  "}, {'-', "               #####               "},
      {'+', "       #    #  #####  #    #       "}, {'%', "##   ##  #   #   #   #   #  ##   ##"},
      {'/', "    #    #   #   #   #   #    #    "}, {':', "      ##   ##        ##   ##       "},
      {'(', "   #   #   #    #    #     #     # "}, {')', " #     #     #    #    #   #   #   "},
      {'=', "          #####     #####          "}, {'_', "                              #####"},
      {' ', "                                   "}, {'>', "#     #     #     #   #   #   #    "},
      {'<', "    #   #   #   #     #     #     #"},
  };
  return glyphs;
}

struct Rgb {
  std::uint8_t r, g, b;
};

Rgb lerp(const Rgb& a, const Rgb& b, double t) {
  auto mix = [t](std::uint8_t x, std::uint8_t y) {
    return static_cast<std::uint8_t>(std::lround(x + t * (static_cast<double>(y) - x)));
  };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

/// Piecewise-linear colour map through `stops` at equally spaced t in [0, 1].
Rgb colour_ramp(const std::vector<Rgb>& stops, double t) {
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(stops.size() - 1);
  const std::size_t n = std::min(static_cast<std::size_t>(t), stops.size() - 2);
  return lerp(stops[n], stops[n + 1], t - static_cast<double>(n));
}

Rgb gamma_colour(double g) {
  // 0 → 1: blue, cyan, green, yellow (passing); 1 → 2: orange to dark red (failing).
  if (g <= 1.0) return colour_ramp({{20, 40, 200}, {0, 190, 220}, {40, 200, 60}, {250, 230, 40}}, g);
  return colour_ramp({{255, 140, 0}, {220, 20, 20}, {120, 0, 0}}, g - 1.0);
}

Rgb difference_colour(double t) {  // t in [−1, 1]
  return colour_ramp({{30, 60, 220}, {255, 255, 255}, {220, 30, 30}}, 0.5 * (t + 1.0));
}

std::string format_number(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

/// Pixel → voxel mapping of a slice: image column/row → grid index (i, j, k).
struct SliceView {
  int axis_h = 0, axis_v = 1, axis_fixed = 2;  ///< grid axes shown horizontally, vertically, fixed
  bool v_up = false;                           ///< vertical grid index increases upwards
  int width = 0, height = 0;                   ///< image size (pixels)
  double mm_per_pixel = 1.0;
};

SliceView make_view(const Grid3& g, SlicePlane plane, int index) {
  SliceView v;
  if (plane == SlicePlane::kAxial) {
    v.axis_h = 0, v.axis_v = 1, v.axis_fixed = 2, v.v_up = false;
  } else if (plane == SlicePlane::kCoronal) {
    v.axis_h = 0, v.axis_v = 2, v.axis_fixed = 1, v.v_up = true;
  } else {
    v.axis_h = 1, v.axis_v = 2, v.axis_fixed = 0, v.v_up = true;
  }
  if (index < 0 || index >= g.size[v.axis_fixed]) {
    std::ostringstream m;
    m << "figure: " << plane_name(plane) << " slice " << index << " is outside the grid (0 … "
      << g.size[v.axis_fixed] - 1 << ")";
    throw InputError(m.str());
  }
  const double extent_h = g.size[v.axis_h] * g.spacing_mm[v.axis_h];
  const double extent_v = g.size[v.axis_v] * g.spacing_mm[v.axis_v];
  // About 480 pixels along the longer side, whatever the voxel size.
  v.mm_per_pixel = std::max(extent_h, extent_v) / 480.0;
  v.width = std::max(1, static_cast<int>(std::lround(extent_h / v.mm_per_pixel)));
  v.height = std::max(1, static_cast<int>(std::lround(extent_v / v.mm_per_pixel)));
  return v;
}

/// Grid index of voxel shown at image pixel (px, py) of the slice `index`.
std::size_t voxel_at(const Grid3& g, const SliceView& v, int index, int px, int py) {
  int ijk[3];
  ijk[v.axis_fixed] = index;
  ijk[v.axis_h] = std::min(g.size[v.axis_h] - 1,
                           static_cast<int>((px + 0.5) * v.mm_per_pixel / g.spacing_mm[v.axis_h]));
  int vi = std::min(g.size[v.axis_v] - 1, static_cast<int>((py + 0.5) * v.mm_per_pixel / g.spacing_mm[v.axis_v]));
  ijk[v.axis_v] = v.v_up ? g.size[v.axis_v] - 1 - vi : vi;
  return g.index(ijk[0], ijk[1], ijk[2]);
}

constexpr int kMargin = 10, kTitleHeight = 26, kBarWidth = 18, kBarSpace = 80;

/// A slice with an optional colour per voxel over the grey background, and a
/// vertical colour bar with labels.
template <class ColourOf>
RgbImage render_slice(const Background& bg, const Grid3& grid, SlicePlane plane, int index,
                      const std::string& title, ColourOf colour_of,
                      const std::vector<Rgb>& bar_colours_bottom_to_top,
                      const std::vector<std::pair<double, std::string>>& bar_labels) {
  if (bg.volume && bg.volume->grid != grid)
    throw InputError("figure '" + title + "': the background is not on the grid of the map");
  const SliceView v = make_view(grid, plane, index);
  RgbImage img(kMargin * 2 + v.width + kBarSpace, kTitleHeight + v.height + kMargin, 255, 255, 255);
  draw_text(img, kMargin, 8, title, 2, 0, 0, 0);
  const double span = bg.high > bg.low ? bg.high - bg.low : 1.0;
  for (int py = 0; py < v.height; ++py)
    for (int px = 0; px < v.width; ++px) {
      const std::size_t n = voxel_at(grid, v, index, px, py);
      double grey = 0.0;
      if (bg.volume) grey = std::clamp((bg.volume->data[n] - bg.low) / span, 0.0, 1.0);
      Rgb c{static_cast<std::uint8_t>(grey * 230), static_cast<std::uint8_t>(grey * 230),
            static_cast<std::uint8_t>(grey * 230)};
      Rgb overlay;
      if (colour_of(n, overlay)) c = lerp(c, overlay, 0.7);
      img.set(kMargin + px, kTitleHeight + py, c.r, c.g, c.b);
    }
  // Colour bar: bottom = first colour, top = last.
  const int bar_x = kMargin + v.width + 12, bar_top = kTitleHeight, bar_h = v.height;
  for (int y = 0; y < bar_h; ++y) {
    const double t = 1.0 - (y + 0.5) / bar_h;
    const Rgb c = colour_ramp(bar_colours_bottom_to_top, t);
    for (int x = 0; x < kBarWidth; ++x) img.set(bar_x + x, bar_top + y, c.r, c.g, c.b);
  }
  for (const auto& [t, label] : bar_labels) {
    const int y = bar_top + static_cast<int>(std::lround((1.0 - t) * (bar_h - 1)));
    for (int x = -3; x < 0; ++x) img.set(bar_x + x, y, 0, 0, 0);
    draw_text(img, bar_x + kBarWidth + 4, std::clamp(y - 3, 0, img.height - 7), label, 1, 0, 0, 0);
  }
  return img;
}

void draw_line(RgbImage& img, double x0, double y0, double x1, double y1, Rgb c, bool dashed, int width) {
  const double len = std::hypot(x1 - x0, y1 - y0);
  const int steps = std::max(1, static_cast<int>(std::ceil(len * 2)));
  for (int s = 0; s <= steps; ++s) {
    const double t = static_cast<double>(s) / steps;
    const double x = x0 + t * (x1 - x0), y = y0 + t * (y1 - y0);
    if (dashed && static_cast<int>(std::fmod(t * len, 10.0)) >= 6) continue;
    for (int dx = 0; dx < width; ++dx)
      for (int dy = 0; dy < width; ++dy)
        img.set(static_cast<int>(x) + dx, static_cast<int>(y) + dy, c.r, c.g, c.b);
  }
}

}  // namespace

const char* plane_name(SlicePlane plane) {
  switch (plane) {
    case SlicePlane::kAxial: return "axial";
    case SlicePlane::kCoronal: return "coronal";
    case SlicePlane::kSagittal: return "sagittal";
  }
  return "unknown";
}

void draw_text(RgbImage& image, int x, int y, const std::string& text, int scale, std::uint8_t r,
               std::uint8_t g, std::uint8_t b) {
  int cx = x;
  for (char ch : text) {
    const auto it = font().find(static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
    const char* glyph = it != font().end() ? it->second : "######   ##   ##   ##   ##   ######";
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (glyph[row * 5 + col] == '#')
          for (int sy = 0; sy < scale; ++sy)
            for (int sx = 0; sx < scale; ++sx) image.set(cx + col * scale + sx, y + row * scale + sy, r, g, b);
    cx += 6 * scale;
  }
}

RgbImage render_gamma_slice(const Background& background, const Volume<float>& gamma, SlicePlane plane,
                            int index, const std::string& title) {
  const auto colour_of = [&](std::size_t n, Rgb& c) {
    const float g = gamma.data[n];
    if (g == kGammaNotEvaluated) return false;
    c = gamma_colour(g);
    return true;
  };
  std::vector<Rgb> bar;
  for (int s = 0; s <= 40; ++s) bar.push_back(gamma_colour(2.0 * s / 40.0));
  return render_slice(background, gamma.grid, plane, index, title, colour_of, bar,
                      {{0.0, "0"}, {0.25, "0.5"}, {0.5, "1 PASS"}, {0.75, "1.5"}, {1.0, ">=2"}});
}

RgbImage render_difference_slice(const Background& background, const Volume<float>& difference_gy,
                                 const Volume<std::uint8_t>& show, double normalisation_dose_gy,
                                 double range_percent, SlicePlane plane, int index, const std::string& title) {
  if (show.grid != difference_gy.grid)
    throw InputError("figure '" + title + "': the display mask is not on the grid of the dose difference");
  if (!(normalisation_dose_gy > 0.0) || !(range_percent > 0.0)) {
    std::ostringstream m;
    m << "figure '" << title << "': normalisation dose " << normalisation_dose_gy << " Gy and range "
      << range_percent << " % must be > 0";
    throw InputError(m.str());
  }
  const auto colour_of = [&](std::size_t n, Rgb& c) {
    if (!show.data[n]) return false;
    c = difference_colour(100.0 * difference_gy.data[n] / normalisation_dose_gy / range_percent);
    return true;
  };
  const std::string r = format_number(range_percent, range_percent < 10 ? 1 : 0);
  return render_slice(background, difference_gy.grid, plane, index, title, colour_of,
                      {{30, 60, 220}, {255, 255, 255}, {220, 30, 30}},
                      {{0.0, "-" + r + "%"}, {0.5, "0"}, {1.0, "+" + r + "%"}});
}

RgbImage render_dose_slice(const Background& background, const Volume<float>& dose_gy, double max_dose_gy,
                           double threshold_fraction, SlicePlane plane, int index, const std::string& title) {
  if (!(max_dose_gy > 0.0) || !(threshold_fraction >= 0.0 && threshold_fraction < 1.0)) {
    std::ostringstream m;
    m << "figure '" << title << "': maximum dose " << max_dose_gy << " Gy must be > 0 and the threshold "
      << threshold_fraction << " in [0, 1)";
    throw InputError(m.str());
  }
  const double low = threshold_fraction * max_dose_gy;
  const std::vector<Rgb> wash{{30, 60, 220}, {30, 200, 80}, {250, 220, 40}, {220, 30, 30}};
  const auto colour_of = [&](std::size_t n, Rgb& c) {
    const double d = dose_gy.data[n];
    if (d < low || d <= 0.0) return false;
    c = colour_ramp(wash, std::clamp((d - low) / (max_dose_gy - low), 0.0, 1.0));
    return true;
  };
  return render_slice(background, dose_gy.grid, plane, index, title, colour_of, wash,
                      {{0.0, format_number(low, 2) + " GY"}, {1.0, format_number(max_dose_gy, 2) + " GY"}});
}

RgbImage render_dvh(const std::vector<Dvh>& reference, const std::vector<Dvh>& test, const std::string& title) {
  if (reference.size() != test.size() || reference.empty()) {
    std::ostringstream m;
    m << "figure '" << title << "': " << reference.size() << " reference and " << test.size()
      << " test DVHs; need the same number, at least one";
    throw InputError(m.str());
  }
  const std::vector<Rgb> palette{{31, 119, 180}, {214, 39, 40}, {44, 160, 44}, {148, 103, 189},
                                 {255, 127, 14}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
  constexpr int kW = 720, kH = 480, kLeft = 70, kRight = 200, kTop = 40, kBottom = 50;
  RgbImage img(kW, kH, 255, 255, 255);
  draw_text(img, kLeft, 12, title, 2, 0, 0, 0);
  double dmax = 0.0;
  for (const auto* set : {&reference, &test})
    for (const Dvh& d : *set) dmax = std::max(dmax, d.max_gy);
  if (!(dmax > 0.0)) dmax = 1.0;
  // A round axis maximum: 1, 2 or 5 × 10^n above the largest dose.
  const double magnitude = std::pow(10.0, std::floor(std::log10(dmax)));
  double axis_max = magnitude;
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * magnitude >= dmax) {
      axis_max = f * magnitude;
      break;
    }
  const int pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double dose) { return kLeft + dose / axis_max * pw; };
  auto py = [&](double percent) { return kTop + (1.0 - percent / 100.0) * ph; };
  for (int t = 0; t <= 5; ++t) {  // grid and ticks
    const double fx = t / 5.0;
    draw_line(img, px(fx * axis_max), kTop, px(fx * axis_max), kTop + ph, {225, 225, 225}, false, 1);
    draw_line(img, kLeft, py(fx * 100), kLeft + pw, py(fx * 100), {225, 225, 225}, false, 1);
    const std::string dose_label = format_number(fx * axis_max, axis_max < 5 ? 2 : 1);
    draw_text(img, static_cast<int>(px(fx * axis_max)) - 3 * static_cast<int>(dose_label.size()), kTop + ph + 6,
              dose_label, 1, 0, 0, 0);
    const std::string vol_label = format_number(fx * 100, 0);
    draw_text(img, kLeft - 8 - 6 * static_cast<int>(vol_label.size()), static_cast<int>(py(fx * 100)) - 3,
              vol_label, 1, 0, 0, 0);
  }
  draw_line(img, kLeft, kTop, kLeft, kTop + ph, {0, 0, 0}, false, 1);
  draw_line(img, kLeft, kTop + ph, kLeft + pw, kTop + ph, {0, 0, 0}, false, 1);
  draw_text(img, kLeft + pw / 2 - 30, kH - 18, "DOSE (GY)", 1, 0, 0, 0);
  draw_text(img, 6, kTop - 14, "VOLUME (%)", 1, 0, 0, 0);
  for (std::size_t s = 0; s < reference.size(); ++s) {
    const Rgb c = palette[s % palette.size()];
    for (int which = 0; which < 2; ++which) {
      const auto& curve = (which == 0 ? reference : test)[s].cumulative;
      for (std::size_t n = 1; n < curve.size(); ++n)
        draw_line(img, px(curve[n - 1].dose_gy), py(curve[n - 1].volume_percent), px(curve[n].dose_gy),
                  py(curve[n].volume_percent), c, which == 1, 2);
    }
    const int ly = kTop + 10 + static_cast<int>(s) * 16;
    draw_line(img, kW - kRight + 15, ly + 3, kW - kRight + 35, ly + 3, c, false, 2);
    draw_text(img, kW - kRight + 40, ly, reference[s].roi_name.substr(0, 24), 1, 0, 0, 0);
  }
  const int ly = kTop + 10 + static_cast<int>(reference.size()) * 16 + 10;
  draw_line(img, kW - kRight + 15, ly + 3, kW - kRight + 35, ly + 3, {0, 0, 0}, false, 2);
  draw_text(img, kW - kRight + 40, ly, "REFERENCE", 1, 0, 0, 0);
  draw_line(img, kW - kRight + 15, ly + 19, kW - kRight + 35, ly + 19, {0, 0, 0}, true, 2);
  draw_text(img, kW - kRight + 40, ly + 16, "TEST (DASHED)", 1, 0, 0, 0);
  return img;
}

}  // namespace protondose::compare
