#!/bin/bash
# fit's Python work per step, before vs after a change (bench/README.md, "fit's loop around the
# kernel"): ROUNDS rounds, each running `report_fit.py --noop-min` (no-op kernels, CPU time,
# minimum of 15 runs of 2000 steps) for every case group once with BEFORE's and once with AFTER's
# python/ tree, in separate processes, alternating; the same bench script (this tree's) both sides.
# Then: python bench/report_fit.py --summarize OUT
#   usage: bench/fit_noop_rounds.sh BEFORE_PYTHON_DIR AFTER_PYTHON_DIR OUT [ROUNDS]
set -euo pipefail
before=$1 after=$2 out=$3 rounds=${4:-5}
bench=$(dirname "$0")/report_fit.py
: > "$out"
for round in $(seq "$rounds"); do
  for group in "--only lsa" "--only lsa --record-every 10" "--only multihead" "--only kernel"; do
    for side in before after; do
      if [ $side = before ]; then path=$before; else path=$after; fi
      # shellcheck disable=SC2086
      PYTHONPATH=$path OPENBLAS_NUM_THREADS=1 python "$bench" --noop-min $group --steps 2000 \
        --repeats 15 | sed "s/^/$side|/" >> "$out"
    done
  done
done
