#!/usr/bin/env python3
"""Independent per-beam summary of RT Ion Plans from `dcmdump +L` text.

Used to obtain the expected numbers in tests/dicom/ion_plan_test.cpp without
any DICOM library (and without protondose's reader): per beam, the control
points whose ScanSpotMetersetWeights are not all zero, layers as changes of
NominalBeamEnergy (inherited where absent) among them, their spot count, the
energy range, and sum(weight) * BeamMeterset / FinalCumulativeMetersetWeight.

    tests/dicom/tools/plan_summary_from_dcmdump.py PLAN.dcm [...]
"""
import re
import subprocess
import sys

LINE = re.compile(r'\s*\((\w{4}),(\w{4})\) (\w\w) (.*?)\s+#\s*\d+,\s*\d+ (\w+)')


def summarise(path):
    text = subprocess.run(['dcmdump', '+L', path], capture_output=True, text=True, check=True).stdout
    beams, beam_meterset, fractions = [], {}, None
    beam = control_point = last_meterset = None
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        vr, value, keyword = m.group(3), m.group(4).strip('[]'), m.group(5)
        if keyword == 'NumberOfFractionsPlanned':
            fractions = int(value)
        elif keyword == 'BeamMeterset':
            last_meterset = float(value)
        elif keyword == 'ReferencedBeamNumber' and line.startswith('        (300c,0006)'):
            beam_meterset[int(value)] = last_meterset
        elif keyword == 'BeamNumber' and line.startswith('    (300a,00c0)'):
            beam = {'number': int(value), 'cps': []}
            beams.append(beam)
        elif keyword == 'FinalCumulativeMetersetWeight' and beam:
            beam['final'] = float(value)
        elif keyword == 'ControlPointIndex':
            control_point = {'w': [], 'e': None}
            beam['cps'].append(control_point)
        elif keyword == 'NominalBeamEnergy' and control_point is not None:
            control_point['e'] = float(value)
        elif keyword == 'ScanSpotMetersetWeights' and control_point is not None and vr == 'FL':
            control_point['w'] = [float(x) for x in value.split('\\')]
    print(f'{path}: fractions {fractions}')
    for b in beams:
        energy = last_layer_energy = None
        layers = spots = 0
        weight_sum = 0.0
        energies = []
        for cp in b['cps']:
            if cp['e'] is not None:
                energy = cp['e']
            if any(w > 0 for w in cp['w']):
                if energy != last_layer_energy:
                    layers += 1
                    last_layer_energy = energy
                spots += len(cp['w'])
                weight_sum += sum(cp['w'])
                energies.append(energy)
        meterset = weight_sum * beam_meterset[b['number']] / b['final']
        print(f"  beam {b['number']}: control points {len(b['cps'])}, layers {layers}, spots {spots}, "
              f"energy {min(energies)}-{max(energies)} MeV, meterset/fraction {meterset:.8g}")


if __name__ == '__main__':
    for plan in sys.argv[1:]:
        summarise(plan)
