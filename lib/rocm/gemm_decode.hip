/*
 * gemm_decode.hip - the NVIDIA decode kernels, for M <= 32 (token
 * generation) with 16-byte aligned rows. Which one runs is select.hip's
 * choice; smm_decode_plan here picks the launch parameters of the mma.sync
 * one. Empty in an AMD build.
 *
 *   decode_kernel      sm_80+: B is the 16-row mma operand and the tokens
 *                      the 8-column one, so every weight byte is read once,
 *                      with 16-byte loads straight into the mma fragments;
 *                      the warps of a block split K and add their int32
 *                      partial sums in shared memory before the epilogue.
 *                      On sm_90+ it is launched with programmatic dependent
 *                      launch and waits for the previous kernel in its
 *                      first instruction; with a packed B (K <= 8192) it
 *                      first loads its first weights, and may let the next
 *                      kernel launch right after its wait, first copying
 *                      up to 72 KiB (64 KiB) of its weights into shared
 *                      memory (the "shared-memory form").
 *   decode_tma_kernel  sm_90a code objects: a producer warp fills
 *                      shared-memory stages with tensor copies of 64 weight
 *                      rows and the padded tokens, a warpgroup runs m64nNk32
 *                      wgmmas (weights as the 64-row operand, tokens as the
 *                      N = 8, 16 or 32 one); clusters split K.
 *   decode_ring_kernel sm_90a code objects: all 128 threads copy 64 weight
 *                      rows and the tokens with cp.async into a shared-
 *                      memory ring of up to eight 256-byte slots of K that
 *                      m64nNk32 wgmmas read (N = 8, 16 or 32); clusters
 *                      split K. At N = 32 the outputs go through shared
 *                      memory and out in 16-byte pieces of C's rows.
 *
 * SMM_GPU_PDL=0 in the environment launches them without programmatic
 * dependent launch.
 */
#include "launch.h"
#include "quant_ops.h"
#include "trace.h"

#if defined(SMM_GPU_NVIDIA)

SMM_DEV uint4 smm_ld_stream16(const int8_t *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

SMM_DEV uint4 smm_ld_cached16(const int8_t *p)
{
    return __ldg((const uint4 *)p);
}

#define SMM_DEC_WARPS 8
/* The decode kernel's shared-memory form (BS 2): bytes per chunk step of
 * a block's warps and row group; at most 9 steps with one row group (72
 * KiB: three blocks fit an SM), 4 with two (64 KiB: two blocks per SM and
 * a larger L1 for the tokens; the other sizes were slower). */
#define SMM_DEC_PRE_STEP (2 * 512 * SMM_DEC_WARPS)
#define SMM_DEC_PRE_MAX 9
#define SMM_DEC_PRE_MAX2 4

/* Loads in flight per thread and K step: enough 16-byte loads to cover the
 * memory latency, within about 96 registers of loaded data (two steps for
 * TG = G = 2, which would otherwise spill within 128 registers). */
template <int TG, int G> struct smm_dec_unroll {
    static const int v = 8 * G + 4 * TG <= 24 && !(TG == 2 && G == 2) ? 4 : 2;
};

/* Blocks per SM the register allocation must allow (__launch_bounds__):
 * left to itself, ptxas gave TG = G = 2 162 registers on sm_90 (and
 * TG = 4, G = 2 128 or 130, depending on small changes elsewhere): above
 * 128, one block of 256 threads fits an SM, which read the weights much
 * slower than two.
 * Three for the smallest variant (80 registers); one for the G = 4
 * variants, which would spill within 128 and run only when forced. */
template <int TG, int G> struct smm_dec_minblocks {
    static const int v = G == 4 ? 1 : (TG == 1 && G == 1 ? 3 : 2);
};

/* Waits for this thread's cp.async copies; a compiler barrier for the
 * shared-memory reads after it. */
SMM_DEV void smm_cp_async_wait_all()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

SMM_DEV unsigned smm_cluster_rank()
{
    unsigned r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
    return r;
}

SMM_DEV void smm_cluster_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

SMM_DEV void smm_cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

/* The address of the same shared variable in block `rank` of the cluster. */
SMM_DEV int32_t *smm_cluster_map(int32_t *p, unsigned rank)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t out;
    asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"((uint64_t)p), "r"(rank));
    return (int32_t *)out;
#else
    (void)rank;
    return p;
#endif
}

/* The decode kernel's own quantization of its tokens (QX, the x dtype:
 * SMM_DEC_QX_*), for smm_linear at M <= SMM_DEC_QX_ROWS. */
enum { SMM_DEC_QX_NONE = 0, SMM_DEC_QX_F32, SMM_DEC_QX_F16, SMM_DEC_QX_BF16 };

/* A row's quantization (quant_ops.h): x / f (the static symmetric mode),
 * x * f (symmetric), or x * f + z (asymmetric). */
enum { SMM_DEC_Q_DIV = 0, SMM_DEC_Q_SYM, SMM_DEC_Q_ASYM };

/* Element widening of x (exact). */
template <int QX> SMM_DEV float smm_dec_widen(uint32_t bits)
{
    if (QX == SMM_DEC_QX_F32)
        return __uint_as_float(bits);
    if (QX == SMM_DEC_QX_F16)
        return smm_epi_f16_to_f32((uint16_t)bits);
    return smm_epi_bf16_to_f32((uint16_t)bits);
}

/* The raw bits of one piece of x: 16 elements (64 bytes of F32, 32 of F16
 * or BF16) from element k0 of a row whose base is 16-byte aligned. n < 16:
 * only the first n elements are read (the rest are zero bits). */
template <int QX> struct smm_dec_piece {
    static const int W = QX == SMM_DEC_QX_F32 ? 4 : 2; /* 16-byte words */
    uint4 w[W];
};

template <int QX>
SMM_DEV void smm_dec_piece_load(smm_dec_piece<QX> &pc, const unsigned char *row, int64_t k0, int n)
{
    const int es = QX == SMM_DEC_QX_F32 ? 4 : 2;
    if (n >= 16) {
#pragma unroll
        for (int i = 0; i < smm_dec_piece<QX>::W; i++)
            pc.w[i] = __ldg((const uint4 *)(row + k0 * es) + i);
        return;
    }
    uint32_t u[4 * smm_dec_piece<QX>::W];
#pragma unroll
    for (int i = 0; i < 4 * smm_dec_piece<QX>::W; i++)
        u[i] = 0;
#pragma unroll
    for (int i = 0; i < 16; i++)
        if (i < n) {
            const uint32_t v = es == 4 ? ((const uint32_t *)row)[k0 + i]
                                       : ((const uint16_t *)row)[k0 + i];
            if (es == 4)
                u[i] = v;
            else
                u[i / 2] |= v << (16 * (i % 2));
        }
#pragma unroll
    for (int i = 0; i < smm_dec_piece<QX>::W; i++)
        pc.w[i] = make_uint4(u[4 * i], u[4 * i + 1], u[4 * i + 2], u[4 * i + 3]);
}

/* Element i (< 16) of a piece, widened. */
template <int QX> SMM_DEV float smm_dec_piece_at(const smm_dec_piece<QX> &pc, int i)
{
    const int per = QX == SMM_DEC_QX_F32 ? 4 : 8; /* elements per word */
    const uint4 &w = pc.w[i / per];
    const int j = (i % per) / (per / 4);
    const uint32_t u = j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
    if (QX == SMM_DEC_QX_F32)
        return smm_dec_widen<QX>(u);
    return smm_dec_widen<QX>((i % 2) ? u >> 16 : u & 0xFFFFu);
}

/*
 * Every thread of the block: quantizes rows 0 .. d.m - 1 (d.m <= 4) of x
 * (fz) into the token rows `tok` (row stride ts, each padded with zeros to
 * whole 64-byte chunks), exactly as smm_quantize_i8 does (quant_ops.h),
 * after the block has reduced each row's amax (and min and max) in the
 * dynamic mode; the grid's block 0 also writes q and, dynamic, the scales
 * and zero points. Returns with the rows in place (barrier); e's scale_a
 * and azp then point at the block's copies of the dynamic scales and zero
 * points (in shared memory). NT threads, one 16-element piece of x each at
 * a time (two in flight spilled registers), pieces past K zeros.
 */
struct smm_dec_rows {
    const float *scale;   /* the block's copy of the dynamic scales */
    const int32_t *azp;   /* and zero points (asymmetric) */
};

template <int QX, int NT>
SMM_DEV smm_dec_rows smm_dec_tokens(const smm_mm_dims &d, const smm_dec_fuse fz, int8_t *tok,
                                    int64_t ts)
{
    const int NW = NT / 32, MR = SMM_DEC_QX_ROWS;
    __shared__ float wst[3][NW][MR];             /* per warp: amax, min, max */
    __shared__ float rf[MR], rs[MR];
    __shared__ int32_t rz[MR];
    __shared__ int rk[MR];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int es = QX == SMM_DEC_QX_F32 ? 4 : 2;
    const int64_t upr = (d.k + 63) / 64 * 4; /* pieces per padded row */
    const int64_t total = d.m * upr;
    const bool asym = fz.azp != NULL;
    const unsigned char *const xb = (const unsigned char *)fz.x;
    const int64_t ldxb = fz.ldx * es;
    auto row = [=](int r) { return xb + (int64_t)r * ldxb; };

    if (fz.dynamic) {
        float a[MR], lo[MR], hi[MR];
#pragma unroll
        for (int r = 0; r < MR; r++)
            a[r] = 0.0f, lo[r] = FLT_MAX, hi[r] = -FLT_MAX;
        for (int64_t p = tid; p < total; p += NT) {
            const int r = (int)(p / upr);
            const int64_t k0 = (p - r * upr) * 16;
            const int n = (int)min((int64_t)16, d.k - k0);
            if (n <= 0)
                continue; /* padding past K */
            smm_dec_piece<QX> pc;
            smm_dec_piece_load<QX>(pc, row(r), k0, n);
            float pa = 0.0f, pl = FLT_MAX, ph = -FLT_MAX;
#pragma unroll
            for (int i = 0; i < 16; i++)
                if (i < n) {
                    const float v = smm_dec_piece_at<QX>(pc, i);
                    pa = q_max(pa, q_abs(v));
                    pl = q_min(pl, v);
                    ph = q_max(ph, v);
                }
#pragma unroll
            for (int rr = 0; rr < MR; rr++)
                if (rr == r) {
                    a[rr] = q_max(a[rr], pa);
                    lo[rr] = q_min(lo[rr], pl);
                    hi[rr] = q_max(hi[rr], ph);
                }
        }
        /* NaN-free values: any reduction order gives the row's (quant_ops.h). */
#pragma unroll
        for (int r = 0; r < MR; r++) {
#pragma unroll
            for (int off = 16; off > 0; off /= 2) {
                a[r] = q_max(a[r], __shfl_xor_sync(0xffffffffu, a[r], off));
                lo[r] = q_min(lo[r], __shfl_xor_sync(0xffffffffu, lo[r], off));
                hi[r] = q_max(hi[r], __shfl_xor_sync(0xffffffffu, hi[r], off));
            }
            if (lane == 0)
                wst[0][warp][r] = a[r], wst[1][warp][r] = lo[r], wst[2][warp][r] = hi[r];
        }
        __syncthreads();
    }
    if (tid < d.m) {
        float f, sc;
        int32_t z = 0;
        int kind;
        if (!fz.dynamic) {
            sc = fz.scale[0];
            if (asym) {
                kind = SMM_DEC_Q_ASYM, f = q_div(1.0f, sc), z = fz.azp[0];
            } else {
                kind = SMM_DEC_Q_DIV, f = sc;
            }
        } else {
            float am = 0.0f, mn = FLT_MAX, mx = -FLT_MAX;
            for (int w = 0; w < NW; w++) {
                am = q_max(am, wst[0][w][tid]);
                mn = q_min(mn, wst[1][w][tid]);
                mx = q_max(mx, wst[2][w][tid]);
            }
            if (asym && q_asym_params(mn, mx, &sc, &f, &z)) {
                kind = SMM_DEC_Q_ASYM;
            } else {
                kind = SMM_DEC_Q_SYM, f = q_sym_inv(am), sc = q_sym_scale(am), z = 0;
            }
            if (blockIdx.x == 0) {
                fz.scale[tid] = sc;
                if (asym)
                    fz.azp[tid] = z;
            }
        }
        rf[tid] = f, rs[tid] = sc, rz[tid] = z, rk[tid] = kind;
    }
    __syncthreads();

    /* The rows themselves; block 0 also writes q. */
    for (int64_t p = tid; p < total; p += NT) {
        const int r = (int)(p / upr);
        const int64_t k0 = (p - r * upr) * 16;
        const int n = (int)max((int64_t)0, min((int64_t)16, d.k - k0));
        smm_dec_piece<QX> pc;
        if (n > 0)
            smm_dec_piece_load<QX>(pc, row(r), k0, n);
        const int kind = rk[r];
        const float f = rf[r];
        const int32_t z = rz[r];
        uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 16; i++)
            if (i < n) {
                const float v = smm_dec_piece_at<QX>(pc, i);
                const int8_t qv = kind == SMM_DEC_Q_DIV   ? q_static_sym(v, f)
                                  : kind == SMM_DEC_Q_SYM ? q_scaled_sym(v, f)
                                                          : q_scaled_asym(v, f, z);
                w[i / 4] |= (uint32_t)(uint8_t)qv << (8 * (i % 4));
            }
        const uint4 v4 = make_uint4(w[0], w[1], w[2], w[3]);
        *(uint4 *)(tok + r * ts + k0) = v4;
        if (blockIdx.x == 0 && n > 0) {
            int8_t *qr = fz.q + r * fz.ldq + k0;
            if (n == 16) {
                *(uint4 *)qr = v4;
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++)
                    if (i < n)
                        qr[i] = (int8_t)(w[i / 4] >> (8 * (i % 4)));
            }
        }
    }
    __syncthreads();
    smm_dec_rows out;
    out.scale = rs;
    out.azp = rz;
    return out;
}

/* 16 bytes of shared memory at p. */
SMM_DEV uint4 smm_ld_shared16(const int8_t *p)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(smm_smem_addr(p)));
    return v;
}

/*
 * One block (or one cluster of S blocks, sm_90+): 16 * G consecutive rows
 * of B (output columns n0 .. n0 + 16 G - 1) for all M <= 8 * TG tokens.
 * Lane (g, q) of a warp reads 16 bytes of B rows n0 + 16 j + g and
 * n0 + 16 j + g + 8 (j < G) and 16 bytes of token rows 8 * t + g, each at
 * byte 64 * chunk + 16 * q; two m16n8k32 mmas per (j, t) consume them (the
 * 64 k of a chunk are fed to the instruction in a permuted order, the same
 * for both operands, which leaves the integer sum unchanged). Each token
 * fragment is loaded once and used for the G row groups, so the token rows
 * are read 16 G times less often than the weights. Warp w of cluster block
 * r takes chunks r * 8 + w, r * 8 + w + 8 S, ...; a K tail shorter than a
 * chunk is read with guarded byte loads. The warps (and the blocks of a
 * cluster) add their int32 partial sums with integer atomics in shared
 * memory (in block 0's through distributed shared memory), which is exact
 * in any order modulo 2^32, and block 0 finishes the elements. Rows past N
 * or M are clamped to the last row (read, never stored). Needs 16-byte
 * aligned rows of A and B. BS: 0, B may be written by the kernel ahead in
 * the stream; 1 or 2, B is a packed B (below).
 */
template <int TG, int G, int S, int BS, int QX>
__device__ __forceinline__ void smm_decode_body(const smm_mm_dims &d, smm_epi_params e,
                                                const smm_dec_fuse &fz)
{
#if defined(SMM_HAVE_MMA)
    static_assert(BS != 2 || (S == 1 && (G == 1 || G == 2)),
                  "the shared-memory form: one or two row groups, no cluster");
    const int U = smm_dec_unroll<TG, G>::v;
    const bool BSTATIC = BS != 0;
    const int NR = G * TG * 4 * 32; /* accumulator words of the block tile */
    __shared__ int32_t red[NR + G * 16];
    int32_t *const csred = red + NR; /* column sums: [G][16] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * 16 * G;
    const bool azp = e.azp != NULL;
    SMM_TRACE_DECL;
    SMM_TRACE_AT(0);

    /* BS 1 and 2 (d.b_static): B is a packed B, complete before smm_pack_b
     * returned and never written by a kernel, so the kernel ahead in the
     * stream cannot be writing it: some weights are read before the wait
     * below, and the shared sums zeroed, while that kernel may still be
     * running. BS 1: the warp's first U steps, into registers. BS 2: its
     * first d.pre steps, copied into shared memory with cp.async (which
     * holds no registers); the launcher takes it for one token and row
     * group when the grid leaves each SM room for a block of the next
     * launch, and for two row groups when the grid is at most three
     * blocks for every two SMs and two fit an SM. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The next programmatically launched kernel in the stream may launch
     * now: its blocks take SM slots as this kernel's blocks exit (or at
     * once where there is room) and, if it is a decode kernel with B
     * static, load their first weights while this one finishes; it still
     * waits for this grid to complete before it reads anything this grid
     * writes. BS 2, and BS 1 with one row group and no cluster, let it
     * launch here, at the start (faster or no slower than after the
     * wait); BS 1 otherwise after the wait below. */
    const bool trigger_at_start = BS == 2 || (BS == 1 && G == 1 && S == 1);
    if (trigger_at_start)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* Lane (g, q)'s bytes of B row n0 + 16 j + 8 h + g (clamped to N). */
    auto wrow = [&](int j, int h) {
        return d.b + min(n0 + 16 * j + 8 * h + g, d.n - 1) * d.ldb + q * 16;
    };
    /* The warp's first chunk and the chunk count are written out here, not
     * shared with the main loop's c, full and CS: computed before the wait,
     * those changed the plain kernel's code (it spilled). */
    uint4 u0[U][G][2];
    const bool have_u =
        BS == 1 && (int64_t)rank * SMM_DEC_WARPS + warp + (U - 1) * S * SMM_DEC_WARPS < d.k / 64;
    if (have_u) {
        const int64_t c0 = (int64_t)rank * SMM_DEC_WARPS + warp;
#pragma unroll
        for (int s = 0; s < U; s++)
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    u0[s][j][h] =
                        smm_ld_stream16(wrow(j, h) + (c0 + s * S * SMM_DEC_WARPS) * 64);
    }
    /* BS 2: [warp][step][j][h][lane]; each lane reads back only the
     * 16-byte pieces it copied itself. */
    extern __shared__ uint4 smm_dec_pre[];
    int npre = 0;
    if (BS == 2) {
        const int64_t c0 = (int64_t)rank * SMM_DEC_WARPS + warp;
        const int64_t nch =
            c0 < d.k / 64 ? (d.k / 64 - 1 - c0) / (S * SMM_DEC_WARPS) + 1 : 0;
        uint4 *const pw = smm_dec_pre + (size_t)warp * d.pre * G * 2 * 32 + lane;
        npre = (int)min((int64_t)d.pre, nch);
        for (int s = 0; s < npre; s++)
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    smm_cp_async16(smm_smem_addr(pw + ((s * G + j) * 2 + h) * 32),
                                   wrow(j, h) + (c0 + s * S * SMM_DEC_WARPS) * 64, 16);
        smm_cp_async_commit();
    }
    if (BSTATIC)
        for (int i = tid; i < NR + G * 16; i += SMM_DEC_WARPS * 32)
            red[i] = 0;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Launched with programmatic stream serialization (d.pdl), the kernel
     * may start while the one ahead of it in the stream is finishing: it
     * waits here for that grid to complete and its memory to be visible
     * before it touches global memory (but a static B, above). Without a
     * prerequisite grid this returns at once. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    /* BS 1 with two or more row groups or a cluster lets the next launch
     * start here (the others did at their start, above). */
    if (BS == 1 && !trigger_at_start)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    SMM_TRACE_AT(1);
    if (!BSTATIC)
        for (int i = tid; i < NR + G * 16; i += SMM_DEC_WARPS * 32)
            red[i] = 0;
    if (S > 1)
        smm_cluster_arrive(); /* waited for before the adds into block 0 */
    else
        __syncthreads();

    /* QX: the tokens quantized by this block into shared memory, after the
     * shared-memory form's weights; the loads below read them there. */
    const int64_t ts = QX ? smm_dec_tok_stride(d.k) : 0;
    int8_t *const tok = (int8_t *)(smm_dec_pre + (size_t)d.pre * G * 2 * 32 * SMM_DEC_WARPS);
    if constexpr (QX != SMM_DEC_QX_NONE) {
        const smm_dec_rows rows = smm_dec_tokens<QX, SMM_DEC_WARPS * 32>(d, fz, tok, ts);
        if (fz.dynamic) { /* the epilogue reads them there */
            e.scale_a = rows.scale;
            e.scale_a_per_row = 1;
            if (fz.azp != NULL) {
                e.azp = rows.azp;
                e.azp_per_row = 1;
            }
        }
    }
    auto xload = [&](const int8_t *p) {
        if constexpr (QX != SMM_DEC_QX_NONE)
            return smm_ld_shared16(p);
        else
            return smm_ld_cached16(p);
    };

    const int8_t *w[G][2];
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            w[j][h] = wrow(j, h);
    const int8_t *x[TG];
#pragma unroll
    for (int t = 0; t < TG; t++)
        x[t] = QX ? tok + min((int64_t)(8 * t + g), d.m - 1) * ts + q * 16
                  : d.a + min((int64_t)(8 * t + g), d.m - 1) * d.lda + q * 16;

    int32_t acc[G][TG][4];
    int32_t cs[G][2];
#pragma unroll
    for (int j = 0; j < G; j++) {
        cs[j][0] = cs[j][1] = 0;
#pragma unroll
        for (int t = 0; t < TG; t++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[j][t][r] = 0;
    }

    auto consume = [&](const uint4 (&u)[G][2], const uint4 (&xs)[TG]) {
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int t = 0; t < TG; t++) {
                smm_mma_16832(acc[j][t], u[j][0].x, u[j][1].x, u[j][0].y, u[j][1].y, xs[t].x,
                              xs[t].y);
                smm_mma_16832(acc[j][t], u[j][0].z, u[j][1].z, u[j][0].w, u[j][1].w, xs[t].z,
                              xs[t].w);
            }
        if (azp) {
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    cs[j][h] = __dp4a((int)u[j][h].x, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].y, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].z, 0x01010101, cs[j][h]);
                    cs[j][h] = __dp4a((int)u[j][h].w, 0x01010101, cs[j][h]);
                }
        }
    };

    const int64_t full = d.k / 64; /* whole 64-byte chunks */
    const int CS = S * SMM_DEC_WARPS;  /* chunk stride of one warp */
    int64_t c = (int64_t)rank * SMM_DEC_WARPS + warp;
    if (have_u) {
        uint4 xs[U][TG];
#pragma unroll
        for (int s = 0; s < U; s++)
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[s][t] = xload(x[t] + (c + s * CS) * 64);
#pragma unroll
        for (int s = 0; s < U; s++)
            consume(u0[s], xs[s]);
        c += U * CS;
    }
    if (BS == 2) {
        /* The steps in shared memory, U at a time (their tokens loaded
         * together), then the rest as below. */
        const uint4 *const pw = smm_dec_pre + (size_t)warp * d.pre * G * 2 * 32 + lane;
        auto wsm = [&](int s, uint4 (&u)[G][2]) {
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    u[j][h] = pw[((s * G + j) * 2 + h) * 32];
        };
        smm_cp_async_wait_all();
        int s = 0;
        for (; s + U <= npre; s += U) {
            uint4 xs[U][TG];
#pragma unroll
            for (int ss = 0; ss < U; ss++)
#pragma unroll
                for (int t = 0; t < TG; t++)
                    xs[ss][t] = xload(x[t] + (c + ss * CS) * 64);
#pragma unroll
            for (int ss = 0; ss < U; ss++) {
                uint4 u[G][2];
                wsm(s + ss, u);
                consume(u, xs[ss]);
            }
            c += U * CS;
        }
        for (; s < npre; s++, c += CS) {
            uint4 u[G][2], xs[TG];
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[t] = xload(x[t] + c * 64);
            wsm(s, u);
            consume(u, xs);
        }
    }
    for (; c + (U - 1) * CS < full; c += U * CS) {
        uint4 u[U][G][2], xs[U][TG];
#pragma unroll
        for (int s = 0; s < U; s++) {
            const int64_t off = (c + s * CS) * 64;
#pragma unroll
            for (int j = 0; j < G; j++) {
                u[s][j][0] = smm_ld_stream16(w[j][0] + off);
                u[s][j][1] = smm_ld_stream16(w[j][1] + off);
            }
#pragma unroll
            for (int t = 0; t < TG; t++)
                xs[s][t] = xload(x[t] + off);
        }
#pragma unroll
        for (int s = 0; s < U; s++)
            consume(u[s], xs[s]);
    }
    for (; c < full; c += CS) {
        uint4 u[G][2], xs[TG];
#pragma unroll
        for (int j = 0; j < G; j++) {
            u[j][0] = smm_ld_stream16(w[j][0] + c * 64);
            u[j][1] = smm_ld_stream16(w[j][1] + c * 64);
        }
#pragma unroll
        for (int t = 0; t < TG; t++)
            xs[t] = xload(x[t] + c * 64);
        consume(u, xs);
    }
    if (full * 64 < d.k && (int64_t)rank * SMM_DEC_WARPS + warp == full % CS) {
        /* The K tail: bytes past K read as zero. */
        const int64_t kk = full * 64 + q * 16;
        uint4 u[G][2], xs[TG];
#pragma unroll
        for (int j = 0; j < G; j++) {
            u[j][0] = smm_load16_guarded(w[j][0] + full * 64, kk, d.k);
            u[j][1] = smm_load16_guarded(w[j][1] + full * 64, kk, d.k);
        }
#pragma unroll
        for (int t = 0; t < TG; t++)
            xs[t] = QX ? xload(x[t] + full * 64) /* zeros past K */
                       : smm_load16_guarded(x[t] + full * 64, kk, d.k);
        consume(u, xs);
    }

    SMM_TRACE_AT(2);

    /* Output o: token o / (16 G), column n0 + o % (16 G) (consecutive
     * threads write consecutive columns). The scales (bias, zero point) of
     * all of a thread's elements are loaded here, together, before the
     * block sums, so that their memory latency overlaps the sums (a few
     * percent faster than loading them after). */
    const int PER = (16 * G * 8 * TG + SMM_DEC_WARPS * 32 - 1) / (SMM_DEC_WARPS * 32);
    smm_epi_in in[PER];
    if (S == 1 || rank == 0) {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DEC_WARPS * 32;
            const int rr = o % (16 * G), m = o / (16 * G);
            if (o < 16 * G * 8 * TG && m < d.m && n0 + rr < d.n)
                in[i] = smm_epi_load(e, m, n0 + rr);
        }
    }

    /* Block sums (layout [G][TG * 4][32]: register, lane). */
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int t = 0; t < TG; t++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                atomicAdd(&red[((j * TG + t) * 4 + r) * 32 + lane], acc[j][t][r]);
    if (azp) {
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int32_t v = cs[j][h];
                v += __shfl_xor_sync(0xffffffffu, v, 1);
                v += __shfl_xor_sync(0xffffffffu, v, 2);
                if (q == 0)
                    atomicAdd(&csred[j * 16 + h * 8 + g], v);
            }
    }
    __syncthreads();
    if (S > 1) {
        smm_cluster_wait(); /* block 0's sums are zeroed */
        if (rank != 0) {
            int32_t *dst = smm_cluster_map(red, 0);
            for (int i = tid; i < NR + (azp ? G * 16 : 0); i += SMM_DEC_WARPS * 32)
                atomicAdd(dst + i, red[i]);
        }
        smm_cluster_arrive();
        smm_cluster_wait();
        if (rank != 0) {
            SMM_TRACE_END(SMM_TRACE_DECODE, d.b);
            return;
        }
    }

    /* The thread's outputs o, finished with the scales loaded above.
     * Element (row r, token mm) of the 16 x 8 tile (j, t) is register
     * (r / 8) * 2 + mm % 2 of lane (r % 8) * 4 + mm / 2. */
    {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DEC_WARPS * 32;
            const int rr = o % (16 * G), m = o / (16 * G);
            const int64_t n = n0 + rr;
            if (o >= 16 * G * 8 * TG || m >= d.m || n >= d.n)
                continue;
            const int j = rr / 16, r = rr % 16, t = m / 8, mm = m % 8;
            const int reg = t * 4 + (r / 8) * 2 + (mm % 2), ln = (r % 8) * 4 + mm / 2;
            const int32_t s = red[(j * TG * 4 + reg) * 32 + ln];
            smm_epi_store_in(e, m, n, s, azp ? csred[j * 16 + r] : 0, in[i]);
        }
    }
    SMM_TRACE_END(SMM_TRACE_DECODE, d.b);
#endif
}

template <int TG, int G, int S, int BS>
__global__ void __launch_bounds__(SMM_DEC_WARPS * 32, (smm_dec_minblocks<TG, G>::v))
smm_decode_kernel(smm_mm_dims d, smm_epi_params e)
{
    smm_decode_body<TG, G, S, BS, SMM_DEC_QX_NONE>(d, e, smm_dec_fuse());
}

/* The decode kernel that quantizes its own tokens: one token group, one
 * row group, no cluster; QX the x dtype. */
template <int BS, int QX>
__global__ void __launch_bounds__(SMM_DEC_WARPS * 32, (smm_dec_minblocks<1, 1>::v))
smm_decode_fused_kernel(smm_mm_dims d, smm_epi_params e, smm_dec_fuse fz)
{
    smm_decode_body<1, 1, 1, BS, QX>(d, e, fz);
}

/* d(64 x NT) = A(64 x 32, smem) * B(NT x 32, smem)^T + (acc ? d : 0),
 * int32 wrapping, for NT = 8, 16, 32 (NT / 2 accumulator registers per
 * thread). */
template <int NT> SMM_DEV void smm_wgmma_64xNx32(int32_t *d, uint64_t da, uint64_t db, int acc);

#if defined(SMM_HAVE_WGMMA)
#define SMM_WGMMA_N_HEAD(n, sd)                                                               \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " sd ", 0;\nwgmma.mma_async.sync.aligned.m64n" #n   \
    "k32.s32.s8.s8 "
#else
#define SMM_WGMMA_N_HEAD(n, sd) ""
#endif

template <> SMM_DEV void smm_wgmma_64xNx32<8>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(8, "%6") "{%0, %1, %2, %3}, %4, %5, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

template <> SMM_DEV void smm_wgmma_64xNx32<16>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(16, "%10") "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
                   "+r"(d[6]), "+r"(d[7])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

template <> SMM_DEV void smm_wgmma_64xNx32<32>(int32_t *d, uint64_t da, uint64_t db, int acc)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile(SMM_WGMMA_N_HEAD(32, "%18") "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                                      "%12, %13, %14, %15}, %16, %17, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]),
                   "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]),
                   "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
#endif
}

#define SMM_DTMA_THREADS 160 /* one consumer warpgroup and a producer warp */

/* Shared memory of the tensor-copy decode kernel with `stages` stages. */
static inline int smm_dtma_smem(int nt, int stages)
{
    return stages * (SMM_DTMA_BR + nt) * 128 + 2 * stages * 8 +
           (nt * (SMM_DTMA_BR + 4) + SMM_DTMA_BR) * 4 + 1024;
}

/*
 * The weights as the 64-row wgmma operand, the tokens (M <= NT, padded
 * with zero rows by the copy engine) as the NT-column one: block (or
 * cluster of S blocks, each a contiguous share of the 128-byte k-tiles)
 * computes output columns n0 .. n0 + 63 for every token. Warp 4 (one
 * thread) issues the tensor copies of each k-tile's 64 x 128-byte weight
 * box and NT x 128-byte token box into `stages` shared-memory stages,
 * 128-byte swizzle, zeros past N, M and K; warps 0-3 (a warpgroup) run
 * four m64nNTk32 wgmmas per stage and hand the stage back through an
 * mbarrier, so up to `stages` k-tiles of weights are in flight per block
 * from the start. The int32 sums (and the weight rows' sums for a zero
 * point) meet in block 0's shared memory (stores, then the other blocks'
 * integer atomics through distributed shared memory: exact in any order
 * modulo 2^32) and block 0 finishes the elements, consecutive threads on
 * consecutive columns. Launched with programmatic dependent launch, it
 * waits (griddepcontrol.wait) before its first global memory access.
 * Needs what the tensor maps need: 16-byte aligned bases, row strides
 * multiples of 16.
 */
template <int NT, int S>
__global__ void __launch_bounds__(SMM_DTMA_THREADS, 1)
smm_decode_tma_kernel(const __grid_constant__ CUtensorMap tma,
                      const __grid_constant__ CUtensorMap tmb, smm_mm_dims d, smm_epi_params e,
                      int stages, int kt_per)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BR = SMM_DTMA_BR, BK = 128, W_BYTES = BR * BK;
    constexpr int STAGE_BYTES = (BR + NT) * BK, LDR = BR + 4;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t smem_base = smm_smem_addr(smem);
    const uint32_t bar_full = smem_base + stages * STAGE_BYTES;
    const uint32_t bar_empty = bar_full + stages * 8;
    int32_t *red = (int32_t *)(smem + stages * STAGE_BYTES + 2 * stages * 8); /* [NT][LDR] */
    int32_t *csred = red + NT * LDR;                                          /* [BR] */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * BR;
    const int ktiles = (int)((d.k + BK - 1) / BK);
    const int kt0 = min((int)rank * kt_per, ktiles), nk = min(kt0 + kt_per, ktiles) - kt0;
    const bool azp = e.azp != NULL;

    if (tid == 0) {
        for (int s = 0; s < stages; s++) {
            smm_mbar_init(bar_full + 8 * s, 1);
            smm_mbar_init(bar_empty + 8 * s, 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tma) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmb) : "memory");
    }
    /* The kernel ahead in the stream (programmatic launch) is complete
     * and its writes visible past this point. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    __syncthreads();

    if (warp == 4) {
        if (lane == 0) {
            for (int i = 0; i < nk; i++) {
                const int s = i % stages;
                const uint32_t st = smem_base + s * STAGE_BYTES;
                smm_mbar_wait(bar_empty + 8 * s, ((i / stages) & 1) ^ 1);
                smm_mbar_expect_tx(bar_full + 8 * s, STAGE_BYTES);
                smm_tma_load_2d(st, &tmb, (kt0 + i) * BK, (int)n0, bar_full + 8 * s);
                smm_tma_load_2d(st + W_BYTES, &tma, (kt0 + i) * BK, 0, bar_full + 8 * s);
            }
        }
        __syncwarp();
    } else {
        /* Warp w of the warpgroup holds weight rows 16 w + g (+ 8),
         * register 4 j + 2 h + c being row 16 w + g + 8 h, token
         * 8 j + 2 q + c. */
        const int g = lane >> 2, q = lane & 3;
        int32_t acc[NT / 2];
        int32_t colsum = 0; /* half (tid & 1) of weight row tid / 2 */
        if (nk <= 0) {
#pragma unroll
            for (int i = 0; i < NT / 2; i++)
                acc[i] = 0;
        }
        /* The first wgmma overwrites the accumulators (scale-d 0): no
         * other instruction defines them while wgmmas are in flight. */
        for (int i = 0; i < nk; i++) {
            const int s = i % stages;
            const uint32_t sw = smem_base + s * STAGE_BYTES, sx = sw + W_BYTES;
            smm_mbar_wait(bar_full + 8 * s, (i / stages) & 1);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 32; kk++)
                smm_wgmma_64xNx32<NT>(acc, smm_wgmma_desc128(sw + 32 * kk),
                                      smm_wgmma_desc128(sx + 32 * kk), i > 0 || kk > 0);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            if (azp) {
                /* Four of the row's eight 16-byte chunks (swizzled: the
                 * two halves hold all eight between them). */
                const unsigned char *pw = smem + s * STAGE_BYTES + (tid >> 1) * BK + (tid & 1) * 64;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint4 v = *(const uint4 *)(pw + c * 16);
                    colsum = __dp4a((int)v.x, 0x01010101, colsum);
                    colsum = __dp4a((int)v.y, 0x01010101, colsum);
                    colsum = __dp4a((int)v.z, 0x01010101, colsum);
                    colsum = __dp4a((int)v.w, 0x01010101, colsum);
                }
            }
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (i > 0)
                smm_mbar_arrive(bar_empty + 8 * ((i - 1) % stages));
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        colsum += __shfl_xor_sync(0xffffffffu, colsum, 1);

        int32_t *dst = red, *dcs = csred;
        if (S > 1 && rank != 0) {
            __syncwarp(); /* the .aligned barrier wants the warp converged */
            smm_cluster_arrive(); /* block 0's own sums are stored */
            smm_cluster_wait();
            dst = smm_cluster_map(red, 0);
            dcs = smm_cluster_map(csred, 0);
        }
        const int nr = (warp << 4) + g;
#pragma unroll
        for (int j = 0; j < NT / 8; j++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int32_t *p = dst + (8 * j + 2 * q + c) * LDR + nr + 8 * h;
                    if (S > 1 && rank != 0)
                        atomicAdd(p, acc[4 * j + 2 * h + c]);
                    else
                        *p = acc[4 * j + 2 * h + c];
                }
        if (azp && (tid & 1) == 0) {
            if (S > 1 && rank != 0)
                atomicAdd(dcs + (tid >> 1), colsum);
            else
                dcs[tid >> 1] = colsum;
        }
        if (S > 1 && rank == 0) {
            __syncwarp();
            smm_cluster_arrive();
            smm_cluster_wait();
        }
    }
    if (S > 1) {
        if (warp == 4) { /* the producer warp takes part in both barriers */
            smm_cluster_arrive();
            smm_cluster_wait();
        }
        smm_cluster_arrive(); /* every block's sums are added */
        smm_cluster_wait();
        if (rank != 0)
            return;
    } else {
        __syncthreads();
    }

    /* Output o: token o / BR, column n0 + o % BR. The scales (bias, zero
     * point) of all of a thread's elements are loaded before any is
     * finished. */
    {
        constexpr int PER = (NT * BR + SMM_DTMA_THREADS - 1) / SMM_DTMA_THREADS;
        const int tot = (int)min((int64_t)NT, d.m) * BR;
        smm_epi_in in[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DTMA_THREADS;
            if (o < tot && n0 + o % BR < d.n)
                in[i] = smm_epi_load(e, o / BR, n0 + o % BR);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int o = tid + i * SMM_DTMA_THREADS, m = o / BR, nl = o % BR;
            if (o >= tot || n0 + nl >= d.n)
                continue;
            smm_epi_store_in(e, m, n0 + nl, red[m * LDR + nl], azp ? csred[nl] : 0, in[i]);
        }
    }
#else
    __shared__ int smm_no_dtma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_dtma)[threadIdx.x & 3] = stages + kt_per + (int)e.ldc;
#endif
}

#define SMM_RING_BR 64 /* weight rows (output columns) per block */
#define SMM_RING_SUB 2 /* 128-byte k-tiles per ring slot */
#define SMM_RING_MAX 8 /* most ring slots */

/* Shared memory of the ring decode kernel with NT token rows and r slots:
 * the slots (each two k-tiles of 64 weight rows and of NT token rows),
 * then the sums the other blocks of a cluster add in, the weight rows'
 * sums and the barrier that counts the other blocks' adds. */
static inline int smm_ring_smem(int nt, int r)
{
    return r * SMM_RING_SUB * (SMM_RING_BR + nt) * 128 + (nt / 2 * 128 + SMM_RING_BR) * 4 + 16 +
           1024;
}

/* The shared::cluster address of the shared variable at (shared::cta)
 * address addr in block `rank` of the cluster. */
SMM_DEV uint32_t smm_cluster_map32(uint32_t addr, unsigned rank)
{
    uint32_t out = addr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
#else
    (void)rank;
#endif
    return out;
}

/* Adds v (modulo 2^32) to the int32 at shared::cluster address addr, in
 * another block of the cluster, and counts its 4 bytes on that block's
 * barrier bar (a shared::cluster address) once done. */
SMM_DEV void smm_red_async_add(uint32_t addr, int32_t v, uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32"
                 " [%0], %1, [%2];\n" ::"r"(addr),
                 "r"(v), "r"(bar)
                 : "memory");
#else
    (void)addr, (void)v, (void)bar;
#endif
}

/* Waits until at most n (0..SMM_RING_MAX) of this thread's cp.async groups
 * are pending. */
SMM_DEV void smm_cp_async_wait_n(int n)
{
    switch (n) {
    case 0: smm_cp_async_wait<0>(); break;
    case 1: smm_cp_async_wait<1>(); break;
    case 2: smm_cp_async_wait<2>(); break;
    case 3: smm_cp_async_wait<3>(); break;
    case 4: smm_cp_async_wait<4>(); break;
    case 5: smm_cp_async_wait<5>(); break;
    case 6: smm_cp_async_wait<6>(); break;
    default: smm_cp_async_wait<7>(); break;
    }
}


/*
 * Block (or cluster of S blocks, each a contiguous share of K's 256-byte
 * slots: `share` each, the last block what is left): output columns
 * n0 .. n0 + 63 for every token (M <= NT, NT = 8, 16 or 32). One
 * warpgroup; each of its 128 threads copies with cp.async four 16-byte
 * pieces of each 128-byte k-tile of the 64 weight rows and NT / 16 of the
 * token rows into a ring of r slots of two k-tiles each (128-byte
 * swizzle; bytes past K zero-filled, rows past N read from the last row
 * and never stored, rows past M likewise or, with PART, not copied), up to
 * r - 2 slots ahead of the one its four m64nNTk32 wgmmas per k-tile read,
 * with one slot of wgmmas left in flight (at the start, all r slots). The
 * weights (and the tokens) are the two shared-memory operands, as in
 * smm_decode_tma_kernel; here every thread keeps copies in flight, which
 * holds no registers. With B static (d.b_static) the first d.pre (r - 2
 * unless forced) slots of
 * weights are copied before griddepcontrol.wait and the next launch is
 * let in at the start; the tokens, and the weights of slots r - 2 and
 * r - 1, always after the wait. The other blocks of a cluster add their
 * sums into block 0's shared memory (red.async, counted on a barrier of
 * block 0's) and leave; block 0 finishes the elements (with NT = 32,
 * written through shared memory as 16-byte pieces of C's rows). AZP
 * (e.azp != NULL): the weight rows' sums are taken from the ring too; a
 * separate instantiation, since that code in the loop makes ptxas
 * serialize the wgmmas (C7515), which the kernel without it avoids.
 * PART (M < NT): the token rows past M are not copied; a separate
 * instantiation, since the same test in the kernel for M = NT made those
 * launches slower, where for M < NT it was faster.
 * Needs 16-byte aligned rows of A and B.
 */
template <int NT, int S, bool AZP, bool PART>
__global__ void __launch_bounds__(128, 1)
smm_decode_ring_kernel(smm_mm_dims d, smm_epi_params e, int r, int share)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BR = SMM_RING_BR, WT = BR * 128, XT = NT * 128;
    constexpr int SLOT = SMM_RING_SUB * (WT + XT);
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t base = smm_smem_addr(smem);
    int32_t *red = (int32_t *)(smem + r * SLOT); /* [NT / 2][128]: register, thread */
    int32_t *csred = red + NT / 2 * 128;         /* [BR] */
    const uint32_t bar = smm_smem_addr(csred + BR); /* the other blocks' adds */
    constexpr int SUMS = NT / 2 * 128 + (AZP ? BR : 0); /* int32 each other block adds */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const unsigned rank = S > 1 ? smm_cluster_rank() : 0;
    const int64_t n0 = (int64_t)(blockIdx.x / S) * BR;
    const int64_t nslot = (d.k + 255) / 256;
    /* K's slots s0 .. s0 + ns - 1: share each, the last block what is left
     * (with S = 2 and block 0 taking more than half, block 1 the rest). */
    const int64_t s0 = min((int64_t)rank * share, nslot);
    const int ns = (int)(min(s0 + share, nslot) - s0);
    const bool azp = AZP; /* e.azp != NULL */
    SMM_TRACE_DECL;
    SMM_TRACE_AT(0);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (d.b_static)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* Thread tid copies piece u = tid % 8 (16 bytes) of each 128-byte
     * k-tile of weight rows tid / 8 + 16 j (j < 4) and of token rows
     * tid / 8 + 16 j (j < NT / 16; NT = 8: threads below 64). Rows past N
     * are read from the last row (never stored); rows past M too, or, with
     * PART (M < NT), not copied at all (their slots keep whatever they
     * held, and their sums are never stored); bytes past K are zero-filled
     * (cp.async reads bytes < 16 of the source; a piece wholly past K reads
     * none, from the start of the block's share). */
    constexpr int XJ = NT >= 16 ? NT / 16 : 1;
    const int u = tid & 7, r0 = tid >> 3;
    const uint32_t poff = (uint32_t)(((u ^ (r0 & 7)) << 4) + r0 * 128); /* + j * 2048 */
    const int8_t *wp[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        wp[j] = d.b + min(n0 + r0 + 16 * j, d.n - 1) * d.ldb + s0 * 256 + u * 16;
    const int8_t *xp[XJ];
#pragma unroll
    for (int j = 0; j < XJ; j++)
        xp[j] = d.a + min((int64_t)(r0 + 16 * j), d.m - 1) * d.lda + s0 * 256 + u * 16;
    const int kleft = (int)(d.k - s0 * 256) - u * 16; /* K bytes from piece u of slot 0 */
    bool xin[XJ]; /* token row r0 + 16 j is copied */
#pragma unroll
    for (int j = 0; j < XJ; j++)
        xin[j] = !PART || r0 + 16 * j < d.m;
    /* Slot sl (0 .. ns - 1) of this block's share into ring slot pos: its
     * weights (w), its tokens (x). */
    auto copy = [&](int sl, int pos, bool w, bool x) {
        if (sl >= ns)
            return;
        const uint32_t st = base + pos * SLOT;
#pragma unroll
        for (int sub = 0; sub < SMM_RING_SUB; sub++) {
            const int off = sl * 256 + sub * 128, kl = kleft - off;
            const int bytes = kl >= 16 ? 16 : kl > 0 ? kl : 0;
            const int offc = kl > 0 ? off : -u * 16;
            if (w)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    smm_cp_async16(st + sub * WT + poff + j * 2048, wp[j] + offc, bytes);
            if (x && (NT >= 16 || tid < 64))
#pragma unroll
                for (int j = 0; j < XJ; j++)
                    if (xin[j])
                        smm_cp_async16(st + SMM_RING_SUB * WT + sub * XT + poff + j * 2048,
                                       xp[j] + offc, bytes);
        }
    };
    /* Groups: weights of slots 0 .. r - 3 (one each), their tokens (one),
     * slots r - 2 and r - 1 (weights and tokens, one each; the ring's
     * last two slots are free at the start), then slot i + r - 2 in
     * iteration i >= 2. Slots r - 2 and r - 1 copied in iterations 0 and
     * 1 instead, once all before them were in, launches were slower. */
    const int pre = d.b_static ? d.pre : 0; /* weight slots before the wait */
    for (int sl = 0; sl < pre; sl++) {
        copy(sl, sl, true, false);
        smm_cp_async_commit();
    }
    /* A cluster's sums meet in block 0: it zeroes them (and the weight
     * rows' sums) and sets its barrier to count the other blocks' adds,
     * before the cluster barrier that the others wait for before adding. */
    if (S > 1) {
        if (rank == 0) {
            for (int i = tid; i < SUMS; i += 128)
                red[i] = 0;
            if (tid == 0) {
                smm_mbar_init(bar, 1);
                asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
                smm_mbar_expect_tx(bar, (S - 1) * SUMS * 4);
            }
        }
        smm_cluster_arrive();
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The kernel ahead in the stream (programmatic launch) is complete
     * and its writes visible past this point. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (!d.b_static)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    SMM_TRACE_AT(1);
    for (int sl = pre; sl < r - 2; sl++) {
        copy(sl, sl, true, false);
        smm_cp_async_commit();
    }
    for (int sl = 0; sl < r - 2; sl++)
        copy(sl, sl, false, true);
    smm_cp_async_commit();
    for (int sl = r - 2; sl < r; sl++) {
        copy(sl, sl, true, true);
        smm_cp_async_commit();
    }
    /* The scales (bias, zero point) of the thread's elements, loaded
     * here, after the wait (the kernel ahead may write them), so that the
     * loop hides their latency: rows 8 j + 2 q + c (rin[2 j + c]) and
     * columns n0 + 16 w + g + 8 h (cin[h]) of warp w, clamped into C
     * (elements outside C are not stored). */
    smm_epi_in rin[NT / 4], cin[2];
#pragma unroll
    for (int jc = 0; jc < NT / 4; jc++)
        smm_epi_load_row(e, min((int64_t)(8 * (jc >> 1) + 2 * q + (jc & 1)), d.m - 1),
                         &rin[jc]);
#pragma unroll
    for (int h = 0; h < 2; h++)
        smm_epi_load_col(e, min(n0 + 16 * warp + g + 8 * h, d.n - 1), &cin[h]);

    /* Warp w holds weight rows 16 w + g (+ 8), register 4 j + 2 h + c
     * being row 16 w + g + 8 h, token 8 j + 2 q + c. */
    int32_t acc[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++)
        acc[i] = 0;
    int32_t colsum = 0; /* half (tid & 1) of weight row tid / 2 */
    int pos = 0, pos_next = r - 2; /* ring slots of slot i and slot i + r - 2 */
    const uint32_t dlo = smm_wgmma_desc128_lo(base);
    for (int i = 0; i < ns; i++) {
        if (i == 0)
            smm_cp_async_wait<2>(); /* all but slots r - 2 and r - 1 */
        else if (i >= r - 2)
            smm_cp_async_wait_n(r - 3); /* slot i's group is in */
        /* The copies (generic proxy) before the wgmmas' reads (async
         * proxy); then every thread's, and every warp's wgmmas of slot
         * i - 2, whose ring slot the next copy takes. */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (i >= 2) {
            copy(i + r - 2, pos_next, true, true);
            smm_cp_async_commit();
        }
        /* The descriptors' low words, stepped by 16-byte units. */
        const uint32_t dw = dlo + pos * (SLOT / 16), dx = dw + SMM_RING_SUB * WT / 16;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int sub = 0; sub < SMM_RING_SUB; sub++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                smm_wgmma_64xNx32<NT>(acc, smm_wgmma_desc128_of(dw + (sub * WT + 32 * kk) / 16),
                                      smm_wgmma_desc128_of(dx + (sub * XT + 32 * kk) / 16), 1);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (azp) {
            /* Half of the row's 16-byte pieces in each k-tile (swizzled
             * within the row: the two halves hold all of them). */
#pragma unroll
            for (int sub = 0; sub < SMM_RING_SUB; sub++) {
                const unsigned char *pw =
                    smem + pos * SLOT + sub * WT + (tid >> 1) * 128 + (tid & 1) * 64;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint4 v = *(const uint4 *)(pw + c * 16);
                    colsum = __dp4a((int)v.x, 0x01010101, colsum);
                    colsum = __dp4a((int)v.y, 0x01010101, colsum);
                    colsum = __dp4a((int)v.z, 0x01010101, colsum);
                    colsum = __dp4a((int)v.w, 0x01010101, colsum);
                }
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        pos = pos + 1 == r ? 0 : pos + 1;
        pos_next = pos_next + 1 == r ? 0 : pos_next + 1;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    colsum += __shfl_xor_sync(0xffffffffu, colsum, 1);
    SMM_TRACE_AT(2);

    /* The other blocks of a cluster add their sums into block 0's shared
     * memory and leave; block 0 waits for all of their adds. With the sums
     * stored by every block and read by block 0 between two cluster
     * barriers, launches were slower. */
    if (S > 1) {
        smm_cluster_wait(); /* block 0's zeroes and barrier are set */
        if (rank != 0) {
            const uint32_t rbar = smm_cluster_map32(bar, 0);
            const uint32_t rred = smm_cluster_map32(smm_smem_addr(red), 0);
#pragma unroll
            for (int i = 0; i < NT / 2; i++)
                smm_red_async_add(rred + (uint32_t)(i * 128 + tid) * 4, acc[i], rbar);
            if (azp && (tid & 1) == 0)
                smm_red_async_add(rred + (uint32_t)(NT / 2 * 128 + (tid >> 1)) * 4, colsum, rbar);
            SMM_TRACE_END(SMM_TRACE_RING, d.b);
            return;
        }
        smm_mbar_wait<true>(bar, 0);
#pragma unroll
        for (int i = 0; i < NT / 2; i++)
            acc[i] += red[i * 128 + tid];
    }
    int32_t cs[2] = {0, 0};
    if (azp) {
        if ((tid & 1) == 0)
            csred[tid >> 1] = (S > 1 ? csred[tid >> 1] : 0) + colsum;
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; h++)
            cs[h] = csred[16 * warp + g + 8 * h];
    }

    /* The thread's elements: all of them finished, then stored. With each
     * store right after its element's arithmetic, launches at M = 32 were
     * slower. */
    uint32_t bits[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++) {
        const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
        bits[i] = smm_epi_bits_in(e, acc[i], cs[h], smm_epi_join(rin[2 * j + c], cin[h]));
    }
    /* NT = 32, a whole tile of 64 columns, C's rows 16-byte aligned: the
     * elements go through shared memory (ring slot 0, its wgmmas done; rows
     * of 64 elements and 16 bytes' padding, so that neither the 2- or 4-byte
     * writes nor the 16-byte reads meet in a bank) and out as 16-byte
     * pieces of C's rows, 2 (or 4) stores per thread instead of 16 of 2 (or
     * 4) bytes: faster at NT = 32, slower at NT = 16, so NT = 8 and 16
     * store each element. */
    const int es = smm_epi_c_bytes(e);
    if (NT == 32 && n0 + BR <= d.n && ((uintptr_t)e.c & 15) == 0 && ((e.ldc * es) & 15) == 0) {
        const int pitch = BR * es + 16, pieces = BR * es / 16; /* per row */
        __syncthreads(); /* every warp is past its last wgmma */
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
            const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
            unsigned char *p = smem + (8 * j + 2 * q + c) * pitch + (16 * warp + g + 8 * h) * es;
            if (es == 4)
                *(uint32_t *)p = bits[i];
            else
                *(uint16_t *)p = (uint16_t)bits[i];
        }
        __syncthreads();
        const int rows = (int)min((int64_t)NT, d.m);
        for (int pc = tid; pc < rows * pieces; pc += 128) {
            const int m = pc / pieces, u16 = pc - m * pieces;
            *(uint4 *)((unsigned char *)e.c + ((int64_t)m * e.ldc + n0) * es + u16 * 16) =
                *(const uint4 *)(smem + m * pitch + u16 * 16);
        }
    } else {
#pragma unroll
        for (int i = 0; i < NT / 2; i++) {
            const int j = i >> 2, h = (i >> 1) & 1, c = i & 1;
            const int64_t m = 8 * j + 2 * q + c, n = n0 + 16 * warp + g + 8 * h;
            if (m < d.m && n < d.n)
                smm_epi_put(e, m, n, bits[i]);
        }
    }
    SMM_TRACE_END(SMM_TRACE_RING, d.b);
#else
    __shared__ int smm_no_ring[4];
    if (d.m < 0)
        ((volatile int *)smm_no_ring)[threadIdx.x & 3] = r + share + (int)e.ldc;
#endif
}

/* Launches of the decode kernel's shared-memory form so far. */
static unsigned long smm_decode_pre_launches = 0;

unsigned long smm_decode_pre_count(void)
{
    return __atomic_load_n(&smm_decode_pre_launches, __ATOMIC_RELAXED);
}

/* Programmatic dependent launch of the decode kernel (sm_90+): on unless
 * SMM_GPU_PDL=0 is in the environment (read once per process) or a launch
 * with it was refused. Each decode launch may then begin while the kernel
 * ahead of it in the stream drains, and waits for that kernel's completion
 * (griddepcontrol.wait) before it touches global memory, but for the
 * first weights of a static B (smm_decode_kernel): the launch latency
 * overlaps the previous kernel's tail, with the stream's order kept. */
static int smm_decode_pdl_env = -1, smm_decode_pdl_off = 0;

bool smm_decode_pdl_allowed(void)
{
    if (smm_decode_pdl_env < 0) {
        const char *v = getenv("SMM_GPU_PDL");
        smm_decode_pdl_env = !(v != NULL && strcmp(v, "0") == 0);
    }
    return smm_decode_pdl_env && !smm_decode_pdl_off;
}

/* Launches a decode kernel: `blocks` blocks of `threads` threads with
 * `smem` bytes of dynamic shared memory, in clusters of s blocks (s > 1,
 * sm_90+) and, with pdl, with programmatic stream serialization. A launch
 * refused with the latter is tried without it; when that one goes
 * through, the runtime or driver lacks programmatic launches: plain
 * launches from now on (smm_decode_pdl_off). */
template <typename... KArgs, typename... Args>
static gpuError_t smm_launch_decode_ex(void (*kern)(KArgs...), int64_t blocks, int threads,
                                       size_t smem, int s, bool pdl, gpuStream_t stream,
                                       Args &&...args)
{
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[2];
    memset(&cfg, 0, sizeof cfg);
    memset(at, 0, sizeof at);
    cfg.gridDim = dim3((unsigned)blocks, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = s;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = s > 1 ? at : at + 1;
    cfg.numAttrs = (s > 1 ? 1 : 0) + (pdl ? 1 : 0);
    gpuError_t err = cudaLaunchKernelEx(&cfg, kern, args...);
    if (err != gpuSuccess && pdl) {
        cfg.numAttrs = s > 1 ? 1 : 0;
        if (cudaLaunchKernelEx(&cfg, kern, args...) == gpuSuccess) {
            (void)gpuGetLastError(); /* the refused launch's error */
            smm_decode_pdl_off = 1;
            err = gpuSuccess;
        }
    }
    return err;
}

/* The decode kernel's shared-memory form (BS 2) exists for one token
 * group with one row group, and for more token groups with two, without
 * clusters; kernel() is null elsewhere, and max the most steps. */
template <int TG, int G, int S> struct smm_dec_pre_form {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return nullptr; }
    static const int max = 0;
};
template <> struct smm_dec_pre_form<1, 1, 1> {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return smm_decode_kernel<1, 1, 1, 2>; }
    static const int max = SMM_DEC_PRE_MAX;
};
template <int TG> struct smm_dec_pre_form2 {
    static void (*kernel())(smm_mm_dims, smm_epi_params) { return smm_decode_kernel<TG, 2, 1, 2>; }
    static const int max = SMM_DEC_PRE_MAX2;
};
template <> struct smm_dec_pre_form<2, 2, 1> : smm_dec_pre_form2<2> {};
template <> struct smm_dec_pre_form<3, 2, 1> : smm_dec_pre_form2<3> {};
template <> struct smm_dec_pre_form<4, 2, 1> : smm_dec_pre_form2<4> {};

/* Blocks of a shared-memory form that fit an SM at its largest size (max
 * steps, stored in *max when max is not null), read once per device; 0
 * when that size cannot be allowed or the form does not exist. Allowing it
 * here is what lets every launch of the form ask for up to that much
 * shared memory. */
template <int TG, int G>
static int smm_decode_pre_fit(int *max)
{
    static signed char cache[64]; /* per device: 0 not asked, else blocks + 1 */

    if (max)
        *max = smm_dec_pre_form<TG, G, 1>::max;
    const int dev = smm_cache_dev();
    if (cache[dev] == 0) {
        const int bytes = smm_dec_pre_form<TG, G, 1>::max * G * SMM_DEC_PRE_STEP;
        auto kern = smm_dec_pre_form<TG, G, 1>::kernel();
        int blocks = 0;
        if (kern == nullptr || gpuFuncSetMaxDynamicSharedMemory(kern, bytes) != gpuSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kern, SMM_DEC_WARPS * 32,
                                                          (size_t)bytes) != cudaSuccess)
            blocks = 0;
        (void)gpuGetLastError();
        cache[dev] = (signed char)(blocks > 100 ? 101 : blocks + 1);
    }
    return cache[dev] - 1;
}

/* The same for tg token groups and g row groups (tg <= 4); *max is 0
 * where there is no form. */
static int smm_decode_pre_fit_tg(int tg, int g, int *max = nullptr)
{
    if (max)
        *max = 0;
    if (g == 1)
        return tg == 1 ? smm_decode_pre_fit<1, 1>(max) : 0;
    if (g != 2)
        return 0;
    return tg == 2   ? smm_decode_pre_fit<2, 2>(max)
           : tg == 3 ? smm_decode_pre_fit<3, 2>(max)
           : tg == 4 ? smm_decode_pre_fit<4, 2>(max)
                     : 0;
}

template <int TG, int G, int S>
static gpuError_t smm_launch_decode_tgs(const smm_mm_dims &d, const smm_epi_params &e,
                                        gpuStream_t stream)
{
    const int64_t nb = (d.n + 16 * G - 1) / (16 * G);

    if (nb * S > INT32_MAX)
        return gpuErrorInvalidValue;
    auto kern = d.b_static ? smm_decode_kernel<TG, G, S, 1> : smm_decode_kernel<TG, G, S, 0>;
    int smem = 0;
    if (d.b_static && d.pre > 0 && smm_dec_pre_form<TG, G, S>::kernel()) {
        /* The shared-memory form, where smm_launch_decode chose it (it
         * allowed the largest size once per device: smm_decode_pre_fit). */
        kern = smm_dec_pre_form<TG, G, S>::kernel();
        smem = d.pre * G * SMM_DEC_PRE_STEP;
    }
    if (S == 1 && d.pdl == 0) {
        kern<<<(unsigned)nb, SMM_DEC_WARPS * 32, (size_t)smem, stream>>>(d, e);
        return gpuGetLastError();
    }
    gpuError_t err = smm_launch_decode_ex(kern, nb * S, SMM_DEC_WARPS * 32, (size_t)smem, S,
                                          d.pdl != 0, stream, d, e);
    if (err == gpuSuccess && smem > 0)
        __atomic_fetch_add(&smm_decode_pre_launches, 1, __ATOMIC_RELAXED);
    return err;
}

template <int TG>
static gpuError_t smm_launch_decode_tg(const smm_mm_dims &d, const smm_epi_params &e, int g,
                                       int s, gpuStream_t stream)
{
    if (g == 1)
        return s == 4 ? smm_launch_decode_tgs<TG, 1, 4>(d, e, stream)
                      : s == 2 ? smm_launch_decode_tgs<TG, 1, 2>(d, e, stream)
                               : smm_launch_decode_tgs<TG, 1, 1>(d, e, stream);
    if (g == 2)
        return s == 4 ? smm_launch_decode_tgs<TG, 2, 4>(d, e, stream)
                      : s == 2 ? smm_launch_decode_tgs<TG, 2, 2>(d, e, stream)
                               : smm_launch_decode_tgs<TG, 2, 1>(d, e, stream);
    return s == 4 ? smm_launch_decode_tgs<TG, 4, 4>(d, e, stream)
                  : s == 2 ? smm_launch_decode_tgs<TG, 4, 2>(d, e, stream)
                           : smm_launch_decode_tgs<TG, 4, 1>(d, e, stream);
}

/* Whether the decode kernels were compiled for sm_90+ (from sm_90+ PTX)
 * for the current device: only then do they carry the cluster
 * instructions and the wait for a programmatic launch (older code, or
 * code JIT-compiled from older PTX, compiles them out); asked once per
 * device. (Like the library's other per-process caches, these are plain
 * variables: threads racing on them store the same values.) */
bool smm_decode_have_cluster(int cc)
{
    static signed char have[64]; /* per device: 0 not asked, 1 yes, -1 no */
    if (cc < 90)
        return false;
    const int dev = smm_cache_dev();
    if (have[dev] == 0) {
        cudaFuncAttributes attr;
        have[dev] =
            cudaFuncGetAttributes(&attr, smm_decode_kernel<1, 1, 2, 0>) == cudaSuccess &&
                    attr.binaryVersion >= 90 && attr.ptxVersion >= 90
                ? 1
                : -1;
    }
    return have[dev] > 0;
}

/* Whether the tensor-copy decode kernel the driver loaded is the sm_90a
 * one (as smm_have_wgmma), read once per device. */
bool smm_have_dtma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_decode_tma_kernel<8, 1>, cache) && smm_tmap_encoder() != NULL;
}

template <int NT, int S>
static gpuError_t smm_launch_dtma_ns(const CUtensorMap &ta, const CUtensorMap &tb,
                                     const smm_mm_dims &d, const smm_epi_params &e,
                                     int64_t blocks, int stages, int kt_per, gpuStream_t stream)
{
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_decode_tma_kernel<NT, S>;

    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smm_dtma_smem(NT, 16));
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    gpuError_t err = smm_launch_decode_ex(kern, blocks, SMM_DTMA_THREADS,
                                          (size_t)smm_dtma_smem(NT, stages), S, d.pdl != 0,
                                          stream, ta, tb, d, e, stages, kt_per);
    return err;
}

template <int NT>
static gpuError_t smm_launch_dtma_n(const CUtensorMap &ta, const CUtensorMap &tb,
                                    const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                    int s, int stages, int kt_per, gpuStream_t stream)
{
    return s == 4 ? smm_launch_dtma_ns<NT, 4>(ta, tb, d, e, rt * 4, stages, kt_per, stream)
           : s == 2 ? smm_launch_dtma_ns<NT, 2>(ta, tb, d, e, rt * 2, stages, kt_per, stream)
                    : smm_launch_dtma_ns<NT, 1>(ta, tb, d, e, rt, stages, kt_per, stream);
}

/* Whether the two sm_90a decode kernels (tensor-copy, ring) take the
 * problem, with rt blocks of 64 weight rows (up to 4 per cluster): K > 0,
 * N, K and the blocks below 2^31, 16-byte aligned bases, row strides
 * multiples of 16 and at least K (a single row's stride is not read). */
static bool smm_decode_wg_takes(const smm_mm_dims &d, int64_t rt)
{
    return !(d.k <= 0 || d.n >= INT32_MAX || d.k >= INT32_MAX || rt * 4 > INT32_MAX ||
             ((uintptr_t)d.a & 15) != 0 || ((uintptr_t)d.b & 15) != 0 ||
             (d.m > 1 && (d.lda % 16 != 0 || d.lda < d.k)) ||
             (d.n > 1 && (d.ldb % 16 != 0 || d.ldb < d.k)));
}

/* A forced cluster size (f.cluster > 0) for the decode kernels
 * instantiated for clusters of 1, 2 and 4 blocks: 3 is taken as 2, above
 * 4 as 4. */
static int smm_forced_cluster_124(int cluster)
{
    return cluster >= 4 ? 4 : cluster == 3 ? 2 : cluster;
}

/* The tensor-copy decode kernel (sm_90a code, tensor maps encodable,
 * 16-byte aligned bases, row strides multiples of 16, K > 0, sizes below
 * 2^31); *done false: nothing launched. Picks the blocks per cluster
 * (split of K) so the blocks cover the SMs, and as many stages as the
 * shared memory of the blocks an SM holds allows (2 to 16). */
gpuError_t smm_launch_decode_tma(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                                 const smm_gpu_force &f, gpuStream_t stream, bool *done)
{
    const int nt = d.m <= 8 ? 8 : d.m <= 16 ? 16 : 32;
    const int64_t rt = (d.n + SMM_DTMA_BR - 1) / SMM_DTMA_BR;
    const int64_t ktiles = (d.k + 127) / 128;
    CUtensorMap ta, tb;
    int s, stages, per_sm;

    *done = false;
    if (!smm_decode_wg_takes(d, rt))
        return gpuSuccess;
    if (!smm_make_tmap(&ta, d.a, d.m, d.k, d.m > 1 ? d.lda : (d.k + 15) / 16 * 16, nt) ||
        !smm_make_tmap(&tb, d.b, d.n, d.k, d.n > 1 ? d.ldb : (d.k + 15) / 16 * 16,
                       SMM_DTMA_BR))
        return gpuSuccess;
    s = rt >= sms ? 1 : 2 * rt >= sms ? 2 : 4;
    if (f.cluster > 0)
        s = smm_forced_cluster_124(f.cluster);
    if (ktiles < s)
        s = ktiles >= 2 ? 2 : 1;
    per_sm = (int)((rt * s + sms - 1) / sms);
    stages = (200 * 1024 / per_sm - (nt * (SMM_DTMA_BR + 4) + SMM_DTMA_BR) * 4 - 1024) /
             ((SMM_DTMA_BR + nt) * 128 + 16);
    {
        const int64_t kt_per = (ktiles + s - 1) / s;
        if (stages > kt_per)
            stages = (int)kt_per;
    }
    if (f.stages > 0)
        stages = f.stages;
    stages = stages < 2 ? 2 : stages > 16 ? 16 : stages;
    *done = true;
    {
        const int kt_per = (int)((ktiles + s - 1) / s);
        return nt == 8 ? smm_launch_dtma_n<8>(ta, tb, d, e, rt, s, stages, kt_per, stream)
               : nt == 16 ? smm_launch_dtma_n<16>(ta, tb, d, e, rt, s, stages, kt_per, stream)
                          : smm_launch_dtma_n<32>(ta, tb, d, e, rt, s, stages, kt_per, stream);
    }
}

/* Whether the ring decode kernel the driver loaded is the sm_90a one (as
 * smm_have_wgmma), read once per device. */
bool smm_have_ring(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_decode_ring_kernel<8, 1, false, false>, cache);
}

template <int NT, int S, bool AZP, bool PART>
static gpuError_t smm_launch_ring_ns(const smm_mm_dims &d, const smm_epi_params &e,
                                     int64_t blocks, int r, int share, gpuStream_t stream)
{
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_decode_ring_kernel<NT, S, AZP, PART>;

    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smm_ring_smem(NT, SMM_RING_MAX));
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    gpuError_t err = smm_launch_decode_ex(kern, blocks, 128, (size_t)smm_ring_smem(NT, r), S,
                                          d.pdl != 0, stream, d, e, r, share);
    return err;
}

template <int NT, bool AZP, bool PART>
static gpuError_t smm_launch_ring_nap(const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                      int s, int r, int share, gpuStream_t stream)
{
    return s == 4   ? smm_launch_ring_ns<NT, 4, AZP, PART>(d, e, rt * 4, r, share, stream)
           : s == 3 ? smm_launch_ring_ns<NT, 3, AZP, PART>(d, e, rt * 3, r, share, stream)
           : s == 2 ? smm_launch_ring_ns<NT, 2, AZP, PART>(d, e, rt * 2, r, share, stream)
                    : smm_launch_ring_ns<NT, 1, AZP, PART>(d, e, rt, r, share, stream);
}

/* The instantiation for e.azp and for rows past M (PART: M < NT). */
template <int NT>
static gpuError_t smm_launch_ring_n(const smm_mm_dims &d, const smm_epi_params &e, int64_t rt,
                                    int s, int r, int share, gpuStream_t stream)
{
    const bool part = d.m < NT;
    if (e.azp != NULL)
        return part ? smm_launch_ring_nap<NT, true, true>(d, e, rt, s, r, share, stream)
                    : smm_launch_ring_nap<NT, true, false>(d, e, rt, s, r, share, stream);
    return part ? smm_launch_ring_nap<NT, false, true>(d, e, rt, s, r, share, stream)
                : smm_launch_ring_nap<NT, false, false>(d, e, rt, s, r, share, stream);
}

/* smm_ring_split's short-K case: three blocks per cluster at nt = 8 with
 * K in at most 16 slots, where two would leave at most one block per SM. */
static bool smm_ring_short_three(int64_t rt, int64_t nslot, int nt, int sms)
{
    return 2 * rt <= (int64_t)sms && nt == 8 && nslot <= 16;
}

/* The blocks per cluster of the ring decode kernel for rt 64-row blocks
 * and nslot 256-byte slots of K, nt token rows (each block a 1/s share of
 * K; smm_launch_decode_ring): two where that still leaves at most one
 * block per SM, except three at nt = 8 with K in at most 16 slots (K <=
 * 4096), where a share is so short that a block's fixed start and finish
 * outweigh streaming a third of the row block on SMs that hold two; else
 * three where the 3 rt blocks fit two per SM, so that the SMs holding two
 * stream 2/3 of a row block's weights rather than all of it (sms / 2 < rt
 * <= 2 sms / 3; clusters sit within a GPC, so near the top of that range
 * a few clusters wait); else one. */
static int smm_ring_split(int64_t rt, int64_t nslot, int nt, int sms)
{
    if (smm_ring_short_three(rt, nslot, nt, sms))
        return 3;
    if (2 * rt <= (int64_t)sms)
        return 2;
    return 3 * rt <= 2 * (int64_t)sms ? 3 : 1;
}

/* Whether the ring kernel would split K three ways at M <= 8 for this
 * problem's own shape (smm_ring_split's short-K case). */
bool smm_ring_splits_short(const smm_mm_dims &d, int sms)
{
    const int64_t rt = (d.n + SMM_RING_BR - 1) / SMM_RING_BR;
    return d.m <= 8 && smm_ring_short_three(rt, (d.k + 255) / 256, 8, sms);
}

/* The ring decode kernel (sm_90a code, 16-byte aligned bases, row strides
 * multiples of 16, K > 0, sizes below 2^31); *done false: nothing
 * launched. Ring slots: with at most one block per SM the most; with more
 * blocks than SMs the most with which two blocks share an SM. The split of
 * K: smm_ring_split. */
gpuError_t smm_launch_decode_ring(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                                  const smm_gpu_force &f, gpuStream_t stream, bool *done)
{
    const int nt = d.m <= 8 ? 8 : d.m <= 16 ? 16 : 32;
    const int64_t rt = (d.n + SMM_RING_BR - 1) / SMM_RING_BR;
    const int64_t nslot = (d.k + 255) / 256;

    *done = false;
    if (!smm_decode_wg_takes(d, rt))
        return gpuSuccess;
    int s = smm_ring_split(rt, nslot, nt, sms);
    if (f.cluster > 0)
        s = f.cluster < 4 ? f.cluster : 4;
    if (s > nslot)
        s = nslot >= 2 ? 2 : 1;
    /* Each block's share of K's slots; of two blocks at M <= 16, block 0
     * (which finishes the elements after the other has added its sums and
     * left) takes max(1, share / 12) more, and block 1 the rest: at least
     * one slot and no more than block 0's, so the kernel's rule (share
     * each, the last block what is left) gives it exactly that (faster
     * than even shares at M <= 16, no faster at M = 32). */
    int share = (int)((nslot + s - 1) / s);
    if (s == 2 && nt <= 16) {
        share += share / 12 > 1 ? share / 12 : 1;
        share = share < nslot ? share : (int)nslot - 1;
    }
    /* One block per SM: the most slots; more: the most that let two
     * blocks share an SM (228 KiB of shared memory, 1 KiB of it the
     * system's per block). */
    int r = SMM_RING_MAX;
    if (rt * s > sms)
        while (r > 3 && 2 * (smm_ring_smem(nt, r) + 1024) > 228 * 1024)
            r--;
    if (f.stages > 0)
        r = f.stages;
    r = r > SMM_RING_MAX ? SMM_RING_MAX : r;
    r = r > share + 2 ? share + 2 : r;
    r = r < 3 ? 3 : r;
    /* With a packed B, the weights of ring slots 0 .. pre - 1 are copied
     * before the wait: r - 2, unless forced. */
    smm_mm_dims dr = d;
    dr.pre = (int16_t)(!d.b_static || f.ring_pre < 0 ? 0
                       : f.ring_pre > 0 && f.ring_pre < r - 2 ? f.ring_pre
                                                              : r - 2);
    *done = true;
    return nt == 8 ? smm_launch_ring_n<8>(dr, e, rt, s, r, share, stream)
           : nt == 16 ? smm_launch_ring_n<16>(dr, e, rt, s, r, share, stream)
                      : smm_launch_ring_n<32>(dr, e, rt, s, r, share, stream);
}

gpuError_t smm_launch_decode_mma(const smm_mm_dims &d, const smm_epi_params &e, int g, int s,
                                 gpuStream_t stream)
{
    switch ((d.m + 7) / 8) {
    case 1: return smm_launch_decode_tg<1>(d, e, g, s, stream);
    case 2: return smm_launch_decode_tg<2>(d, e, g, s, stream);
    case 3: return smm_launch_decode_tg<3>(d, e, g, s, stream);
    default: return smm_launch_decode_tg<4>(d, e, g, s, stream);
    }
}

/* Launches of the decode kernel that quantizes its tokens so far. */
static unsigned long smm_decode_fused_launches = 0;

unsigned long smm_decode_fused_count(void)
{
    return __atomic_load_n(&smm_decode_fused_launches, __ATOMIC_RELAXED);
}

template <int QX>
static gpuError_t smm_launch_fused_qx(const smm_mm_dims &d, const smm_epi_params &e,
                                      const smm_dec_fuse &fz, size_t smem, gpuStream_t stream,
                                      bool *done)
{
    /* Above 48 KiB of shared memory a kernel must be allowed it: the
     * largest a launch asks for (the shared-memory form's largest size,
     * which the token rows share), once per device and kernel (0 not
     * asked, 1 allowed, -1 refused: two launches instead). */
    static signed char allowed[3][64];
    const int bs = d.b_static ? (d.pre > 0 ? 2 : 1) : 0;
    auto kern = bs == 2   ? smm_decode_fused_kernel<2, QX>
                : bs == 1 ? smm_decode_fused_kernel<1, QX>
                          : smm_decode_fused_kernel<0, QX>;
    const int dev = smm_cache_dev();
    if (smem > 48 * 1024) {
        if (allowed[bs][dev] == 0) {
            const int most = SMM_DEC_PRE_MAX * SMM_DEC_PRE_STEP;
            allowed[bs][dev] =
                gpuFuncSetMaxDynamicSharedMemory(kern, most) == gpuSuccess ? 1 : -1;
            (void)gpuGetLastError();
        }
        if (allowed[bs][dev] < 0)
            return gpuSuccess; /* *done false */
    }
    const int64_t nb = (d.n + 15) / 16;
    if (nb > INT32_MAX)
        return gpuSuccess;
    *done = true;
    gpuError_t err;
    if (d.pdl == 0) {
        kern<<<(unsigned)nb, SMM_DEC_WARPS * 32, smem, stream>>>(d, e, fz);
        err = gpuGetLastError();
    } else {
        err = smm_launch_decode_ex(kern, nb, SMM_DEC_WARPS * 32, smem, 1, true, stream, d, e, fz);
    }
    if (err == gpuSuccess) {
        __atomic_fetch_add(&smm_decode_fused_launches, 1, __ATOMIC_RELAXED);
        if (bs == 2)
            __atomic_fetch_add(&smm_decode_pre_launches, 1, __ATOMIC_RELAXED);
    }
    return err;
}

/* The fused decode launch: the planned shared-memory form keeps as many of
 * its steps as fit beside the token rows within the form's largest size
 * (so that as many blocks share an SM as without the tokens). */
gpuError_t smm_launch_decode_fused(const smm_mm_dims &dp, const smm_epi_params &e,
                                   const smm_dec_fuse &fz, int x_dtype, gpuStream_t stream,
                                   bool *done)
{
    const int64_t tok = dp.m * smm_dec_tok_stride(dp.k);
    *done = false;
    if (dp.m > SMM_DEC_QX_ROWS || dp.k <= 0 || tok > SMM_DEC_TOK_MAX)
        return gpuSuccess;
    smm_mm_dims d = dp;
    if (d.pre > 0) {
        const int64_t fit = (SMM_DEC_PRE_MAX * (int64_t)SMM_DEC_PRE_STEP - tok) / SMM_DEC_PRE_STEP;
        d.pre = (int16_t)(d.pre < fit ? d.pre : fit);
    }
    const size_t smem = (size_t)d.pre * SMM_DEC_PRE_STEP + (size_t)tok;
    switch (x_dtype) {
    case SMM_DTYPE_F32:
        return smm_launch_fused_qx<SMM_DEC_QX_F32>(d, e, fz, smem, stream, done);
    case SMM_DTYPE_F16:
        return smm_launch_fused_qx<SMM_DEC_QX_F16>(d, e, fz, smem, stream, done);
    default:
        return smm_launch_fused_qx<SMM_DEC_QX_BF16>(d, e, fz, smem, stream, done);
    }
}

/* The decode launch of d (M <= 32, rows 16-byte aligned). Rules, each
 * kept because it was faster on the Llama-3.1-8B layer shapes it was
 * measured on (doc/design.md):
 *   - two 16-row groups per block for M > 8 while that still gives every
 *     SM a block, except at M <= 16 with more than two such blocks per SM;
 *   - for M > 16 with fewer such blocks than SMs, two groups in clusters of
 *     two blocks (half of K each), except with a packed B at K <= 4096,
 *     where one group without a cluster lets the next launch start early;
 *   - a packed B loads its first weights before the wait for the previous
 *     kernel only up to K = 8192 (a longer K lost more than it gained);
 *   - the shared-memory form where the grid leaves room on the SMs for a
 *     block of the next launch: one token group with one row group at most
 *     two blocks per SM, more token groups with two row groups at most
 *     three blocks for every two SMs. */
void smm_decode_plan(smm_mm_dims *dp, int cc, int sms, const smm_gpu_force &f, int *gp, int *sp)
{
    smm_mm_dims &d = *dp;
    const int tg = (int)((d.m + 7) / 8);
    const int64_t nb2 = (d.n + 31) / 32; /* blocks with two row groups */
    const bool sm90 = smm_decode_have_cluster(cc); /* clusters and the wait */
    int g = tg > 1 && nb2 >= (int64_t)sms && (tg > 2 || nb2 <= 2 * (int64_t)sms) ? 2 : 1;
    int s = 1;

    d.pdl = sm90 && smm_decode_pdl_allowed();
    d.b_static = d.b_static && d.pdl && d.k <= 8192;
    if (tg > 2 && nb2 < (int64_t)sms && sm90 && !(d.b_static && d.k <= 4096))
        g = 2, s = 2;
    if (f.groups > 0)
        g = f.groups;
    if (f.cluster > 0)
        s = smm_forced_cluster_124(f.cluster);
    if (!sm90)
        s = 1;
    d.pre = 0;
    if (d.b_static && s == 1 && f.pre >= 0 && d.k >= 64) {
        int most = 0; /* the form's most steps */
        const int fit = smm_decode_pre_fit_tg(tg, g, &most);
        const int64_t nch = (d.k / 64 + SMM_DEC_WARPS - 1) / SMM_DEC_WARPS;
        const int64_t nb = (d.n + 16 * g - 1) / (16 * g);
        const bool room = g == 1 ? nb <= 2 * (int64_t)sms && fit >= 3
                                 : 2 * nb <= 3 * (int64_t)sms && fit >= 2;
        if (fit >= 1 && (f.pre > 0 || room))
            d.pre = (int16_t)(nch < most ? nch : most);
    }
    *gp = g;
    *sp = s;
}

/* The trace records of this file's kernels (trace.h). */
int smm_decode_trace_take(unsigned long long *out, int max)
{
    return SMM_TRACE_TAKE_TU(out, max);
}

#endif /* SMM_GPU_NVIDIA */
