# train_llama — build, test, demo.
#   make train_llama_cpu   fp32 CPU reference trainer (OpenMP + OpenBLAS + MPI)
#   make train_llama       CUDA trainer (needs nvcc; sm_90a by default (H100, H200), GPU_ARCH=sm_80 etc.)
#   make test              install missing dependencies, build, run every CPU test (GPU tests skip without a GPU)
#   make test T=cli        the same, then one test (by name: test_cli, cli, test/test_cli.sh)
#   make check             the inner loop (advisory budget 5 minutes): unit tests, test_cli, short CPU and emulated runs
#   make demo              a short training run on the bundled dataset
#   make clean

CXX_MPI    ?= mpicxx
CXXFLAGS   ?= -O3 -march=native -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-function
LDLIBS_CPU  = -lopenblas -llapacke -lm
NVCC       ?= $(firstword $(shell command -v nvcc) $(wildcard /usr/local/cuda/bin/nvcc) nvcc)
GPU_ARCH   ?= sm_90a
BUILD       = build

LLMC_H  = $(wildcard llmc/*.h)
TEST_H  = test/test_util.h test/fixture.h
NPROC  ?= $(shell nproc)

.PHONY: FORCE all deps test test-build check check-build emu testdata test-cpu test-gpu demo clean bench bench-checkpoint fuzz fidelity study

all: train_llama_cpu

deps:
	@bash scripts/install_deps.sh

# --version prints the commit and the compile line: build/commit.txt is rewritten only when the
# commit changes, so a new commit rebuilds the trainers and nothing else does
COMMIT_FILE = $(BUILD)/commit.txt
$(COMMIT_FILE): FORCE
	@mkdir -p $(BUILD); c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); [ "$$(cat $@ 2>/dev/null)" = "$$c" ] || echo "$$c" >$@
FORCE:
version_defs = -DTRAIN_LLAMA_COMMIT='"'"$$(cat $(COMMIT_FILE))"'"' -DTRAIN_LLAMA_BUILD='"$(strip $(1))"'

train_llama_cpu: train_llama_cpu.cpp $(LLMC_H) $(COMMIT_FILE)
	$(CXX_MPI) $(CXXFLAGS) $(call version_defs,$(CXX_MPI) $(CXXFLAGS)) $< -o $@ $(LDLIBS_CPU)

$(BUILD):
	@mkdir -p $(BUILD)


$(BUILD)/test_%: test/test_%.cpp $(LLMC_H) $(TEST_H) | $(BUILD)
	$(CXX_MPI) $(CXXFLAGS) $< -o $@ $(LDLIBS_CPU)

$(BUILD)/test_model: test/test_model.cpp train_llama_cpu.cpp $(LLMC_H) $(TEST_H) | $(BUILD)
	$(CXX_MPI) $(CXXFLAGS) $< -o $@ $(LDLIBS_CPU)

CPU_TESTS = $(patsubst test/%.cpp,$(BUILD)/%,$(wildcard test/test_*.cpp))

# CUDA sources always compile where nvcc exists (so CI catches every compile error); the GPU
# tests then run and report SKIP when no device is present.
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)

# What the tests need, built NPROC at a time: the CPU programs; where nvcc exists every CUDA
# program (make gpu's too: test_gpu_check bundles them); dev/emu's CPU builds of the CUDA engine
# (test_cuda_emulated and test_gpu_check run them); the small test model's data (test/testlib.py).
# A failed dev/emu build does not stop make: test_cuda_emulated then reports it as a FAIL row
# (or SKIPs where the CUDA headers or MPI are missing).
TEST_BUILD = train_llama_cpu $(CPU_TESTS) $(BUILD)/dump_logits $(BUILD)/fidelity $(BUILD)/bench_checkpoint testdata emu \
             $(if $(and $(HAVE_NVCC),$(wildcard cuda.mk)),cuda-all gpu)
test-build:
	@$(if $(and $(HAVE_NVCC),$(wildcard cuda.mk)),,echo "nvcc not found: CUDA sources not compiled")
	@$(MAKE) --no-print-directory -j$(NPROC) $(TEST_BUILD)

# make test: the time from here (after deps) counts against the budget run_tests.sh reports;
# make test T=<name> (or T="cli model"): the same builds, then only those tests (test_cli, cli,
# test/test_cli.sh and build/test_model all name one)
T ?=
test: deps
	@start=$$(date +%s); $(MAKE) --no-print-directory test-build && TEST_START_EPOCH=$$start bash test/run_tests.sh $(T)

# make check: the inner loop, for a change under way (make test before a commit): the C++ unit
# tests, test_cli.sh and test/quick_train.sh (a short CPU run and a short emulated run of the
# small model, compared); an advisory budget of 5 minutes (its last line says when it was over;
# time alone never fails it): 100 s from a fresh clone on an idle 2-core AMD EPYC, most of it the builds
CHECK_BUILD = train_llama_cpu $(CPU_TESTS) $(BUILD)/fidelity testdata emu
check: deps
	@start=$$(date +%s); $(MAKE) --no-print-directory -j$(NPROC) $(CHECK_BUILD) && \
	    TEST_START_EPOCH=$$start TEST_BUDGET_S=300 bash test/run_tests.sh $(CPU_TESTS) test/test_cli.sh test/quick_train.sh

emu:
	-@bash dev/emu/build.sh $(BUILD)/emu >$(BUILD)/emu_build.log 2>&1 || echo "dev/emu: not built ($$(tail -1 $(BUILD)/emu_build.log)); the emulated tests say why"

testdata:
	@python3 test/testlib.py --small-model >/dev/null

# the demo: two data-parallel ranks with GeoFP8 communication on the tiny preset and the bundled
# data: 20 steps of fp8 profiling pick the layers, then the geometry path with a fresh factor every
# step and the whitening power chosen per unit (--geofp8-refresh 1 --geofp8-power auto: the
# settings docs/gradient_communication.md's "GeoFP8 at 64 ranks" supports); fidelity every 10
# steps and the fair figures over windows of 10 (geofp8 against plain fp8 with its own error
# feedback on the same units);
# then its loss curves and fair figures in out/demo/loss.png
MPIRUN_ROOT := $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
demo: deps
	@$(MAKE) --no-print-directory train_llama_cpu
	OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive mpirun $(MPIRUN_ROOT) --oversubscribe -np 2 ./train_llama_cpu -e tiny -b 4 -t 256 -x 80 \
	    -l 2e-3 -u 5 -c geofp8 --geofp8-profile-steps 20 --geofp8-refresh 1 --geofp8-power auto --fidelity-every 10 --fidelity-window 10 \
	    -v 20 -m 4 -s 80 -g 48 -o out/demo --overwrite 1
	python3 scripts/plot_runs.py out/demo --out out/demo/loss.png

# the GeoFP8 study (scripts/study.py): modes x seeds x N virtual ranks x lr x steps of the small
# test model, each mode paired with fp32 by seed; a table of paired statistics and out/study/study.png.
# The default grid (256 ranks, 200 steps, 8 seeds, 88 runs) takes days on 2 cores; STUDY_ARGS
# narrows it (e.g. STUDY_ARGS="--ranks 64 --steps 50 --seeds 1,2,3"). Finished runs are kept.
STUDY_ARGS ?=
study: testdata
	@$(MAKE) --no-print-directory train_llama_cpu
	python3 scripts/study.py $(STUDY_ARGS)

-include cuda.mk
-include gpu.mk

clean:
	rm -rf $(BUILD) train_llama_cpu train_llama out

# libFuzzer target for the shard and checkpoint parsers (not part of make test)
FUZZ_SECONDS ?= 60
$(BUILD)/fuzz_parsers: dev/fuzz/fuzz_parsers.cpp $(LLMC_H) | $(BUILD)
	clang++ -g -O1 -std=c++17 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $< -o $@

fuzz: $(BUILD)/fuzz_parsers
	@python3 dev/fuzz/make_seeds.py $(BUILD)/fuzz_corpus
	$(BUILD)/fuzz_parsers $(BUILD)/fuzz_corpus -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1

# the engine's logits and greedy tokens on real text, for comparing an export (scripts/export_hf.py)
$(BUILD)/dump_logits: dev/dump_logits.cpp train_llama_cpu.cpp $(LLMC_H) | $(BUILD)
	$(CXX_MPI) $(CXXFLAGS) $< -o $@ $(LDLIBS_CPU)

# what a checkpoint costs on this disk: a rank's state file, version 1 against 2 (llmc/checkpoint.h),
# rank 0's files on the training loop, --checkpoint-async 0 against 1 (llmc/checkpoint_writer.h),
# and rank 0's reads at a resume, every rank's files against its own (llmc/run.h):
# make bench-checkpoint (BENCH_CHECKPOINT_ARGS="--dir DIR --presets ... --ranks ... --step-ms MS --tables 1,2,3")
BENCH_CHECKPOINT_ARGS ?=
$(BUILD)/bench_checkpoint: dev/bench_checkpoint.cpp $(LLMC_H) | $(BUILD)
	$(CXX_MPI) $(CXXFLAGS) $< -o $@ $(LDLIBS_CPU)
bench-checkpoint: $(BUILD)/bench_checkpoint
	$(BUILD)/bench_checkpoint $(BENCH_CHECKPOINT_ARGS)

# tokens/s of the CPU engine against a plain PyTorch step of the same model (needs torch)
bench: train_llama_cpu
	@bash dev/bench_cpu.sh

# the fidelity analysis (the paper's Tables I and II) on any checkpoint
fidelity: $(BUILD)/fidelity
$(BUILD)/fidelity: dev/fidelity.cpp train_llama_cpu.cpp $(LLMC_H) | $(BUILD)
	$(CXX_MPI) $(CXXFLAGS) $< -o $@ $(LDLIBS_CPU)
