#!/usr/bin/env bash
# bench_refresh.sh — what a GeoFP8 refresh costs on the CPU engine: the small test model
# (test/testlib.py), one process, -b 4 -t 64, geofp8 on the four fc2 units; means over steps 5-16.
# Columns: ms per step; with a refresh every 5 steps, the refresh steps' ms (6, 11, 16) against the
# others' and their ratio; the geometry path's own phases: t_sketch_ms (handing the activations to
# the sketch), t_refresh_ms (the refreshes: sketch fold, Nyström, broadcast, residual carry, p
# auto) and t_omega_ms (what the step waited for its test matrices, built ahead on host threads).
# Rows print as they complete; the CPU block runs twice (its ms per step is noisy on a shared
# machine: compare the phases, and rows of one block). BIN=path runs another build (e.g. an older
# commit's train_llama_cpu) for a before/after. With EMU=1 it also runs the GPU engine under
# dev/emu, whose ms per step is host time of the emulation, not a GPU figure.
# Usage: bash dev/bench_refresh.sh        (EMU=1 bash dev/bench_refresh.sh: also dev/emu)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-./train_llama_cpu}
[ "$BIN" != ./train_llama_cpu ] || make -s train_llama_cpu || exit 1
read -ra SMALL <<<"$(python3 test/testlib.py --small-model)" || exit 1
FC2=layers.0.fc2,layers.1.fc2,layers.2.fc2,layers.3.fc2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SPECS=("fp8|-c fp8" "geofp8, refresh 50|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 50"
       "geofp8, refresh 5|-c geofp8 --geofp8-layers $FC2 --geofp8-refresh 5"
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
m = lambda rows, k: sum(x.get(k, 0.0) for x in rows) / len(rows) if rows else float("nan")
on = [x for x in r if x["step"] in (6, 11, 16)]
off = [x for x in r if x["step"] not in (6, 11, 16)]
split = "| %.1f | %.1f | %.2fx " % (m(on, "ms"), m(off, "ms"), m(on, "ms") / m(off, "ms")) if on and off else "| | | "
print("| %.1f %s| %.2f | %.2f | %.3f |" % (m(r, "ms"), split, m(r, "t_sketch_ms"), m(r, "t_refresh_ms"), m(r, "t_omega_ms")), flush=True)
PY
    rm -rf "$TMP/r"
}
echo "CPU engine (train_llama_cpu), small model, 1 process, -b 4 -t 64, steps 5-16"
echo "| run | ms/step | refresh steps | other steps | ratio | t_sketch_ms | t_refresh_ms | t_omega_ms |"
echo "|---|---|---|---|---|---|---|---|"
for rep in 1 2; do
    for spec in "${SPECS[@]}"; do
        # shellcheck disable=SC2086
        printf "| %s (block %d) " "${spec%%|*}" "$rep"; run "$BIN" 16 ${spec#*|}
    done
done
[ "${EMU:-0}" = 1 ] || exit 0
bash dev/emu/build.sh build/emu >"$TMP/emu.log" 2>&1 || { echo "dev/emu build failed: $(tail -1 "$TMP/emu.log")"; exit 1; }
echo
echo "GPU engine under dev/emu (host time of the emulation, not a GPU figure), steps 5-8"
echo "| run | ms/step | refresh steps | other steps | ratio | t_sketch_ms | t_refresh_ms | t_omega_ms |"
echo "|---|---|---|---|---|---|---|---|"
cd build/emu/src || exit 1
for spec in "${SPECS[@]:0:4}"; do
    # shellcheck disable=SC2086
    printf "| %s " "${spec%%|*}"; run ../train_llama 8 ${spec#*|}
done
