#!/usr/bin/env bash
# geofp8_train_compare.sh — fp32, fp8 and geofp8 variants trained side by side on the tiny preset
# with the bundled data (same seed, data and ranks), then one row per run as it completes: the last
# val loss and its gap to fp32, and for the geofp8 runs the geometry units' mean RelL2 over the
# fidelity steps next to plain fp8's on the same units and steps (fidelity_rel_l2_geo_fp8: the same
# gradient without transform or error feedback), their ratio, and ms per step.
# Usage: bash dev/geofp8_train_compare.sh [RANKS] [STEPS] [OUT]     (defaults: 2 200 out/compare)
#        VARIANTS="name|flags;..." replaces the list of runs below.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RANKS=${1:-2}
STEPS=${2:-200}
OUT=${3:-out/compare}
make -s train_llama_cpu || exit 1
ROOT_FLAG=$([ "$(id -u)" = 0 ] && echo --allow-run-as-root)
COMMON=(-e tiny -b 4 -t 128 -d $((RANKS * 4 * 128)) -x "$STEPS" -l 2e-3 -u 10 -v 50 -m 4 --seed 1337
        --fidelity-every 5 --geofp8-profile-steps 20 --geofp8-refresh 10 -n -1 --overwrite 1)
VARIANTS=${VARIANTS:-"fp32|-c fp32;fp8|-c fp8;geofp8 (paper: p 1)|-c geofp8;geofp8 p auto|-c geofp8 --geofp8-power auto;geofp8 p auto, ema 0.95|-c geofp8 --geofp8-power auto --geofp8-ema 0.95;geofp8 p 0.5, ema 0.95|-c geofp8 --geofp8-power 0.5 --geofp8-ema 0.95"}
mkdir -p "$OUT"
echo "tiny, $RANKS ranks, $STEPS steps, B=4 T=128, lr 2e-3; fidelity every 5 steps; auto layer selection after 20 steps; refresh every 10"
echo "| run | val loss | gap to fp32 | geo RelL2 | fp8 on the same units | ratio | ms/step |"
echo "|---|---|---|---|---|---|---|"
IFS=';' read -ra runs <<<"$VARIANTS"
for v in "${runs[@]}"; do
    name=${v%%|*} flags=${v#*|}
    dir="$OUT/$(echo "$name" | tr -c 'a-zA-Z0-9.\n' '_')"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive mpirun $ROOT_FLAG --oversubscribe -np "$RANKS" ./train_llama_cpu "${COMMON[@]}" $flags \
        -o "$dir" >"$dir.log" 2>&1 || { echo "| $name | failed: $(tail -1 "$dir.log") |"; continue; }
    python3 - "$dir" "$OUT/fp32/metrics.jsonl" "$name" <<'PYEOF'
import json, os, sys
run, base, name = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
val = [r for r in rows if "val_loss" in r]
last = val[-1]["val_loss"] if val else float("nan")
gap = "-"
if os.path.exists(base):
    bval = {r["step"]: r["val_loss"] for r in map(json.loads, open(base)) if "val_loss" in r}
    if val and val[-1]["step"] in bval:
        gap = "%+.2f%%" % (100 * (last / bval[val[-1]["step"]] - 1))
fid = [r for r in rows if r.get("fidelity_rel_l2_geo_fp8") is not None and r.get("fidelity_rel_l2_geo") is not None]
geo = sum(r["fidelity_rel_l2_geo"] for r in fid) / len(fid) if fid else None
fp8 = sum(r["fidelity_rel_l2_geo_fp8"] for r in fid) / len(fid) if fid else None
ms = [r["ms"] for r in rows if "ms" in r][5:]
f = lambda x: "%.3e" % x if x is not None else "-"
print(f"| {name} | {last:.4f} | {gap} | {f(geo)} | {f(fp8)} | {'%.3f' % (geo / fp8) if fid else '-'} | {sum(ms) / max(len(ms), 1):.0f} |",
      flush=True)
PYEOF
done
