// emu_float.h — the GPU's fp32 NaN, for the float operations dev/emu carries out itself (emu.h,
// emu_runtime.cpp). An NVIDIA GPU's fp32 arithmetic returns the canonical NaN 0x7fffffff whatever
// the operands' sign and payload: measured on the H200 for the add (NaN + 1.0f in a warp sum,
// 2026-12-04); test_mma_layout's nan_is_the_gpus checks hold every operation below to it on a GPU
// too. x86 returns the first NaN operand's bits, quieted (0x7fc00000 for NAN, 0xffffffff for the
// all-ones garbage of fresh device memory). emu_gpu_f32 turns a host result into the GPU's, so
// that emulated bitwise dumps agree with a GPU's where emu computes the value: mma.sync, the warp
// reductions' butterfly, __fadd_rn / __fsub_rn / __fmul_rn / __fdiv_rn and atomicAdd on floats.
// What it cannot reach: plain `a + b`, expf, ... in kernel code are compiled by g++ into host
// instructions, and a NaN that flows through them keeps x86's bits (whether a value is NaN still
// matches; only its bits can differ). The emulated libraries (cuBLAS, NCCL) and fp64 results keep
// the host's bits too: their NaN on a GPU has not been measured here.
#pragma once
#include <cstdint>
#include <cstring>

static const uint32_t EMU_GPU_NAN_F32 = 0x7fffffffu;
static inline float emu_gpu_f32(float x) {
    if (x != x) memcpy(&x, &EMU_GPU_NAN_F32, 4);
    return x;
}
