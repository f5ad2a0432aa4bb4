#include "protondose/engine/phantom.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::engine {

PhantomSlab parse_phantom_slab(const std::string& text) {
  PhantomSlab s;
  std::istringstream in(text);
  std::string axis, from, to, hu;
  const auto bad = [&](const std::string& why) {
    return ConfigError("phantom slab '" + text + "': " + why + "; expected AXIS:FROM:TO:HU, e.g. y:-80:-60:1300");
  };
  if (!std::getline(in, axis, ':') || !std::getline(in, from, ':') || !std::getline(in, to, ':') ||
      !std::getline(in, hu) || hu.find(':') != std::string::npos)
    throw bad("not four fields");
  if (axis == "x") s.axis = 0;
  else if (axis == "y") s.axis = 1;
  else if (axis == "z") s.axis = 2;
  else throw bad("axis '" + axis + "' is not x, y or z");
  try {
    std::size_t n1 = 0, n2 = 0, n3 = 0;
    s.from_mm = std::stod(from, &n1);
    s.to_mm = std::stod(to, &n2);
    s.hu = std::stof(hu, &n3);
    if (n1 != from.size() || n2 != to.size() || n3 != hu.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw bad("a number is malformed");
  }
  if (!(s.to_mm > s.from_mm)) throw bad("FROM must be below TO");
  return s;
}

CtImage make_box_phantom(const IonPlan& plan, const PhantomSpec& spec) {
  if (plan.beams.empty()) throw InputError("phantom: plan '" + plan.label + "' has no beams (no isocentre)");
  if (!(spec.spacing_mm > 0) || !std::isfinite(spec.spacing_mm) || !(spec.margin_mm >= 0)) {
    std::ostringstream m;
    m << "phantom: spacing " << spec.spacing_mm << " mm must be > 0 and margin " << spec.margin_mm << " mm >= 0";
    throw ConfigError(m.str());
  }
  Vec3 centre{0, 0, 0};
  for (const IonBeam& b : plan.beams)
    for (int a = 0; a < 3; ++a) centre[a] += b.isocenter_mm[a] / static_cast<double>(plan.beams.size());
  CtImage ct;
  Grid3 g;
  for (int a = 0; a < 3; ++a) {
    if (!(spec.box_size_mm[a] > 0) || !std::isfinite(spec.box_size_mm[a])) {
      std::ostringstream m;
      m << "phantom: box size along axis " << a << " is " << spec.box_size_mm[a] << " mm; must be > 0";
      throw ConfigError(m.str());
    }
    const double extent = spec.box_size_mm[a] + 2 * spec.margin_mm;
    g.size[a] = std::max(1, static_cast<int>(std::lround(extent / spec.spacing_mm)));
    g.spacing_mm[a] = spec.spacing_mm;
    g.origin_mm[a] = centre[a] - 0.5 * (g.size[a] - 1) * spec.spacing_mm;
  }
  ct.hu = Volume<float>(g, spec.air_hu);
  for (int k = 0; k < g.size[2]; ++k)
    for (int j = 0; j < g.size[1]; ++j)
      for (int i = 0; i < g.size[0]; ++i) {
        const Vec3 p = g.position_mm(i, j, k);
        const Vec3 r{p[0] - centre[0], p[1] - centre[1], p[2] - centre[2]};
        bool inside = true;
        for (int a = 0; a < 3; ++a) inside = inside && std::abs(r[a]) < 0.5 * spec.box_size_mm[a];
        if (!inside) continue;
        float hu = spec.box_hu;
        for (const PhantomSlab& s : spec.slabs)
          if (r[s.axis] > s.from_mm && r[s.axis] < s.to_mm) hu = s.hu;
        ct.hu.at(i, j, k) = hu;
      }
  ct.patient_position = "HFS";
  ct.study_instance_uid = plan.study_instance_uid;
  ct.frame_of_reference_uid = plan.frame_of_reference_uid;
  ct.patient_id = plan.patient_id;
  ct.patient_name = plan.patient_name;
  return ct;
}

}  // namespace protondose::engine
