#!/usr/bin/env python3
"""Writes this machine folder (energies.csv, idd/) from the shared DCPT data.

    python3 data/machines/DCPT_ProBeam_v5/make_machine.py [SHARED_DIR]

SHARED_DIR defaults to ../shared beside the repository (the folder holding
data/beam-models/dcpt-probeam/ and reference/dcpt-v5-water-idd/). Standard
library only. The output is deterministic; re-running it rewrites the same files.
"""
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "..", "shared")
BEAM_MODEL = os.path.join(SHARED, "data", "beam-models", "dcpt-probeam", "DCPT_beam_model__v5.csv")
IDD_DIR = os.path.join(SHARED, "reference", "dcpt-v5-water-idd")

CREDIT = ('# Credit (CC BY 4.0): "MC particle transport simulations for the 2022 LET-measurements at DCPT",\n'
          "#   N. Bassler, L. Grzanka, J. B. Christensen, H. Brkic et al. (APTG/2022_DCPT_LET).\n")


def g(x, digits=10):
    return f"{x:.{digits}g}"


def write_energies():
    rows = []
    with open(BEAM_MODEL, newline="") as f:
        for line in f:
            if line.lstrip().startswith("#") or not line.strip():
                continue
            v = [float(c) for c in line.strip().split(",")]
            nominal = v[0]
            # The 1 MeV rows of the 0.1 MeV table (as in the MCsquare BDL of the reference data).
            if abs(nominal - round(nominal)) < 1e-6:
                rows.append([round(nominal)] + v[1:])
    with open(os.path.join(HERE, "energies.csv"), "w", newline="") as out:
        out.write("# DCPT ProBeam emittance beam model v5 (S. Norrig, C. Soendergaard, DCPT; valid from August 2024),\n"
                  "# averaged over gantry rooms TR1-3, defined 600 mm upstream of the isocentre: the 1 MeV rows of\n"
                  "# DCPT_beam_model__v5.csv, columns renamed (docs/formats/machine-file.md), values unchanged.\n")
        out.write(CREDIT)
        out.write("nominal_energy_MeV,mean_energy_MeV,energy_spread_sigma_MeV,protons_per_MU,"
                  "sigma_x_mm,sigma_theta_x_rad,correlation_x,sigma_y_mm,sigma_theta_y_rad,correlation_y\n")
        for e, e_real, e_sigma, ppmu, sx, sy, sxp, syp, rx, ry in rows:
            out.write(",".join([str(e), g(e_real), g(e_sigma), g(ppmu), g(sx), g(sxp), g(rx), g(sy), g(syp), g(ry)]) + "\n")
    return len(rows)


def write_idds():
    index = []
    for e in range(70, 231, 10):
        name = f"idd_E{e:03d}.csv"
        depth, idd = [], []
        with open(os.path.join(IDD_DIR, name), newline="") as f:
            for r in csv.DictReader(f):
                depth.append(float(r["depth_mm"]))
                idd.append(float(r["idd_MeV_cm2_per_g_per_proton"]))
        last = max(i for i, v in enumerate(idd) if v > 0.0)
        end = min(last + 1, len(idd) - 1)  # keep one zero bin after the last non-zero one
        with open(os.path.join(HERE, "idd", name), "w", newline="") as out:
            out.write(f"# Integrated depth dose in water, nominal {e} MeV, DCPT ProBeam v5 beam model: computed with the\n"
                      "# MCsquare Monte Carlo code (K. Souris, UCLouvain; Med. Phys. 43:1700, 2016) for the protondose\n"
                      "# reference data (shared/reference/dcpt-v5-water-idd, see its README): 300 x 300 mm water box,\n"
                      "# surface at the isocentre plane, 600 mm of air from the beam-model plane, 1 mm bins (values at\n"
                      "# bin centres), per primary proton. Trimmed after the last non-zero bin.\n")
            out.write(CREDIT)
            out.write("depth_mm,idd_MeV_cm2_per_g_per_proton\n")
            for d, v in zip(depth[: end + 1], idd[: end + 1]):
                out.write(f"{g(d, 6)},{g(v, 7)}\n")
        index.append((e, name))
    with open(os.path.join(HERE, "idd", "index.csv"), "w", newline="") as out:
        out.write("# Tabulated IDDs of DCPT_ProBeam_v5 (MCsquare), one file per nominal energy.\n")
        out.write("nominal_energy_MeV,file\n")
        for e, name in index:
            out.write(f"{e},{name}\n")
    return len(index)


if __name__ == "__main__":
    n_e = write_energies()
    n_i = write_idds()
    print(f"wrote energies.csv ({n_e} energies) and {n_i} IDD files to {HERE}")
