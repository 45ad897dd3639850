"""Worst recorded margin per (test, line) over all runs in marginplug JSON-lines files:
worst, median and count of the per-run values (a run = one test call under one seed); ratios
and absolute-slack records in separate tables (--min=X filters the ratios)."""
import collections
import json
import re
import sys

vals = {"ratio": collections.defaultdict(list), "diff": collections.defaultdict(list)}
files = [a for a in sys.argv[1:] if not a.startswith("--")]
thr = float(next((a[6:] for a in sys.argv[1:] if a.startswith("--min=")), 0.0))
for path in files:
    for line in open(path):
        r = json.loads(line)
        r["node"] = r["node"] or "?"
        node = re.sub(r"(\[s\d+-|-s\d+(?=\]))", lambda m: "[" if m.group(0).startswith("[") else "", r["node"])
        node = re.sub(r"\[s\d+\]$", "", node)
        v = r["v"]
        kind = "diff" if isinstance(v, list) else "ratio"  # ["diff", A − B]: an absolute slack
        v = v[1] if isinstance(v, list) else v
        v = -1.0 if v is None or v != v else v
        vals[kind][(node, r["where"])].append(v)
titles = {"ratio": "ratios (1.0 = at the threshold)",
          "diff": "absolute slack A − B (units of the compared quantity; not comparable with ratios)"}
for kind, table in vals.items():
    rows = sorted(table.items(), key=lambda kv: -max(kv[1]))
    if rows:
        print(f"== {titles[kind]}")
    for (node, where), vs in rows:
        vs.sort()
        if kind == "diff" or vs[-1] >= thr:
            print(f"{vs[-1]:10.4g} med {vs[len(vs)//2]:9.3g} n={len(vs):<4d} {where:34s} {node}")
