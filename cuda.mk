# cuda.mk — build rules of the CUDA engine, included by the top-level Makefile (-include cuda.mk)
# and usable on its own (make -f cuda.mk cuda-all).
#   make train_llama            CUDA trainer
#   make build/test_llama_gpu   whole-model GPU test (exits 77 with a SKIP line without a GPU)
#   make build/dev_<op>         kernel validation + benchmark of one family (dev/cuda/<op>.cu)
#   make cuda-all               all of the above
#   make dev                    the dev/cuda tools
#   make test-gpu               build, run the GPU model test and every dev/cuda validation
#   make ptxas-report           register / spill report of the attention and Muon kernels
#                               -> dev/cuda/ptxas_report.txt

NVCC       ?= nvcc
GPU_ARCH   ?= sm_90
BUILD      ?= build
NVCCFLAGS  ?= -O3 -std=c++17 -arch=$(GPU_ARCH) --expt-relaxed-constexpr \
              -Xcompiler -fopenmp,-Wall,-Wextra,-Wno-unused-function
NVCC_LDLIBS = -lcublas -lcublasLt -lcusolver -lnccl -lopenblas -llapacke -lgomp -lm

CUDA_H     = $(wildcard llmc/*.cuh) $(wildcard llmc/*.h)
DEV_OPS    = matmul encoder rmsnorm rope swiglu attention crossentropy adamw muon global_norm
DEV_BINS   = $(patsubst %,$(BUILD)/dev_%,$(DEV_OPS))

.PHONY: cuda-all dev test-gpu ptxas-report

cuda-all: train_llama $(BUILD)/test_llama_gpu $(DEV_BINS)

dev: $(DEV_BINS)

train_llama: train_llama.cu $(CUDA_H)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LDLIBS)

$(BUILD)/test_llama_gpu: test/test_llama_gpu.cu train_llama.cu $(CUDA_H) test/test_util.h test/fixture.h
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LDLIBS)

$(BUILD)/dev_%: dev/cuda/%.cu $(CUDA_H)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVCC_LDLIBS)

# Runs the GPU model test and every kernel validation; without a GPU each one says SKIP.
test-gpu: cuda-all
	@status=0; \
	./$(BUILD)/test_llama_gpu; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ] || status=1; \
	for op in $(DEV_OPS); do ./$(BUILD)/dev_$$op --validate-only; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ] || status=1; done; \
	exit $$status

# ptxas register / spill lines (demangled) of the attention and Muon kernels.
ptxas-report:
	@mkdir -p $(BUILD)
	@{ echo "# nvcc -Xptxas -v, -arch=$(GPU_ARCH): registers, shared memory and spills of the attention and Muon kernels"; \
	   echo "# regenerate with: make ptxas-report   ($$($(NVCC) --version | tail -1))"; \
	   for op in attention muon; do \
	     echo; echo "## llmc/$$op.cuh (compiled through dev/cuda/$$op.cu)"; \
	     $(NVCC) $(NVCCFLAGS) -Xptxas -v -c dev/cuda/$$op.cu -o $(BUILD)/ptxas_$$op.o 2>&1 \
	       | grep -A2 "Compiling entry function '_Z[0-9]*$${op}_" \
	       | sed -e "s/^ptxas info *: //" -e "/^--$$/d" \
	       | c++filt; \
	   done; } > dev/cuda/ptxas_report.txt
	@cat dev/cuda/ptxas_report.txt
