#!/usr/bin/env bash
# dev/bench_flash_commits.sh — each change to the flash kernels since they were last timed on a GPU,
# timed on its own: dev_attention as built at every commit that changed the kernels' code, each
# binary's --bench-only on one GPU in turn, a few rounds. One row per commit, shape and direction:
# the median time, its speed-up over the commit before, and what that commit's dev/flash_model.py
# modelled (the gain it expected before any measurement). The first commit is the last one timed
# (c950ed2, dev/gpu_results_c950ed2.txt), so every ratio comes from one GPU in one run.
# Usage:
#   bash dev/bench_flash_commits.sh --list [REV...]         the commits --build would take, and
#                                                            each one left out with why
#   bash dev/bench_flash_commits.sh --build DIR [REV...]    here (nvcc, no GPU): DIR/INDEX (the
#       commits in order, the -arch each built with, each one's subject) and per commit
#       DIR/<commit>.gz (its dev_attention, gzip, about 0.75 MB) and DIR/<commit>.model.csv (its
#       dev/flash_model.py --csv); each commit builds with its own make rule (about 15 s of nvcc)
#   bash dev/bench_flash_commits.sh [--rounds N] [--budget S] DIR    on the GPU: each binary's
#       --bench-only N times (default 2), the order rotated each round; a line per run as it ends,
#       then the table. No round starts once S seconds (default 180) are spent or would be, no run
#       once they are spent; a run stops after 60 s (fewer where fewer are left), and a commit
#       whose run failed or hung is not run again
#   REV...: commits (default: c950ed2, then each later commit of HEAD's history that changed
#       llmc/flash_*.cuh or llmc/mma.cuh in more than comments, spacing and the code only dev/emu
#       compiles). The working tree's
#       uncommitted changes are not built.
# On the GPU: carry DIR and the bundle (make gpu-bundle; its gpu_check.sh --env finds the CUDA
# libraries), then: bash dev/bench_flash_commits.sh build/flash-commits
# Environment: OUT a folder that gets bench_flash_commits.csv (variant,round,shape,B,T,NH,HS,
# direction,ms,tflops: dev/flash_measured.csv's columns, round for call), the table
# (bench_flash_commits.txt), both after every round, and the logs (bench_flash_commits_logs.tar.gz);
# NVCC and GPU_ARCH (--build) as make takes them.
# Exit status: 0 every run passed, 1 bad usage or a failed build or run, 77 no CUDA device.
set -u
export LC_ALL=C
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SELF_DIR/.." && pwd)
LAST_MEASURED=c950ed2  # the last commit whose flash kernels were timed on a GPU
KERNEL_FILES=(llmc/flash_common.cuh llmc/flash_forward.cuh llmc/flash_backward.cuh llmc/flash_forward_sm90.cuh llmc/flash_backward_sm90.cuh
              llmc/flash_attention.cuh llmc/mma.cuh)
# commits whose flash kernels compile to the machine code of the commit before them (every flash
# kernel's cuobjdump -sass, sm_90a, compared when they were committed): timing them would repeat
# that commit. 4967156: the wgmma backward's Sᵀ and dPᵀ loops as one lambda; 99357a4: the wgmma
# kernels' SKIP argument (dev_attention --ablate), 0 in every launch the timings make.
SAME_CODE=(4967156 99357a4)

die() { echo "bench_flash_commits: $*" >&2; exit 1; }

ACTION=run DIR="" ROUNDS=2 BUDGET=180 REVS=()
while [ $# -gt 0 ]; do
    case $1 in
        --list) ACTION=list; shift ;;
        --build) [ $# -ge 2 ] || die "--build: expected a folder after the flag (hint: --build build/flash-commits)"
                 ACTION=build; DIR=$2; shift 2 ;;
        --rounds) [ $# -ge 2 ] || die "--rounds: expected a count after the flag"
                  [[ $2 =~ ^[1-9][0-9]?$ ]] || die "--rounds: expected a whole number from 1 to 99, found '$2'"
                  ROUNDS=$2; shift 2 ;;
        --budget) [ $# -ge 2 ] || die "--budget: expected seconds after the flag"
                  [[ $2 =~ ^[1-9][0-9]{0,4}$ ]] || die "--budget: expected whole seconds from 1 to 99999, found '$2'"
                  BUDGET=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown flag '$1' (expected --list, --build DIR, --rounds N, --budget S or --help)" ;;
        *) if [ "$ACTION" = run ] && [ -z "$DIR" ]; then DIR=$1; else REVS+=("$1"); fi; shift ;;
    esac
done

# ---------------------------------------------------------------------------------------------
# here: which commits, and their builds

# does commit C change the kernel files against its parent in more than comments, spacing and the
# dev/emu branches (#elif defined(EMU_WARP_MMA) up to the next #elif, #else or #endif, which nvcc
# never compiles)?
strip_comments() {
    gcc -fpreprocessed -dD -E -P -x c++ - 2>/dev/null |
        awk '/^[ \t]*#[ \t]*elif[ \t]+defined[ \t]*\([ \t]*EMU_WARP_MMA[ \t]*\)/ { emu = 1; next }
             emu && /^[ \t]*#[ \t]*(elif|else|endif)/ { emu = 0 }
             !emu' | tr -s ' \t\n' ' '
}
changes_code() {
    local f
    for f in "${KERNEL_FILES[@]}"; do
        [ "$(git -C "$ROOT" show "$1^:$f" 2>/dev/null | strip_comments | md5sum)" = \
          "$(git -C "$ROOT" show "$1:$f" 2>/dev/null | strip_comments | md5sum)" ] || return 0
    done
    return 1
}
# the commits, one short hash a line, oldest first; what is left out goes to stderr with why
commits() {
    git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || die "$ROOT is not a git checkout (--list and --build read its history)"
    command -v gcc >/dev/null || die "gcc not found (it strips the comments to tell a code change from a comment change)"
    if [ ${#REVS[@]} -gt 0 ]; then
        local r c
        for r in "${REVS[@]}"; do
            c=$(git -C "$ROOT" rev-parse --short=7 --verify --quiet "$r^{commit}") || die "'$r' is not a commit of $ROOT"
            echo "$c"
        done
        return
    fi
    git -C "$ROOT" rev-parse --verify --quiet "$LAST_MEASURED^{commit}" >/dev/null ||
        die "$LAST_MEASURED (the last commit timed on a GPU) is not in this checkout's history (a shallow clone? git fetch --unshallow, or name the commits)"
    git -C "$ROOT" rev-parse --short=7 "$LAST_MEASURED"
    local c
    for c in $(git -C "$ROOT" rev-list --reverse "$LAST_MEASURED..HEAD" -- "${KERNEL_FILES[@]}"); do
        if [[ " ${SAME_CODE[*]} " == *" ${c:0:7} "* ]]; then
            echo "left out: $(git -C "$ROOT" log -1 --format='%h %s' "$c" | cut -c1-100) (the machine code of the commit before)" >&2
        elif changes_code "$c"; then git -C "$ROOT" rev-parse --short=7 "$c"
        else echo "left out: $(git -C "$ROOT" log -1 --format='%h %s' "$c" | cut -c1-100) (comments, spacing or dev/emu branches only)" >&2; fi
    done
}

if [ "$ACTION" = list ]; then
    list=$(commits) || exit 1
    for c in $list; do echo "$(git -C "$ROOT" log -1 --format='%h %ad %s' --date=format:%Y-%m-%dT%H:%M "$c" | cut -c1-120)"; done
    exit 0
fi

if [ "$ACTION" = build ]; then
    case $DIR in ''|/) die "--build: expected a folder, found '$DIR'" ;; esac
    [ -e "$DIR" ] && [ ! -d "$DIR" ] && die "--build: '$DIR' exists and is not a folder"
    # an earlier --build's folder is replaced; any other folder with files in it is left alone
    if [ -d "$DIR" ] && [ ! -f "$DIR/INDEX" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
        die "--build: '$DIR' holds files and no INDEX (expected a new folder or an earlier --build's, which is replaced)"
    fi
    list=$(commits) || exit 1
    list=$(echo "$list" | awk '!seen[$0]++')  # a commit named twice is built once
    n=$(echo "$list" | wc -w)
    mkdir -p "$(dirname "$DIR")" && tmp=$(mktemp -d "$(dirname "$DIR")/.bench_flash_commits.XXXXXX") && chmod 755 "$tmp" && mkdir "$tmp/trees" ||
        die "--build: cannot make a folder beside '$DIR'"
    trap 'rm -rf "$tmp"' EXIT
    echo "bench_flash_commits: building dev_attention at $n commits into $DIR (two at a time)"
    # build_one C: its tree from git archive, make's own rule, the gzipped binary and the model's rows
    build_one() {
        local c=$1 tree=$tmp/trees/$1 arch
        mkdir -p "$tree" && git -C "$ROOT" archive "$c" | tar -x -C "$tree" || { echo "git archive $c failed" >"$tmp/$c.err"; return 1; }
        if ! make -C "$tree" --no-print-directory build/dev_attention >"$tmp/$c.build.log" 2>&1; then
            grep -v -- ' -o build/dev_attention ' "$tmp/$c.build.log" | tail -2 >"$tmp/$c.err"; return 1  # its errors, not the command
        fi
        arch=$(grep -o -m1 -- '-arch=[a-z0-9_]*' "$tmp/$c.build.log"); echo "${arch#-arch=}" >"$tmp/$c.arch"
        gzip -9c "$tree/build/dev_attention" >"$tmp/$c.gz" || { echo "gzip of its dev_attention failed" >"$tmp/$c.err"; return 1; }
        if [ -f "$tree/dev/flash_model.py" ]; then
            (cd "$tree" && timeout 120 python3 dev/flash_model.py --csv) >"$tmp/$c.model.csv" 2>"$tmp/$c.model.err" || rm -f "$tmp/$c.model.csv"
        fi
        rm -rf "$tree"
    }
    for c in $list; do
        build_one "$c" &
        while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
    done
    wait
    bad=""
    for c in $list; do
        if [ ! -e "$tmp/$c.err" ] && [ -s "$tmp/$c.gz" ]; then
            echo "  $c built ($(cat "$tmp/$c.arch"), $(($(stat -c %s "$tmp/$c.gz") / 1024)) KiB gzipped$([ -f "$tmp/$c.model.csv" ] || echo ', no model rows'))"
        else bad="$bad $c: $(tr '\n' ' ' <"$tmp/$c.err" 2>/dev/null | cut -c1-300);"; fi
    done
    [ -z "$bad" ] || die "--build: failed:$bad nothing written to $DIR"
    for c in $list; do
        printf '%s %s %s\n' "$c" "$(cat "$tmp/$c.arch")" "$(git -C "$ROOT" log -1 --format=%s "$c" | cut -c1-100)"
    done >"$tmp/INDEX"
    rm -rf "$tmp/trees" "$tmp"/*.err "$tmp"/*.arch "$tmp"/*.log "$tmp"/*.model.err
    rm -rf "$DIR" && mv "$tmp" "$DIR" || die "--build: cannot move $tmp to $DIR"
    trap - EXIT
    echo "bench_flash_commits: $DIR, $n commits, $(du -sk "$DIR" | cut -f1) KiB; on the GPU: bash dev/bench_flash_commits.sh $DIR"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# on the GPU: every binary, round by round, then the table

[ -n "$DIR" ] || die "expected the folder --build made (hint: bash dev/bench_flash_commits.sh build/flash-commits)"
[ ${#REVS[@]} -eq 0 ] || die "unexpected argument '${REVS[0]}' after $DIR (the commits are the folder's INDEX)"
[ -f "$DIR/INDEX" ] || die "$DIR/INDEX not found (expected a folder made by --build)"
mapfile -t ORDER < <(awk 'NF >= 2 { print $1 }' "$DIR/INDEX")
[ ${#ORDER[@]} -gt 0 ] || die "$DIR/INDEX lists no commit"
for c in "${ORDER[@]}"; do [[ $c =~ ^[0-9a-f]{7,40}$ ]] || die "$DIR/INDEX: expected a commit's hash first on each line, found '$c'"; done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for c in "${ORDER[@]}"; do
    [ -f "$DIR/$c.gz" ] || die "$DIR/$c.gz not found (INDEX lists $c; hint: --build again)"
    mkdir -p "$WORK/$c" && gzip -dc "$DIR/$c.gz" >"$WORK/$c/dev_attention" 2>/dev/null || die "$DIR/$c.gz: not a gzip file"
    chmod +x "$WORK/$c/dev_attention"
done
# the CUDA libraries: where they do not load as they are, gpu_check.sh --env finds them
first=$WORK/${ORDER[0]}/dev_attention
if ldd "$first" 2>/dev/null | grep -q "not found"; then
    for g in "$ROOT/build/gpu-bundle/gpu_check.sh" "$ROOT/dev/gpu_check.sh"; do
        [ -f "$g" ] || continue
        eval "$(GPU_CHECK_BIN=$WORK/${ORDER[0]} bash "$g" --env 2>/dev/null)"
        break
    done
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)
else gpu="(no nvidia-smi)"; fi
CSV=$WORK/bench_flash_commits.csv TABLE=$WORK/bench_flash_commits.txt
echo "variant,round,shape,B,T,NH,HS,direction,ms,tflops" >"$CSV"
out() { echo "$1"; echo "$1" >>"$TABLE"; }
save() { if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$WORK"/*.csv "$WORK"/*.txt "$OUT/" 2>/dev/null; fi; }
out "# dev/bench_flash_commits.sh on $gpu, $(date -u +%Y-%m-%dT%H:%MZ): ${#ORDER[@]} commits of $DIR, $ROUNDS round(s), each run dev_attention --bench-only (median of 10 launches after 2 warm-up)"

# bench_rows C ROUND LOG: the flash rows of a --bench-only log as CSV (B, T, NH, HS from the
# forward line; the backward line follows it at the same shape); the wgmma kernels' lines (flash_sm90,
# at the commits that have them) as directions forward_sm90 and backward_sm90, dev/flash_model.py's
bench_rows() {
    awk -v c="$1" -v r="$2" '$1 == "bench" && ($3 == "flash" || $3 == "flash_sm90") && ($4 == "forward" || $4 == "backward") {
        if ($4 == "forward") { B = T = NH = HS = ""
            for (i = 5; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "B") B = kv[2]; if (kv[1] == "T") T = kv[2]; if (kv[1] == "NH") NH = kv[2]; if (kv[1] == "HS") HS = kv[2] } }
        ms = tf = ""
        for (i = 5; i <= NF; i++) { if ($i == "ms" && ms == "") ms = $(i - 1); if ($i == "TFLOP/s" && tf == "") tf = $(i - 1) }
        if (ms != "" && tf != "") printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", c, r, $2, B, T, NH, HS, $4 ($3 == "flash_sm90" ? "_sm90" : ""), ms, tf
    }' "$3"
}

# a run's limit: RUN_LIMIT seconds (a run takes a few), less where the budget has less left; a
# commit that failed or hung once is not run again (a hang would cost its limit every round)
RUN_LIMIT=60
t0=$SECONDS fail=0 rounds_done=0 longest=0 spent=0
declare -A FAILED
for ((r = 1; r <= ROUNDS && !spent; r++)); do
    if [ $((SECONDS - t0 + longest * ${#ORDER[@]})) -gt "$BUDGET" ] && [ $r -gt 1 ]; then
        out "# round $r not started: $((SECONDS - t0)) s spent, a round takes about $((longest * ${#ORDER[@]})) s (--budget $BUDGET)"; break
    fi
    for ((k = 0; k < ${#ORDER[@]}; k++)); do
        c=${ORDER[$(((k + r - 1) % ${#ORDER[@]}))]}
        [ -n "${FAILED[$c]:-}" ] && continue
        left=$((BUDGET - (SECONDS - t0)))
        if [ "$left" -lt 5 ]; then out "# round $r stopped before $c: the budget is spent (--budget $BUDGET)"; spent=1; break; fi
        limit=$((left < RUN_LIMIT ? left : RUN_LIMIT))
        log=$WORK/$c.round$r.log s0=$SECONDS
        timeout -k 5 "$limit" "$WORK/$c/dev_attention" --bench-only >"$log" 2>&1 </dev/null
        rc=$?
        [ $((SECONDS - s0)) -gt "$longest" ] && longest=$((SECONDS - s0))
        if [ $rc -eq 77 ]; then echo "SKIP bench_flash_commits: no CUDA device ($(grep -m1 '^SKIP' "$log" | cut -c1-160))"; exit 77; fi
        rows=$(bench_rows "$c" "$r" "$log")
        if [ $rc -ne 0 ] || [ -z "$rows" ]; then
            fail=1 FAILED[$c]=1
            out "| FAIL round $r $c: exit $rc$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo " (timeout $limit s)"); $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200) (not run again)"
            continue
        fi
        echo "$rows" >>"$CSV"
        out "# round $r $c ($((SECONDS - s0)) s):$(echo "$rows" | awk -F, '{ printf " %s %s %s ms", $3, substr($8, 1, 3), $9 }')"
    done
    [ "$spent" = 0 ] && rounds_done=$r
    save
done

# the table: per commit, shape and direction the median over the rounds, its spread, the speed-up
# over the commit before (its ms / this one's: above 1 faster), and the model's ms at that commit
# and its speed-up likewise
models=$(for c in "${ORDER[@]}"; do [ -f "$DIR/$c.model.csv" ] && echo "$c $DIR/$c.model.csv"; done)
out "$(printf '| %-7s | %-11s | %-8s | %9s | %6s | %7s | %8s | %9s | %8s | %s' commit shape direction 'ms' spread TFLOP/s '× before' 'model ms' '× before' 'change (INDEX)')"
awk -F, -v order="${ORDER[*]}" -v models="$models" -v index_file="$DIR/INDEX" '
    function median(list,   v, n, i, j, t) {
        n = split(list, v, " ")
        for (i = 2; i <= n; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] + 0 > t + 0; j--) v[j + 1] = v[j]; v[j + 1] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    BEGIN {
        nc = split(order, C, " ")
        while ((getline line < index_file) > 0) { split(line, w, " "); sub(/^[^ ]+ [^ ]+ /, "", line); subj[w[1]] = line }
        nm = split(models, M, "\n")
        for (i = 1; i <= nm; i++) {
            split(M[i], cm, " "); f = cm[2]; hdr = 1
            while ((getline line < f) > 0) {
                n = split(line, x, ",")
                if (hdr) { for (j = 1; j <= n; j++) col[x[j]] = j; hdr = 0; continue }
                if (("shape" in col) && ("direction" in col) && ("ms" in col)) model[cm[1], x[col["shape"]], x[col["direction"]]] = x[col["ms"]]
            }
            close(f); delete col
        }
    }
    NR > 1 { key = $1 SUBSEP $3 SUBSEP $8; ms[key] = ms[key] " " $9; flops[$3, $8] = $9 * $10
             if (!(($3, $8) in seen)) { seen[$3, $8] = 1; S[++ns] = $3 SUBSEP $8 } }
    END {
        for (s = 1; s <= ns; s++) {
            split(S[s], sd, SUBSEP); prev = ""; prevm = ""; started = 0
            for (i = 1; i <= nc; i++) {
                c = C[i]; key = c SUBSEP sd[1] SUBSEP sd[2]
                if (!(key in ms) && !started) continue  # a commit before the kernel (flash_sm90) existed
                started = 1
                if (!(key in ms)) { printf "| %-7s | %-11s | %-8s | %9s | %6s | %7s | %8s | %9s | %8s | %s\n", c, sd[1], sd[2], "no run", "", "", "", "", "", subj[c]; prev = ""; continue }
                n = split(ms[key], v, " "); lo = hi = v[1]
                for (j = 2; j <= n; j++) { if (v[j] + 0 < lo + 0) lo = v[j]; if (v[j] + 0 > hi + 0) hi = v[j] }
                med = median(ms[key]); m = model[c, sd[1], sd[2]]
                printf "| %-7s | %-11s | %-8s | %9.4f | %5.1f%% | %7.1f | %8s | %9s | %8s | %s\n", c, sd[1], sd[2], med,
                       100 * (hi - lo) / med, flops[sd[1], sd[2]] / med,
                       prev == "" ? "" : sprintf("%.3f", prev / med), m == "" ? "n/a" : sprintf("%.4f", m),
                       (prevm == "" || m == "") ? "" : sprintf("%.3f", prevm / m), substr(subj[c], 1, 70)
                prev = med; prevm = m
            }
        }
    }' "$CSV" | while IFS= read -r line; do out "$line"; done
out "# $((SECONDS - t0)) s, $rounds_done round(s); × before: the commit before's ms / this one's (above 1 faster); spread: (slowest - fastest) / median over the rounds; model: dev/flash_model.py --csv as of that commit; $([ $fail = 0 ] && echo 'every run passed' || echo 'FAILED runs above')"
if [ -n "${OUT:-}" ]; then save; (cd "$WORK" && tar -czf "$OUT/bench_flash_commits_logs.tar.gz" ./*.log 2>/dev/null); fi
exit $fail
