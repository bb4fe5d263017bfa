#!/usr/bin/env bash
# Regenerates every committed fixture in test/fixtures from the PyTorch / Hugging Face oracles.
# Generated with torch 2.15.0 and transformers 5.24.0 (CPU), Python 3.11, numpy.
# Every script draws its inputs from numpy.random.default_rng(seed); the seeds are fixed here.
set -euo pipefail
cd "$(dirname "$0")/../.."

python test/reference/make_layer_fixtures.py --seed 1234 --out test/fixtures/layers.fix
python test/reference/make_model_fixtures.py --seed 4321 --out test/fixtures/model.fix \
    --checkpoint test/fixtures/model_small.bin
python test/reference/make_optim_fixtures.py --seed 2718 --out test/fixtures/optim.fix
# ml_dtypes 0.6.0 (numpy only, no torch)
python test/reference/make_fp8_fixtures.py --seed 8080 --out test/fixtures/fp8.fix
