/*
 * gemm_wgmma.hip - the NVIDIA sm_90a (H100/H200) large-M kernels, built
 * with real code only when the sm_90a target is compiled (stubs elsewhere,
 * which the launchers detect: smm_sm90a_loaded). Empty in an AMD build.
 *
 *   wgmma_kernel  128 x 256 tile, two warpgroups of wgmma.mma_async
 *                 m64n256k32 s8 reading both operands from 64-byte-swizzled
 *                 shared memory (the same layout as the mma kernel's), 5
 *                 cp.async stages.
 *   tma_kernel    rows 16-byte aligned: persistent, warp-specialized; one
 *                 producer thread fills 4 stages of 128 x 128-byte A and
 *                 256 x 128-byte B tiles with tensor copies (TMA, 128-byte
 *                 swizzle, zeros past the edges; the tensor maps are encoded
 *                 on the host through the runtime's driver entry point), two
 *                 consumer warpgroups run m64n256k32 wgmmas on a 128 x 256
 *                 tile; mbarrier hand-over; the epilogue goes through shared
 *                 memory, 16 x 32 slices per warp, finished 4 elements per
 *                 lane with 8 / 16-byte stores.
 *   tma_pp_kernel the same producer, 64 x 256 (or 128 x 128) tiles: each
 *                 consumer warpgroup owns whole tiles, the two in turn (ping-pong),
 *                 so one tile's epilogue runs under the next one's wgmmas;
 *                 no azp (the column sums stay with tma_kernel).
 */
#include "launch.h"

#if defined(SMM_GPU_NVIDIA)

/*
 * Shared-memory matrix descriptor of a K-major int8 tile with 64-byte rows
 * in the 64-byte swizzle layout (the one smm_swz writes: 16-byte chunk
 * index XOR address bits 7..8, tile based on a 512-byte boundary): start
 * address, leading byte offset 1 (unused: a K step of 32 bytes stays
 * inside one swizzled row), stride byte offset 512 (8 rows), layout 2.
 */
SMM_DEV uint64_t smm_wgmma_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(512 >> 4) << 32) | ((uint64_t)2 << 62);
}

/* d(64 x 256) += A(64 x 32, smem) * B(256 x 32, smem)^T, int32 wrapping. */
SMM_DEV void smm_wgmma_64x256x32(int32_t *d, uint64_t da, uint64_t db)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n"
                 "}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                   "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
                   "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
                   "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
                   "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
                   "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
                   "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
                   "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
                   "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
                   "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
                   "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
                   "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
                   "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
                   "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
                   "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
                   "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
                 : "l"(da), "l"(db));
#endif
}

/* d(64 x 128) += A(64 x 32, smem) * B(128 x 32, smem)^T, int32 wrapping. */
SMM_DEV void smm_wgmma_64x128x32(int32_t *d, uint64_t da, uint64_t db)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "setp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n"
                 "}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                   "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
                   "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
                   "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
                   "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
                   "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
                   "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
                   "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "l"(da), "l"(db));
#endif
}

/*
 * Block tile 128 x 256, two warpgroups (64 rows each, all 256 columns),
 * K step 64 bytes in STAGES shared-memory stages filled by cp.async (or by
 * guarded byte loads when rows are not 16-byte aligned) two k-tiles ahead;
 * each stage is two m64n256k32 wgmmas per warpgroup, with one k-tile of
 * wgmmas left in flight. The accumulator layout of a warpgroup is that of
 * mma.sync's 16 x 8 tiles: warp w holds rows 16w .. 16w + 15.
 * Built only for sm_90a; elsewhere the body is a stub the launcher never
 * runs (it carries a static shared array, which is how the launcher tells
 * the two apart through cudaFuncGetAttributes).
 */
template <int STAGES, bool ASYNC>
__global__ void __launch_bounds__(256)
smm_wgmma_kernel(smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BM = 128, BN = 256, THREADS = 256;
    constexpr int STAGE_BYTES = (BM + BN) * 64;
    constexpr int GROUP_M = 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* Stages on a 1024-byte boundary (the swizzle is of absolute address
     * bits); the launcher asks for 1024 bytes more. */
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    int32_t *cs = (int32_t *)(smem + STAGES * STAGE_BYTES);
    const uint32_t smem_base = smm_smem_addr(smem);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wwarp = warp & 3;

    const int t = blockIdx.x;
    const int in_group = GROUP_M * ntiles;
    const int first_m = (t / in_group) * GROUP_M;
    const int group_rows = min(mtiles - first_m, GROUP_M);
    const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
    const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;

    const int ktiles = (int)((d.k + 63) / 64);
    const bool azp = e.azp != NULL;
    int32_t acc[128];
    int32_t colsum = 0; /* column bn + tid */

#pragma unroll
    for (int i = 0; i < 128; i++)
        acc[i] = 0;

    auto load_tile = [&](int s, int kt) {
        const uint32_t sa = smem_base + s * STAGE_BYTES;
        const uint32_t sb = sa + BM * 64;
        unsigned char *pa = smem + s * STAGE_BYTES;
        unsigned char *pb = pa + BM * 64;
        const int64_t k0 = (int64_t)kt * 64;
#pragma unroll
        for (int it = 0; it < BM * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bm + r, kk = k0 + c * 16;
            const bool ok = row < d.m && kk < d.k;
            const int8_t *src = ok ? d.a + row * d.lda + kk : d.a;
            if (ASYNC)
                smm_cp_async16(sa + smm_swz(r, c), src, ok ? (int)min((int64_t)16, d.k - kk) : 0);
            else
                *(uint4 *)(pa + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int it = 0; it < BN * 4 / THREADS; it++) {
            const int q = tid + it * THREADS;
            const int r = q >> 2, c = q & 3;
            const int64_t row = bn + r, kk = k0 + c * 16;
            const bool ok = row < d.n && kk < d.k;
            const int8_t *src = ok ? d.b + row * d.ldb + kk : d.b;
            if (ASYNC)
                smm_cp_async16(sb + smm_swz(r, c), src, ok ? (int)min((int64_t)16, d.k - kk) : 0);
            else
                *(uint4 *)(pb + smm_swz(r, c)) =
                    ok ? smm_load16_guarded(src, kk, d.k) : make_uint4(0, 0, 0, 0);
        }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < ktiles)
            load_tile(s, s);
        smm_cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; kt++) {
        smm_cp_async_wait<STAGES - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        {
            /* Stage of k-tile kt - 2: every warpgroup has waited for its
             * wgmmas (wait_group 1 after committing kt - 1). */
            const int next = kt + STAGES - 2;
            if (next < ktiles)
                load_tile(next % STAGES, next);
            smm_cp_async_commit();
        }
        const int s = kt % STAGES;
        const uint32_t sa = smem_base + s * STAGE_BYTES + wg * 64 * 64;
        const uint32_t sb = smem_base + s * STAGE_BYTES + BM * 64;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        smm_wgmma_64x256x32(acc, smm_wgmma_desc(sa), smm_wgmma_desc(sb));
        smm_wgmma_64x256x32(acc, smm_wgmma_desc(sa + 32), smm_wgmma_desc(sb + 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if (azp) {
            const unsigned char *pb = smem + s * STAGE_BYTES + BM * 64 + tid * 64;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const uint4 v = *(const uint4 *)(pb + c * 16);
                colsum = __dp4a((int)v.x, 0x01010101, colsum);
                colsum = __dp4a((int)v.y, 0x01010101, colsum);
                colsum = __dp4a((int)v.z, 0x01010101, colsum);
                colsum = __dp4a((int)v.w, 0x01010101, colsum);
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    smm_cp_async_wait<0>();
    if (azp) {
        cs[tid] = colsum;
        __syncthreads();
    }

    {
        const int g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t m = bm + wg * 64 + wwarp * 16 + g + h * 8;
            if (m >= d.m)
                continue;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int cl = j * 8 + 2 * q;
                const int64_t n = bn + cl;
                const int32_t c0 = azp ? cs[cl] : 0, c1 = azp ? cs[cl + 1] : 0;
                if (n + 1 < d.n)
                    smm_epi_store2(e, m, n, acc[j * 4 + 2 * h], acc[j * 4 + 2 * h + 1], c0, c1);
                else if (n < d.n)
                    smm_epi_store(e, m, n, acc[j * 4 + 2 * h], c0);
            }
        }
    }
#else
    __shared__ int smm_no_wgmma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_wgmma)[threadIdx.x & 3] = mtiles + ntiles + (int)e.ldc;
#endif
}

#define SMM_TMA_STAGES 4
/* int32 per row of a warp's 16 x 32 epilogue slice: 8 mod 32, so that the
 * 8-byte stores of each half-warp (rows g = 0..3 land 8 banks apart, lanes
 * q 2 banks apart) meet no bank twice; 16-byte reads of a row are whole. */
#define SMM_TMA_STG_LD 40
#define SMM_TMA_SMEM                                                                       \
    (SMM_TMA_STAGES * (128 + 256) * 128 + 2 * SMM_TMA_STAGES * 8 + 3 * 256 * 4 + 2 * 128 * 4 + \
     8 * 16 * SMM_TMA_STG_LD * 4 + 1024)

/* Finishes elements (m, n .. n + 3) of C (those below nmax) from their
 * int32 sums v, with the tile's column data (colsum, scale_b, bias at
 * column n) and row data (scale_a, zero point of row m); the epilogue.h
 * arithmetic, in the same order. One 8- or 16-byte store when all four
 * are inside C and the address is aligned for it. */
SMM_DEV void smm_tma_epi4(const smm_epi_params &e, bool scaled, bool azp, int64_t m, int64_t n,
                          int64_t nmax, int4 v, const int32_t *cs, const float *sb,
                          const float *bias, float sa, int32_t z)
{
    const int64_t off = m * e.ldc + n;
    const bool all4 = n + 3 < nmax;
    uint32_t w[4] = {(uint32_t)v.x, (uint32_t)v.y, (uint32_t)v.z, (uint32_t)v.w};

    if (scaled) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            uint32_t a = w[c];
            float y;
            if (azp)
                a -= (uint32_t)z * (uint32_t)cs[c];
            {
                const float t = smm_epi_mul(smm_epi_i2f((int32_t)a), sb[c]);
                if (e.bias != NULL)
                    y = smm_epi_fma(sa, t, bias[c]);
                else if (azp)
                    y = smm_epi_fma(sa, t, 0.0f);
                else
                    y = smm_epi_mul(sa, t);
            }
            if (e.c_dtype == SMM_DTYPE_F32)
                w[c] = smm_epi_f32_canonical(y);
            else if (e.c_dtype == SMM_DTYPE_F16)
                w[c] = smm_epi_f32_to_f16(y);
            else
                w[c] = smm_epi_f32_to_bf16(y);
        }
    }
    if (e.c_dtype == SMM_DTYPE_F16 || e.c_dtype == SMM_DTYPE_BF16) {
        uint16_t *p = (uint16_t *)e.c + off;
        if (all4 && ((uintptr_t)p & 7u) == 0) {
            *(uint2 *)p = make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (n + c < nmax)
                    p[c] = (uint16_t)w[c];
        }
    } else {
        uint32_t *p = (uint32_t *)e.c + off;
        if (all4 && ((uintptr_t)p & 15u) == 0) {
            *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (n + c < nmax)
                    p[c] = w[c];
        }
    }
}

/*
 * The epilogue of a warp's 16 x 32 NCH share of a tile (rows m0 .. m0 +
 * 15, columns bn .. bn + 32 NCH - 1; warp-level: every lane calls it), 32
 * columns at a time: register j * 4 + 2 h + c of the m64n(32 NCH)
 * accumulator is row g + 8 h, column 8 j + 2 q + c. The warp parks a 16 x 32 slice in st (its
 * own 16 x SMM_TMA_STG_LD int32), then each lane finishes 4 consecutive
 * elements of a row per step (8 lanes a row) and stores them with one 8-
 * or 16-byte store. Column data cs / csb / cbias are indexed by the
 * tile's column, row data rsa / rz by the warp's row (0 .. 15); cs and rz
 * are read only with azp.
 */
template <int NCH>
SMM_DEV void smm_tma_epilogue(const int32_t *acc, int32_t *st, const smm_mm_dims &d,
                              const smm_epi_params &e, bool scaled, bool azp, int64_t m0,
                              int64_t bn, const int32_t *cs, const float *csb,
                              const float *cbias, const float *rsa, const int32_t *rz)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int jc = 0; jc < NCH; jc++) {
#pragma unroll
        for (int jj = 0; jj < 4; jj++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *(int2 *)(st + (g + 8 * h) * SMM_TMA_STG_LD + jj * 8 + 2 * q) =
                    make_int2(acc[(jc * 4 + jj) * 4 + 2 * h], acc[(jc * 4 + jj) * 4 + 2 * h + 1]);
        __syncwarp();
#pragma unroll 1
        for (int step = 0; step < 4; step++) {
            const int idx = step * 32 + lane;
            const int r = idx >> 3, cl = jc * 32 + (idx & 7) * 4;
            const int64_t m = m0 + r, n = bn + cl;
            if (m < d.m && n < d.n) {
                const int4 v = *(const int4 *)(st + r * SMM_TMA_STG_LD + (idx & 7) * 4);
                smm_tma_epi4(e, scaled, azp, m, n, d.n, v, azp ? cs + cl : NULL, csb + cl,
                             cbias + cl, rsa[r], azp ? rz[r] : 0);
            }
        }
        __syncwarp();
    }
}

/*
 * Persistent kernel, block tile 128 x 256, K step 128 bytes, 384 threads:
 * warpgroup 0 is the producer (one thread issues the tensor copies of A and
 * B tiles into SMM_TMA_STAGES shared-memory stages, 128-byte swizzle, rows
 * and columns past the matrix filled with zeros by the copy engine),
 * warpgroups 1 and 2 the consumers (64 rows x 256 columns each, four
 * m64n256k32 wgmmas per stage, one stage of wgmmas left in flight). Stage
 * s is handed over with two barriers: full[s] (the copies landed) and
 * empty[s] (all 256 consumer threads are done reading it). Tiles
 * blockIdx.x, blockIdx.x + gridDim.x, ... in groups of 8 block rows; the
 * producer runs ahead into the next tile while the consumers finish the
 * last one. Needs 16-byte aligned rows of A and B (the tensor maps).
 */
__global__ void __launch_bounds__(384, 1)
smm_tma_kernel(const __grid_constant__ CUtensorMap tma, const __grid_constant__ CUtensorMap tmb,
               smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BM = 128, BN = 256, BK = 128, STAGES = SMM_TMA_STAGES;
    constexpr int A_BYTES = BM * BK, STAGE_BYTES = (BM + BN) * BK;
    constexpr int GROUP_M = 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t smem_base = smm_smem_addr(smem);
    const uint32_t bar_full = smem_base + STAGES * STAGE_BYTES;
    const uint32_t bar_empty = bar_full + STAGES * 8;
    int32_t *cs = (int32_t *)(smem + STAGES * STAGE_BYTES + 2 * STAGES * 8); /* BN */
    float *csb = (float *)(cs + BN);                                          /* BN */
    float *cbias = csb + BN;                                                  /* BN */
    float *csa = cbias + BN;                                                  /* BM */
    int32_t *cz = (int32_t *)(csa + BM);                                      /* BM */
    int32_t *stg = cz + BM; /* 8 warps x 16 x SMM_TMA_STG_LD */

    const int tid = threadIdx.x, wg = tid >> 7;
    const int ktiles = (int)((d.k + BK - 1) / BK);
    const int tiles = mtiles * ntiles;
    const int in_group = GROUP_M * ntiles;

    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            smm_mbar_init(bar_full + 8 * s, 1);
            smm_mbar_init(bar_empty + 8 * s, 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* Producer. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int first_m = (t / in_group) * GROUP_M;
                const int group_rows = min(mtiles - first_m, GROUP_M);
                const int bm = (first_m + (t % in_group) % group_rows) * BM;
                const int bn = ((t % in_group) / group_rows) * BN;
                for (int kt = 0; kt < ktiles; kt++, it++) {
                    const uint32_t s = it % STAGES;
                    const uint32_t sa = smem_base + s * STAGE_BYTES;
                    smm_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
                    smm_mbar_expect_tx(bar_full + 8 * s, STAGE_BYTES);
                    smm_tma_load_2d(sa, &tma, kt * BK, bm, bar_full + 8 * s);
                    smm_tma_load_2d(sa + A_BYTES, &tmb, kt * BK, bn, bar_full + 8 * s);
                }
            }
        }
    } else {
        /* Consumers. */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int ctid = tid - 128, cwg = wg - 1;
        const int wwarp = (tid >> 5) & 3;
        const bool azp = e.azp != NULL;
        const bool scaled = e.c_dtype != SMM_DTYPE_I32;
        uint32_t it = 0;
        int32_t acc[128];

        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int first_m = (t / in_group) * GROUP_M;
            const int group_rows = min(mtiles - first_m, GROUP_M);
            const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
            const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;
            int32_t colsum = 0; /* column bn + ctid */

#pragma unroll
            for (int i = 0; i < 128; i++)
                acc[i] = 0;

            for (int kt = 0; kt < ktiles; kt++, it++) {
                const uint32_t s = it % STAGES;
                const uint32_t sa = smem_base + s * STAGE_BYTES + cwg * 64 * BK;
                const uint32_t sb = smem_base + s * STAGE_BYTES + A_BYTES;
                smm_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 32; kk++)
                    smm_wgmma_64x256x32(acc, smm_wgmma_desc128(sa + 32 * kk),
                                        smm_wgmma_desc128(sb + 32 * kk));
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                if (azp) {
                    /* Row ctid of the B tile (its 16-byte chunks permuted,
                     * which leaves the sum alone), chunks in a rotated
                     * order to spread the banks. */
                    const unsigned char *pb = smem + s * STAGE_BYTES + A_BYTES + ctid * BK;
#pragma unroll
                    for (int c = 0; c < BK / 16; c++) {
                        const uint4 v = *(const uint4 *)(pb + (((c + ctid) & 7) << 4));
                        colsum = __dp4a((int)v.x, 0x01010101, colsum);
                        colsum = __dp4a((int)v.y, 0x01010101, colsum);
                        colsum = __dp4a((int)v.z, 0x01010101, colsum);
                        colsum = __dp4a((int)v.w, 0x01010101, colsum);
                    }
                }
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                if (kt > 0)
                    smm_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (ktiles > 0)
                smm_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
            /* Per-tile column and row data into shared memory (after every
             * consumer is done with the last tile's). */
            asm volatile("bar.sync 1, 256;\n" ::: "memory");
            if (scaled) {
                const int64_t n = bn + ctid < d.n ? bn + ctid : d.n - 1;
                cs[ctid] = colsum;
                csb[ctid] = __ldg(e.scale_b_per_col ? e.scale_b + n : e.scale_b);
                cbias[ctid] = e.bias != NULL ? __ldg(e.bias + n) : 0.0f;
                if (ctid < BM) {
                    const int64_t m = bm + ctid < d.m ? bm + ctid : d.m - 1;
                    csa[ctid] = __ldg(e.scale_a_per_row ? e.scale_a + m : e.scale_a);
                    cz[ctid] = azp ? __ldg(e.azp_per_row ? e.azp + m : e.azp) : 0;
                }
            }
            asm volatile("bar.sync 1, 256;\n" ::: "memory");

            smm_tma_epilogue<8>(acc, stg + (ctid >> 5) * (16 * SMM_TMA_STG_LD), d, e, scaled, azp,
                             bm + cwg * 64 + wwarp * 16, bn, cs, csb, cbias,
                             csa + cwg * 64 + wwarp * 16, cz + cwg * 64 + wwarp * 16);
        }
    }
#else
    __shared__ int smm_no_tma[4];
    if (d.m < 0)
        ((volatile int *)smm_no_tma)[threadIdx.x & 3] = mtiles + ntiles + (int)e.ldc;
#endif
}

/* The ping-pong form's shared memory with ST stages of a warpgroup tile
 * of BM x BN: stages of BM x 128 bytes of A and BN x 128 of B, full /
 * empty barriers per stage, two order barriers, per consumer warpgroup its
 * tile's column data (scale_b, bias: 2 x BN floats) and row data (scale_a,
 * BM floats), the epilogue slices, and the 1024-byte alignment slack. */
#define SMM_TMA_PP_STAGES 4
#define SMM_TMA_PP_SMEM(ST, BM, BN)                                                       \
    ((ST) * ((BM) + (BN)) * 128 + 2 * (ST) * 8 + 2 * 8 + 2 * (2 * (BN) + (BM)) * 4 +       \
     8 * 16 * SMM_TMA_STG_LD * 4 + 1024)
static_assert(SMM_TMA_PP_SMEM(5, 64, 256) <= 227 * 1024,
              "five 64 x 256 stages fit one block per SM (sm_90)");
static_assert(SMM_TMA_PP_SMEM(6, 128, 128) <= 227 * 1024,
              "six 128 x 128 stages fit one block per SM (sm_90)");

/*
 * Ping-pong form of smm_tma_kernel (no azp), 384 threads: warpgroup 0 is
 * the producer, as there; consumer warpgroups 1 and 2 each own a whole 64 x
 * 256 tile (one m64n256k32 accumulator) and take the block's tiles in
 * turn: the block's j-th tile is warpgroup 1 + j % 2's. The producer fills
 * the stages with the tiles' k-tiles in that order, so a warpgroup's
 * k-tile is iteration j ktiles + kt of the stage ring. A warpgroup starts
 * a tile's products only once the other has issued all of the previous
 * tile's (order[w] counts warpgroup w's finished main loops), so that the
 * two main loops never share the tensor cores and a barrier's phase is
 * never waited on two phases early; one warpgroup's epilogue then runs
 * under the other's products. empty[s] counts the four warps of the
 * warpgroup that read stage s. Tiles blockIdx.x, blockIdx.x + gridDim.x,
 * ... in groups of 1024 rows. SQ: the warpgroup tile is 128 x 128 (two
 * m64n128k32 accumulators sharing each B slice), for problems with few
 * 64 x 256 tiles (smm_launch_tma_pp). Needs 16-byte aligned rows of A
 * and B.
 */
template <int STAGES, bool SQ>
__global__ void __launch_bounds__(384, 1)
smm_tma_pp_kernel(const __grid_constant__ CUtensorMap tma, const __grid_constant__ CUtensorMap tmb,
                  smm_mm_dims d, smm_epi_params e, int mtiles, int ntiles)
{
#if defined(SMM_HAVE_WGMMA)
    constexpr int BM = SQ ? 128 : 64, BN = SQ ? 128 : 256, BK = 128;
    constexpr int A_BYTES = BM * BK, STAGE_BYTES = (BM + BN) * BK;
    constexpr int GROUP_M = 1024 / BM;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t raw_addr = smm_smem_addr(smem_raw);
    unsigned char *smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
    const uint32_t smem_base = smm_smem_addr(smem);
    const uint32_t bar_full = smem_base + STAGES * STAGE_BYTES;
    const uint32_t bar_empty = bar_full + STAGES * 8;
    const uint32_t bar_order = bar_empty + STAGES * 8; /* 2 */
    float *cdata = (float *)(smem + STAGES * STAGE_BYTES + 2 * STAGES * 8 + 2 * 8);
    int32_t *stg = (int32_t *)(cdata + 2 * (2 * BN + BM)); /* 8 warps x 16 x SMM_TMA_STG_LD */

    const int tid = threadIdx.x, wg = tid >> 7;
    const int ktiles = (int)((d.k + BK - 1) / BK);
    const int tiles = mtiles * ntiles;
    const int in_group = GROUP_M * ntiles;

    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            smm_mbar_init(bar_full + 8 * s, 1);
            smm_mbar_init(bar_empty + 8 * s, 4);
        }
        smm_mbar_init(bar_order, 128);
        smm_mbar_init(bar_order + 8, 128);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* Producer: every tile of the block, in order. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int first_m = (t / in_group) * GROUP_M;
                const int group_rows = min(mtiles - first_m, GROUP_M);
                const int bm = (first_m + (t % in_group) % group_rows) * BM;
                const int bn = ((t % in_group) / group_rows) * BN;
                for (int kt = 0; kt < ktiles; kt++, it++) {
                    const uint32_t s = it % STAGES;
                    const uint32_t sa = smem_base + s * STAGE_BYTES;
                    smm_mbar_wait(bar_empty + 8 * s, ((it / STAGES) & 1) ^ 1);
                    smm_mbar_expect_tx(bar_full + 8 * s, STAGE_BYTES);
                    smm_tma_load_2d(sa, &tma, kt * BK, bm, bar_full + 8 * s);
                    smm_tma_load_2d(sa + A_BYTES, &tmb, kt * BK, bn, bar_full + 8 * s);
                }
            }
        }
    } else {
        /* Consumers: warpgroup c takes the block's tiles j = c, c + 2, ... */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, ctid = tid & 127, wwarp = (tid >> 5) & 3, lane = tid & 31;
        const bool scaled = e.c_dtype != SMM_DTYPE_I32;
        float *csb = cdata + c * (2 * BN + BM), *cbias = csb + BN, *csa = cbias + BN;
        const uint32_t order_mine = bar_order + 8 * c, order_other = bar_order + 8 * (c ^ 1);
        uint32_t waits = 0; /* of order_other so far */
        int32_t acc[128];
        /* This warp is done with stage s (its wgmmas completed). */
        auto release = [&](uint32_t s) {
            if (lane == 0)
                smm_mbar_arrive(bar_empty + 8 * s);
        };

        for (int j = c, t = blockIdx.x + c * gridDim.x; t < tiles; j += 2, t += 2 * gridDim.x) {
            const int first_m = (t / in_group) * GROUP_M;
            const int group_rows = min(mtiles - first_m, GROUP_M);
            const int64_t bm = (int64_t)(first_m + (t % in_group) % group_rows) * BM;
            const int64_t bn = (int64_t)((t % in_group) / group_rows) * BN;
            uint32_t it = (uint32_t)j * (uint32_t)ktiles;

#pragma unroll
            for (int i = 0; i < 128; i++)
                acc[i] = 0;
            /* The other warpgroup has issued every product of tile j - 1. */
            if (j > 0) {
                smm_mbar_wait(order_other, waits & 1);
                waits++;
            }
            for (int kt = 0; kt < ktiles; kt++, it++) {
                const uint32_t s = it % STAGES;
                const uint32_t sa = smem_base + s * STAGE_BYTES;
                const uint32_t sb = sa + A_BYTES;
                smm_mbar_wait(bar_full + 8 * s, (it / STAGES) & 1);
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 32; kk++) {
                    if (SQ) {
                        smm_wgmma_64x128x32(acc, smm_wgmma_desc128(sa + 32 * kk),
                                            smm_wgmma_desc128(sb + 32 * kk));
                        smm_wgmma_64x128x32(acc + 64, smm_wgmma_desc128(sa + 64 * BK + 32 * kk),
                                            smm_wgmma_desc128(sb + 32 * kk));
                    } else {
                        smm_wgmma_64x256x32(acc, smm_wgmma_desc128(sa + 32 * kk),
                                            smm_wgmma_desc128(sb + 32 * kk));
                    }
                }
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                if (kt == ktiles - 1)
                    smm_mbar_arrive(order_mine);
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                if (kt > 0)
                    release((it - 1) % STAGES);
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            release((it - 1) % STAGES);

            /* The tile's column and row data (after every warp of this
             * warpgroup is done with its last tile's). */
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
            if (scaled) {
#pragma unroll
                for (int h = 0; h < BN / 128; h++) {
                    const int cl = ctid + 128 * h;
                    const int64_t n = bn + cl < d.n ? bn + cl : d.n - 1;
                    csb[cl] = __ldg(e.scale_b_per_col ? e.scale_b + n : e.scale_b);
                    cbias[cl] = e.bias != NULL ? __ldg(e.bias + n) : 0.0f;
                }
                if (ctid < BM) {
                    const int64_t m = bm + ctid < d.m ? bm + ctid : d.m - 1;
                    csa[ctid] = __ldg(e.scale_a_per_row ? e.scale_a + m : e.scale_a);
                }
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");

            int32_t *st = stg + ((tid - 128) >> 5) * (16 * SMM_TMA_STG_LD);
            if (SQ) { /* rows wwarp * 16 .. of each 64-row half */
                smm_tma_epilogue<4>(acc, st, d, e, scaled, false, bm + wwarp * 16, bn, NULL, csb,
                                    cbias, csa + wwarp * 16, NULL);
                smm_tma_epilogue<4>(acc + 64, st, d, e, scaled, false, bm + 64 + wwarp * 16, bn,
                                    NULL, csb, cbias, csa + 64 + wwarp * 16, NULL);
            } else {
                smm_tma_epilogue<8>(acc, st, d, e, scaled, false, bm + wwarp * 16, bn, NULL, csb,
                                    cbias, csa + wwarp * 16, NULL);
            }
        }
    }
#else
    __shared__ int smm_no_tma_pp[4];
    if (d.m < 0)
        ((volatile int *)smm_no_tma_pp)[threadIdx.x & 3] = mtiles + ntiles + (int)e.ldc;
#endif
}

#define SMM_WGMMA_STAGES 5

/* Whether the wgmma kernel the driver loaded for the current device is the
 * sm_90a one (the stub has static shared memory), read once per device. */
bool smm_have_wgmma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_wgmma_kernel<SMM_WGMMA_STAGES, true>, cache);
}

gpuError_t smm_launch_wgmma(const smm_mm_dims &d, const smm_epi_params &e,
                            gpuStream_t stream)
{
    const int64_t mt = (d.m + 127) / 128, nt = (d.n + 255) / 256;
    const int smem = SMM_WGMMA_STAGES * (128 + 256) * 64 + 256 * 4 + 1024;
    static bool attr_set[64]; /* per device: the attribute is per context */
    auto kern = smm_wgmma_kernel<SMM_WGMMA_STAGES, true>;

    if (mt * nt > INT32_MAX)
        return gpuErrorInvalidValue;
    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kern, smem);
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    kern<<<(unsigned)(mt * nt), 256, smem, stream>>>(d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no
 * link against the driver library), looked up once; NULL if missing. */
PFN_cuTensorMapEncodeTiled_v12000 smm_tmap_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int tried;

    if (!tried) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &q);
#else
        cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p,
                                                  cudaEnableDefault, &q);
#endif
        if (err == cudaSuccess && q == cudaDriverEntryPointSuccess && p != NULL)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
        (void)cudaGetLastError();
        tried = 1;
    }
    return fn;
}

/* Tensor map of a rows x k int8 matrix (row stride ld bytes, a multiple
 * of 16, base 16-byte aligned): boxes of 128 bytes of K by box_rows rows,
 * 128-byte swizzle, zeros past the edges. */
bool smm_make_tmap(CUtensorMap *map, const int8_t *base, int64_t rows, int64_t k,
                   int64_t ld, unsigned box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 fn = smm_tmap_encoder();
    cuuint64_t dims[2], strides[1];
    cuuint32_t box[2], estr[2] = {1, 1};

    if (fn == NULL)
        return false;
    dims[0] = (cuuint64_t)k;
    dims[1] = (cuuint64_t)rows;
    strides[0] = (cuuint64_t)ld;
    box[0] = 128;
    box[1] = box_rows;
    return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)base, dims, strides, box, estr,
              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Whether the TMA kernel the driver loaded is the sm_90a one (as
 * smm_have_wgmma), read once per device. */
bool smm_have_tma(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_tma_kernel, cache) && smm_tmap_encoder() != NULL;
}

/* The TMA kernel when the problem suits it (16-byte aligned, strides
 * multiples of 16, sizes below 2^31, K > 0) and the tensor maps encode;
 * *done false: nothing launched, use another kernel. */
gpuError_t smm_launch_tma(const smm_mm_dims &d, const smm_epi_params &e, int sms,
                          gpuStream_t stream, bool *done)
{
    const int64_t mt = (d.m + 127) / 128, nt = (d.n + 255) / 256;
    static bool attr_set[64];
    CUtensorMap ta, tb;

    *done = false;
    if (d.k <= 0 || d.m >= INT32_MAX || d.n >= INT32_MAX || d.k >= INT32_MAX ||
        d.lda % 16 != 0 || d.ldb % 16 != 0 || d.lda < d.k || d.ldb < d.k ||
        ((uintptr_t)d.a & 15) != 0 || ((uintptr_t)d.b & 15) != 0 || mt * nt > INT32_MAX)
        return gpuSuccess;
    if (!smm_make_tmap(&ta, d.a, d.m, d.k, d.lda, 128) ||
        !smm_make_tmap(&tb, d.b, d.n, d.k, d.ldb, 256))
        return gpuSuccess;
    const int dev = smm_cache_dev();
    if (!attr_set[dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(smm_tma_kernel, SMM_TMA_SMEM);
        if (err != gpuSuccess)
            return err;
        attr_set[dev] = true;
    }
    *done = true;
    smm_tma_kernel<<<(unsigned)(mt * nt < sms ? mt * nt : sms), 384, SMM_TMA_SMEM, stream>>>(
        ta, tb, d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

/* Whether the ping-pong kernels the driver loaded are the sm_90a ones. */
bool smm_have_tma_pp(void)
{
    static signed char cache[64];
    return smm_sm90a_loaded(smm_tma_pp_kernel<SMM_TMA_PP_STAGES, false>, cache) &&
           smm_tmap_encoder() != NULL;
}

/* The ping-pong kernel when the problem suits it (smm_launch_tma's
 * conditions, and no azp): tile 1 the 64 x 256 warpgroup tile with
 * `stages` 4 or 5, tile 2 the 128 x 128 one with 5 or 6; 0 (or another
 * value) chosen. *done false: nothing launched. */
gpuError_t smm_launch_tma_pp(const smm_mm_dims &d, const smm_epi_params &e, int sms, int stages,
                             int tile, gpuStream_t stream, bool *done)
{
    static bool attr_set[4][64];
    CUtensorMap ta, tb;

    *done = false;
    /* Tile 0 (chosen): the 128 x 128 tile where the 64 x 256 one leaves
     * SMs idle or ends on a thin last wave: at most 768 tiles of 64 x 256
     * (about three per warpgroup on 132 SMs), and at M <= 64, where half
     * of each 128-row tile is padding, at most 128 tiles of 128 x 128
     * (the bounds from gpu-tune --large-sweep on an H100; doc/design.md). */
    if (tile != 1 && tile != 2) {
        const int64_t t1 = (d.m + 63) / 64 * ((d.n + 255) / 256);
        const int64_t t2 = (d.m + 127) / 128 * ((d.n + 127) / 128);
        tile = (d.m <= 64 ? t2 <= 128 : t1 <= 768) ? 2 : 1;
    }
    const bool sq = tile == 2;
    const int bm = sq ? 128 : 64, bn = sq ? 128 : 256;
    const int64_t mt = (d.m + bm - 1) / bm, nt = (d.n + bn - 1) / bn;
    if (e.azp != NULL || d.k <= 0 || d.m >= INT32_MAX || d.n >= INT32_MAX ||
        d.k >= INT32_MAX || d.lda % 16 != 0 || d.ldb % 16 != 0 || d.lda < d.k || d.ldb < d.k ||
        ((uintptr_t)d.a & 15) != 0 || ((uintptr_t)d.b & 15) != 0 || mt * nt > INT32_MAX / 2)
        return gpuSuccess;
    if (!smm_make_tmap(&ta, d.a, d.m, d.k, d.lda, (unsigned)bm) ||
        !smm_make_tmap(&tb, d.b, d.n, d.k, d.ldb, (unsigned)bn))
        return gpuSuccess;
    int f;
    if (sq)
        f = stages == 5 ? 2 : 3;
    else
        f = (stages == 4 || stages == 5 ? stages : SMM_TMA_PP_STAGES) == 4 ? 0 : 1;
    static void (*const kerns[4])(const CUtensorMap, const CUtensorMap, smm_mm_dims,
                                  smm_epi_params, int, int) = {
        smm_tma_pp_kernel<4, false>, smm_tma_pp_kernel<5, false>, smm_tma_pp_kernel<5, true>,
        smm_tma_pp_kernel<6, true>};
    static const int smems[4] = {SMM_TMA_PP_SMEM(4, 64, 256), SMM_TMA_PP_SMEM(5, 64, 256),
                                 SMM_TMA_PP_SMEM(5, 128, 128), SMM_TMA_PP_SMEM(6, 128, 128)};
    const int dev = smm_cache_dev();
    if (!attr_set[f][dev]) {
        gpuError_t err = gpuFuncSetMaxDynamicSharedMemory(kerns[f], smems[f]);
        if (err != gpuSuccess)
            return err;
        attr_set[f][dev] = true;
    }
    *done = true;
    kerns[f]<<<(unsigned)(mt * nt < sms ? mt * nt : sms), 384, smems[f], stream>>>(
        ta, tb, d, e, (int)mt, (int)nt);
    return gpuGetLastError();
}

#endif /* SMM_GPU_NVIDIA */
