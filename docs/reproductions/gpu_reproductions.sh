#!/usr/bin/env bash
# The CCS reproductions at the papers' sizes on a lent GPU (issue 19), resumable across leases.
#
# A lease gives ~15 minutes of device time in all (one command at most 10), less than one full CCS
# grid needs (docs/reproductions/README.md, "What the first GPU session runs"). Every training is
# a cell cached under RUN_DIR/cache/ as it finishes, so a run stopped by the deadline loses only the
# cells in flight: this script builds the package (the build stages of run_gpu_checks.sh), runs
# the ids in IDS with `--full --device cuda` until DEADLINE_S, and packs RUN_DIR (results, figures
# and the cell cache) into one file, $OUT/gpu-repro.tgz, since only a few flat files come back
# from a lease. Next lease: unpack that file into RUN_DIR (git-ignored: out/) on this side, name
# RUN_DIR in the run's `carry`, and run the script again: cached cells are read, not retrained.
#
#   OUT=... IDS="ccs-fig3-5-6" DEADLINE_S=480 bash docs/reproductions/gpu_reproductions.sh
#   SET="--set seeds=1" ...          extra arguments for every id (a different size is another
#                                    configuration: its own folder, RUN_DIR, is then needed)
#   SET_ccs_fig1="--set kernels=exp" extra arguments for one id only (its name with - as _),
#                                    after SET: e.g. a subset of one id's grid
#   DEVICE=cpu BUILD=0 ...           the same bookkeeping without a GPU (what the tests here ran)
# At the end it prints docs/reproductions/summarize_run.py's summary (verdicts, per-panel
# dist(M, I), per-cell steps and convergence), also saved as RUN_DIR/summary.txt.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
RUN_DIR=${RUN_DIR:-$PWD/out/gpu-repro}
IDS=${IDS:-"ccs-fig3-5-6 ccs-fig1 ccs-fig2 ccs-fig4"}
DEVICE=${DEVICE:-cuda}
DEADLINE_S=${DEADLINE_S:-480}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$RUN_DIR"
t_start=$(date +%s)

if [ "${BUILD:-1}" = 1 ]; then
  # versions, `pip install .` with CUDA (sm_90) and the import check: run_gpu_checks.sh's stages
  OUT="$OUT/build" GPU_STAGES="versions build import" bash bench/gpu/run_gpu_checks.sh || exit 1
fi

status=0
for id in $IDS; do
  left=$(( DEADLINE_S - ($(date +%s) - t_start) ))
  if [ "$left" -lt 30 ]; then echo "=== $id skipped (deadline)"; status=1; continue; fi
  echo "=== $id --full --device $DEVICE (limit ${left}s, at +$(( $(date +%s) - t_start ))s)"
  t0=$(date +%s)
  id_set_var="SET_${id//-/_}"
  echo "    python -m lsa_native.cli reproduce $id --full --device $DEVICE --workers 0 --quiet --force --out $RUN_DIR ${SET:-} ${!id_set_var:-}"
  # shellcheck disable=SC2086  # SET holds several arguments
  timed=()  # GNU time where the machine has it (a bare image may not)
  [ -x /usr/bin/time ] && timed=(/usr/bin/time -f "%e s wall, %U s user" -o "$RUN_DIR/$id.time")
  "${timed[@]}" timeout --signal=KILL "$left" "$PY" -m lsa_native.cli reproduce "$id" --full --device "$DEVICE" \
    --workers 0 --quiet --force --out "$RUN_DIR" ${SET:-} ${!id_set_var:-} >"$RUN_DIR/$id.log" 2>&1
  rc=$?
  cells=$(ls "$RUN_DIR/cache/$id" 2>/dev/null | wc -l)
  echo "--- $id: rc=$rc in $(( $(date +%s) - t0 ))s; $cells cells cached"
  tail -n 3 "$RUN_DIR/$id.log"
  # rc 0: PASS, 1: FAIL (a finding to write up), other: stopped (deadline) or broken
  [ "$rc" -gt 1 ] && status=1
done
# the verdicts and the numbers each claim is about (per-panel dist(M, I), per-cell steps), also for
# an id the deadline stopped (from its cached cells): on stdout and into the packed folder
# shellcheck disable=SC2086  # IDS holds several ids
"$PY" docs/reproductions/summarize_run.py "$RUN_DIR" $IDS 2>&1 | tee "$RUN_DIR/summary.txt"
tar czf "$OUT/gpu-repro.tgz" -C "$RUN_DIR" .
echo "=== packed $(du -h "$OUT/gpu-repro.tgz" | cut -f1) into $OUT/gpu-repro.tgz at +$(( $(date +%s) - t_start ))s"
exit "$status"
