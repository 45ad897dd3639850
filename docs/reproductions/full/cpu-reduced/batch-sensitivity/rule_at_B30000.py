"""When would the convergence rule have stopped p3a's and p4's trainings at B = 30000? (issue 19)

Replays ``ccs_training.ConvergenceMonitor``'s test (checked every 50 steps from the end of the
decay, step 3000: |change| + 2 SE < 1% over the last 10% of steps, at least 200) on the 10-step
block means of the training loss recorded by the runs p3a, p3b and p4, once as run (each must
stop where it stopped: p3a 14100 steps, p3b 3150; p4 was capped at 6000 unconverged) and, for
B = 3000, once with the standard error divided by √10 (the batch noise of B = 30000; the drift of
the mean is the same schedule's). Output: rule_at_B30000.txt.

    python docs/reproductions/full/cpu-reduced/batch-sensitivity/rule_at_B30000.py
"""
import glob
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def first_stop(blocks, se_divisor, start=3000, every=50, tol=0.01, z=2.0):
    for t in range(start, 10 * len(blocks) + 1, every):
        w = max(int(0.1 * t), 200)
        w -= w % 20
        b1, b2 = np.split(blocks[(t - w) // 10: t // 10], 2)
        rel = (b1.mean() - b2.mean()) / b2.mean()
        se = np.sqrt(b1.var(ddof=1) / b1.size + b2.var(ddof=1) / b2.size) / b2.mean() / se_divisor
        if abs(rel) + z * se < tol:
            return t, rel, se
    return None


def main():
    for path in sorted(glob.glob(os.path.join(HERE, "p[34]*", "cache", "*", "*.json"))):
        d = json.load(open(path))
        cell = f"{os.path.basename(path.split(os.sep + 'cache')[0])} h̃ = {d['config']['activations'][0]}"
        blocks = np.asarray(d["result"]["train_loss_blocks"])
        batch = d["config"]["batch"]
        replays = [(f"B = {batch}, as run", 1.0)] + ([("B = 30000 (SE / √(30000/B))", np.sqrt(30000 / batch))]
                                                    if batch < 30000 else [])
        for name, div in replays:
            stop = first_stop(blocks, div)
            print(f"{cell}: {name}: " + ("not stopped within the steps run" if stop is None else
                  f"stops at {stop[0]} steps (change {100 * stop[1]:+.2f}% ± {100 * stop[2]:.2f}%)"))


if __name__ == "__main__":
    main()
