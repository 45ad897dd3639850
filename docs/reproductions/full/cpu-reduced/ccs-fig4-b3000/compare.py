"""Per cell of ccs-fig4 (seed 0): the B = 3000 CPU cell against the B = 30000 H100 cell (same Σ,
initialization and test prompts; other training streams): test loss ± Monte Carlo SE, steps
(* = stopped at the cap unconverged, † = diverged), training wall / CPU seconds on this CPU.
    python compare.py CPU_RUN_DIR GPU_RUN_DIR"""
import glob, json, math, sys

def load(d):
    out = {}
    for p in glob.glob(d + "/cache/ccs-fig4/*.json"):
        r = json.load(open(p)); c = r["config"]
        out[(c["kernel"][5:], "+".join(c["activations"]), c["layers"])] = r["result"]
    return out

def num(v):
    try: return float(v)
    except (TypeError, ValueError): return math.nan

def cell(r):
    if r is None: return "—", math.nan, math.nan
    l, s = num(r["loss_per_layer"][-1]), num(r["loss_se_per_layer"][-1])
    tag = f"{r.get('steps_taken')}" + ("" if r.get("converged") else ("†" if r.get("diverged") else "*"))
    return (f"{l:.4g} ± {s:.2g} ({tag})" if l == l else f"diverged ({tag})"), l, s

cpu, gpu = load(sys.argv[1]), load(sys.argv[2])
print("| target | model | L | B = 3000 (CPU) | B = 30000 (H100) | 3000 − 30000 (SE) | CPU wall s (CPU s) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
order = {"composite": 0, "linear": 1, "exp": 2}
for k in sorted(cpu, key=lambda k: (order[k[0]], k[1], k[2])):
    a, la, sa = cell(cpu[k]); b, lb, sb = cell(gpu.get(k))
    d = f"{la - lb:+.3g} ({math.hypot(sa, sb):.2g})" if la == la and lb == lb else "—"
    r = cpu[k]
    print(f"| {k[0]} | {k[1]} | {k[2]} | {a} | {b} | {d} | {r['train_wall_s']:.0f} ({r['train_cpu_s']:.0f}) |")
