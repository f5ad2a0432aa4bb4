#include "protondose/physics/materials.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::physics {
namespace {

struct ElementX0 {
  const char* symbol;
  double radiation_length_g_cm2;
};

// Elemental radiation lengths, g/cm², from the PDG tables "Atomic and nuclear
// properties of materials" (pdg.lbl.gov/AtomicNuclearProperties).
constexpr ElementX0 kElementX0[] = {
    {"H", 63.04},  {"C", 42.70},  {"N", 37.99},  {"O", 34.24},
    {"Na", 27.74}, {"Mg", 25.03}, {"P", 21.21},  {"S", 19.50},
    {"Cl", 19.28}, {"Ar", 19.55}, {"K", 17.32},  {"Ca", 16.14},
};

double element_x0(const std::string& symbol) {
  for (const auto& e : kElementX0) {
    if (symbol == e.symbol) return e.radiation_length_g_cm2;
  }
  throw InputError("radiation length: unknown element '" + symbol +
                   "' (supported: H C N O Na Mg P S Cl Ar K Ca)");
}

using Composition = std::vector<std::pair<std::string, double>>;

// Mass fractions in per cent. Tissues: Woodard & White, Br J Radiol 59:1209
// (1986), as tabulated in ICRU Report 46 (1992) and Schneider et al., PMB
// 45:459 (2000), table 2. Air (dry, near sea level) and water: PDG.
const Composition kAir = {{"C", 0.0124}, {"N", 75.5268}, {"O", 23.1781}, {"Ar", 1.2827}};
const Composition kLung = {{"H", 10.3}, {"C", 10.5}, {"N", 3.1}, {"O", 74.9}, {"Na", 0.2},
                           {"P", 0.2},  {"S", 0.3},  {"Cl", 0.3}, {"K", 0.2}};
const Composition kAdipose = {{"H", 11.4}, {"C", 59.8}, {"N", 0.7}, {"O", 27.8},
                              {"Na", 0.1}, {"S", 0.1},  {"Cl", 0.1}};
const Composition kWater = {{"H", 11.1894}, {"O", 88.8106}};
const Composition kMuscle = {{"H", 10.2}, {"C", 14.3}, {"N", 3.4}, {"O", 71.0}, {"Na", 0.1},
                             {"P", 0.2},  {"S", 0.3},  {"Cl", 0.1}, {"K", 0.4}};
const Composition kCorticalBone = {{"H", 3.4}, {"C", 15.5}, {"N", 4.2},  {"O", 43.5}, {"Na", 0.1},
                                   {"Mg", 0.2}, {"P", 10.3}, {"S", 0.3}, {"Ca", 22.5}};
// PMMA C5H8O2 and polycarbonate C16H14O3: mass fractions from the formulas
// (atomic weights H 1.008, C 12.011, O 15.999).
const Composition kPmma = {{"H", 8.0541}, {"C", 59.9846}, {"O", 31.9613}};
const Composition kPolycarbonate = {{"H", 5.5491}, {"C", 75.5751}, {"O", 18.8758}};

std::vector<ReferenceMaterial> build_reference_tissues() {
  // Densities: air 0.00120479 (PDG); lung 0.26 g/cm³ (ICRU 46 inflated lung);
  // adipose 0.95, muscle 1.05, cortical bone 1.92 (Woodard & White 1986).
  return {
      {"air", 0.00120479, mixture_radiation_length_g_cm2(kAir)},
      {"lung", 0.26, mixture_radiation_length_g_cm2(kLung)},
      {"adipose tissue", 0.95, mixture_radiation_length_g_cm2(kAdipose)},
      {"water", 1.0, mixture_radiation_length_g_cm2(kWater)},
      {"skeletal muscle", 1.05, mixture_radiation_length_g_cm2(kMuscle)},
      {"cortical bone", 1.92, mixture_radiation_length_g_cm2(kCorticalBone)},
  };
}

}  // namespace

double mixture_radiation_length_g_cm2(const std::vector<std::pair<std::string, double>>& mass_fractions) {
  double weight_sum = 0.0;
  double inverse_x0_sum = 0.0;
  for (const auto& [symbol, fraction] : mass_fractions) {
    if (!(fraction >= 0.0) || !std::isfinite(fraction)) {
      std::ostringstream msg;
      msg << "radiation length: mass fraction of " << symbol << " is " << fraction
          << "; expected a finite value >= 0";
      throw InputError(msg.str());
    }
    inverse_x0_sum += fraction / element_x0(symbol);
    weight_sum += fraction;
  }
  if (!(weight_sum > 0.0)) {
    throw InputError("radiation length: the mass fractions sum to 0; expected a positive sum");
  }
  return weight_sum / inverse_x0_sum;
}

const std::vector<ReferenceMaterial>& reference_tissues() {
  static const std::vector<ReferenceMaterial> tissues = build_reference_tissues();
  return tissues;
}

ReferenceMaterial pmma() { return {"PMMA", 1.19, mixture_radiation_length_g_cm2(kPmma)}; }

ReferenceMaterial polycarbonate() {
  return {"polycarbonate (Lexan)", 1.20, mixture_radiation_length_g_cm2(kPolycarbonate)};
}

double radiation_length_g_cm2(double density_g_cm3) {
  if (!std::isfinite(density_g_cm3) || !(density_g_cm3 > 0.0)) {
    std::ostringstream msg;
    msg << "radiation length: mass density " << density_g_cm3
        << " g/cm3 is not valid; expected a finite density > 0 g/cm3";
    throw InputError(msg.str());
  }
  const auto& t = reference_tissues();
  if (density_g_cm3 <= t.front().density_g_cm3) return t.front().radiation_length_g_cm2;
  if (density_g_cm3 >= t.back().density_g_cm3) return t.back().radiation_length_g_cm2;
  std::size_t i = 1;
  while (t[i].density_g_cm3 < density_g_cm3) ++i;
  const double f = (density_g_cm3 - t[i - 1].density_g_cm3) / (t[i].density_g_cm3 - t[i - 1].density_g_cm3);
  return t[i - 1].radiation_length_g_cm2 + f * (t[i].radiation_length_g_cm2 - t[i - 1].radiation_length_g_cm2);
}

}  // namespace protondose::physics
