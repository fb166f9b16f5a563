/*
 * quantize.hip - smm_quantize_i8 on the GPU, every mode of the numerics
 * contract (doc/numerics.md, "Quantization of activations"), bit for bit
 * equal to lib/reference.c, in the forms of quant_ops.h (which the decode
 * kernel that quantizes its own tokens, gemm_decode.hip, shares).
 * Inputs F32, F16, BF16 (row-major, ldx elements), widened to float exactly;
 * q int8 row-major (ldq elements); all pointers are device pointers.
 *
 * Shared by AMD (clang -x hip) and NVIDIA (nvcc -x cu) builds.
 *
 * Work split: the static modes use one block per row (grid-strided over the
 * rows), the threads striding over k. The dynamic modes use one block per
 * row as well: each thread reduces its k's, then a shared-memory tree
 * reduces the block (any tree gives the reference's result: quant_ops.h).
 *
 * The launcher queues one kernel on the stream and returns the launch
 * status; m > 0 and every argument has been validated by lib/check.c.
 *
 * NVIDIA sm_90+: each block first lets the next kernel in the stream
 * launch (griddepcontrol.launch_dependents), then waits for the kernel
 * ahead of it (griddepcontrol.wait), and the kernel is launched with
 * programmatic stream serialization when the decode kernels are (see
 * smm_decode_pdl_allowed). A decode GEMM queued after the quantizer then
 * starts on the SMs the quantizer leaves free and reads its packed
 * weights while the activations are quantized; it reads the activations
 * only after its own wait, which returns once the quantizer has finished
 * and its writes are visible. Stream order is kept: no kernel touches
 * memory another wrote before that kernel's wait.
 */
#include "launch.h"
#include "quant_ops.h"

#include <float.h>
#include <stdint.h>

namespace {

enum { QBLOCK = 256 }; /* threads per block */
enum { QMAX_GRID = 65535 };

/* ------------------------------------------------------------------ */
/* Inputs                                                              */
/* ------------------------------------------------------------------ */

/* The widening conversions are smm_epi_f16_to_f32 / smm_epi_bf16_to_f32
 * (epilogue.h), which tests/check_gpu_convert.c checks on the host. */

/* Element k of a row, widened exactly. DT is the smm_dtype of x. */
template <int DT> SMM_DEV float q_load(const void *row, int64_t k)
{
    if (DT == SMM_DTYPE_F32)
        return ((const float *)row)[k];
    if (DT == SMM_DTYPE_F16)
        return smm_epi_f16_to_f32(((const uint16_t *)row)[k]);
    return smm_epi_bf16_to_f32(((const uint16_t *)row)[k]);
}

template <int DT> SMM_DEV const void *q_row(const void *x, int64_t i, int64_t ldx)
{
    const int64_t es = DT == SMM_DTYPE_F32 ? 4 : 2;
    return (const char *)x + i * ldx * es;
}

/* ------------------------------------------------------------------ */
/* Kernels                                                             */
/* ------------------------------------------------------------------ */

/* The first instructions of every quantizer block (above): no-ops unless
 * the kernel was launched with programmatic stream serialization. */
SMM_DEV void q_dependent_launch_begin()
{
#if defined(SMM_GPU_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* Static per-tensor: scale[0] (and azp[0] when azp != NULL) are inputs. */
template <int DT>
__global__ void __launch_bounds__(QBLOCK)
smm_q_static(const void *x, int64_t ldx, int8_t *q, int64_t ldq, int64_t m, int64_t k,
             const float *scale, const int32_t *azp)
{
    q_dependent_launch_begin();
    const float s = scale[0];

    for (int64_t i = SMM_BID_X; i < m; i += SMM_GDIM_X) {
        const void *xr = q_row<DT>(x, i, ldx);
        int8_t *qr = q + i * ldq;
        if (azp == NULL) {
            for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
                qr[kk] = q_static_sym(q_load<DT>(xr, kk), s);
        } else {
            const float inv = q_div(1.0f, s);
            const int32_t z = azp[0];
            for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
                qr[kk] = q_scaled_asym(q_load<DT>(xr, kk), inv, z);
        }
    }
}

/* Tree reduction of one value per thread over the block (QBLOCK threads,
 * a power of two); every thread returns the block's result. OP 0: max,
 * 1: min (NaN never reaches here: each thread's value is already NaN-free). */
template <int OP> SMM_DEV float q_block_reduce(float v, float *sh)
{
    const int t = SMM_TID_X;

    sh[t] = v;
    SMM_SYNCTHREADS();
    for (int half = QBLOCK / 2; half > 0; half /= 2) {
        if (t < half)
            sh[t] = OP == 0 ? q_max(sh[t], sh[t + half]) : q_min(sh[t], sh[t + half]);
        SMM_SYNCTHREADS();
    }
    v = sh[0];
    SMM_SYNCTHREADS(); /* sh is reused by the next reduction */
    return v;
}

/* The symmetric row (also the fallback of degenerate asymmetric rows). */
template <int DT>
SMM_DEV void q_row_symmetric(const void *xr, int8_t *qr, int64_t k, float amax, float *scale_out,
                             int32_t *azp_out)
{
    const float inv = q_sym_inv(amax);

    for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
        qr[kk] = q_scaled_sym(q_load<DT>(xr, kk), inv);
    if (SMM_TID_X == 0) {
        *scale_out = q_sym_scale(amax);
        if (azp_out != NULL)
            *azp_out = 0;
    }
}

/* Dynamic per-token symmetric: scale[i] written, one block per row. */
template <int DT>
__global__ void __launch_bounds__(QBLOCK)
smm_q_dynamic_sym(const void *x, int64_t ldx, int8_t *q, int64_t ldq, int64_t m, int64_t k,
                  float *scale)
{
    __shared__ float sh[QBLOCK];

    q_dependent_launch_begin();

    for (int64_t i = SMM_BID_X; i < m; i += SMM_GDIM_X) {
        const void *xr = q_row<DT>(x, i, ldx);
        float amax = 0.0f;
        for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
            amax = q_max(amax, q_abs(q_load<DT>(xr, kk)));
        amax = q_block_reduce<0>(amax, sh);
        q_row_symmetric<DT>(xr, q + i * ldq, k, amax, &scale[i], NULL);
    }
}

/* Dynamic per-token asymmetric: scale[i] and azp[i] written. */
template <int DT>
__global__ void __launch_bounds__(QBLOCK)
smm_q_dynamic_asym(const void *x, int64_t ldx, int8_t *q, int64_t ldq, int64_t m, int64_t k,
                   float *scale, int32_t *azp)
{
    __shared__ float sh[QBLOCK];

    q_dependent_launch_begin();

    for (int64_t i = SMM_BID_X; i < m; i += SMM_GDIM_X) {
        const void *xr = q_row<DT>(x, i, ldx);
        int8_t *qr = q + i * ldq;
        float mn = FLT_MAX, mx = -FLT_MAX, s;
        for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK) {
            const float v = q_load<DT>(xr, kk);
            mn = q_min(mn, v);
            mx = q_max(mx, v);
        }
        mn = q_block_reduce<1>(mn, sh);
        mx = q_block_reduce<0>(mx, sh);

        float inv;
        int32_t z;
        if (!q_asym_params(mn, mx, &s, &inv, &z)) {
            float amax = 0.0f;
            for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
                amax = q_max(amax, q_abs(q_load<DT>(xr, kk)));
            amax = q_block_reduce<0>(amax, sh);
            q_row_symmetric<DT>(xr, qr, k, amax, &scale[i], &azp[i]);
            continue;
        }
        {
            for (int64_t kk = SMM_TID_X; kk < k; kk += QBLOCK)
                qr[kk] = q_scaled_asym(q_load<DT>(xr, kk), inv, z);
            if (SMM_TID_X == 0) {
                scale[i] = s;
                azp[i] = z;
            }
        }
    }
}

#if defined(SMM_GPU_NVIDIA)
/* Whether kern may be launched with programmatic stream serialization on
 * the current device: programmatic launches are on, and the code object
 * the driver loaded for it has the sm_90 instructions of
 * q_dependent_launch_begin (one cache per kernel, per device: 0 not
 * asked, 1 yes, -1 no). */
template <typename K> static bool q_pdl_ok(K kern, signed char (&cache)[64])
{
    int cc = 0, sms = 0;
    smm_device_info(&cc, &sms);
    if (cc < 90 || !smm_decode_pdl_allowed())
        return false;
    const int dev = smm_cache_dev();
    if (cache[dev] == 0) {
        cudaFuncAttributes attr;
        cache[dev] = cudaFuncGetAttributes(&attr, kern) == cudaSuccess &&
                             attr.binaryVersion >= 90 && attr.ptxVersion >= 90
                         ? 1
                         : -1;
        (void)cudaGetLastError();
    }
    return cache[dev] > 0;
}
#endif

/* One launch of kern over `grid` blocks: with programmatic stream
 * serialization where q_pdl_ok allows it (a refused one is made again
 * without), else a plain launch. */
template <typename... KArgs, typename... Args>
static gpuError_t q_launch_kernel(void (*kern)(KArgs...), signed char (&pdl_cache)[64],
                                  unsigned grid, gpuStream_t stream, Args... args)
{
#if defined(SMM_GPU_NVIDIA)
    if (q_pdl_ok(kern, pdl_cache)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        memset(&cfg, 0, sizeof cfg);
        memset(&at, 0, sizeof at);
        cfg.gridDim = dim3(grid, 1, 1);
        cfg.blockDim = dim3(QBLOCK, 1, 1);
        cfg.stream = stream;
        at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, kern, args...) == gpuSuccess)
            return gpuSuccess;
        (void)gpuGetLastError(); /* the refused launch's error */
    }
#else
    (void)pdl_cache;
#endif
    kern<<<grid, QBLOCK, 0, stream>>>(args...);
    return gpuGetLastError();
}

template <int DT> gpuError_t q_launch(const smm_quantize_args *a, gpuStream_t stream)
{
    static signed char pdl_static[64], pdl_sym[64], pdl_asym[64];
    const unsigned grid = (unsigned)(a->m < QMAX_GRID ? a->m : QMAX_GRID);

    if (a->mode == SMM_QUANT_STATIC_PER_TENSOR)
        return q_launch_kernel(smm_q_static<DT>, pdl_static, grid, stream, a->x, a->ldx, a->q,
                               a->ldq, a->m, a->k, (const float *)a->scale, a->azp);
    if (a->azp == NULL)
        return q_launch_kernel(smm_q_dynamic_sym<DT>, pdl_sym, grid, stream, a->x, a->ldx, a->q,
                               a->ldq, a->m, a->k, a->scale);
    return q_launch_kernel(smm_q_dynamic_asym<DT>, pdl_asym, grid, stream, a->x, a->ldx, a->q,
                           a->ldq, a->m, a->k, a->scale, a->azp);
}

} /* namespace */

gpuError_t smm_gpu_launch_quantize(const smm_quantize_args *q, gpuStream_t stream)
{
    switch (q->x_dtype) {
    case SMM_DTYPE_F16:
        return q_launch<SMM_DTYPE_F16>(q, stream);
    case SMM_DTYPE_BF16:
        return q_launch<SMM_DTYPE_BF16>(q, stream);
    default: /* F32 (validated) */
        return q_launch<SMM_DTYPE_F32>(q, stream);
    }
}
