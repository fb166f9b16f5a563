/*
 * launch.h - the host side the GEMM files share: each kernel file's
 * launchers, called by select.hip's rules, and the device queries they
 * use. Internal to lib/rocm/ (hidden in the plugin: -fvisibility=hidden
 * and plugin.map). A launcher with a `done` argument may decline the
 * problem (*done false, nothing launched, gpuSuccess): the rules then try
 * the next kernel.
 */
#ifndef SMM_GPU_LAUNCH_H
#define SMM_GPU_LAUNCH_H

#include "device_common.h"

/* Whether a row-major matrix (rows x ld, base p) is `bytes`-aligned: its
 * base and, when it has more than one row, its row stride. */
static inline bool smm_aligned(const void *p, int64_t ld, int64_t rows, unsigned bytes)
{
    return ((uintptr_t)p % bytes) == 0 && (rows == 1 || ld % (int64_t)bytes == 0);
}

/* gemm_generic.hip */
gpuError_t smm_launch_generic(const smm_mm_dims &d, const smm_epi_params &e,
                              gpuStream_t stream);

#if defined(SMM_GPU_AMD)
/* gemm_mfma.hip */
gpuError_t smm_launch_mfma(const smm_mm_dims &d, const smm_epi_params &e, gpuStream_t stream);
#endif

#if defined(SMM_GPU_NVIDIA)

/* select.hip: the current device as an index into the launchers'
 * per-device caches (arrays of 64; 0 when it cannot be read or is past
 * them), and its compute capability (major * 10 + minor) and SM count,
 * read once per device. */
int smm_cache_dev(void);
void smm_device_info(int *cc, int *sms);

/* Whether the code object the driver loaded for kern on the current device
 * is the sm_90a one (the sm_90a kernels take only dynamic shared memory,
 * their stubs for other targets a static array), read once per device into
 * cache (one array per kernel). */
template <typename K> static bool smm_sm90a_loaded(K kern, signed char (&cache)[64])
{
    const int dev = smm_cache_dev();
    if (cache[dev] == 0) {
        cudaFuncAttributes attr;
        const bool ok = cudaFuncGetAttributes(&attr, kern) == cudaSuccess &&
                        attr.sharedSizeBytes == 0;
        (void)cudaGetLastError();
        cache[dev] = ok ? 1 : -1;
    }
    return cache[dev] > 0;
}

/* gemm_wgmma.hip: cuTensorMapEncodeTiled through the runtime's driver
 * entry point (NULL if missing), and a tensor map of a rows x k int8
 * matrix (row stride ld bytes, a multiple of 16, base 16-byte aligned):
 * boxes of 128 bytes of K by box_rows rows, 128-byte swizzle, zeros past
 * the edges. */
PFN_cuTensorMapEncodeTiled_v12000 smm_tmap_encoder(void);
bool smm_make_tmap(CUtensorMap *map, const int8_t *base, int64_t rows, int64_t k, int64_t ld,
                   unsigned box_rows);

/* gemm_mma.hip: the mma.sync tiled kernel's three forms. */
enum smm_mma_form {
    SMM_MMA_128X128_GUARDED, /* rows not 16-byte aligned: guarded loads, 3 stages */
    SMM_MMA_128X256,         /* cp.async, 4 stages */
    SMM_MMA_128X128          /* cp.async, 4 stages */
};
gpuError_t smm_launch_mma(const smm_mm_dims &d, const smm_epi_params &e, smm_mma_form form,
                          gpuStream_t stream);

/* gemm_wgmma.hip: the sm_90a large-M kernels and whether the driver loaded
 * their sm_90a code (and, for TMA, found the tensor-map encoder). */
bool smm_have_wgmma(void);
gpuError_t smm_launch_wgmma(const smm_mm_dims &d, const smm_epi_params &e, gpuStream_t stream);
bool smm_have_tma(void);
gpuError_t smm_launch_tma(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                          gpuStream_t stream, bool *done);
/* The ping-pong form (tile 1: 64 x 256 with stages 4 or 5, tile 2: 128 x
 * 128 with 5 or 6; 0: chosen); declines azp. */
bool smm_have_tma_pp(void);
gpuError_t smm_launch_tma_pp(const smm_mm_dims &d, const smm_epi_params &e, int sms, int stages,
                             int tile, gpuStream_t stream, bool *done);

/* gemm_decode.hip. smm_decode_plan fills in the decode launch of a
 * problem with M <= 32 and 16-byte aligned rows: d->pdl, d->b_static (the
 * caller's, kept only where the kernel uses it), d->pre, and the DECODE
 * kernel's row groups *g and blocks per cluster *s; f's forced parameters
 * apply. The launchers take the planned d (the ring kernel with the
 * caller's b_static). */
bool smm_decode_have_cluster(int cc);
/* Whether programmatic dependent launches are on (SMM_GPU_PDL, and no
 * launch with one refused so far); the quantizer follows it too. */
bool smm_decode_pdl_allowed(void);
/* A trace build's records (trace.h) of gemm_decode.hip's and
 * quantize.hip's kernels: smm_gpu_trace_take's halves. */
int smm_decode_trace_take(unsigned long long *out, int max);
int smm_quant_trace_take(unsigned long long *out, int max);
void smm_decode_plan(smm_mm_dims *d, int cc, int sms, const smm_gpu_force &f, int *g, int *s);
gpuError_t smm_launch_decode_mma(const smm_mm_dims &d, const smm_epi_params &e, int g, int s,
                                 gpuStream_t stream);
bool smm_have_dtma(void);
gpuError_t smm_launch_decode_tma(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                                 const smm_gpu_force &f, gpuStream_t stream, bool *done);
bool smm_have_ring(void);
bool smm_ring_splits_short(const smm_mm_dims &d, int sms);
gpuError_t smm_launch_decode_ring(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                                  const smm_gpu_force &f, gpuStream_t stream, bool *done);
/* Launches of the DECODE kernel's shared-memory form so far. */
unsigned long smm_decode_pre_count(void);

/* The DECODE kernel that quantizes its own tokens (smm_linear at small M,
 * one launch): the float activations and the quantization's arguments,
 * as smm_quantize_args gives them (scale and azp are inputs in the static
 * mode, outputs in the dynamic one; azp NULL: symmetric). */
struct smm_dec_fuse {
    const void *x;
    int64_t ldx;   /* elements */
    int8_t *q;     /* the int8 activations, written by the grid's block 0 */
    int64_t ldq;
    float *scale;
    int32_t *azp;
    int dynamic;
};
/* Bytes of shared memory a block of it holds the M quantized token rows
 * in: rows padded with zeros to whole 64-byte chunks, the row stride 64
 * more than a multiple of 128 (two rows that a quarter of a warp reads
 * fall in different banks). */
SMM_HD int64_t smm_dec_tok_stride(int64_t k)
{
    return (k + 127) / 128 * 128 + 64;
}
#define SMM_DEC_TOK_MAX (32 * 1024) /* the most token bytes a block holds */
#define SMM_DEC_QX_ROWS 4           /* and the most rows (M) */
/* Launches it for the planned d (M <= SMM_DEC_QX_ROWS, one row group, no
 * cluster, the rows of x, q and B 16-byte aligned, K > 0, d.a unused) and
 * x of x_dtype (F32, F16 or BF16); *done false (nothing launched) where
 * the token rows do not fit or the shared memory it needs is refused. */
gpuError_t smm_launch_decode_fused(const smm_mm_dims &d, const smm_epi_params &e,
                                   const smm_dec_fuse &fz, int x_dtype, gpuStream_t stream,
                                   bool *done);
/* Launches of it so far. */
unsigned long smm_decode_fused_count(void);

#define SMM_DTMA_BR 64 /* weight rows (output columns) per tensor-copy decode block */

#endif /* SMM_GPU_NVIDIA */

#endif
