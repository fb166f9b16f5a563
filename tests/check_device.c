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
    /* AUTO's host backend is a host backend; its GPU one a GPU backend. */
    if (!getenv("SMM_BACKEND")) {
        ck_assert(!is_gpu(smm_backend_auto()));
        smm_backend dev = smm_backend_auto_device(&why);
        ck_assert(dev == SMM_BACKEND_AUTO || (is_gpu(dev) && smm_backend_available(dev, NULL)));
        printf("check_device: AUTO: device data -> %s (%s)\n",
               dev == SMM_BACKEND_AUTO ? "none" : smm_backend_name(dev), why);
    }
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

/* ---- where the data lives: GPU contexts and AUTO (lib/route.c) ---- */

/* A random scaled_mm problem with bias and per-token azp, its inputs on
 * the host, and the reference's output (f32). */
typedef struct {
    int64_t m, n, k;
    int8_t *a, *b;
    float *sa, *sb, *bias, *cref;
    int32_t *azp;
} route_problem;

static void route_problem_make(cf_rng *r, smm_context *ref, route_problem *p)
{
    p->m = cf_rng_range(r, 1, 33);
    p->n = cf_rng_range(r, 1, 70);
    p->k = cf_rng_range(r, 1, 200);
    p->a = malloc((size_t)(p->m * p->k));
    p->b = malloc((size_t)(p->n * p->k));
    p->sa = malloc((size_t)p->m * 4);
    p->sb = malloc((size_t)p->n * 4);
    p->bias = malloc((size_t)p->n * 4);
    p->azp = malloc((size_t)p->m * 4);
    p->cref = malloc((size_t)(p->m * p->n) * 4);
    ck_assert(p->a && p->b && p->sa && p->sb && p->bias && p->azp && p->cref);
    cf_fill_i8(r, p->a, p->m, p->k, p->k, CF_VALUES_UNIFORM);
    cf_fill_i8(r, p->b, p->n, p->k, p->k, CF_VALUES_UNIFORM);
    for (int64_t i = 0; i < p->m; i++) {
        p->sa[i] = (float)cf_rng_range(r, 1, 4000) / 1024.0f;
        p->azp[i] = (int32_t)cf_rng_range(r, -128, 127);
    }
    for (int64_t i = 0; i < p->n; i++) {
        p->sb[i] = (float)cf_rng_range(r, 1, 4000) / 2048.0f;
        p->bias[i] = (float)cf_rng_range(r, -5000, 5000) / 16.0f;
    }
    smm_scaled_mm_args args = {.m = p->m, .n = p->n, .k = p->k, .a = p->a, .lda = p->k,
                               .b = p->b, .ldb = p->k, .scale_a = p->sa, .scale_a_len = p->m,
                               .scale_b = p->sb, .scale_b_len = p->n, .bias = p->bias,
                               .azp = p->azp, .azp_len = p->m, .c = p->cref, .ldc = p->n,
                               .c_dtype = SMM_DTYPE_F32};
    memset(p->cref, 0xA5, (size_t)(p->m * p->n) * 4);
    ck_assert_int_eq(smm_scaled_mm(ref, &args), SMM_OK);
}

static void route_problem_free(route_problem *p)
{
    free(p->a);
    free(p->b);
    free(p->sa);
    free(p->sb);
    free(p->bias);
    free(p->azp);
    free(p->cref);
}

/* The problem's inputs and a poisoned C in ctx's memory (smm_malloc). */
typedef struct {
    void *a, *b, *sa, *sb, *bias, *azp, *c;
} route_dev;

static void *to_ctx(smm_context *ctx, const void *src, size_t bytes)
{
    void *d = NULL;
    ck_assert_int_eq(smm_malloc(ctx, bytes, &d), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, d, src, bytes, SMM_MEMCPY_HOST_TO_DEVICE), SMM_OK);
    return d;
}

static void route_dev_make(smm_context *ctx, const route_problem *p, route_dev *d)
{
    d->a = to_ctx(ctx, p->a, (size_t)(p->m * p->k));
    d->b = to_ctx(ctx, p->b, (size_t)(p->n * p->k));
    d->sa = to_ctx(ctx, p->sa, (size_t)p->m * 4);
    d->sb = to_ctx(ctx, p->sb, (size_t)p->n * 4);
    d->bias = to_ctx(ctx, p->bias, (size_t)p->n * 4);
    d->azp = to_ctx(ctx, p->azp, (size_t)p->m * 4);
    size_t cb = (size_t)(p->m * p->n) * 4;
    unsigned char *poison = malloc(cb);
    ck_assert_ptr_nonnull(poison);
    memset(poison, 0x5A, cb);
    d->c = to_ctx(ctx, poison, cb);
    free(poison);
}

static void route_dev_free(smm_context *ctx, route_dev *d)
{
    void *all[7] = {d->a, d->b, d->sa, d->sb, d->bias, d->azp, d->c};
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(smm_free(ctx, all[i]), SMM_OK);
}

static smm_scaled_mm_args route_args(const route_problem *p, const route_dev *d)
{
    smm_scaled_mm_args args = {.m = p->m, .n = p->n, .k = p->k, .a = d->a, .lda = p->k,
                               .b = d->b, .ldb = p->k, .scale_a = d->sa, .scale_a_len = p->m,
                               .scale_b = d->sb, .scale_b_len = p->n, .bias = d->bias,
                               .azp = d->azp, .azp_len = p->m, .c = d->c, .ldc = p->n,
                               .c_dtype = SMM_DTYPE_F32};
    return args;
}

/* C copied back from ctx's memory: the reference's bits, or all poison. */
static void expect_c(smm_context *ctx, const route_problem *p, const route_dev *d, int written,
                     const char *what)
{
    size_t cb = (size_t)(p->m * p->n) * 4;
    unsigned char *back = malloc(cb);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
    ck_assert_int_eq(smm_memcpy(ctx, back, d->c, cb, SMM_MEMCPY_DEVICE_TO_HOST), SMM_OK);
    if (written) {
        ck_assert_msg(memcmp(back, p->cref, cb) == 0,
                      "%s: differs from the reference (m %" PRId64 " n %" PRId64 " k %" PRId64
                      "; SMM_TEST_SEED=0x%016" PRIx64 ")", what, p->m, p->n, p->k, tu_seed);
    } else {
        for (size_t i = 0; i < cb; i++)
            ck_assert_msg(back[i] == 0x5A, "%s: C written at byte %zu", what, i);
    }
    free(back);
}

/* The contexts whose memory is a GPU's: every GPU backend that runs here,
 * and AUTO when it found one. */
static int gpu_memory_contexts(smm_context *out[3], int with_auto)
{
    int n = 0;
    static const smm_backend gpus[2] = {SMM_BACKEND_ROCM, SMM_BACKEND_CUDA};
    for (int i = 0; i < 2; i++)
        if (tu_backend_selected(gpus[i]) && smm_backend_available(gpus[i], NULL))
            out[n++] = tu_ctx(gpus[i], 0);
    if (with_auto && !getenv("SMM_BACKEND")) {
        smm_context *a = tu_ctx(SMM_BACKEND_AUTO, 0);
        if (smm_context_device_backend(a) != SMM_BACKEND_AUTO &&
            tu_backend_selected(smm_context_device_backend(a)))
            out[n++] = a;
        else
            smm_context_destroy(a);
    }
    if (n == 0)
        printf("check_device: no GPU here: the GPU routing tests have nothing to run\n");
    return n;
}

/* A GPU context (and AUTO with a GPU) refuses host memory it cannot read,
 * argument by argument, naming it, with nothing queued or written; the
 * next valid call on the same context succeeds, bit for bit. */
START_TEST(test_gpu_refuses_host_pointers)
{
    cf_rng r = tu_rng("gpu_refuses_host_pointers");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0), *ctxs[3];
    int nc = gpu_memory_contexts(ctxs, 0);
    for (int i = 0; i < nc; i++) {
        smm_context *ctx = ctxs[i];
        const char *name = smm_backend_name(smm_context_device_backend(ctx));
        route_problem p;
        route_dev d;
        route_problem_make(&r, ref, &p);
        route_dev_make(ctx, &p, &d);
        float *hc = malloc((size_t)(p.m * p.n) * 4);
        ck_assert_ptr_nonnull(hc);
        const void *host[7] = {p.a, p.b, p.sa, p.sb, p.bias, p.azp, hc};
        static const char *const names[7] = {"a", "b", "scale_a", "scale_b", "bias", "azp", "c"};
        for (int j = 0; j < 7; j++) {
            smm_scaled_mm_args args = route_args(&p, &d);
            const void **slot[7] = {(const void **)&args.a, (const void **)&args.b,
                                    (const void **)&args.scale_a, (const void **)&args.scale_b,
                                    (const void **)&args.bias, (const void **)&args.azp,
                                    (const void **)&args.c};
            *slot[j] = host[j];
            ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_ERR_INVALID_ARG);
            char want[64];
            snprintf(want, sizeof want, "smm_scaled_mm: %s is host memory", names[j]);
            ck_assert_msg(strstr(smm_context_last_error(ctx), want) != NULL, "%s: \"%s\"", name,
                          smm_context_last_error(ctx));
            expect_c(ctx, &p, &d, 0, "refused call");
        }
        /* The other calls, each with one host pointer. */
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, p.m, p.n, p.k, p.a, p.k, d.b, p.k, d.c, p.n),
                         SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "a is host memory"));
        smm_packed_b *pb = (smm_packed_b *)1;
        ck_assert_int_eq(smm_pack_b(ctx, p.n, p.k, p.b, p.k, &pb), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_null(pb);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "smm_pack_b: b is host memory"));
        ck_assert_int_eq(smm_pack_b(ctx, p.n, p.k, d.b, p.k, &pb), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, p.m, p.n, p.k, d.a, p.k, pb,
                                                 (int32_t *)hc, p.n), SMM_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "c is host memory"));
        smm_packed_b_destroy(pb);
        smm_quantize_args q = {.m = p.m, .k = p.n, .x = hc, .x_dtype = SMM_DTYPE_F32,
                               .ldx = p.n, .q = d.a, .ldq = p.n, .scale = d.sa,
                               .mode = SMM_QUANT_DYNAMIC_PER_TOKEN};
        if (p.n <= p.k) {   /* q (d.a) holds m x k >= m x n bytes */
            ck_assert_int_eq(smm_quantize_i8(ctx, &q), SMM_ERR_INVALID_ARG);
            ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "x is host memory"));
        }
        expect_c(ctx, &p, &d, 0, "refused calls");
        /* The context is still usable: a valid call succeeds. */
        smm_scaled_mm_args args = route_args(&p, &d);
        ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        expect_c(ctx, &p, &d, 1, name);
        free(hc);
        route_dev_free(ctx, &d);
        route_problem_free(&p);
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

/* AUTO with device pointers runs on the GPU it found (bit for bit the
 * reference), with host pointers on the host; mixed pointers are refused,
 * naming them, with nothing written. */
START_TEST(test_auto_routes_by_memory)
{
    cf_rng r = tu_rng("auto_routes_by_memory");
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0), *ctxs[3];
    int nc = gpu_memory_contexts(ctxs, 1);
    for (int i = 0; i < nc; i++) {
        smm_context *ctx = ctxs[i];
        if (smm_context_device_backend(ctx) == smm_context_backend(ctx)) {
            smm_context_destroy(ctx);   /* a plain GPU context: not AUTO */
            continue;
        }
        const char *name = smm_backend_name(smm_context_device_backend(ctx));
        for (int rep = 0; rep < 4; rep++) {
            route_problem p;
            route_dev d;
            route_problem_make(&r, ref, &p);
            route_dev_make(ctx, &p, &d);
            smm_scaled_mm_args args = route_args(&p, &d);
            ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
            expect_c(ctx, &p, &d, 1, name);
            /* Host pointers on the same context: the host backend. */
            float *hc = malloc((size_t)(p.m * p.n) * 4);
            ck_assert_ptr_nonnull(hc);
            memset(hc, 0x5A, (size_t)(p.m * p.n) * 4);
            smm_scaled_mm_args h = {.m = p.m, .n = p.n, .k = p.k, .a = p.a, .lda = p.k,
                                    .b = p.b, .ldb = p.k, .scale_a = p.sa,
                                    .scale_a_len = p.m, .scale_b = p.sb, .scale_b_len = p.n,
                                    .bias = p.bias, .azp = p.azp, .azp_len = p.m, .c = hc,
                                    .ldc = p.n, .c_dtype = SMM_DTYPE_F32};
            ck_assert_int_eq(smm_scaled_mm(ctx, &h), SMM_OK);
            ck_assert_int_eq(memcmp(hc, p.cref, (size_t)(p.m * p.n) * 4), 0);
            /* Mixed: device A and C, host B and scales. */
            memset(hc, 0x5A, (size_t)(p.m * p.n) * 4);
            smm_scaled_mm_args mix = args;
            mix.b = p.b;
            mix.scale_a = p.sa;
            ck_assert_int_eq(smm_scaled_mm(ctx, &mix), SMM_ERR_INVALID_ARG);
            ck_assert_str_eq(smm_context_last_error(ctx),
                             "smm_scaled_mm: a, c, scale_b, bias, azp are device memory and b, "
                             "scale_a are host memory: the pointers of one call must all be in "
                             "host memory or all in the device's");
            mix = h;   /* host everything but C */
            mix.c = d.c;
            ck_assert_int_eq(smm_scaled_mm(ctx, &mix), SMM_ERR_INVALID_ARG);
            ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "c is device memory"));
            expect_c(ctx, &p, &d, 1, "unchanged after the refusals");
            /* A B packed from device memory is a device pointer. */
            smm_packed_b *pb = NULL;
            ck_assert_int_eq(smm_pack_b(ctx, p.n, p.k, d.b, p.k, &pb), SMM_OK);
            ck_assert_msg(strncmp(smm_packed_b_format(pb), name, strlen(name)) == 0, "\"%s\"",
                          smm_packed_b_format(pb));
            args.b = NULL;
            args.b_packed = pb;
            ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
            expect_c(ctx, &p, &d, 1, "AUTO, B packed on the device");
            h.b = NULL;
            h.b_packed = pb;   /* device B, host rest */
            ck_assert_int_eq(smm_scaled_mm(ctx, &h), SMM_ERR_INVALID_ARG);
            ck_assert_ptr_nonnull(strstr(smm_context_last_error(ctx), "b_packed"));
            smm_packed_b_destroy(pb);
            free(hc);
            route_dev_free(ctx, &d);
            route_problem_free(&p);
        }
        smm_context_destroy(ctx);
    }
    smm_context_destroy(ref);
}
END_TEST

/* The conformance battery through an AUTO context: its smm_malloc memory
 * is the GPU's when it found one (the battery stages every input there),
 * host memory otherwise. */
START_TEST(test_auto_conformance)
{
    if (getenv("SMM_BACKEND") && *getenv("SMM_BACKEND"))
        return;
    smm_context *ctx = tu_ctx(SMM_BACKEND_AUTO, 0), *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    if (!tu_backend_selected(smm_context_device_backend(ctx)) &&
        smm_context_device_backend(ctx) != SMM_BACKEND_AUTO) {
        smm_context_destroy(ctx);
        smm_context_destroy(ref);
        return;
    }
    cf_options opt;
    memset(&opt, 0, sizeof opt);
    opt.seed = tu_seed;
    opt.quick = 1;
    cf_report *rep = calloc(1, sizeof *rep);
    ck_assert_ptr_nonnull(rep);
    int failures = cf_run_battery(ctx, ref, &opt, rep);
    smm_backend dev = smm_context_device_backend(ctx);
    printf("check_device: conformance battery through AUTO (device data -> %s): %d failures\n",
           dev == SMM_BACKEND_AUTO ? "none" : smm_backend_name(dev), failures);
    ck_assert_msg(failures == 0, "AUTO: %s (SMM_TEST_SEED=0x%016" PRIx64 ")", rep->first_failure,
                  tu_seed);
    free(rep);
    smm_context_destroy(ctx);
    smm_context_destroy(ref);
}
END_TEST

/* A context on AUTO under allocation failures: each of its allocations
 * (the context, the host backend's state, and with a GPU the GPU part)
 * fails in turn; creation reports SMM_ERR_NO_MEMORY and leaks nothing. */
START_TEST(test_auto_allocation_failures)
{
    if (getenv("SMM_BACKEND") && *getenv("SMM_BACKEND"))
        return;
    tu_counting cnt;
    int failed = 0;
    for (int64_t at = 0; at < 16; at++) {
        tu_counting_init(&cnt);
        tu_counting_fail_in(&cnt, at);
        smm_allocator al = tu_counting_allocator(&cnt);
        smm_context *ctx = (smm_context *)1;
        smm_status st = smm_context_create_with_allocator(&ctx, SMM_BACKEND_AUTO, &al);
        if (st == SMM_OK) {
            ck_assert_ptr_nonnull(ctx);
            smm_context_destroy(ctx);
            ck_assert_int_eq(cnt.live, 0);
            break;   /* fewer allocations than `at`: every one has failed once */
        }
        failed++;
        ck_assert_int_eq(st, SMM_ERR_NO_MEMORY);
        ck_assert_ptr_null(ctx);
        ck_assert_int_eq(cnt.live, 0);
    }
    ck_assert_int_ge(failed, 1);
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
    tcase_add_test(tc, test_gpu_refuses_host_pointers);
    tcase_add_test(tc, test_auto_routes_by_memory);
    tcase_add_test(tc, test_auto_conformance);
    tcase_add_test(tc, test_auto_allocation_failures);
    return s;
}

int main(void)
{
    return tu_main_gpu(device_suite(), "check_device");
}
