#!/usr/bin/env python3
"""Writes schneider2000_stoichiometric.csv: a stoichiometric-style HU -> (RSP, mass density)
curve (data/hu-curves/README.md, docs/physics/ct-conversion.md).

Method, the stoichiometric calibration of Schneider, Pedroni & Lomax (Phys Med Biol 41:111, 1996):
compute (HU, RSP) for a set of body tissues from their composition and density, then join them
piecewise-linearly. The tissues are the 24 groups of Schneider, Bortfeld & Schlegel (Phys Med Biol
45:459, 2000), each at the centre of its HU interval:

  mass density  rho(HU): Schneider et al. 2000, piecewise linear (KNOTS_HU_DENSITY below, as
                reproduced in the Geant4/GATE DICOM examples' Schneider2000DensitiesTable), with
                the adipose/soft-tissue line through water (0 HU, 1.000 g/cm3; Schneider's fit
                gives 1.017 there);
  composition   the group's elemental weights (GROUPS below; Schneider et al. 2000's groups as
                reproduced in GATE's Schneider2000MaterialsTable);
  RSP           rho * (sum w_i Z_i/A_i) / (Z/A)_water * L(I) / L(I_water),
                L(I) = ln(2 m_e c^2 beta^2 gamma^2 / I) - beta^2 (Bethe, no shell or density
                corrections), protons of 100 MeV (MCsquare's convention in
                shared/reference/*/hu_calibration.csv), ln I = sum w_i (Z/A)_i ln I_i /
                sum w_i (Z/A)_i (Bragg additivity) with the elemental I-values below; water is
                computed with the same formula (H 11.19 %, O 88.81 %: I = 75.3 eV), so its RSP is 1.

Choices of this project, stated in the CSV header and the docs:
  * water (0 HU -> RSP 1, 1.000 g/cm3) is the tissue point of the group around 0 HU
    (-22 ... 7 HU), so that water phantoms are water;
  * monotone RSP: where two neighbouring tissue points decrease (connective tissue at 99.5 HU,
    1.1023, and the first marrow/bone group at 159.5 HU, 1.0979: Schneider's density drops from
    1.120 to 1.076 g/cm3 at 100/101 HU) both get their mean (pool-adjacent-violators);
  * HU -1024 (the usual CT minimum) and -1000 -> air at 0.0012 g/cm3;
  * above the last group (1500 ... 1600 HU) the densest bone group is kept up to 3000 HU, with
    the density to 2.8 g/cm3 at 3000 HU (the GATE table's extension): not tissue data.

Run: python3 data/hu-curves/make_schneider2000_curve.py > data/hu-curves/schneider2000_stoichiometric.csv
"""
import math

# Z, standard atomic weight (IUPAC 2013 conventional values), mean excitation energy I (eV):
# H, C, N, O as bound in condensed compounds, ICRU Report 37 (1984) (19.2, 81, 82, 106 eV);
# the other elements with their elemental ICRU 37 values (the I-values of NIST ESTAR/PSTAR).
ELEMENTS = {
    "H": (1, 1.008, 19.2), "C": (6, 12.011, 81.0), "N": (7, 14.007, 82.0), "O": (8, 15.999, 106.0),
    "Na": (11, 22.990, 149.0), "Mg": (12, 24.305, 156.0), "P": (15, 30.974, 173.0),
    "S": (16, 32.06, 180.0), "Cl": (17, 35.45, 174.0), "Ar": (18, 39.948, 188.0),
    "K": (19, 39.098, 190.0), "Ca": (20, 40.078, 191.0),
}
ORDER = ["H", "C", "N", "O", "Na", "Mg", "P", "S", "Cl", "Ar", "K", "Ca"]

# (lowest HU of the group, name, weight % of H C N O Na Mg P S Cl Ar K Ca): Schneider et al. 2000.
GROUPS = [
    (-1050, "air", [0, 0, 75.5, 23.2, 0, 0, 0, 0, 0, 1.3, 0, 0]),
    (-950, "lung", [10.3, 10.5, 3.1, 74.9, 0.2, 0, 0.2, 0.3, 0.3, 0, 0.2, 0]),
    (-120, "adipose/adrenal/small intestine 1", [11.6, 68.1, 0.2, 19.8, 0.1, 0, 0, 0.1, 0.1, 0, 0, 0]),
    (-82, "adipose/adrenal/small intestine 2", [11.3, 56.7, 0.9, 30.8, 0.1, 0, 0, 0.1, 0.1, 0, 0, 0]),
    (-52, "adipose/adrenal/small intestine 3", [11.0, 45.8, 1.5, 41.1, 0.1, 0, 0.1, 0.2, 0.2, 0, 0, 0]),
    (-22, "adipose/adrenal/small intestine 4", [10.8, 35.6, 2.2, 50.9, 0, 0, 0.1, 0.2, 0.2, 0, 0, 0]),
    (8, "adipose/adrenal/small intestine 5", [10.6, 28.4, 2.6, 57.8, 0, 0, 0.1, 0.2, 0.2, 0, 0.1, 0]),
    (19, "soft tissue", [10.3, 13.4, 3.0, 72.3, 0.2, 0, 0.2, 0.2, 0.2, 0, 0.2, 0]),
    (80, "connective tissue", [9.4, 20.7, 6.2, 62.2, 0.6, 0, 0, 0.6, 0.3, 0, 0, 0]),
    (120, "marrow/bone 1", [9.5, 45.5, 2.5, 35.5, 0.1, 0, 2.1, 0.1, 0.1, 0, 0.1, 4.5]),
    (200, "marrow/bone 2", [8.9, 42.3, 2.7, 36.3, 0.1, 0, 3.0, 0.1, 0.1, 0, 0.1, 6.4]),
    (300, "marrow/bone 3", [8.2, 39.1, 2.9, 37.2, 0.1, 0, 3.9, 0.1, 0.1, 0, 0.1, 8.3]),
    (400, "marrow/bone 4", [7.6, 36.1, 3.0, 38.0, 0.1, 0.1, 4.7, 0.2, 0.1, 0, 0, 10.1]),
    (500, "marrow/bone 5", [7.1, 33.5, 3.2, 38.7, 0.1, 0.1, 5.4, 0.2, 0, 0, 0, 11.7]),
    (600, "marrow/bone 6", [6.6, 31.0, 3.3, 39.4, 0.1, 0.1, 6.1, 0.2, 0, 0, 0, 13.2]),
    (700, "marrow/bone 7", [6.1, 28.7, 3.5, 40.0, 0.1, 0.1, 6.7, 0.2, 0, 0, 0, 14.6]),
    (800, "marrow/bone 8", [5.6, 26.5, 3.6, 40.5, 0.1, 0.2, 7.3, 0.3, 0, 0, 0, 15.9]),
    (900, "marrow/bone 9", [5.2, 24.6, 3.7, 41.1, 0.1, 0.2, 7.8, 0.3, 0, 0, 0, 17.0]),
    (1000, "marrow/bone 10", [4.9, 22.7, 3.8, 41.6, 0.1, 0.2, 8.3, 0.3, 0, 0, 0, 18.1]),
    (1100, "marrow/bone 11", [4.5, 21.0, 3.9, 42.0, 0.1, 0.2, 8.8, 0.3, 0, 0, 0, 19.2]),
    (1200, "marrow/bone 12", [4.2, 19.4, 4.0, 42.5, 0.1, 0.2, 9.2, 0.3, 0, 0, 0, 20.1]),
    (1300, "marrow/bone 13", [3.9, 17.9, 4.1, 42.9, 0.1, 0.2, 9.6, 0.3, 0, 0, 0, 21.0]),
    (1400, "marrow/bone 14", [3.6, 16.5, 4.2, 43.2, 0.1, 0.2, 10.0, 0.3, 0, 0, 0, 21.9]),
    (1500, "marrow/bone 15", [3.4, 15.5, 4.2, 43.5, 0.1, 0.2, 10.3, 0.3, 0, 0, 0, 22.5]),
]
HU_MAX = 3000

# HU -> mass density (g/cm3), Schneider et al. 2000; 3000 HU: the GATE table's extension.
# The knot (0, 1.000) replaces Schneider's (-97, 0.930486): the adipose line through water.
KNOTS_HU_DENSITY = [(-1000, 0.00121), (-98, 0.93), (0, 1.0), (14, 1.03), (23, 1.031),
                    (100, 1.1199), (101, 1.0762), (1600, 1.9642), (3000, 2.8)]

WATER = [11.19, 0, 0, 88.81, 0, 0, 0, 0, 0, 0, 0, 0]
ELECTRON_REST_ENERGY_EV = 510998.95
PROTON_REST_ENERGY_MEV = 938.272
REFERENCE_ENERGY_MEV = 100.0


def density(hu):
    if hu <= KNOTS_HU_DENSITY[0][0]:
        return KNOTS_HU_DENSITY[0][1]
    for (h0, d0), (h1, d1) in zip(KNOTS_HU_DENSITY, KNOTS_HU_DENSITY[1:]):
        if h0 <= hu <= h1:
            return d0 + (hu - h0) * (d1 - d0) / (h1 - h0)
    raise ValueError(hu)


def group(hu):
    g = GROUPS[0]
    for candidate in GROUPS:
        if hu >= candidate[0]:
            g = candidate
    return g


def electrons_and_log_i(weights):
    total = sum(weights)
    ne = sum(w / total * ELEMENTS[e][0] / ELEMENTS[e][1] for w, e in zip(weights, ORDER))
    log_i = sum(w / total * ELEMENTS[e][0] / ELEMENTS[e][1] * math.log(ELEMENTS[e][2])
                for w, e in zip(weights, ORDER)) / ne
    return ne, log_i


def stopping_number(log_i_ev):
    gamma = 1.0 + REFERENCE_ENERGY_MEV / PROTON_REST_ENERGY_MEV
    beta2 = 1.0 - 1.0 / gamma ** 2
    return math.log(2 * ELECTRON_REST_ENERGY_EV * beta2 * gamma ** 2) - log_i_ev - beta2


NE_WATER, LOG_I_WATER = electrons_and_log_i(WATER)


def rsp(hu, weights):
    ne, log_i = electrons_and_log_i(weights)
    return density(hu) * ne / NE_WATER * stopping_number(log_i) / stopping_number(LOG_I_WATER)


def tissue_points():
    """(HU, name, weights) of the curve's nodes, sorted by HU."""
    points = [(-1024, "air", GROUPS[0][2]), (-1000, "air", GROUPS[0][2])]
    for i, (lo, name, weights) in enumerate(GROUPS):
        hi = GROUPS[i + 1][0] - 1 if i + 1 < len(GROUPS) else 1600
        centre = (max(lo, -1000) + hi) / 2
        if lo <= 0 <= hi:
            points.append((0, "water", WATER))  # the group around 0 HU is represented by water
        else:
            points.append((centre, name, weights))
    points += [(1600, GROUPS[-1][1], GROUPS[-1][2]), (HU_MAX, GROUPS[-1][1], GROUPS[-1][2])]
    return sorted(points, key=lambda p: p[0])


def pool_adjacent_violators(values):
    """Least-squares non-decreasing sequence closest to values (equal weights)."""
    blocks = []  # [sum, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out = []
    for s, n in blocks:
        out += [s / n] * n
    return out


def main():
    points = tissue_points()
    raw = [rsp(hu, weights) for hu, _, weights in points]
    monotone = pool_adjacent_violators(raw)
    print("# protondose stoichiometric-style HU calibration (the default; data/hu-curves/README.md,")
    print("#   docs/physics/ct-conversion.md). Written by make_schneider2000_curve.py (this folder).")
    print("# Method: stoichiometric calibration (Schneider, Pedroni & Lomax, Phys Med Biol 41:111, 1996):")
    print("#   RSP of body tissues from composition and density (Bethe formula, 100 MeV, I-values of")
    print("#   ICRU Report 37: H 19.2, C 81, N 82, O 106 eV in compounds, Bragg additivity; water")
    print("#   I = %.1f eV, RSP exactly 1), joined piecewise-linearly. Tissues: the groups of Schneider," % math.exp(LOG_I_WATER))
    print("#   Bortfeld & Schlegel, Phys Med Biol 45:459 (2000) at the centres of their HU intervals, with")
    print("#   their HU -> mass density line.")
    print("# Project choices: water (0 HU, 1.000 g/cm3) stands for the group around 0 HU; RSP made")
    print("#   non-decreasing by pooling (99.5 and 159.5 HU); -1024 and -1000 HU are air; the densest bone")
    print("#   group is kept to 3000 HU (density 2.8 g/cm3 there: extrapolation, not tissue data).")
    print("# Not the calibration of any scanner (Schneider's HU come from one CT scanner): clinics supply")
    print("#   their own curve (load_hu_curve_csv).")
    print("HU,rsp,mass_density_g_cm3,tissue,rsp_before_pooling")
    for (hu, name, _), r, r_raw in zip(points, monotone, raw):
        print(f"{hu:g},{r:.4f},{density(hu):.4f},{name},{r_raw:.4f}")


if __name__ == "__main__":
    main()
