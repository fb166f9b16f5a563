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
 * Work split: one block per row, grid-strided over the rows. Rows whose
 * start is 16-byte aligned, with k a multiple of the 16-byte chunk (8
 * f16 / bf16 or 4 f32 elements) and at most 8192 chunks, take smm_q_rows:
 * each thread loads up to 8 chunks of the row with 16-byte loads (thread t
 * chunks t, t + T, ...; T threads, a multiple of 32, as few chunks each as
 * the row allows), keeps them in registers, the block reduces the row's
 * amax (or min and max) with warp shuffles and one shared-memory step, and
 * the threads quantize their chunks from registers, storing 8 or 4 bytes
 * at once where q allows it: the row is read from memory once, in one
 * round of loads. Every other row takes the element-strided kernels
 * (256 threads, each striding over k; the same block reduction). Any
 * reduction tree gives the reference's result (quant_ops.h).
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
#include "trace.h"

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

enum { QV_BYTES = 16, QV_MAX_THREADS = 1024, QV_MAX_CH = 8 };
enum { Q_STATIC = 0, Q_DYNAMIC_SYM = 1, Q_DYNAMIC_ASYM = 2 };

#if defined(SMM_GPU_NVIDIA)
enum { QV_SHARED = 32 }; /* one partial per warp */
#else
enum { QV_SHARED = QV_MAX_THREADS }; /* one per thread: a shared-memory tree */
#endif

/* OP 0: q_max, 1: q_min. */
template <int OP> SMM_DEV float q_op(float a, float b)
{
    return OP == 0 ? q_max(a, b) : q_min(a, b);
}

/* The block's max (OP 0) or min (OP 1) of one value per thread (NaN
 * never reaches here: each thread's value is already NaN-free); any block
 * size that is a multiple of 32, up to 1024; sh: QV_SHARED floats, or as
 * many as the block has threads. Every thread returns the result. */
template <int OP> SMM_DEV float q_block_reduce(float v, float *sh)
{
    const int t = SMM_TID_X, nt = SMM_BDIM_X;
#if defined(SMM_GPU_NVIDIA)
    for (int o = 16; o > 0; o /= 2)
        v = q_op<OP>(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    if ((t & 31) == 0)
        sh[t / 32] = v;
    SMM_SYNCTHREADS();
    v = sh[0];
    for (int w = 1; w < nt / 32; w++)
        v = q_op<OP>(v, sh[w]);
#else
    sh[t] = v;
    SMM_SYNCTHREADS();
    for (int half = QV_MAX_THREADS / 2; half > 0; half /= 2) {
        if (t < half && t + half < nt)
            sh[t] = q_op<OP>(sh[t], sh[t + half]);
        SMM_SYNCTHREADS();
    }
    v = sh[0];
#endif
    SMM_SYNCTHREADS(); /* sh is reused by the next reduction */
    return v;
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

/* ------------------------------------------------------------------ */
/* Rows held in registers (the header's fast form)                     */
/* ------------------------------------------------------------------ */

/* The V = 16 / element size elements of a 16-byte chunk, widened exactly
 * (little-endian: element 0 in the low bytes). */
template <int DT> SMM_DEV void q_unpack(const uint4 &c, float *f)
{
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (DT == SMM_DTYPE_F32) {
            f[j] = __uint_as_float(w[j]);
        } else if (DT == SMM_DTYPE_F16) {
            f[2 * j] = smm_epi_f16_to_f32((uint16_t)(w[j] & 0xFFFFu));
            f[2 * j + 1] = smm_epi_f16_to_f32((uint16_t)(w[j] >> 16));
        } else {
            f[2 * j] = smm_epi_bf16_to_f32((uint16_t)(w[j] & 0xFFFFu));
            f[2 * j + 1] = smm_epi_bf16_to_f32((uint16_t)(w[j] >> 16));
        }
    }
}

/*
 * One block per row (grid-strided), the row in registers: thread t holds
 * chunks t + j * T (j < CH, T = blockDim.x) of the row's k / V chunks.
 * MODE Q_STATIC: scale[0] (and azp[0] when azp != NULL) are inputs;
 * Q_DYNAMIC_SYM: scale[i] written; Q_DYNAMIC_ASYM: scale[i] and azp[i]
 * written. q_wide: q and ldq allow one V-byte store per chunk (else byte
 * stores). The element forms are quant_ops.h's, as in the kernels above.
 */
template <int DT, int CH, int MODE>
__global__ void __launch_bounds__(QV_MAX_THREADS)
smm_q_rows(const void *x, int64_t ldx, int8_t *q, int64_t ldq, int64_t m, int64_t k,
           float *scale, int32_t *azp, int q_wide)
{
    enum { V = DT == SMM_DTYPE_F32 ? 4 : 8 };
    __shared__ float sh[QV_SHARED];
    const int t = SMM_TID_X, nt = SMM_BDIM_X;
    const int64_t nc = k / V;
    SMM_TRACE_DECL;
    SMM_TRACE_AT(0);

    q_dependent_launch_begin();
    SMM_TRACE_AT(1);

    for (int64_t i = SMM_BID_X; i < m; i += SMM_GDIM_X) {
        const uint4 *xr = (const uint4 *)q_row<DT>(x, i, ldx);
        int8_t *qr = q + i * ldq;
        uint4 c[CH];

#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int64_t ci = t + (int64_t)j * nt;
            if (ci < nc)
                c[j] = xr[ci];
        }

        /* The row's parameters: sym (symmetric, factor inv or divisor s)
         * or asymmetric (inv, z). */
        bool sym = true, divide = false;
        float inv = 0.0f, s = 0.0f, amax = 0.0f;
        int32_t z = 0;
        if (MODE == Q_STATIC) {
            s = scale[0];
            if (azp == NULL) {
                divide = true;
            } else {
                sym = false;
                inv = q_div(1.0f, s);
                z = azp[0];
            }
        } else {
            float mn = FLT_MAX, mx = -FLT_MAX;
#pragma unroll
            for (int j = 0; j < CH; j++) {
                if (t + (int64_t)j * nt < nc) {
                    float f[V];
                    q_unpack<DT>(c[j], f);
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        if (MODE == Q_DYNAMIC_SYM) {
                            amax = q_max(amax, q_abs(f[e]));
                        } else {
                            mn = q_min(mn, f[e]);
                            mx = q_max(mx, f[e]);
                        }
                    }
                }
            }
            if (MODE == Q_DYNAMIC_ASYM) {
                mn = q_block_reduce<1>(mn, sh);
                mx = q_block_reduce<0>(mx, sh);
                sym = !q_asym_params(mn, mx, &s, &inv, &z);
                if (sym) { /* degenerate: the symmetric row, azp 0 */
#pragma unroll
                    for (int j = 0; j < CH; j++) {
                        if (t + (int64_t)j * nt < nc) {
                            float f[V];
                            q_unpack<DT>(c[j], f);
#pragma unroll
                            for (int e = 0; e < V; e++)
                                amax = q_max(amax, q_abs(f[e]));
                        }
                    }
                }
            }
            if (sym) {
                amax = q_block_reduce<0>(amax, sh);
                inv = q_sym_inv(amax);
            }
        }

#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int64_t ci = t + (int64_t)j * nt;
            if (ci < nc) {
                float f[V];
                uint32_t p[V / 4];
                q_unpack<DT>(c[j], f);
#pragma unroll
                for (int w = 0; w < V / 4; w++)
                    p[w] = 0;
#pragma unroll
                for (int e = 0; e < V; e++) {
                    const int8_t v = divide ? q_static_sym(f[e], s)
                                     : sym  ? q_scaled_sym(f[e], inv)
                                            : q_scaled_asym(f[e], inv, z);
                    p[e / 4] |= (uint32_t)(uint8_t)v << (8 * (e % 4));
                }
                int8_t *dst = qr + ci * V;
                if (q_wide) {
                    if (V == 8)
                        *(uint2 *)dst = make_uint2(p[0], p[V / 4 - 1]);
                    else
                        *(uint32_t *)dst = p[0];
                } else {
#pragma unroll
                    for (int e = 0; e < V; e++)
                        dst[e] = (int8_t)(p[e / 4] >> (8 * (e % 4)));
                }
            }
        }
        if (MODE != Q_STATIC && t == 0) {
            scale[i] = sym ? q_sym_scale(amax) : s;
            if (azp != NULL)
                azp[i] = sym ? 0 : z;
        }
    }
    SMM_TRACE_AT(2);
    SMM_TRACE_END(SMM_TRACE_QUANT, q);
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
                                  unsigned grid, unsigned block, gpuStream_t stream,
                                  Args... args)
{
#if defined(SMM_GPU_NVIDIA)
    if (q_pdl_ok(kern, pdl_cache)) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        memset(&cfg, 0, sizeof cfg);
        memset(&at, 0, sizeof at);
        cfg.gridDim = dim3(grid, 1, 1);
        cfg.blockDim = dim3(block, 1, 1);
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
    kern<<<grid, block, 0, stream>>>(args...);
    return gpuGetLastError();
}

/* smm_q_rows<DT, CH, MODE> over grid blocks of `block` threads. */
template <int DT, int CH, int MODE>
static gpuError_t q_launch_rows_mode(const smm_quantize_args *a, unsigned grid, unsigned block,
                                     int q_wide, gpuStream_t stream)
{
    static signed char pdl[64];
    return q_launch_kernel(smm_q_rows<DT, CH, MODE>, pdl, grid, block, stream, a->x, a->ldx,
                           a->q, a->ldq, a->m, a->k, a->scale, a->azp, q_wide);
}

template <int DT, int CH>
static gpuError_t q_launch_rows_ch(const smm_quantize_args *a, unsigned grid, unsigned block,
                                   int q_wide, gpuStream_t stream)
{
    if (a->mode == SMM_QUANT_STATIC_PER_TENSOR)
        return q_launch_rows_mode<DT, CH, Q_STATIC>(a, grid, block, q_wide, stream);
    if (a->azp == NULL)
        return q_launch_rows_mode<DT, CH, Q_DYNAMIC_SYM>(a, grid, block, q_wide, stream);
    return q_launch_rows_mode<DT, CH, Q_DYNAMIC_ASYM>(a, grid, block, q_wide, stream);
}

/* Whether smm_q_rows takes these rows (the header's conditions); if so,
 * its chunks per thread and threads per block, and whether q takes
 * chunk-wide stores. */
template <int DT>
static bool q_rows_fit(const smm_quantize_args *a, int *ch, unsigned *block, int *q_wide)
{
    const int64_t v = DT == SMM_DTYPE_F32 ? 4 : 8; /* elements a chunk */
    if (a->k <= 0 || a->k % v != 0 || (uintptr_t)a->x % QV_BYTES != 0 ||
        (a->m > 1 && a->ldx % v != 0)) /* ldx * element size: whole chunks */
        return false;
    const int64_t nc = a->k / v;
    if (nc > (int64_t)QV_MAX_THREADS * QV_MAX_CH)
        return false;
    smm_gpu_force f; /* q_chunks: a tuning program's lower bound */
    smm_gpu_force_get(&f);
    int c = 1;
    while (nc > (int64_t)QV_MAX_THREADS * c || (c < f.q_chunks && c < QV_MAX_CH))
        c *= 2;
    *ch = c;
    *block = (unsigned)(((nc + c - 1) / c + 31) / 32 * 32);
    *q_wide = (uintptr_t)a->q % (uintptr_t)v == 0 && a->ldq % v == 0;
    return true;
}

template <int DT> gpuError_t q_launch(const smm_quantize_args *a, gpuStream_t stream)
{
    static signed char pdl_static[64], pdl_sym[64], pdl_asym[64];
    const unsigned grid = (unsigned)(a->m < QMAX_GRID ? a->m : QMAX_GRID);
    int ch = 0, q_wide = 0;
    unsigned block = 0;

    if (q_rows_fit<DT>(a, &ch, &block, &q_wide)) {
        switch (ch) {
        case 1:
            return q_launch_rows_ch<DT, 1>(a, grid, block, q_wide, stream);
        case 2:
            return q_launch_rows_ch<DT, 2>(a, grid, block, q_wide, stream);
        case 4:
            return q_launch_rows_ch<DT, 4>(a, grid, block, q_wide, stream);
        default:
            return q_launch_rows_ch<DT, 8>(a, grid, block, q_wide, stream);
        }
    }
    if (a->mode == SMM_QUANT_STATIC_PER_TENSOR)
        return q_launch_kernel(smm_q_static<DT>, pdl_static, grid, QBLOCK, stream, a->x, a->ldx,
                               a->q, a->ldq, a->m, a->k, (const float *)a->scale, a->azp);
    if (a->azp == NULL)
        return q_launch_kernel(smm_q_dynamic_sym<DT>, pdl_sym, grid, QBLOCK, stream, a->x,
                               a->ldx, a->q, a->ldq, a->m, a->k, a->scale);
    return q_launch_kernel(smm_q_dynamic_asym<DT>, pdl_asym, grid, QBLOCK, stream, a->x, a->ldx,
                           a->q, a->ldq, a->m, a->k, a->scale, a->azp);
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

#if defined(SMM_GPU_NVIDIA)
/* The trace records of this file's kernels (trace.h). */
int smm_quant_trace_take(unsigned long long *out, int max)
{
    return SMM_TRACE_TAKE_TU(out, max);
}
#endif
