#include "protondose/core/plan.h"

namespace protondose {

std::size_t IonBeam::spot_count() const {
  std::size_t n = 0;
  for (const auto& layer : layers) n += layer.spots.size();
  return n;
}

double IonBeam::total_meterset() const {
  double sum = 0.0;
  for (const auto& layer : layers)
    for (const auto& spot : layer.spots) sum += spot.meterset;
  return sum;
}

std::size_t IonPlan::spot_count() const {
  std::size_t n = 0;
  for (const auto& beam : beams) n += beam.spot_count();
  return n;
}

}  // namespace protondose
