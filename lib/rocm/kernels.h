/*
 * kernels.h - the GPU kernels' host-side launchers (gemm.hip, quantize.hip),
 * called by the backend glue (backend.hip). Shared by AMD (hipcc / clang -x
 * hip) and NVIDIA (nvcc -x cu) builds through gpu_compat.h.
 *
 * The glue has validated every argument (lib/check.c) and resolved a packed
 * B to plain rows, so a launcher sees p->b_packed == NULL, m > 0, n > 0 (mm)
 * or m > 0 (quantize), and device pointers throughout. Launchers only queue
 * work on `stream`; they return the runtime's launch status (gpuSuccess or
 * the error of the launch), never synchronise, and write nothing on error.
 */
#ifndef SMM_GPU_KERNELS_H
#define SMM_GPU_KERNELS_H

#include "gpu_compat.h"
extern "C" {
#include "internal.h"
}

/* One scaled mm or raw int32 gemm (c_dtype I32), as smm_mm_problem says.
 * b_static: p->b is the rows of a packed B (smm_pack_b), which no kernel
 * writes, so the NVIDIA decode kernels may read it before the kernel ahead
 * of them in the stream has finished (gemm.hip); false for a caller's B. */
gpuError_t smm_gpu_launch_mm(const smm_mm_problem *p, bool b_static, gpuStream_t stream);

/* One smm_quantize_i8 problem, every mode of the contract. */
gpuError_t smm_gpu_launch_quantize(const smm_quantize_args *q, gpuStream_t stream);

#endif
