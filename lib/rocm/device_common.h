/*
 * device_common.h - what the GEMM kernel files (gemm_*.hip) share on the
 * device side: the problem's dimensions as the kernels take them, 4-byte
 * dot products and loads, and NVIDIA's cp.async / ldmatrix / mma.sync and
 * mbarrier / tensor-copy helpers (inline PTX). Internal to lib/rocm/.
 *
 * The numbers are the numerics contract's (doc/numerics.md), bit for bit:
 * the int32 sums wrap modulo 2^32 (integer tensor-core / matrix-core and
 * dot-product instructions accumulate without saturation; every partial
 * sum is int32 or uint32, so the grouping of the sum does not change a
 * bit), and the float epilogue is epilogue.h's, done once per element
 * after the whole sum. The column sums of B needed with an activation zero
 * point are computed by the kernels from the B tiles they already hold
 * (int32, wrapping).
 */
#ifndef SMM_GPU_DEVICE_COMMON_H
#define SMM_GPU_DEVICE_COMMON_H

#include "kernels.h"
#include "epilogue.h"

#if defined(SMM_GPU_NVIDIA)
#include <cudaTypedefs.h> /* CUtensorMap, PFN_cuTensorMapEncodeTiled (no -lcuda) */
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct smm_mm_dims {
    const int8_t *a;
    const int8_t *b;
    int64_t m, n, k, lda, ldb;
    int pdl; /* decode kernel: launched with programmatic stream serialization */
    /* Decode kernel: B is a packed B, which no kernel writes; and with it,
     * the chunk steps per warp copied into shared memory before the wait
     * (0: the first U steps into registers). Two 16-bit fields where one
     * int was: the kernels' parameter block keeps its size. */
    int16_t b_static, pre;
};

/* c + the four byte products of a and b (signed), modulo 2^32. */
SMM_DEV int32_t smm_dot4(int32_t a, int32_t b, int32_t c)
{
#if defined(SMM_GPU_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#elif defined(SMM_GPU_AMD) &&                                                          \
    (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) ||              \
     defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) ||              \
     defined(__gfx1011__) || defined(__gfx1012__) || defined(__gfx1030__) ||           \
     defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) ||           \
     defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__))
    return __builtin_amdgcn_sdot4(a, b, c, false); /* no clamp: wraps */
#else
    uint32_t s = (uint32_t)c;
    int i;
    for (i = 0; i < 4; i++)
        s += (uint32_t)((int32_t)(int8_t)(a >> (8 * i)) * (int32_t)(int8_t)(b >> (8 * i)));
    return (int32_t)s;
#endif
}

/* The 4 bytes at p (k .. k+3 of a row whose valid length is `len` bytes
 * from p's row start, i.e. bytes at k + i >= len read as 0). `al4`: the
 * address is 4-byte aligned. */
SMM_DEV int32_t smm_load4(const int8_t *p, int64_t k, int64_t len, bool al4)
{
    if (al4 && k + 4 <= len)
        return *(const int32_t *)p;
    {
        uint32_t v = 0;
        int i;
        for (i = 0; i < 4; i++)
            if (k + i < len)
                v |= (uint32_t)(uint8_t)p[i] << (8 * i);
        return (int32_t)v;
    }
}

#if defined(SMM_GPU_NVIDIA)

/* sm_80+ (mma.sync, cp.async, ldmatrix): the mma and decode kernels. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SMM_HAVE_MMA 1
#endif

SMM_DEV uint32_t smm_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

SMM_DEV void smm_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
#endif
}

SMM_DEV void smm_cp_async_commit()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> SMM_DEV void smm_cp_async_wait()
{
#if defined(SMM_HAVE_MMA)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

SMM_DEV void smm_ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                             uint32_t &r3)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
#endif
}

/* d += a(16x32, row) * b(32x8, col), int32 wrapping (no .satfinite). */
SMM_DEV void smm_mma_16832(int32_t *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                           uint32_t b0, uint32_t b1)
{
#if defined(SMM_HAVE_MMA)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* 16 bytes of a row at byte k (row length len), zero past len; unaligned
 * addresses are fine (byte loads). */
SMM_DEV uint4 smm_load16_guarded(const int8_t *p, int64_t k, int64_t len)
{
    uint32_t w[4] = {0, 0, 0, 0};
    int i;
    for (i = 0; i < 16; i++)
        if (k + i < len)
            w[i / 4] |= (uint32_t)(uint8_t)p[i] << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Byte offset of 16-byte chunk c (0..3) of row r in a 64-byte-row tile:
 * the chunk index is XORed with (r / 2) % 4 so that the 8 rows an ldmatrix
 * phase reads fall in 8 different bank groups. */
SMM_DEV uint32_t smm_swz(int r, int c)
{
    return (uint32_t)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
}

/* sm_90a code objects (wgmma, mbarrier transactions, tensor copies). */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMM_HAVE_WGMMA 1
#endif

SMM_DEV void smm_mbar_init(uint32_t bar, uint32_t count)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}

/* Arrive once and add `bytes` to the transaction count of the phase. */
SMM_DEV void smm_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
#endif
}

SMM_DEV void smm_mbar_arrive(uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

/* Waits until the phase of parity `parity` of the barrier has completed.
 * CLUSTER: with acquire at cluster scope, so that what other blocks of the
 * cluster wrote (their completions counted on the barrier) is visible
 * after it. */
template <bool CLUSTER = false> SMM_DEV void smm_mbar_wait(uint32_t bar, uint32_t parity)
{
#if defined(SMM_HAVE_WGMMA)
    uint32_t done = 0;
    do {
        if (CLUSTER)
            asm volatile("{\n.reg .pred p;\n"
                         "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done)
                         : "r"(bar), "r"(parity)
                         : "memory");
        else
            asm volatile("{\n.reg .pred p;\n"
                         "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done)
                         : "r"(bar), "r"(parity)
                         : "memory");
    } while (!done);
#endif
}

/* Tensor copy of the box at (c0 = byte along K, c1 = row) into shared
 * memory at dst, completing on barrier bar. */
SMM_DEV void smm_tma_load_2d(uint32_t dst, const void *tmap, int c0, int c1, uint32_t bar)
{
#if defined(SMM_HAVE_WGMMA)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"((uint64_t)tmap), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
#endif
}

/*
 * Shared-memory matrix descriptor of a K-major int8 tile with 128-byte
 * rows in the 128-byte swizzle layout the tensor copy writes (16-byte
 * chunk index XOR row % 8, tile on a 1024-byte boundary): stride byte
 * offset 1024 (8 rows), layout 1. A K step of 32 bytes inside the row is
 * a start address 32 bytes further.
 */
SMM_DEV uint64_t smm_wgmma_desc128(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The same descriptor from its low word, smm_wgmma_desc128_lo(addr) (a
 * shared-memory address below 256 KiB: the low word of the descriptor of
 * addr + 16 i is that of addr plus i, so a loop can step it with one
 * 32-bit add). */
SMM_DEV uint32_t smm_wgmma_desc128_lo(uint32_t addr)
{
    return ((addr & 0x3FFFF) >> 4) | (1u << 16);
}

SMM_DEV uint64_t smm_wgmma_desc128_of(uint32_t lo)
{
    return (uint64_t)lo | ((uint64_t)((1024 >> 4) | (1u << 30)) << 32);
}

#endif /* SMM_GPU_NVIDIA */

#endif
