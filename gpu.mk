# gpu.mk — what a GPU machine needs, made here; included by the top-level Makefile (-include gpu.mk)
# after cuda.mk (make gpu builds the binaries into build/gpu).
#   make gpu-refs     the CPU engine's reference curves that dev/gpu_check.sh compares with, into
#                     build/gpu/refs: the 50-step tiny run and every -c mode's 30-step run
#                     (main.log, metrics.jsonl) and flags.txt with the exact flags, which the script
#                     checks before comparing. The GPU machine runs no CPU reference, needs no BLAS.
#   make gpu-bundle   build/gpu-bundle: make gpu's binaries (bin/), the curves (refs/),
#                     gpu_check.sh, and the data and fixtures the runs read, with a MANIFEST of
#                     sha256 sums; at most 48 MiB. Carry that folder, then on the GPU machine:
#                     bash build/gpu-bundle/gpu_check.sh
#   make flash-commits
#                     build/flash-commits: dev_attention at every commit that changed the flash
#                     kernels since they were last timed on a GPU, and each one's model rows (about
#                     2 minutes of nvcc, 9 MiB). Carry it beside the bundle, then on the GPU machine:
#                     bash dev/bench_flash_commits.sh build/flash-commits
# dev/gpu_check.sh --list-files names every file a run needs; the bundle is exactly that list.

BUILD             ?= build
GPU_DIR           ?= $(BUILD)/gpu
GPU_REFS          ?= $(GPU_DIR)/refs
GPU_BUNDLE        ?= $(BUILD)/gpu-bundle
GPU_BUNDLE_MAX_MIB = 48

.PHONY: gpu-refs gpu-bundle flash-commits

flash-commits:
	@bash dev/bench_flash_commits.sh --build $(BUILD)/flash-commits

gpu-refs: $(GPU_REFS)/flags.txt

# remade when the CPU engine, the script (its flags) or the data change; the script keeps curves
# whose flags and files are already right (a few minutes of CPU otherwise)
$(GPU_REFS)/flags.txt: train_llama_cpu dev/gpu_check.sh $(wildcard data/kjv/*.bin)
	@bash dev/gpu_check.sh --refs $(GPU_REFS)

gpu-bundle: gpu gpu-refs
	@set -e; tmp=$(GPU_BUNDLE).tmp; rm -rf $$tmp; mkdir -p $$tmp; \
	GPU_CHECK_BIN=$(abspath $(GPU_DIR)) GPU_CHECK_REFS=$(abspath $(GPU_REFS)) EMULATE=0 \
	    bash dev/gpu_check.sh --list-files >$$tmp.files; \
	while read -r dst src; do \
	    if [ ! -f "$$src" ]; then echo "gpu-bundle: $$src is missing (the bundle's $$dst)"; rm -rf $$tmp $$tmp.files; exit 1; fi; \
	    mkdir -p "$$tmp/$$(dirname "$$dst")"; cp -p "$$src" "$$tmp/$$dst"; \
	done <$$tmp.files; \
	rm -f $$tmp.files; \
	echo "gpu_check bundle made $$(date -u +%Y-%m-%dT%H:%MZ) from commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD -- 2>/dev/null || echo ' plus local changes'), $(GPU_ARCH)" >$$tmp/BUNDLE; \
	(cd $$tmp && find . -type f ! -name MANIFEST ! -name BUNDLE | sed 's|^\./||' | sort | xargs sha256sum >MANIFEST); \
	bytes=$$(du -sb $$tmp | cut -f1); \
	if [ $$bytes -gt $$(( $(GPU_BUNDLE_MAX_MIB) * 1048576 )) ]; then \
	    echo "gpu-bundle: $$((bytes / 1048576)) MiB, over the $(GPU_BUNDLE_MAX_MIB) MiB limit; the largest files:"; \
	    (cd $$tmp && find . -type f -printf '%s %p\n' | sort -rn | head -5); rm -rf $$tmp; exit 1; \
	fi; \
	rm -rf $(GPU_BUNDLE); mv $$tmp $(GPU_BUNDLE); \
	echo "gpu-bundle: $(GPU_BUNDLE), $$(wc -l <$(GPU_BUNDLE)/MANIFEST) files, $$(awk -v b=$$bytes 'BEGIN { printf "%.1f", b / 1048576 }') MiB (limit $(GPU_BUNDLE_MAX_MIB)); on the GPU machine: bash $(GPU_BUNDLE)/gpu_check.sh"
