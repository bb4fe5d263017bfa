# cuda.mk — build rules of the CUDA engine, included by the top-level Makefile (-include cuda.mk)
# and usable on its own (make -f cuda.mk cuda-all).
#   make train_llama            CUDA trainer
#   make build/test_<name>      GPU tests, one per test/test_<name>.cu (each exits 77 with a SKIP
#                               line where there is no GPU)
#   make build/dev_<op>         kernel validation + benchmark of one family (dev/cuda/<op>.cu)
#   make cuda-all               all of the above
#   make dev                    the dev/cuda tools
#   make test-gpu               build, then run every GPU test and every dev/cuda validation
#   make ptxas-report           registers / shared memory / spills of the attention and Muon
#                               kernels -> dev/cuda/ptxas_report.txt
#   make gpu                    the same programs for a bare CUDA machine, into build/gpu: no MPI
#                               (one process, or plain srun with the id-file launch)
# No CUDA program needs a host BLAS or LAPACK: the engine's own host-side linear algebra is a
# small double-precision QR (llmc/geofp8.h), and the CPU references the checks call through
# llmc/*.h get their CBLAS / LAPACKE calls from dev/cuda/blas_shim (cuBLAS and cuSOLVER in fp32 /
# fp64). What a program links: libc, libm, libstdc++, libgcc, libgomp, the CUDA driver, cuBLAS,
# cuBLASLt, cuSOLVER and NCCL (cudart is static).
# dev binaries are named build/dev_<op>, not build/test_*, so the CPU test runner (which runs
# every build/test_*) does not pick them up; the GPU tests it does run skip without a device.

NVCC       ?= nvcc
GPU_ARCH   ?= sm_90a
BUILD      ?= build
NVCCFLAGS  ?= -O3 -std=c++17 -arch=$(GPU_ARCH) --expt-relaxed-constexpr \
              -Xcompiler -fopenmp,-Wall,-Wextra,-Wno-unused-function
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))

# NCCL: $(NCCL_HOME) when set; else the toolkit's or the system's; else the nvidia-nccl Python
# wheel (a CUDA image with PyTorch often has NCCL only there: nvidia/nccl/{include,lib}). The
# wheel ships libnccl.so.2 without the unversioned link, hence -l:libnccl.so.2 throughout.
ifneq ($(NCCL_HOME),)
NCCL_INC := $(NCCL_HOME)/include
NCCL_LIB := $(firstword $(wildcard $(NCCL_HOME)/lib $(NCCL_HOME)/lib64))
else ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
NCCL_INC := $(CUDA_HOME)/include
NCCL_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
else ifneq ($(wildcard /usr/include/nccl.h),)
NCCL_INC := /usr/include
NCCL_LIB :=
else
NCCL_WHEEL := $(shell python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
NCCL_INC := $(if $(NCCL_WHEEL),$(NCCL_WHEEL)/include)
NCCL_LIB := $(if $(NCCL_WHEEL),$(NCCL_WHEEL)/lib)
endif
NCCL_FLAGS  = $(if $(NCCL_INC),-I$(NCCL_INC))
NCCL_LDLIBS = $(if $(NCCL_LIB),-L$(NCCL_LIB)) -l:libnccl.so.2

# dev/cuda/blas_shim first on the include path: <cblas.h> and <lapacke.h> of the CPU references
CUDA_INCLUDES = -Idev/cuda/blas_shim $(NCCL_FLAGS)
NVCC_LDLIBS = -lcublas -lcublasLt -lcusolver $(NCCL_LDLIBS) -lgomp -lm

CUDA_H     = $(wildcard llmc/*.cuh) $(wildcard llmc/*.h)
DEV_OPS    = matmul encoder rmsnorm rope swiglu attention crossentropy adamw muon global_norm geofp8
DEV_BINS   = $(patsubst %,$(BUILD)/dev_%,$(DEV_OPS))
GPU_TESTS  = $(patsubst test/%.cu,$(BUILD)/%,$(wildcard test/test_*.cu))

.PHONY: cuda-all dev test-gpu ptxas-report gpu

cuda-all: train_llama $(GPU_TESTS) $(DEV_BINS)

dev: $(DEV_BINS)

# MPI is optional for the CUDA trainer (llmc/comm.cuh): with mpicxx on the PATH, train_llama can
# start from mpirun / srun --mpi=pmix; without it, from plain srun or as one process.
MPI_CFLAGS := $(filter -I%,$(shell mpicxx --showme:compile 2>/dev/null))
MPI_LIBS   := $(filter -L% -l%,$(shell mpicxx --showme:link 2>/dev/null))

train_llama: train_llama.cu $(CUDA_H) $(COMMIT_FILE)
	$(NVCC) $(NVCCFLAGS) $(CUDA_INCLUDES) $(MPI_CFLAGS) $(call version_defs,$(NVCC) $(NVCCFLAGS)) $< -o $@ $(NVCC_LDLIBS) $(MPI_LIBS)

# the whole-model test includes the trainer
$(BUILD)/test_llama_gpu: train_llama.cu

# the GPU tests and dev tools are single-process programs: never MPI
SHIM_H = $(wildcard dev/cuda/blas_shim/*.h)

$(BUILD)/test_%: test/test_%.cu $(CUDA_H) $(SHIM_H) test/test_util.h test/fixture.h
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(CUDA_INCLUDES) -DCOMM_GPU_NO_MPI $< -o $@ $(NVCC_LDLIBS)

$(BUILD)/dev_%: dev/cuda/%.cu dev/cuda/dev_flags.h $(CUDA_H) $(SHIM_H)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(CUDA_INCLUDES) -DCOMM_GPU_NO_MPI $< -o $@ $(NVCC_LDLIBS)

# make gpu: the trainer without MPI, and the tests and dev tools (already MPI-free) copied beside it
GPU_DIR = $(BUILD)/gpu
GPU_BINS = $(GPU_DIR)/train_llama $(patsubst $(BUILD)/%,$(GPU_DIR)/%,$(GPU_TESTS) $(DEV_BINS))

gpu: $(GPU_BINS)

$(GPU_DIR)/train_llama: train_llama.cu $(CUDA_H) $(SHIM_H) $(COMMIT_FILE)
	@mkdir -p $(GPU_DIR)
	$(NVCC) $(NVCCFLAGS) $(CUDA_INCLUDES) -DCOMM_GPU_NO_MPI $(call version_defs,$(NVCC) $(NVCCFLAGS)) $< -o $@ $(NVCC_LDLIBS)

$(GPU_DIR)/%: $(BUILD)/%
	@mkdir -p $(GPU_DIR)
	cp $< $@

# Every GPU test, then every kernel validation (no benchmarks); without a GPU each says SKIP.
test-gpu: cuda-all
	@status=0; \
	for t in $(GPU_TESTS); do ./$$t; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ] || status=1; done; \
	for op in $(DEV_OPS); do ./$(BUILD)/dev_$$op --validate-only; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ] || status=1; done; \
	exit $$status

# One line per kernel of llmc/attention.cuh (flash_attention.cuh's included) and llmc/muon.cuh, from nvcc -Xptxas -v,
# then dev/flash_model.py --check: each flash kernel fits its __launch_bounds__ blocks per SM, and a backward's setmaxnreg
# takes no more registers than its block was launched with (a spill is a WARN line).
# PTXAS_REPORT=path writes the report elsewhere (test/test_flash_model.py compares it with the committed one).
PTXAS_REPORT ?= dev/cuda/ptxas_report.txt
ptxas-report:
	@mkdir -p $(BUILD)
	@{ echo "# ptxas resource usage of the attention and Muon kernels (nvcc -Xptxas -v, -arch=$(GPU_ARCH), -O3)"; \
	   echo "# $$($(NVCC) --version | tail -1); regenerate with: make ptxas-report"; \
	   for op in attention muon; do \
	     echo; echo "## llmc/$$op.cuh (compiled through dev/cuda/$$op.cu)"; \
	     printf "%-5s %-6s %-6s %-7s %-7s %s\n" regs smem stack spill_st spill_ld kernel; \
	     $(NVCC) $(NVCCFLAGS) $(CUDA_INCLUDES) -Xptxas -v -c dev/cuda/$$op.cu -o $(BUILD)/ptxas_$$op.o 2>&1 | awk -v op="$$op" ' \
	       /Compiling entry function/ { match($$0, /_Z[0-9]+[a-z_]+/); name = substr($$0, RSTART, RLENGTH); \
	         fn = $$0; sub(/.*function .__*/, "", fn); sub(/. for .*/, "", fn); full = "_" fn; keep = (name ~ ("^_Z[0-9]+" op "_") || (op == "attention" && name ~ /^_Z[0-9]+flash_/)) && full !~ /ILi[0-9]+ELi[1-9][0-9]*E/; next } \
	       /bytes stack frame/ { stack = $$1; sst = $$5; sld = $$9; next } \
	       /Used [0-9]+ registers/ { if (keep) { regs = $$0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs); \
	         smem = "0"; if ($$0 ~ /bytes smem/) { smem = $$0; sub(/ bytes smem.*/, "", smem); sub(/.*, /, "", smem) } \
	         printf "%-5s %-6s %-6s %-7s %-7s %s\n", regs, smem, stack, sst, sld, full } }' \
	       | c++filt; \
	   done; } > $(PTXAS_REPORT)
	@cat $(PTXAS_REPORT)
	@grep -q 'flash_forward_kernel<' $(PTXAS_REPORT) && grep -q 'muon_' $(PTXAS_REPORT) || \
	  { echo "ptxas-report: a kernel list is empty (dev/cuda/attention.cu or muon.cu did not compile: $(NVCC) $(NVCCFLAGS) -c dev/cuda/attention.cu)" >&2; exit 1; }
	@python3 dev/flash_model.py --check --hs 16,32,64,128 --ptxas $(PTXAS_REPORT)
