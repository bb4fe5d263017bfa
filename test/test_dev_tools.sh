#!/usr/bin/env bash
# test_dev_tools.sh — the dev/cuda tools' command lines (dev/cuda/dev_flags.h; dev_attention reads
# its own), on the binaries make test builds with nvcc (build/dev_*):
#   - a flag a tool does not take (an unknown one, and --small / --compare where the tool has no
#     such path): one line on stderr naming the tool and the flag, with its usage; exit 2; nothing
#     on stdout (no check ran, no device was looked for);
#   - the flags it takes get past the parser: without a CUDA device each tool says SKIP and exits 77
#     (on a machine with one this part is skipped: it would run the whole validation).
cd "$(dirname "$0")/.." || exit 1
source test/testlib.sh  # pass, fail, skip
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# tool, and the flags it takes beyond --validate-only
TOOLS=("adamw --small" "crossentropy --small --compare" "encoder" "geofp8 --small" "global_norm --small --compare"
       "matmul --small --compare" "muon --small --compare" "rmsnorm --small --compare" "rope --small --compare" "swiglu")
if [ ! -x build/dev_rmsnorm ]; then
    echo "SKIP test_dev_tools: no build/dev_* (make test builds them where nvcc is on the PATH)"
    exit 0
fi
no_device=1
{ [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; } && no_device=0

for spec in "${TOOLS[@]}"; do
    read -r op takes <<<"$spec"
    bin=build/dev_$op
    if [ ! -x "$bin" ]; then fail "dev_tools.${op}_built" "$bin is missing"; continue; fi
    refused=(--bogus)
    for f in --small --compare; do [[ " $takes " == *" $f "* ]] || refused+=("$f"); done
    for f in "${refused[@]}"; do
        timeout 60 "$bin" --validate-only "$f" >"$TMP/out" 2>"$TMP/err"; rc=$?
        if [ $rc -eq 2 ] && [ ! -s "$TMP/out" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
           grep -q "^dev_$op: unknown flag '$f'; usage: dev_$op \[--validate-only\]" "$TMP/err"; then
            pass "dev_tools.${op}_refuses_${f#--}"
        else fail "dev_tools.${op}_refuses_${f#--}" "rc=$rc, stdout '$(head -c 200 "$TMP/out")', stderr '$(head -c 300 "$TMP/err")'"; fi
    done
    # the usage line names exactly the flags the tool takes
    want="usage: dev_$op [--validate-only]"
    for f in $takes; do want="$want [$f]"; done
    if grep -qxF -- "dev_$op: unknown flag '--bogus'; $want" <("$bin" --bogus 2>&1); then pass "dev_tools.${op}_usage_names_its_flags"
    else fail "dev_tools.${op}_usage_names_its_flags" "expected '$want', got '$("$bin" --bogus 2>&1 | head -c 300)'"; fi
    if [ $no_device = 1 ]; then
        timeout 60 "$bin" --validate-only $takes >"$TMP/out" 2>&1; rc=$?
        if [ $rc -eq 77 ] && grep -q "^SKIP .*no CUDA device" "$TMP/out"; then pass "dev_tools.${op}_takes_its_flags"
        else fail "dev_tools.${op}_takes_its_flags" "rc=$rc: $(head -c 300 "$TMP/out")"; fi
    fi
done
# dev_attention's own parser refuses the same way (exit 2, a usage line)
timeout 60 build/dev_attention --bogus >"$TMP/out" 2>"$TMP/err"; rc=$?
if [ $rc -eq 2 ] && [ ! -s "$TMP/out" ] && grep -q "^usage: dev_attention " "$TMP/err"; then pass dev_tools.attention_refuses_bogus
else fail dev_tools.attention_refuses_bogus "rc=$rc: $(head -c 300 "$TMP/err")"; fi
[ $no_device = 0 ] && skip dev_tools.takes_their_flags "a CUDA device is here: the tools would run their whole validation"
exit $((failures > 0))
