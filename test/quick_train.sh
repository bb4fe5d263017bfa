#!/usr/bin/env bash
# quick_train.sh — make check's two training runs (make test does not run this file: its checks
# are test_cuda_emulated.sh's mode rows and test_comm_modes.sh's, shortened here): the small test
# model (test/testlib.py) trains 6 steps with -c geofp8 on 2 ranks, by the CPU engine and by the
# CUDA engine under dev/emu (build/emu, made by make check), with the same flags:
#   - each run logs 6 finite steps whose loss falls, and refreshes the geometry at steps 1 and 4;
#   - the emulated run's loss is within 2e-2 of the CPU engine's at every step (bf16 compute
#     against fp32: the bound of test_cuda_emulated.sh's FP8 mode rows) and sends the same bytes.
# Prints "PASS name" / "FAIL name: detail" / "SKIP name: why" lines.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP quick_train: mpirun not found"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source test/testlib.sh  # fail, skip, why, small_model
small_model
RUN=("${SMALL[@]}" -b 1 -t 32 -d 64 -x 6 -v 0 -s 0 -n -1 -l 3e-3 -u 2 --seed 1337 --fidelity-every 1
     -c geofp8 --geofp8-layers layers.1.fc1,layers.2.fc2 --geofp8-rank 8 --geofp8-refresh 3)
timeout 300 mpirun --oversubscribe -np 2 ./train_llama_cpu "${RUN[@]}" -o "$TMP/cpu" >"$TMP/cpu.out" 2>&1 ||
    fail quick_train.cpu_runs "$(why "$TMP/cpu.out")"
EMU=$ROOT/build/emu
if [ -x "$EMU/train_llama" ] && [ -f "$EMU/BUILT" ]; then
    (cd "$EMU/src" && timeout 300 mpirun --oversubscribe -np 2 "$EMU/train_llama" "${RUN[@]}" -o "$TMP/emu") >"$TMP/emu.out" 2>&1 ||
        fail quick_train.emulated_runs "$(why "$TMP/emu.out")"
else
    skip quick_train.emulated "no dev/emu build in $EMU (make emu; it needs the CUDA headers and MPI)"
fi
python3 - "$TMP" "$ROOT" <<'PY' || failures=$((failures + 1))
import json, math, os, sys
sys.path.insert(0, sys.argv[2] + "/test")
from testlib import Checks, bound
check = Checks()
def rows(run):
    try:
        return {r["step"]: r for r in map(json.loads, open(f"{sys.argv[1]}/{run}/metrics.jsonl")) if "train_loss" in r}
    except OSError:
        return {}
runs = {"cpu": rows("cpu")}
if os.path.isdir(f"{sys.argv[1]}/emu"):
    runs["emulated"] = rows("emu")
for name, r in runs.items():
    loss = [r[s]["train_loss"] for s in sorted(r)]
    refresh = sorted(s for s in r if r[s].get("geo_refresh") == 1)
    check(f"quick_train.{name}_trains", len(loss) == 6 and all(math.isfinite(x) for x in loss) and loss[-1] < loss[0] and refresh == [1, 4],
          f"{len(loss)} steps, losses {loss}, refresh steps {refresh}")
if "emulated" in runs and len(runs["emulated"]) == 6 and len(runs["cpu"]) == 6:
    g, c = runs["emulated"], runs["cpu"]
    check.failed += not bound("quick_train.emulated_losses_near_cpu",
                              max(abs(g[s]["train_loss"] - c[s]["train_loss"]) / c[s]["train_loss"] for s in c), 2e-2, "max rel diff over 6 steps")
    check("quick_train.emulated_same_bytes_as_cpu", all(g[s]["comm_bytes"] == c[s]["comm_bytes"] for s in c), "comm_bytes differ")
sys.exit(1 if check.failed else 0)
PY
[ "$failures" -eq 0 ]
