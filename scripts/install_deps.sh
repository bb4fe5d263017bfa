#!/usr/bin/env bash
# Installs what building, testing and the demo need, if it is missing: a C++ compiler,
# OpenBLAS (OpenMP build), LAPACKE, Open MPI, python3 and strace (test_faults checks the fsyncs)
# from Debian/Ubuntu packages; requirements.txt's Python packages (numpy, tiktoken, safetensors,
# ml_dtypes, matplotlib, tqdm) and (where torch is installed) lm-eval from PyPI, into $PYTHON
# (default: the first python3 on PATH; tiktoken has no Debian package; pip keeps numpy matched to
# that interpreter).
# --slurm: also Slurm (slurmctld, slurmd, the client commands, the PMIx plugin) and munge, for
# test/test_slurm.sh, which runs the recipes of scripts/slurm/ on a one-node cluster of its own.
# Quiet and quick when everything is there. Needs root (or sudo) only when something is missing.
set -euo pipefail

apt_pkgs=(g++ make libopenblas-openmp-dev liblapacke-dev openmpi-bin libopenmpi-dev python3 python3-pip strace)
for arg in "$@"; do
    case "$arg" in
        --slurm) apt_pkgs+=(slurm-wlm munge) ;;
        *) echo "install_deps: unknown argument '$arg' (expected --slurm or nothing)" >&2; exit 1 ;;
    esac
done
have_python=0
command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1 && have_python=1
pkgs=()
for p in "${apt_pkgs[@]}"; do
    # python3/pip may come from elsewhere (pyenv, conda): then apt need not provide them
    if [ "$have_python" = 1 ] && { [ "$p" = python3 ] || [ "$p" = python3-pip ]; }; then continue; fi
    dpkg -s "$p" >/dev/null 2>&1 || pkgs+=("$p")
done
if [ ${#pkgs[@]} -gt 0 ]; then
    echo "install_deps: installing ${pkgs[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

# the Python packages: requirements.txt, installed into $PYTHON (default: the first python3 on
# PATH) where any is missing; each imports under its own name
PY=${PYTHON:-python3}
REQ="$(dirname "$0")/../requirements.txt"
py_missing=()
while read -r pkg _; do
    [ -z "$pkg" ] && continue
    "$PY" -c "import $pkg" 2>/dev/null || py_missing+=("$pkg")
done < <(sed 's/#.*//' "$REQ")
# lm-eval-harness for scripts/eval_downstream.sh (and its test), where torch is already there: it
# would otherwise pull a torch build of its own
if "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -c "import lm_eval, accelerate" 2>/dev/null || py_missing+=("lm_eval[hf]")
fi
if [ ${#py_missing[@]} -gt 0 ]; then
    echo "install_deps: pip installing ${py_missing[*]} into $("$PY" -c 'import sys; print(sys.executable)') (requirements.txt)"
    "$PY" -m pip install -q "${py_missing[@]}" 2>/dev/null || "$PY" -m pip install -q --break-system-packages "${py_missing[@]}"
fi
exit 0
