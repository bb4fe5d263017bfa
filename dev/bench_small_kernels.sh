#!/usr/bin/env bash
# dev/bench_small_kernels.sh — on a GPU: each reworked small kernel timed against the version it
# replaced, which its dev/cuda program keeps as version 1, at llama300m's (B=4, T=4096) and
# llama600m's (B=4, T=2048) shapes. One table row per kernel and shape, printed as it completes:
#   rmsnorm_backward          dev_rmsnorm --compare   rows, then dweight reading dout and x again -> one
#                                                     pass, dweight partials in shared memory
#   crossentropy_forward_backward  dev_crossentropy --compare   the row read twice -> kept in shared memory
#   rope_rotate               dev_rope --compare      a pair per thread, 64-bit divisions -> 16-byte runs
#   muon_newton_schulz        dev_muon --compare      cuBLAS + 2 copies an iteration -> cuBLASLt ping-pong
#   muon memory passes        dev_muon --compare      a norm pass, tall X transposed -> the norm in the
#                                                     momentum, W's orientation, 16-byte accesses
#   matmul                    dev_matmul --compare    the heuristic's first algorithm -> autotuned (same bits)
#   global_norm_squared       dev_global_norm --compare   a float a step -> 16-byte loads
#   clip + optimizer          dev_global_norm --compare   a clip pass -> the scale read by the update
# Each program first checks its two versions against each other (bitwise, or to its fp32 bound);
# a failed check, a crash or a timeout makes a FAIL row. Meant to take well under 60 s on an H200
# (not yet measured on a GPU).
# Usage: make gpu && bash dev/bench_small_kernels.sh          (binaries from build/gpu)
#        bash build/gpu-bundle/bench_small_kernels.sh          (make gpu-bundle carries it: bin/)
# Environment: BENCH_BIN the folder of the dev_<op> binaries; OUT a folder that gets a copy of the
# table (bench_small_kernels.txt) and the programs' logs.
# Exit status: 0 every row ran and its checks passed, 1 something failed, 77 no CUDA device.
set -u
export LC_ALL=C
DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$DIR/BUNDLE" ]; then BIN_DEFAULT=$DIR/bin; GPU_CHECK=$DIR/gpu_check.sh
else BIN_DEFAULT=$DIR/../build/gpu; GPU_CHECK=$DIR/gpu_check.sh; fi
BIN=${BENCH_BIN:-$BIN_DEFAULT}
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
for op in rmsnorm crossentropy rope muon matmul global_norm; do
    [ -x "$BIN/dev_$op" ] || { echo "bench_small_kernels: $BIN/dev_$op not found (hint: make gpu, or set BENCH_BIN)" >&2; exit 1; }
done
# the CUDA libraries: where they do not load as they are, gpu_check.sh --env finds them
if ldd "$BIN/dev_matmul" 2>/dev/null | grep -q "not found" && [ -f "$GPU_CHECK" ]; then
    eval "$(bash "$GPU_CHECK" --env 2>/dev/null)"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
else gpu="(no nvidia-smi)"; fi

table=$LOGS/bench_small_kernels.txt
out() { echo "$1"; echo "$1" >>"$table"; }
out "# dev/bench_small_kernels.sh on $gpu, $(date -u +%Y-%m-%dT%H:%MZ); v1 = the version replaced, v2 = llmc/'s (median ms of 20 or 10 runs)"
out "$(printf '| %-26s | %-55s | %9s | %9s | %6s | %s' kernel shape 'v1 ms' 'v2 ms' 'v1/v2' 'what changed')"
fail=0
t0=$SECONDS
for op in rmsnorm crossentropy rope muon matmul global_norm; do
    log=$LOGS/dev_$op.log
    timeout 120 "$BIN/dev_$op" --compare 2>&1 | tee "$log" | while IFS= read -r line; do
        case "$line" in
            "COMPARE "*)
                IFS='|' read -r k shape v1 v2 ratio note <<<"${line#COMPARE }"
                trim() { local x=$1; x=${x#"${x%%[![:space:]]*}"}; echo "${x%"${x##*[![:space:]]}"}"; }
                v1=$(trim "$v1"); v1=${v1#v1 }; v2=$(trim "$v2"); v2=${v2#v2 }
                out "$(printf '| %-26s | %-55s | %9s | %9s | %6s | %s' "$(trim "$k")" "$(trim "$shape")" "${v1% ms}" "${v2% ms}" "$(trim "$ratio")" "$(trim "$note")")" ;;
            "FAIL "*) out "| FAIL $op: ${line#FAIL }" ;;
        esac
    done
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 77 ]; then echo "SKIP bench_small_kernels: no CUDA device"; exit 77; fi
    if [ "$rc" -ne 0 ]; then
        fail=1
        out "| FAIL dev_$op --compare: exit $rc$([ "$rc" -eq 124 ] && echo ' (timeout 120 s)'); $(grep -v '^COMPARE\|^PASS' "$log" | tail -2 | tr '\n' ' ')"
    fi
done
out "# $((SECONDS - t0)) s; $([ $fail = 0 ] && echo 'every check passed' || echo 'FAILED (rows above)')"
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$LOGS"/* "$OUT/"; fi
exit $fail
