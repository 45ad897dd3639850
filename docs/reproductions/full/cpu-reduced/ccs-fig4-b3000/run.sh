#!/bin/bash
# ccs-fig4 at the paper's grid, B = 3000, one seed; composite first, then linear, exp, then all (reads the cache)
# The record of this session's run, made portable: run from anywhere in a checkout, with the
# package importable (a venv activated); OUT is the run folder (its cell cache is shared by the calls).
cd "$(git rev-parse --show-toplevel)"
export PYTHONPATH=python OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
OUT=${OUT:-out/fig4-b3000}
for t in composite linear exp; do
  echo "=== targets=$t start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -v nice -n 10 python -m lsa_native.cli reproduce ccs-fig4 --full --workers 0 --threads 1 --quiet --force \
    --out $OUT --set batch=3000 --set seeds=1 --set targets=$t 2>&1
  echo "=== targets=$t end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "=== all start $(date -u +%FT%TZ)"
nice -n 10 python -m lsa_native.cli reproduce ccs-fig4 --full --workers 0 --threads 1 --quiet --force \
    --out $OUT --set batch=3000 --set seeds=1 2>&1
echo "=== all end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
