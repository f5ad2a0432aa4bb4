#include "protondose/physics/materials.h"

#include <cmath>
#include <sstream>

#include "protondose/core/error.h"

namespace protondose::physics {
namespace {

struct Element {
  const char* symbol;
  double radiation_length_g_cm2;  // PDG X0
  int z;                          // atomic number
  double a;                       // standard atomic weight, g/mol
};

// Elemental radiation lengths, g/cm², from the PDG tables "Atomic and nuclear
// properties of materials" (pdg.lbl.gov/AtomicNuclearProperties); standard
// atomic weights (IUPAC, abridged).
constexpr Element kElements[] = {
    {"H", 63.04, 1, 1.008},     {"C", 42.70, 6, 12.011},   {"N", 37.99, 7, 14.007},
    {"O", 34.24, 8, 15.999},    {"Na", 27.74, 11, 22.990}, {"Mg", 25.03, 12, 24.305},
    {"P", 21.21, 15, 30.974},   {"S", 19.50, 16, 32.06},   {"Cl", 19.28, 17, 35.45},
    {"Ar", 19.55, 18, 39.948},  {"K", 17.32, 19, 39.098},  {"Ca", 16.14, 20, 40.078},
};

const Element& element(const std::string& symbol, const char* what) {
  for (const auto& e : kElements) {
    if (symbol == e.symbol) return e;
  }
  throw InputError(std::string(what) + ": unknown element '" + symbol +
                   "' (supported: H C N O Na Mg P S Cl Ar K Ca)");
}

// Gottschalk 2010: 1/X_S per unit mass fraction of an element, cm²/g.
double inverse_scattering_length_cm2_g(const Element& e) {
  constexpr double kFineStructure = 1.0 / 137.035999;
  constexpr double kAvogadro = 6.02214076e23;     // 1/mol
  constexpr double kElectronRadiusCm = 2.8179403e-13;
  const double z = e.z;
  return kFineStructure * kAvogadro * kElectronRadiusCm * kElectronRadiusCm * z * z / e.a *
         (2.0 * std::log(33219.0 * std::pow(e.a * z, -1.0 / 3.0)) - 1.0);
}

// Σ w_i f(element_i) / Σ w_i, validating the fractions.
template <typename F>
double weighted_mean(const std::vector<std::pair<std::string, double>>& mass_fractions, const char* what, F f) {
  double weight_sum = 0.0;
  double sum = 0.0;
  for (const auto& [symbol, fraction] : mass_fractions) {
    if (!(fraction >= 0.0) || !std::isfinite(fraction)) {
      std::ostringstream msg;
      msg << what << ": mass fraction of " << symbol << " is " << fraction
          << "; expected a finite value >= 0";
      throw InputError(msg.str());
    }
    sum += fraction * f(element(symbol, what));
    weight_sum += fraction;
  }
  if (!(weight_sum > 0.0)) {
    throw InputError(std::string(what) + ": the mass fractions sum to 0; expected a positive sum");
  }
  return sum / weight_sum;
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

ReferenceMaterial make_material(const char* name, double density_g_cm3, const Composition& composition) {
  return {name, density_g_cm3, mixture_radiation_length_g_cm2(composition),
          mixture_scattering_length_g_cm2(composition)};
}

std::vector<ReferenceMaterial> build_reference_tissues() {
  // Densities: air 0.00120479 (PDG); lung 0.26 g/cm³ (ICRU 46 inflated lung);
  // adipose 0.95, muscle 1.05, cortical bone 1.92 (Woodard & White 1986).
  return {
      make_material("air", 0.00120479, kAir),
      make_material("lung", 0.26, kLung),
      make_material("adipose tissue", 0.95, kAdipose),
      make_material("water", 1.0, kWater),
      make_material("skeletal muscle", 1.05, kMuscle),
      make_material("cortical bone", 1.92, kCorticalBone),
  };
}

}  // namespace

double mixture_radiation_length_g_cm2(const std::vector<std::pair<std::string, double>>& mass_fractions) {
  return 1.0 / weighted_mean(mass_fractions, "radiation length",
                             [](const Element& e) { return 1.0 / e.radiation_length_g_cm2; });
}

double mixture_scattering_length_g_cm2(const std::vector<std::pair<std::string, double>>& mass_fractions) {
  return 1.0 / weighted_mean(mass_fractions, "scattering length", inverse_scattering_length_cm2_g);
}

const std::vector<ReferenceMaterial>& reference_tissues() {
  static const std::vector<ReferenceMaterial> tissues = build_reference_tissues();
  return tissues;
}

ReferenceMaterial pmma() { return make_material("PMMA", 1.19, kPmma); }

ReferenceMaterial polycarbonate() { return make_material("polycarbonate (Lexan)", 1.20, kPolycarbonate); }

namespace {

// Piecewise-linear interpolation in density between the tissue anchors; ends
// assigned to air and cortical bone (see materials.h).
double interpolate_tissues(double density_g_cm3, const char* what, double ReferenceMaterial::*field) {
  if (!std::isfinite(density_g_cm3) || !(density_g_cm3 > 0.0)) {
    std::ostringstream msg;
    msg << what << ": mass density " << density_g_cm3
        << " g/cm3 is not valid; expected a finite density > 0 g/cm3";
    throw InputError(msg.str());
  }
  const auto& t = reference_tissues();
  if (density_g_cm3 <= t.front().density_g_cm3) return t.front().*field;
  if (density_g_cm3 >= t.back().density_g_cm3) return t.back().*field;
  std::size_t i = 1;
  while (t[i].density_g_cm3 < density_g_cm3) ++i;
  const double f = (density_g_cm3 - t[i - 1].density_g_cm3) / (t[i].density_g_cm3 - t[i - 1].density_g_cm3);
  return t[i - 1].*field + f * (t[i].*field - t[i - 1].*field);
}

}  // namespace

double radiation_length_g_cm2(double density_g_cm3) {
  return interpolate_tissues(density_g_cm3, "radiation length", &ReferenceMaterial::radiation_length_g_cm2);
}

double scattering_length_g_cm2(double density_g_cm3) {
  return interpolate_tissues(density_g_cm3, "scattering length", &ReferenceMaterial::scattering_length_g_cm2);
}

}  // namespace protondose::physics
