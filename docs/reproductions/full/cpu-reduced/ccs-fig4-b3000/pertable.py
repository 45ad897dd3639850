"""Per-L table of a ccs-fig4 cell cache: each target's three models (loss ± MC SE, steps, converged) and
the 2-head − 1-head differences with their SE (one seed: the evaluation's Monte Carlo SE)."""
import glob, json, math, sys
cells = {}
for p in glob.glob(sys.argv[1] + "/cache/ccs-fig4/*.json"):
    r = json.load(open(p)); c, res = r["config"], r["result"]
    if len(sys.argv) > 2 and c["batch"] != int(sys.argv[2]):
        continue
    m = "+".join(c["activations"])
    cells[(c["kernel"][5:], m, c["layers"])] = res
def f(res):
    if res is None: return "—", math.nan, math.nan
    l, s = res["loss_per_layer"][-1], res["loss_se_per_layer"][-1]
    l = float(l) if l not in (None, "nan") else math.nan; s = float(s) if s not in (None, "nan") else math.nan
    tag = f"{res.get('steps_taken')}{'' if res.get('converged') else ('†' if res.get('diverged') else '*')}"
    return (f"{l:.4g} ± {s:.2g} ({tag})" if l == l else f"diverged ({tag})"), l, s
print("| target | L | 1-head linear | 1-head exp | 2-head linear+exp | 2-head − matching / 2-head − best 1-head (SE) | bayes |")
print("|---|---|---|---|---|---|---|")
for t in ("composite", "linear", "exp"):
    for L in range(1, 9):
        row = [f(cells.get((t, m, L))) for m in ("linear", "exp", "linear+exp")]
        if all(r[0] == "—" for r in row): continue
        (_, l1, s1), (_, le, se_), (_, l2, s2) = row
        if t == "composite":
            diffs = [(l2 - l1, math.hypot(s2, s1)), (l2 - le, math.hypot(s2, se_))]
            d = "; ".join(f"{x:+.3g} ({y:.2g})" for x, y in diffs)
        else:
            lm, sm = (l1, s1) if t == "linear" else (le, se_)
            d = f"{l2 - lm:+.3g} ({math.hypot(s2, sm):.2g})"
            if d.startswith("+") and (l2 - lm) == (l2 - lm): d += f" = {(l2 - lm) / math.hypot(s2, sm):.1f} SE"
        b = next((cells[(t, m, L)]["bayes_loss"] for m in ("linear", "exp", "linear+exp") if (t, m, L) in cells), math.nan)
        print(f"| {t} | {L} | {row[0][0]} | {row[1][0]} | {row[2][0]} | {d} | {b:.4g} |")
