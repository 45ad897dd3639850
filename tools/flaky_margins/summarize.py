"""Worst recorded margin per (test, line) over all runs in marginplug JSON-lines files:
worst, median and count of the per-run values (a run = one test call under one seed)."""
import collections
import json
import re
import sys

vals = collections.defaultdict(list)
files = [a for a in sys.argv[1:] if not a.startswith("--")]
thr = float(next((a[6:] for a in sys.argv[1:] if a.startswith("--min=")), 0.0))
for path in files:
    for line in open(path):
        r = json.loads(line)
        r["node"] = r["node"] or "?"
        node = re.sub(r"(\[s\d+-|-s\d+(?=\]))", lambda m: "[" if m.group(0).startswith("[") else "", r["node"]); node = re.sub(r"\[s\d+\]$", "", node)
        v = r["v"]
        v = v[1] if isinstance(v, list) else v
        v = -1.0 if v is None or v != v else v
        vals[(node, r["where"])].append(v)
rows = sorted(vals.items(), key=lambda kv: -max(kv[1]))
for (node, where), vs in rows:
    vs.sort()
    if vs[-1] >= thr:
        print(f"{vs[-1]:10.4g} med {vs[len(vs)//2]:9.3g} n={len(vs):<4d} {where:34s} {node}")
