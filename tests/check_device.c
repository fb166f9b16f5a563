/*
 * check_device.c - device memory and streams (smm_malloc, smm_free,
 * smm_memcpy, smm_context_set_stream, smm_synchronize) on every available
 * backend: every error path, copies in every direction with the bytes
 * around them untouched, alignment, packed B, and argument checks that
 * never read the data (GPU contexts pass device pointers through them).
 * GPU backends that cannot run here are reported as skipped, with why.
 */
#include "config.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_gpu(smm_backend b)
{
    return b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA;
}

/* The device kinds a context accepts: all four on a GPU context, only host
 * to host elsewhere. */
static smm_memcpy_kind up_kind(smm_backend b)
{
    return is_gpu(b) ? SMM_MEMCPY_HOST_TO_DEVICE : SMM_MEMCPY_HOST_TO_HOST;
}
static smm_memcpy_kind down_kind(smm_backend b)
{
    return is_gpu(b) ? SMM_MEMCPY_DEVICE_TO_HOST : SMM_MEMCPY_HOST_TO_HOST;
}
static smm_memcpy_kind across_kind(smm_backend b)
{
    return is_gpu(b) ? SMM_MEMCPY_DEVICE_TO_DEVICE : SMM_MEMCPY_HOST_TO_HOST;
}

/* ---- the GPU backends: available, or skipped with a reason ---- */

START_TEST(test_gpu_probe_reasons)
{
    static const smm_backend gpus[2] = { SMM_BACKEND_ROCM, SMM_BACKEND_CUDA };
    for (int i = 0; i < 2; i++) {
        const char *why = NULL;
        int ok = smm_backend_available(gpus[i], &why);
        ck_assert_ptr_nonnull(why);
        ck_assert_msg(why[0] != '\0', "%s: empty reason", smm_backend_name(gpus[i]));
        if (!ok) {
            printf("check_device: backend %s: SKIP (%s)\n", smm_backend_name(gpus[i]), why);
            smm_context *ctx = (smm_context *)1;
            ck_assert_int_eq(smm_context_create(&ctx, gpus[i]), SMM_ERR_NOT_AVAILABLE);
            ck_assert_ptr_null(ctx);
        }
    }
    /* A plugin built in this tree is found through SMM_GPU_PLUGIN_DIR
     * (make check sets it): when it is not usable, the reason comes from
     * loading it, not "not found" or "no GPU backend in this build". */
    const char *why = NULL;
#ifdef SMM_BUILD_CUDA
    if (!smm_backend_available(SMM_BACKEND_CUDA, &why))
        ck_assert_msg(strncmp(why, "libscaledmm-cuda.so: ", 21) == 0, "cuda: \"%s\"", why);
#else
    if (!getenv("SMM_GPU_PLUGIN_DIR") || !*getenv("SMM_GPU_PLUGIN_DIR")) {
        smm_backend_available(SMM_BACKEND_CUDA, &why);
        ck_assert_ptr_nonnull(why);
    }
#endif
#ifdef SMM_BUILD_ROCM
    if (!smm_backend_available(SMM_BACKEND_ROCM, &why))
        ck_assert_msg(strncmp(why, "libscaledmm-rocm.so: ", 21) == 0, "rocm: \"%s\"", why);
#endif
    /* AUTO never picks a GPU backend (their calls take device pointers). */
    if (!getenv("SMM_BACKEND"))
        ck_assert(!is_gpu(smm_backend_auto()));
}
END_TEST

/* ---- NULL context ---- */

START_TEST(test_null_context)
{
    void *p = (void *)1;
    char buf[4];
    ck_assert_int_eq(smm_malloc(NULL, 16, &p), SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(smm_malloc(NULL, 16, NULL), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_free(NULL, NULL), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_free(NULL, buf), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_memcpy(NULL, buf, buf + 2, 2, SMM_MEMCPY_HOST_TO_HOST),
                     SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_context_set_stream(NULL, NULL), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_synchronize(NULL), SMM_ERR_INVALID_ARG);
}
END_TEST

/* ---- smm_malloc / smm_free ---- */

START_TEST(test_malloc_free)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    for (int i = 0; i < nb; i++) {
        const char *name = smm_backend_name(bs[i]);
        smm_context *ctx = tu_ctx(bs[i], 0);
        ck_assert_int_eq(smm_malloc(ctx, 16, NULL), SMM_ERR_INVALID_ARG);
        ck_assert_msg(strstr(smm_context_last_error(ctx), "ptr") != NULL, "%s: \"%s\"", name,
                      smm_context_last_error(ctx));

        /* Too much: NO_MEMORY (or the device's error), pointer NULL. */
        void *p = (void *)1;
        smm_status st = smm_malloc(ctx, SIZE_MAX - 4095, &p);
        ck_assert_msg(st == SMM_ERR_NO_MEMORY || (is_gpu(bs[i]) && st == SMM_ERR_DEVICE),
                      "%s: smm_malloc(SIZE_MAX - 4095): %s", name, smm_strerror(st));
        ck_assert_ptr_null(p);
        ck_assert_msg(smm_context_last_error(ctx)[0] != '\0', "%s: no message", name);

        /* Zero bytes: valid, unique pointers. */
        void *z1 = NULL, *z2 = NULL;
        ck_assert_int_eq(smm_malloc(ctx, 0, &z1), SMM_OK);
        ck_assert_int_eq(smm_malloc(ctx, 0, &z2), SMM_OK);
        ck_assert_ptr_nonnull(z1);
        ck_assert_ptr_nonnull(z2);
        ck_assert_ptr_ne(z1, z2);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        ck_assert_int_eq(smm_free(ctx, z1), SMM_OK);
        ck_assert_int_eq(smm_free(ctx, z2), SMM_OK);

        /* Alignment: 256 bytes on a device, 64 on the host. */
        size_t align = is_gpu(bs[i]) ? 256 : 64;
        static const size_t sizes[5] = { 1, 3, 64, 1000, 1 << 20 };
        void *ps[5];
        for (int s = 0; s < 5; s++) {
            ck_assert_int_eq(smm_malloc(ctx, sizes[s], &ps[s]), SMM_OK);
            ck_assert_msg((uintptr_t)ps[s] % align == 0, "%s: smm_malloc(%zu) = %p", name,
                          sizes[s], ps[s]);
        }
        for (int s = 0; s < 5; s++)
            ck_assert_int_eq(smm_free(ctx, ps[s]), SMM_OK);
        ck_assert_int_eq(smm_free(ctx, NULL), SMM_OK);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* Host contexts allocate through the context's allocator. */
START_TEST(test_malloc_allocator)
{
    smm_backend host[2] = { SMM_BACKEND_REFERENCE, SMM_BACKEND_CPU };
    for (int i = 0; i < 2; i++) {
        if (!smm_backend_available(host[i], NULL))
            continue;
        tu_counting cnt;
        tu_counting_init(&cnt);
        smm_allocator al = tu_counting_allocator(&cnt);
        smm_context *ctx = NULL;
        ck_assert_int_eq(smm_context_create_with_allocator(&ctx, host[i], &al), SMM_OK);
        int64_t live = cnt.live;
        void *p = NULL;
        ck_assert_int_eq(smm_malloc(ctx, 100, &p), SMM_OK);
        ck_assert_int_eq(cnt.live, live + 1);
        tu_counting_fail_in(&cnt, 0);
        void *q = (void *)1;
        ck_assert_int_eq(smm_malloc(ctx, 100, &q), SMM_ERR_NO_MEMORY);
        ck_assert_ptr_null(q);
        tu_counting_fail_in(&cnt, -1);
        ck_assert_int_eq(smm_free(ctx, p), SMM_OK);
        ck_assert_int_eq(cnt.live, live);
        smm_context_destroy(ctx);
        ck_assert_int_eq(cnt.live, 0);
    }
}
END_TEST

/* ---- smm_memcpy ---- */

START_TEST(test_memcpy_errors)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    for (int i = 0; i < nb; i++) {
        const char *name = smm_backend_name(bs[i]);
        smm_context *ctx = tu_ctx(bs[i], 0);
        unsigned char host[64];
        memset(host, 0x11, sizeof host);
        void *dev = NULL;
        ck_assert_int_eq(smm_malloc(ctx, 64, &dev), SMM_OK);

        /* Kinds outside the enum. */
        ck_assert_int_eq(smm_memcpy(ctx, dev, host, 8, (smm_memcpy_kind)-1), SMM_ERR_INVALID_ARG);
        ck_assert_int_eq(smm_memcpy(ctx, dev, host, 8, (smm_memcpy_kind)4), SMM_ERR_INVALID_ARG);
        ck_assert_msg(strstr(smm_context_last_error(ctx), "kind") != NULL, "%s: \"%s\"", name,
                      smm_context_last_error(ctx));
        /* NULL pointers with bytes > 0; bytes == 0 does nothing. */
        for (int k = 0; k < 4; k++) {
            smm_memcpy_kind kind = (smm_memcpy_kind)k;
            if (!is_gpu(bs[i]) && kind != SMM_MEMCPY_HOST_TO_HOST) {
                /* A device kind on a context without a device. */
                ck_assert_int_eq(smm_memcpy(ctx, dev, host, 8, kind), SMM_ERR_INVALID_ARG);
                ck_assert_msg(strstr(smm_context_last_error(ctx), "device") != NULL,
                              "%s: \"%s\"", name, smm_context_last_error(ctx));
                continue;
            }
            void *dst = kind == SMM_MEMCPY_DEVICE_TO_HOST || kind == SMM_MEMCPY_HOST_TO_HOST
                            ? (void *)host : dev;
            const void *src = kind == SMM_MEMCPY_HOST_TO_DEVICE || kind == SMM_MEMCPY_HOST_TO_HOST
                                  ? (const void *)(host + 32) : dev;
            ck_assert_int_eq(smm_memcpy(ctx, NULL, src, 8, kind), SMM_ERR_INVALID_ARG);
            ck_assert_int_eq(smm_memcpy(ctx, dst, NULL, 8, kind), SMM_ERR_INVALID_ARG);
            ck_assert_int_eq(smm_memcpy(ctx, NULL, NULL, 0, kind), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, dst, src, 0, kind), SMM_OK);
            /* Address-space wrap. */
            ck_assert_int_eq(smm_memcpy(ctx, dst, (const void *)(UINTPTR_MAX - 3), 8, kind),
                             SMM_ERR_INVALID_ARG);
        }
        /* Overlap within one memory. */
        ck_assert_int_eq(smm_memcpy(ctx, host, host + 4, 8, SMM_MEMCPY_HOST_TO_HOST),
                         SMM_ERR_OVERLAP);
        ck_assert_int_eq(smm_memcpy(ctx, host + 4, host, 8, SMM_MEMCPY_HOST_TO_HOST),
                         SMM_ERR_OVERLAP);
        ck_assert_int_eq(smm_memcpy(ctx, host, host, 1, SMM_MEMCPY_HOST_TO_HOST),
                         SMM_ERR_OVERLAP);
        ck_assert_int_eq(smm_memcpy(ctx, host, host + 8, 8, SMM_MEMCPY_HOST_TO_HOST), SMM_OK);
        ck_assert_int_eq(smm_memcpy(ctx, dev, (char *)dev + 8, 16, across_kind(bs[i])),
                         SMM_ERR_OVERLAP);
        ck_assert_int_eq(smm_memcpy(ctx, (char *)dev + 16, dev, 16, across_kind(bs[i])), SMM_OK);
        for (int j = 0; j < 64; j++)   /* nothing was copied on error */
            if (j < 8 || j >= 16)
                ck_assert_int_eq(host[j], 0x11);
        ck_assert_int_eq(smm_free(ctx, dev), SMM_OK);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* Round trips in every direction the context has, into the middle of
 * poisoned buffers: the bytes arrive, nothing around them changes. */
START_TEST(test_memcpy_round_trip)
{
    cf_rng r = tu_rng("memcpy_round_trip");
    smm_backend bs[4];
    int nb = tu_backends(bs);
    static const size_t sizes[6] = { 1, 2, 7, 256, 4099, 1000003 };
    for (int i = 0; i < nb; i++) {
        const char *name = smm_backend_name(bs[i]);
        smm_context *ctx = tu_ctx(bs[i], 0);
        for (int s = 0; s < 6; s++) {
            size_t n = sizes[s];
            size_t off = (size_t)cf_rng_range(&r, 0, 63);
            tu_buf src, dst;
            tu_buf_alloc(&src, n, off, 0);
            tu_buf_alloc(&dst, n, (size_t)cf_rng_range(&r, 0, 63), 0xA5);
            for (size_t x = 0; x < n; x++)
                src.p[x] = (unsigned char)(cf_rng_next(&r) >> 56);
            /* d1 and d2: the context's memory, with 64 poisoned bytes each
             * side, so a copy writing past its range shows on the way back. */
            unsigned char *d1 = NULL, *d2 = NULL;
            void *v;
            ck_assert_int_eq(smm_malloc(ctx, n + 128, &v), SMM_OK);
            d1 = v;
            ck_assert_int_eq(smm_malloc(ctx, n + 128, &v), SMM_OK);
            d2 = v;
            unsigned char *poison = malloc(n + 128);
            ck_assert_ptr_nonnull(poison);
            memset(poison, 0x5A, n + 128);
            ck_assert_int_eq(smm_memcpy(ctx, d1, poison, n + 128, up_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, d2, poison, n + 128, up_kind(bs[i])), SMM_OK);

            ck_assert_int_eq(smm_memcpy(ctx, d1 + 64, src.p, n, up_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, d2 + 64, d1 + 64, n, across_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, dst.p, d2 + 64, n, down_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
            ck_assert_msg(memcmp(dst.p, src.p, n) == 0, "%s: %zu bytes came back different",
                          name, n);
            /* dst's guards untouched */
            for (size_t x = 0; x < dst.guard; x++)
                ck_assert_int_eq(dst.mem[x], 0xA5);
            for (size_t x = 0; x < 64; x++)
                ck_assert_int_eq(dst.p[n + x], 0xA5);
            /* The context-memory guards untouched. */
            unsigned char *back = malloc(n + 128);
            ck_assert_ptr_nonnull(back);
            ck_assert_int_eq(smm_memcpy(ctx, back, d2, n + 128, down_kind(bs[i])), SMM_OK);
            for (size_t x = 0; x < 64; x++) {
                ck_assert_int_eq(back[x], 0x5A);
                ck_assert_int_eq(back[n + 64 + x], 0x5A);
            }
            ck_assert_int_eq(memcmp(back + 64, src.p, n), 0);
            /* And host to host on this context. */
            tu_buf_poison(&dst, 0xC3);
            ck_assert_int_eq(smm_memcpy(ctx, dst.p, src.p, n, SMM_MEMCPY_HOST_TO_HOST), SMM_OK);
            ck_assert_int_eq(memcmp(dst.p, src.p, n), 0);
            for (size_t x = 0; x < 64; x++)
                ck_assert_int_eq(dst.p[n + x], 0xC3);
            free(back);
            free(poison);
            ck_assert_int_eq(smm_free(ctx, d1), SMM_OK);
            ck_assert_int_eq(smm_free(ctx, d2), SMM_OK);
            tu_buf_free(&src);
            tu_buf_free(&dst);
        }
        smm_context_destroy(ctx);
    }
}
END_TEST

/* ---- streams ---- */

START_TEST(test_stream_synchronize)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        ck_assert_int_eq(smm_context_set_stream(ctx, NULL), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
        if (!is_gpu(bs[i])) {
            int dummy;
            ck_assert_int_eq(smm_context_set_stream(ctx, &dummy), SMM_ERR_UNSUPPORTED);
            ck_assert_msg(smm_context_last_error(ctx)[0] != '\0', "no message");
            /* Still works after the refusal. */
            ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
            ck_assert_str_eq(smm_context_last_error(ctx), "");
        }
        smm_context_destroy(ctx);
    }
}
END_TEST

/* ---- the argument checks never read the data ---- */

/* Pointers that would fault if read (page 0 and the top of the address
 * space): every check that fails must say so without touching them. */
START_TEST(test_checks_do_not_read_data)
{
    smm_backend bs[4];
    int nb = tu_backends(bs);
    const int8_t *a = (const int8_t *)(uintptr_t)0x1000;
    const int8_t *b = (const int8_t *)(uintptr_t)0x100000;
    void *c = (void *)(uintptr_t)0x200000;
    const float *sa = (const float *)(uintptr_t)0x300000, *sb = (const float *)(uintptr_t)0x300100;
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        smm_scaled_mm_args args = { .m = 4, .n = 4, .k = 8, .a = a, .lda = 8, .b = b, .ldb = 8,
                                    .scale_a = sa, .scale_a_len = 1, .scale_b = sb,
                                    .scale_b_len = 1, .c = c, .ldc = 4,
                                    .c_dtype = SMM_DTYPE_F32 };
        smm_scaled_mm_args x = args;
        x.lda = 7;
        ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_INVALID_ARG);
        x = args;
        x.scale_a_len = 3;
        ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_INVALID_ARG);
        x = args;
        x.c = (void *)(uintptr_t)(0x1000 + 8);   /* inside A */
        ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_OVERLAP);
        x = args;
        x.c = (void *)(uintptr_t)0x200002;        /* misaligned f32 */
        ck_assert_int_eq(smm_scaled_mm(ctx, &x), SMM_ERR_INVALID_ARG);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 4, 4, 8, a, 8, b, 3, c, 4), SMM_ERR_INVALID_ARG);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 4, 4, 8, a, 8, b, 8, (int32_t *)(uintptr_t)0x1004, 4),
                         SMM_ERR_OVERLAP);
        /* Empty problems are no-ops that read nothing. */
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 0, 4, 8, a, 8, b, 8, c, 4), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 4, 0, 8, a, 8, b, 8, c, 4), SMM_OK);
        smm_quantize_args q = { .m = 2, .k = 8, .x = (const void *)(uintptr_t)0x400000,
                                .x_dtype = SMM_DTYPE_F32, .ldx = 7,
                                .q = (int8_t *)(uintptr_t)0x500000, .ldq = 8,
                                .scale = (float *)(uintptr_t)0x600000,
                                .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
        ck_assert_int_eq(smm_quantize_i8(ctx, &q), SMM_ERR_INVALID_ARG);
        q.ldx = 8;
        q.q = (int8_t *)(uintptr_t)0x400004;      /* inside x */
        ck_assert_int_eq(smm_quantize_i8(ctx, &q), SMM_ERR_OVERLAP);
        smm_packed_b *pb = (smm_packed_b *)1;
        ck_assert_int_eq(smm_pack_b(ctx, 4, 8, b, 7, &pb), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_null(pb);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* ---- packed B in the context's memory ---- */

/* B packed from the context's memory (device memory on a GPU), used by
 * smm_gemm_s8s8s32_packed and compared with the unpacked call and with the
 * reference on the host, bitwise; the packed B outlives its context. */
START_TEST(test_packed_b_in_context_memory)
{
    cf_rng r = tu_rng("packed_b_in_context_memory");
    smm_backend bs[4];
    int nb = tu_backends(bs);
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    for (int i = 0; i < nb; i++) {
        const char *name = smm_backend_name(bs[i]);
        for (int rep = 0; rep < 4; rep++) {
            int64_t m = cf_rng_range(&r, 1, 40), n = cf_rng_range(&r, 1, 70),
                    k = cf_rng_range(&r, 1, 300);
            int64_t lda = k + cf_rng_range(&r, 0, 5), ldb = k + cf_rng_range(&r, 0, 5),
                    ldc = n + cf_rng_range(&r, 0, 5);
            size_t asz = (size_t)((m - 1) * lda + k), bsz = (size_t)((n - 1) * ldb + k),
                   csz = (size_t)((m - 1) * ldc + n) * 4;
            int8_t *a = malloc(asz), *b = malloc(bsz);
            int32_t *cref = malloc(csz), *c1 = malloc(csz), *c2 = malloc(csz);
            ck_assert(a && b && cref && c1 && c2);
            cf_fill_i8(&r, a, m, k, lda, CF_VALUES_UNIFORM);
            cf_fill_i8(&r, b, n, k, ldb, rep == 1 ? CF_VALUES_EXTREME : CF_VALUES_UNIFORM);
            memset(cref, 0xA5, csz);
            ck_assert_int_eq(smm_gemm_s8s8s32(ref, m, n, k, a, lda, b, ldb, cref, ldc), SMM_OK);

            smm_context *ctx = tu_ctx(bs[i], 0);
            void *da, *db, *dc;
            ck_assert_int_eq(smm_malloc(ctx, asz, &da), SMM_OK);
            ck_assert_int_eq(smm_malloc(ctx, bsz, &db), SMM_OK);
            ck_assert_int_eq(smm_malloc(ctx, csz, &dc), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, da, a, asz, up_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, db, b, bsz, up_kind(bs[i])), SMM_OK);
            smm_packed_b *pb = NULL;
            smm_status st = smm_pack_b(ctx, n, k, db, ldb, &pb);
            ck_assert_msg(st == SMM_OK, "%s: smm_pack_b: %s (%s)", name, smm_strerror(st),
                          smm_context_last_error(ctx));
            ck_assert_msg(strncmp(smm_packed_b_format(pb), name, strlen(name)) == 0,
                          "%s: format \"%s\"", name, smm_packed_b_format(pb));
            ck_assert_int_eq(smm_packed_b_n(pb), n);
            ck_assert_int_eq(smm_packed_b_k(pb), k);
            /* B may go away once packed. */
            memset(b, 0, bsz);
            ck_assert_int_eq(smm_memcpy(ctx, db, b, bsz, up_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_free(ctx, db), SMM_OK);

            memset(c1, 0x5A, csz);
            ck_assert_int_eq(smm_memcpy(ctx, dc, c1, csz, up_kind(bs[i])), SMM_OK);
            st = smm_gemm_s8s8s32_packed(ctx, m, n, k, da, lda, pb, dc, ldc);
            ck_assert_msg(st == SMM_OK, "%s: smm_gemm_s8s8s32_packed: %s (%s)", name,
                          smm_strerror(st), smm_context_last_error(ctx));
            ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, c1, dc, csz, down_kind(bs[i])), SMM_OK);
            smm_context_destroy(ctx);

            /* The packed B still works on a new context of the backend. */
            ctx = tu_ctx(bs[i], 0);
            void *dc2;
            ck_assert_int_eq(smm_malloc(ctx, csz, &dc2), SMM_OK);
            memset(c2, 0xA5, csz);
            ck_assert_int_eq(smm_memcpy(ctx, dc2, c2, csz, up_kind(bs[i])), SMM_OK);
            void *da2;
            ck_assert_int_eq(smm_malloc(ctx, asz, &da2), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, da2, a, asz, up_kind(bs[i])), SMM_OK);
            ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, m, n, k, da2, lda, pb, dc2, ldc),
                             SMM_OK);
            ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
            ck_assert_int_eq(smm_memcpy(ctx, c2, dc2, csz, down_kind(bs[i])), SMM_OK);
            for (int64_t row = 0; row < m; row++) {
                size_t at = (size_t)(row * ldc);
                ck_assert_msg(memcmp(c1 + at, cref + at, (size_t)n * 4) == 0,
                              "%s: packed result differs from the reference in row %" PRId64
                              " (m %" PRId64 " n %" PRId64 " k %" PRId64 "; SMM_TEST_SEED=0x%016"
                              PRIx64 ")", name, row, m, n, k, tu_seed);
                ck_assert_int_eq(memcmp(c2 + at, cref + at, (size_t)n * 4), 0);
            }
            smm_packed_b_destroy(pb);
            smm_free(ctx, da);   /* from the first context: same backend */
            smm_free(ctx, da2);
            smm_free(ctx, dc);
            smm_free(ctx, dc2);
            smm_context_destroy(ctx);
            free(a);
            free(b);
            free(cref);
            free(c1);
            free(c2);
        }
    }
    smm_context_destroy(ref);
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tu_tcase(s, "device", 600);
    tcase_add_test(tc, test_gpu_probe_reasons);
    tcase_add_test(tc, test_null_context);
    tcase_add_test(tc, test_malloc_free);
    tcase_add_test(tc, test_malloc_allocator);
    tcase_add_test(tc, test_memcpy_errors);
    tcase_add_test(tc, test_memcpy_round_trip);
    tcase_add_test(tc, test_stream_synchronize);
    tcase_add_test(tc, test_checks_do_not_read_data);
    tcase_add_test(tc, test_packed_b_in_context_memory);
    return s;
}

int main(void)
{
    return tu_main(device_suite(), "check_device");
}
