/*
 * kernels.h - the GPU kernels' host-side launchers (select.hip,
 * quantize.hip, epilogue.hip), called by the backend glue (backend.hip), and the internal
 * interface that forces a GEMM kernel (tests/check_gpu_kernels.c). Shared by AMD (hipcc / clang -x hip) and NVIDIA
 * (nvcc -x cu) builds through gpu_compat.h.
 *
 * The glue has validated every argument (lib/check.c) and resolved a packed
 * B to plain rows, so a launcher sees p->b_packed == NULL, m > 0, n > 0 (mm)
 * or m > 0 (quantize), and device pointers throughout. Launchers only queue
 * work on `stream`; they return the runtime's launch status (gpuSuccess or
 * the error of the launch), never synchronise, and write nothing on error.
 */
#ifndef SMM_GPU_KERNELS_H
#define SMM_GPU_KERNELS_H

#if !defined(SMM_GPU_FORCE_ONLY)

#include "gpu_compat.h"
extern "C" {
#include "internal.h"
}

/* One scaled mm or raw int32 gemm (c_dtype I32), as smm_mm_problem says.
 * b_static: p->b is the rows of a packed B (smm_pack_b), which no kernel
 * writes, so the NVIDIA decode kernels may read it before the kernel ahead
 * of them in the stream has finished (gemm_decode.hip); false for a
 * caller's B. The kernel is chosen by the rules of select.hip. */
gpuError_t smm_gpu_launch_mm(const smm_mm_problem *p, bool b_static, gpuStream_t stream);

/* One smm_quantize_i8 problem, every mode of the contract. */
gpuError_t smm_gpu_launch_quantize(const smm_quantize_args *q, gpuStream_t stream);

/* smm_linear's two halves (q's outputs are p's a, scale_a and azp; n > 0,
 * b_static as for smm_gpu_launch_mm): smm_gpu_launch_quantize, then the
 * GEMM as smm_gpu_launch_mm runs it, except that its rules know the GEMM
 * follows the quantizer (select.hip); forced (smm_gpu_force.fuse), at
 * small M on NVIDIA one launch of the decode kernel that quantizes its own
 * tokens. */
gpuError_t smm_gpu_launch_linear(const smm_quantize_args *q, const smm_mm_problem *p,
                                 bool b_static, gpuStream_t stream);

/* One smm_scaled_epilogue problem (m > 0, n > 0; colsum_b set exactly
 * when azp is), epilogue.hip. */
gpuError_t smm_gpu_launch_epilogue(const smm_epilogue_args *a, gpuStream_t stream);

#endif /* SMM_GPU_FORCE_ONLY */

/*
 * Forcing a GEMM kernel: an internal interface for tests and tuning, not
 * the library's API. The plugin exports these five functions (C linkage,
 * plugin.map) next to its entry point, so a program that has loaded the
 * plugin through the library (a context on the GPU backend) finds them
 * with dlopen(<the plugin's path>, RTLD_NOLOAD) and dlsym, as
 * tests/check_gpu_kernels.c does; a program linking the kernel objects
 * directly (a tuning program) calls them. This part of the header is
 * plain C: define SMM_GPU_FORCE_ONLY before including it from C.
 *
 * Every kernel gives the same bits; forcing changes only which one runs.
 * A forced kernel that cannot run the problem (another vendor's, a compute
 * capability or code object without it, rows not 16-byte aligned, or an M
 * over 32 for the decode kernels) gives way to what select.hip's rules
 * choose for the problem; smm_gpu_kernel_counts says what ran.
 */
enum smm_gpu_kernel {
    SMM_GPU_KERNEL_AUTO = 0,    /* select.hip's rules decide */
    SMM_GPU_KERNEL_GENERIC,     /* any GPU: dp4a / sdot4 / plain code */
    SMM_GPU_KERNEL_MFMA,        /* AMD: 128 x 128 tile, MFMA or sdot4 */
    SMM_GPU_KERNEL_MMA,         /* NVIDIA sm_80+: mma.sync tiled kernel */
    SMM_GPU_KERNEL_WGMMA,       /* NVIDIA sm_90a: cp.async + wgmma */
    SMM_GPU_KERNEL_TMA,         /* NVIDIA sm_90a: TMA + wgmma, persistent */
    SMM_GPU_KERNEL_DECODE,      /* NVIDIA sm_80+, M <= 32: mma.sync decode */
    SMM_GPU_KERNEL_DECODE_TMA,  /* NVIDIA sm_90a, M <= 32: tensor-copy decode */
    SMM_GPU_KERNEL_DECODE_RING, /* NVIDIA sm_90a, M <= 32: ring decode */
    SMM_GPU_KERNEL_TMA_PP,      /* NVIDIA sm_90a: TMA + wgmma, ping-pong */
    SMM_GPU_KERNEL_COUNT
};

typedef struct smm_gpu_force {
    int kernel;   /* enum smm_gpu_kernel; AUTO: the rules decide */
    int groups;   /* DECODE: 16-row groups per block (1, 2, 4); 0: chosen */
    int cluster;  /* decode kernels: blocks per cluster (1, 2, 4; sm_90+;
                     DECODE_RING also 3, the others take 3 as 2; above 4
                     is 4); 0: chosen */
    int stages;   /* DECODE_TMA: stages (2 to 16); DECODE_RING: ring slots
                     (3 to 8); TMA_PP: stages (4 or 5 with tile 1, 5 or
                     6 with tile 2); 0: chosen */
    int pre;      /* DECODE with a packed B: 1 the shared-memory form
                     wherever it exists, -1 never, 0 chosen */
    int no_wgmma; /* AUTO: no sm_90a wgmma kernel (large M stays on MMA,
                     M <= 32 on DECODE) */
    int no_tma;   /* AUTO: no TMA kernel for large M (WGMMA instead), and
                     M <= 32 on DECODE */
    int fuse;     /* smm_linear: 1 the DECODE kernel that quantizes its
                     tokens (one launch) wherever it can run; else the
                     quantizer, then the GEMM (never chosen by itself:
                     slower, doc/design.md) */
    int tile;     /* TMA_PP: 1 the 64 x 256 warpgroup tile, 2 the 128 x
                     128 one; 0: chosen */
    int ring_pre; /* DECODE_RING with a packed B: ring slots of weights
                     copied before the wait (1 .. slots - 2; -1 none); 0:
                     chosen (slots - 2) */
    int q_chunks; /* the quantizer's row kernel: at least this many 16-byte
                     chunks of the row per thread (2, 4, 8; fewer threads
                     per block); 0: chosen (as few as the row allows) */
} smm_gpu_force;

/* Launches so far in this process, per kernel (index: enum
 * smm_gpu_kernel; a fused smm_linear counts as DECODE), and launches of the
 * DECODE kernel's shared-memory form (decode_pre) and of its form that
 * quantizes its tokens (decode_fused). */
typedef struct smm_gpu_counts {
    unsigned long launches[SMM_GPU_KERNEL_COUNT];
    unsigned long decode_pre;
    unsigned long decode_fused; /* DECODE launches that quantized their tokens */
} smm_gpu_counts;

#if defined(__cplusplus)
#define SMM_GPU_FORCE_API extern "C" __attribute__((visibility("default")))
#else
#define SMM_GPU_FORCE_API extern
#endif

/* Sets the force for the calling thread (a copy of *f); NULL clears it.
 * Without one, a thread gets the process default, read once from the
 * environment: SMM_GPU_GEMM_KERNEL=generic forces GENERIC, =mma sets
 * no_wgmma, =wgmma sets no_tma; anything else or unset: AUTO. The GPU
 * backends launch on the thread that called the library. */
SMM_GPU_FORCE_API void smm_gpu_force_set(const smm_gpu_force *f);

/* The force in effect for the calling thread. */
SMM_GPU_FORCE_API void smm_gpu_force_get(smm_gpu_force *f);

SMM_GPU_FORCE_API void smm_gpu_kernel_counts(smm_gpu_counts *out);

/* Printable name of a kernel ("generic", "mfma", "mma", ...). */
SMM_GPU_FORCE_API const char *smm_gpu_kernel_name(int kernel);

/* A tuning build's per-block timeline (lib/rocm/trace.h, -DSMM_GPU_TRACE):
 * copies up to max records of 6 words each (id = kernel | SM << 8 |
 * block << 32, tag, then the global timer in ns at the block's start,
 * after its wait, after its products, at its end) to out, and empties the
 * buffer. Returns the number of records, or -1 in a build without it or
 * on a runtime error. */
SMM_GPU_FORCE_API int smm_gpu_trace_take(unsigned long long *out, int max);

/* A trace record's words, and the kernels in its id's low byte. */
#define SMM_TRACE_WORDS 6 /* id, tag, start, wait, products, end */
enum { SMM_TRACE_QUANT = 1, SMM_TRACE_DECODE = 2, SMM_TRACE_RING = 3 };

/* The functions' types, for dlsym. */
typedef void (*smm_gpu_force_set_fn)(const smm_gpu_force *f);
typedef void (*smm_gpu_kernel_counts_fn)(smm_gpu_counts *out);
typedef const char *(*smm_gpu_kernel_name_fn)(int kernel);
typedef int (*smm_gpu_trace_take_fn)(unsigned long long *out, int max);

#endif
