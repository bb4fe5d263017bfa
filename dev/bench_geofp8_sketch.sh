#!/usr/bin/env bash
# bench_geofp8_sketch.sh — what sketching every step (--geofp8-ema) costs in the CPU engine: for
# each preset, one rank trains -c geofp8 with every fc1 and fc2 unit on the geometry path, once
# with --geofp8-ema 0 (the sketch only on refresh steps) and once with --geofp8-ema 0.95 (every
# step). On the steps that are not refreshes, the row gives both runs' mean ms per step, the
# sketch's own time (t_sketch_ms of metrics.jsonl: handing each unit's activations to its
# sketch, Y += w hᵀ(hΩ) and tr A) and its share of the step, next to the flop count's share,
# 4·n·d_in·(r+8) per unit against 6·params·n for the step. One row per preset as it completes.
#   bash dev/bench_geofp8_sketch.sh [STEPS]        (default 21: refreshes at steps 1, 11, 21)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${1:-21}
OUT=${OUT:-out/bench_geofp8_sketch}
make -s train_llama_cpu || exit 1
mkdir -p "$OUT"
# preset B T layers
CONFIGS=("tiny 4 256 4" "d12 1 256 12")
echo "| preset | tokens/step | geometry units | ms/step, ema 0 | ms/step, ema 0.95 | sketch ms/step | sketch share | flop share |"
echo "|---|---|---|---|---|---|---|---|"
for c in "${CONFIGS[@]}"; do
    read -r preset B T L <<<"$c"
    layers=$(for ((l = 0; l < L; l++)); do printf "layers.%d.fc1,layers.%d.fc2," "$l" "$l"; done)
    layers=${layers%,}
    for ema in 0 0.95; do
        dir="$OUT/${preset}_ema$ema"
        OMP_WAIT_POLICY=passive ./train_llama_cpu -e "$preset" -b "$B" -t "$T" -x "$STEPS" -v 0 -n -1 -l 1e-3 -u 2 --seed 1337 \
            -c geofp8 --geofp8-layers "$layers" --geofp8-refresh 10 --geofp8-ema "$ema" -o "$dir" --overwrite 1 >"$dir.log" 2>&1 ||
            { echo "| $preset | run failed: $(tail -1 "$dir.log") |"; continue 2; }
    done
    python3 - "$OUT" "$preset" "$B" "$T" "$dir.log" <<'PYEOF'
import json, re, sys
out, preset, B, T, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def rows(ema):
    return {r["step"]: r for r in map(json.loads, open(f"{out}/{preset}_ema{ema}/metrics.jsonl")) if "train_loss" in r}
a, b = rows("0"), rows("0.95")
# steps after the first where the ema-0 run did not sketch (not a refresh step)
steps = [s for s in a if s > 1 and s in b and a[s]["t_sketch_ms"] == 0.0]
mean = lambda v: sum(v) / len(v)
ms_a, ms_b = mean([a[s]["ms"] for s in steps]), mean([b[s]["ms"] for s in steps])
sk = mean([b[s]["t_sketch_ms"] for s in steps])
# the model's shapes from the config table of the log
cfg = open(log).read()
def num(key):
    m = re.search(r"\b" + key + r"=(\d+)", cfg)
    return int(m.group(1)) if m else 0
C, L, FF = num("C"), num("L"), num("FF")
m = re.search(r"parameters\s*\|\s*(\d+)", cfg)
params = int(m.group(1)) if m else 0
n, r = B * T, 32
sketch_flops = 4 * n * L * (C + FF) * (r + 8)
share_f = sketch_flops / (6 * params * n) if params else float("nan")
print(f"| {preset} | {n} | {2 * L} | {ms_a:.1f} | {ms_b:.1f} | {sk:.2f} | {100 * sk / ms_b:.2f}% | {100 * share_f:.2f}% |", flush=True)
PYEOF
done
