#!/usr/bin/env bash
# bench_refresh.sh — what a fresh factor every step (--geofp8-refresh 1) costs against one every
# 50 steps and against plain fp8: the small test model (test/testlib.py), one process, -b 4 -t 64,
# geofp8 on the four fc2 units; mean over steps 5-16 of ms per step and, on the CPU engine, the
# geometry path's own phases: t_sketch_ms (handing the activations to the sketch) and
# t_refresh_ms (the refreshes: sketch fold, Nyström, broadcast, residual carry, p auto). Rows
# print as they complete; the CPU block runs twice (its ms per step is noisy on a shared
# machine: compare the phases, and rows of one block). With EMU=1 it also runs the GPU engine
# under dev/emu, whose ms per step is host time of the emulation, not a GPU figure.
# Usage: bash dev/bench_refresh.sh        (EMU=1 bash dev/bench_refresh.sh: also dev/emu)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
make -s train_llama_cpu || exit 1
read -ra SMALL <<<"$(python3 test/testlib.py --small-model)" || exit 1
FC2=layers.0.fc2,layers.1.fc2,layers.2.fc2,layers.3.fc2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SPECS=("fp8|-c fp8" "geofp8, refresh 50|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 50"
       "geofp8, refresh 1|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 1"
       "geofp8, refresh 1, p auto|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 1 --geofp8-power auto"
       "geofp8, refresh 1, rank full|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 1 --geofp8-rank full")
run() {  # BIN STEPS FLAGS...: one row
    local bin=$1 steps=$2; shift 2
    OMP_NUM_THREADS=1 "$bin" "${SMALL[@]}" -b 4 -t 64 -x "$steps" -v 0 -s 0 -n -1 -u 2 "$@" -o "$TMP/r" >"$TMP/r.out" 2>&1 ||
        { echo "failed: $(tail -1 "$TMP/r.out")"; return; }
    python3 - "$TMP/r/metrics.jsonl" <<'PY'
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if "train_loss" in x][4:]
m = lambda k: sum(x.get(k, 0.0) for x in r) / len(r)
print("| %.1f | %.2f | %.2f |" % (m("ms"), m("t_sketch_ms"), m("t_refresh_ms")), flush=True)
PY
    rm -rf "$TMP/r"
}
echo "CPU engine (train_llama_cpu), small model, 1 process, -b 4 -t 64, steps 5-16"
echo "| run | ms/step | t_sketch_ms | t_refresh_ms |"
echo "|---|---|---|---|"
for rep in 1 2; do
    for spec in "${SPECS[@]}"; do
        # shellcheck disable=SC2086
        printf "| %s (block %d) " "${spec%%|*}" "$rep"; run ./train_llama_cpu 16 ${spec#*|}
    done
done
[ "${EMU:-0}" = 1 ] || exit 0
bash dev/emu/build.sh build/emu >"$TMP/emu.log" 2>&1 || { echo "dev/emu build failed: $(tail -1 "$TMP/emu.log")"; exit 1; }
echo
echo "GPU engine under dev/emu (host time of the emulation, not a GPU figure), steps 5-8"
echo "| run | ms/step | t_sketch_ms, t_refresh_ms: emulated events, not times | |"
echo "|---|---|---|---|"
cd build/emu/src || exit 1
for spec in "${SPECS[@]:0:4}"; do
    # shellcheck disable=SC2086
    printf "| %s " "${spec%%|*}"; run ../train_llama 8 ${spec#*|}
done
