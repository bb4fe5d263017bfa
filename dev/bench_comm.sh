#!/usr/bin/env bash
# bench_comm.sh — every gradient communication mode of the CPU engine on N MPI ranks of one
# machine, in one run: ms per step and bytes per step relative to fp32, and the logged RelL2 /
# Cos of the communicated gradient (all units, and the units geofp8 selected) against the fp32
# all-reduce. The ranks share one machine, so the communication is shared memory: the ms column
# shows the cost of the codec, not of a network.
#   bash dev/bench_comm.sh [RANKS] [STEPS]        (defaults 4 and 40)
set -u
cd "$(dirname "$0")/.." || exit 1
N=${1:-4}
STEPS=${2:-40}
OUT=${OUT:-out/bench_comm_np$N}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make --no-print-directory train_llama_cpu >/dev/null || exit 1
RUN=(-e tiny -b 2 -t 128 -x "$STEPS" -v 0 -l 2e-3 -u 5 --fidelity-every 2 --geofp8-profile-steps 10 --geofp8-refresh 10 -n -1)
MODES=("fp32" "bf16" "fp8" "fp8block" "geofp8" "kfac" "fp8 --fp8-reduce twophase" "geofp8 --fp8-reduce twophase")
mkdir -p "$OUT"
for mode in "${MODES[@]}"; do
    t=$(echo "$mode" | sed 's/ --fp8-reduce twophase/_twophase/')
    rm -rf "${OUT:?}/$t"
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np "$N" ./train_llama_cpu "${RUN[@]}" -c $mode -o "$OUT/$t" >"$OUT/$t.log" 2>&1 || echo "run $t failed: see $OUT/$t.log"
done
python3 - "$OUT" "$N" <<'EOF'
import json, os, sys
out, n = sys.argv[1], sys.argv[2]
def rows(t):
    p = f"{out}/{t}/metrics.jsonl"
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
sel = []
p = f"{out}/geofp8/geofp8_layers.txt"
if os.path.exists(p):
    sel = [l.split()[0] for l in open(p)]
tags = ["fp32", "bf16", "fp8", "fp8block", "geofp8", "kfac", "fp8_twophase", "geofp8_twophase"]
base = rows("fp32")
ms32 = sum(r["ms"] for r in base[1:] if "ms" in r) / max(1, len([r for r in base[1:] if "ms" in r]))
def typical_bytes(rs):  # the median step: refresh steps also send the sketches
    v = sorted(r["comm_bytes"] for r in rs if "comm_bytes" in r)
    return v[len(v) // 2] if v else float("nan")
b32 = typical_bytes(base)
print(f"{n} ranks, tiny preset, B=2 T=128 per rank; geofp8 selected: {', '.join(sel) or 'none'}")
print("| mode | ms/step | vs fp32 | bytes/step | vs fp32 | RelL2 all | Cos all | RelL2 selected units (steps 11+) |")
print("|---|---|---|---|---|---|---|---|")
for t in tags:
    rs = rows(t)
    if not rs:
        print(f"| {t} | failed | | | | | | |"); continue
    st = [r for r in rs[1:] if "ms" in r]
    ms = sum(r["ms"] for r in st) / len(st)
    b = typical_bytes(rs)
    fid = [r for r in rs if "fidelity_rel_l2" in r]
    rel = sum(r["fidelity_rel_l2"] for r in fid) / len(fid) if fid else float("nan")
    cos = sum(r["fidelity_cos"] for r in fid) / len(fid) if fid else float("nan")
    late = [r for r in fid if r["step"] > 10]
    rs_sel = sum(r["fidelity_units"][u][0] for r in late for u in sel) / (len(late) * len(sel)) if sel and late else float("nan")
    print(f"| {t} | {ms:.1f} | {ms / ms32:.2f} | {b:.0f} | {b / b32:.4f} | {rel:.3e} | {cos:.6f} | {rs_sel:.3e} |")
EOF
