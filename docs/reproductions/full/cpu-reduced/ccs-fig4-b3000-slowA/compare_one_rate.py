"""One-rate (today's) against slow-A (A_init 0.1, A_rate 0.1) ccs-fig4 cells at B = 3000, seed 0:
loss ± MC SE (steps; * = at the cap unconverged, † = diverged) and the difference in SE."""
import glob, json, math, sys
def load(d):
    out = {}
    for p in glob.glob(d + "/cache/ccs-fig4/*.json"):
        r = json.load(open(p)); c, res = r["config"], r["result"]
        if c["batch"] != 3000: continue
        out[(c["kernel"][5:], "+".join(c["activations"]), c["layers"])] = res
    return out
old, new = load(sys.argv[1]), load(sys.argv[2])
def f(res):
    if res is None: return "not run", math.nan, math.nan
    l, s = res["loss_per_layer"][-1], res["loss_se_per_layer"][-1]
    l = float(l) if l is not None else math.nan; s = float(s) if s is not None else math.nan
    tag = f"{res.get('steps_taken')}{'' if res.get('converged') else ('†' if res.get('diverged') else '*')}"
    return (f"{l:.4g} ± {s:.2g} ({tag})" if l == l else f"diverged ({tag})"), l, s
print("| target | model | L | one rate (today's) | slow A_ℓ (A_init 0.1, A_rate 0.1) | slow − one rate (SE) |")
print("|---|---|---|---|---|---|")
for k in sorted(new):
    a, b = f(old.get(k)), f(new[k])
    d = b[1] - a[1]; s = math.hypot(a[2], b[2])
    dd = f"{d:+.3g} ({s:.2g}) = {d / s:+.1f} SE" if d == d else "—"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {a[0]} | {b[0]} | {dd} |")
