#!/bin/bash
# after the linear target: the exp target (4(b)) at L = 1, 2, 3 only (the session's deadline), same run folder
# The record of this session's run, made portable: run from anywhere in a checkout, with the
# package importable (a venv activated); OUT is the run folder (its cell cache is shared by the calls).
cd "$(git rev-parse --show-toplevel)"
export PYTHONPATH=python OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
OUT=${OUT:-out/fig4-b3000}
echo "=== targets=linear end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p $OUT-linear_out && cp $OUT/ccs-fig4_result.json $OUT/ccs-fig4_table.csv $OUT/ccs-fig4_figure.png $OUT/index.md $OUT-linear_out/ 2>/dev/null
echo "=== targets=exp depths=1,2,3 start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -v nice -n 10 python -m lsa_native.cli reproduce ccs-fig4 --full --workers 0 --threads 1 --quiet --force \
    --out $OUT --set batch=3000 --set seeds=1 --set targets=exp --set depths=1,2,3 2>&1
echo "=== targets=exp end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
