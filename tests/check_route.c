/*
 * check_route.c - where a call runs, decided from where its data lives
 * (lib/route.c), on machines without a GPU:
 *   - the decision itself, for every kind of memory a GPU runtime reports
 *     (lib/route.c is compiled into this test and fed random kinds, checked
 *     against the rules as include/scaledmm.h states them): GPU contexts
 *     refuse host and other devices' memory, AUTO runs host data on the
 *     host, device data on the GPU and refuses a mix, naming the pointers;
 *   - which pointers of each call count;
 *   - an AUTO context on this machine: host pointers run on the host
 *     backend, bit for bit the reference; with no GPU runtime the context
 *     has no GPU part, says so, and its memory functions work on the host
 *     for every copy kind; SMM_BACKEND overrides and is reported.
 * The same calls with device pointers run in check_device on a GPU.
 */
#include "config.h"
#include "testutil.h"
/* The decision under test, compiled in: it is hidden inside libscaledmm. */
#include "route.c"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the decision, against the header's rules ---- */

static const char *const kind_names[] = {"host", "device", "other_device", "managed",
                                         "registered"};

/* The rules of include/scaledmm.h, written independently of route.c. */
static smm_route expected(const smm_ptr_kind *k, int n, int gpu_context)
{
    int host = 0, device = 0, other = 0;
    for (int i = 0; i < n; i++) {
        host += k[i] == SMM_PTR_HOST;
        device += k[i] == SMM_PTR_DEVICE;
        other += k[i] == SMM_PTR_OTHER_DEVICE;
    }
    if (other)
        return SMM_ROUTE_ERROR;
    if (gpu_context)
        return host ? SMM_ROUTE_ERROR : SMM_ROUTE_DEVICE;
    if (host && device)
        return SMM_ROUTE_ERROR;
    if (host || n == 0)
        return SMM_ROUTE_HOST;
    return SMM_ROUTE_DEVICE;
}

START_TEST(test_decide_random)
{
    cf_rng r = tu_rng("decide_random");
    static const char *const names[SMM_MAX_PTR_ARGS] = {"a", "b", "c", "scale_a", "scale_b",
                                                        "bias", "azp", "b_packed"};
    for (int rep = 0; rep < 20000; rep++) {
        int n = (int)cf_rng_range(&r, 0, SMM_MAX_PTR_ARGS);
        int gpu_context = (int)cf_rng_range(&r, 0, 1);
        smm_ptr_arg args[SMM_MAX_PTR_ARGS];
        smm_ptr_kind kinds[SMM_MAX_PTR_ARGS];
        /* Mostly one or two kinds per call, as real calls have. */
        smm_ptr_kind k1 = (smm_ptr_kind)cf_rng_range(&r, 0, 4),
                     k2 = (smm_ptr_kind)cf_rng_range(&r, 0, 4);
        for (int i = 0; i < n; i++) {
            args[i].name = names[i];
            args[i].ptr = (const void *)(uintptr_t)(0x1000 * (i + 1));
            kinds[i] = cf_rng_range(&r, 0, 3) ? k1 : k2;
        }
        char msg[256];
        memset(msg, 'x', sizeof msg);
        smm_route got = smm_route_decide(args, kinds, n, gpu_context, msg, sizeof msg);
        char desc[200] = "";
        for (int i = 0; i < n; i++)
            snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "%s%s=%s", i ? " " : "",
                     names[i], kind_names[kinds[i]]);
        ck_assert_msg(got == expected(kinds, n, gpu_context),
                      "%s context, %s: route %d, expected %d (SMM_TEST_SEED=0x%016" PRIx64 ")",
                      gpu_context ? "GPU" : "AUTO", desc, (int)got,
                      (int)expected(kinds, n, gpu_context), tu_seed);
        if (got != SMM_ROUTE_ERROR) {
            ck_assert_str_eq(msg, "");
            continue;
        }
        /* The message names every pointer that decided against the call
         * (host and other devices' memory; on AUTO, the device memory of a
         * mix too) and no other. */
        ck_assert_msg(strlen(msg) < sizeof msg, "unterminated");
        int other = 0;
        for (int i = 0; i < n; i++)
            other |= kinds[i] == SMM_PTR_OTHER_DEVICE;
        for (int i = 0; i < n; i++) {
            int named = other ? kinds[i] == SMM_PTR_OTHER_DEVICE
                              : kinds[i] == SMM_PTR_HOST ||
                                    (!gpu_context && kinds[i] == SMM_PTR_DEVICE);
            /* Names are distinct words here except "b" inside "b_packed"
             * and "scale_b": look for it delimited. */
            char word[32];
            const char *at = msg;
            int found = 0;
            size_t len = strlen(names[i]);
            while ((at = strstr(at, names[i])) != NULL) {
                char before = at == msg ? ' ' : at[-1], after = at[len];
                if ((before == ' ' || before == ',') && (after == ' ' || after == ','))
                    found = 1;
                at += len;
            }
            snprintf(word, sizeof word, "%s", names[i]);
            ck_assert_msg(found == named, "%s context, %s: \"%s\" %s %s",
                          gpu_context ? "GPU" : "AUTO", desc, msg,
                          named ? "does not name" : "names", word);
        }
        ck_assert_msg(strstr(msg, other ? "another device" : gpu_context
                                                             ? "host memory the device cannot read"
                                                             : "host memory or all in the device"),
                      "\"%s\"", msg);
    }
}
END_TEST

/* The exact messages, and a message cut to a small buffer stays a string. */
START_TEST(test_decide_messages)
{
    smm_ptr_arg args[3] = {{"a", (void *)1, 0}, {"b", (void *)2, 0}, {"c", (void *)3, 0}};
    smm_ptr_kind k[3] = {SMM_PTR_DEVICE, SMM_PTR_HOST, SMM_PTR_HOST};
    char msg[256];
    ck_assert_int_eq(smm_route_decide(args, k, 3, 0, msg, sizeof msg), SMM_ROUTE_ERROR);
    ck_assert_str_eq(msg, "a is device memory and b, c are host memory: the pointers of one call "
                          "must all be in host memory or all in the device's");
    ck_assert_int_eq(smm_route_decide(args, k, 3, 1, msg, sizeof msg), SMM_ROUTE_ERROR);
    ck_assert_str_eq(msg, "b, c are host memory the device cannot read (pass device memory: "
                          "smm_malloc and smm_memcpy)");
    k[2] = SMM_PTR_OTHER_DEVICE;
    ck_assert_int_eq(smm_route_decide(args, k, 3, 1, msg, sizeof msg), SMM_ROUTE_ERROR);
    ck_assert_str_eq(msg, "c is memory of another device than the calling thread's current one");
    char small[12];
    ck_assert_int_eq(smm_route_decide(args, k, 3, 0, small, sizeof small), SMM_ROUTE_ERROR);
    ck_assert_uint_lt(strlen(small), sizeof small);
    /* Managed and registered memory go with either side. */
    smm_ptr_kind mr[3] = {SMM_PTR_MANAGED, SMM_PTR_REGISTERED, SMM_PTR_HOST};
    ck_assert_int_eq(smm_route_decide(args, mr, 3, 0, msg, sizeof msg), SMM_ROUTE_HOST);
    ck_assert_int_eq(smm_route_decide(args, mr, 2, 0, msg, sizeof msg), SMM_ROUTE_DEVICE);
    ck_assert_int_eq(smm_route_decide(args, mr, 2, 1, msg, sizeof msg), SMM_ROUTE_DEVICE);
    ck_assert_int_eq(smm_route_decide(args, mr, 0, 0, msg, sizeof msg), SMM_ROUTE_HOST);
}
END_TEST

/* ---- which pointers of a call count ---- */

START_TEST(test_call_pointers)
{
    int8_t a[4], b[4];
    float sa[1], sb[1], bias[2], c[4];
    int32_t azp[1];
    smm_scaled_mm_args p = {.m = 2, .n = 2, .k = 2, .a = a, .lda = 2, .b = b, .ldb = 2,
                            .scale_a = sa, .scale_a_len = 1, .scale_b = sb, .scale_b_len = 1,
                            .bias = bias, .azp = azp, .azp_len = 1, .c = c, .ldc = 2,
                            .c_dtype = SMM_DTYPE_F32};
    smm_ptr_arg out[SMM_MAX_PTR_ARGS];
    ck_assert_int_eq(smm_mm_pointers(&p, 0, out), 7);
    ck_assert_str_eq(out[0].name, "a");
    ck_assert_ptr_eq(out[6].ptr, azp);
    ck_assert_int_eq(smm_mm_pointers(&p, 1, out), 3);   /* raw: a, b, c */
    p.k = 0;                                              /* a and b are not read */
    ck_assert_int_eq(smm_mm_pointers(&p, 1, out), 1);
    ck_assert_str_eq(out[0].name, "c");
    p.m = 0;                                              /* nothing is read */
    ck_assert_int_eq(smm_mm_pointers(&p, 0, out), 0);
    struct smm_packed_b pb = {.mem = b};
    p.b_packed = &pb;                                     /* its format is still checked */
    ck_assert_int_eq(smm_mm_pointers(&p, 0, out), 1);
    ck_assert_str_eq(out[0].name, "b_packed");
    smm_quantize_args q = {.m = 1, .k = 2, .x = c, .q = a, .scale = sa};
    ck_assert_int_eq(smm_quantize_pointers(&q, out), 3);
    q.azp = azp;
    ck_assert_int_eq(smm_quantize_pointers(&q, out), 4);
    q.m = -1;
    ck_assert_int_eq(smm_quantize_pointers(&q, out), 0);
}
END_TEST

/* ---- an AUTO context on this machine ---- */

/* Host pointers on an AUTO context run on the host backend: bitwise the
 * reference, for every call that routes. */
START_TEST(test_auto_host_pointers)
{
    cf_rng r = tu_rng("auto_host_pointers");
    if (getenv("SMM_BACKEND") && *getenv("SMM_BACKEND"))
        return;   /* the variable decides instead: test_auto_env */
    smm_context *ctx = tu_ctx(SMM_BACKEND_AUTO, 0), *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    ck_assert_int_eq(smm_context_backend(ctx), smm_backend_auto());
    for (int rep = 0; rep < 20; rep++) {
        int64_t m = cf_rng_range(&r, 1, 40), n = cf_rng_range(&r, 1, 40),
                k = cf_rng_range(&r, 0, 100);
        size_t asz = (size_t)(m * k) + 1, bsz = (size_t)(n * k) + 1, csz = (size_t)(m * n);
        int8_t *a = malloc(asz), *b = malloc(bsz);
        float *sa = malloc((size_t)m * 4), *sb = malloc((size_t)n * 4);
        int32_t *c1 = malloc(csz * 4), *c2 = malloc(csz * 4);
        ck_assert(a && b && sa && sb && c1 && c2);
        cf_fill_i8(&r, a, m, k, k, CF_VALUES_UNIFORM);
        cf_fill_i8(&r, b, n, k, k, CF_VALUES_UNIFORM);
        for (int64_t i = 0; i < m; i++)
            sa[i] = (float)cf_rng_range(&r, 1, 1000) / 256.0f;
        for (int64_t i = 0; i < n; i++)
            sb[i] = (float)cf_rng_range(&r, 1, 1000) / 512.0f;
        /* raw accumulators, unpacked and packed */
        memset(c1, 0xA5, csz * 4);
        memset(c2, 0x5A, csz * 4);
        ck_assert_int_eq(smm_gemm_s8s8s32(ref, m, n, k, a, k, b, k, c1, n), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, m, n, k, a, k, b, k, c2, n), SMM_OK);
        ck_assert_int_eq(memcmp(c1, c2, csz * 4), 0);
        smm_packed_b *pb = NULL;
        ck_assert_int_eq(smm_pack_b(ctx, n, k, b, k, &pb), SMM_OK);
        ck_assert_msg(strncmp(smm_packed_b_format(pb), smm_backend_name(smm_backend_auto()),
                              strlen(smm_backend_name(smm_backend_auto()))) == 0,
                      "packed on the host backend: \"%s\"", smm_packed_b_format(pb));
        memset(c2, 0x5A, csz * 4);
        ck_assert_int_eq(smm_gemm_s8s8s32_packed(ctx, m, n, k, a, k, pb, c2, n), SMM_OK);
        ck_assert_int_eq(memcmp(c1, c2, csz * 4), 0);
        smm_packed_b_destroy(pb);
        /* scaled, per-token and per-channel, bf16 */
        smm_scaled_mm_args args = {.m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = k,
                                   .scale_a = sa, .scale_a_len = m, .scale_b = sb,
                                   .scale_b_len = n, .c = c1, .ldc = n,
                                   .c_dtype = SMM_DTYPE_BF16};
        memset(c1, 0xA5, csz * 4);
        memset(c2, 0x5A, csz * 4);
        ck_assert_int_eq(smm_scaled_mm(ref, &args), SMM_OK);
        args.c = c2;
        ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
        ck_assert_int_eq(memcmp(c1, c2, csz * 2), 0);
        /* the quantizer */
        float *x = (float *)c1;
        for (size_t i = 0; i < csz; i++)
            x[i] = (float)cf_rng_range(&r, -100000, 100000) / 64.0f;
        int8_t *q1 = malloc(csz), *q2 = malloc(csz);
        float *s1 = malloc((size_t)m * 4), *s2 = malloc((size_t)m * 4);
        ck_assert(q1 && q2 && s1 && s2);
        memset(q2, 0x5A, csz);
        smm_quantize_args qa = {.m = m, .k = n, .x = x, .x_dtype = SMM_DTYPE_F32, .ldx = n,
                                .q = q1, .ldq = n, .scale = s1,
                                .mode = SMM_QUANT_DYNAMIC_PER_TOKEN};
        ck_assert_int_eq(smm_quantize_i8(ref, &qa), SMM_OK);
        qa.q = q2;
        qa.scale = s2;
        ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
        ck_assert_int_eq(memcmp(q1, q2, csz), 0);
        ck_assert_int_eq(memcmp(s1, s2, (size_t)m * 4), 0);
        free(q1);
        free(q2);
        free(s1);
        free(s2);
        free(a);
        free(b);
        free(sa);
        free(sb);
        free(c1);
        free(c2);
    }
    smm_context_destroy(ctx);
    smm_context_destroy(ref);
}
END_TEST

/* With no GPU runtime: AUTO has no GPU part, says why, loads nothing for
 * it, and its memory is host memory that takes every copy kind. */
START_TEST(test_auto_without_gpu)
{
    if (getenv("SMM_BACKEND") && *getenv("SMM_BACKEND"))
        return;
    const char *why = NULL;
    smm_backend dev = smm_backend_auto_device(&why);
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(why[0] != '\0', "empty reason");
    const char *answer = NULL;
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &answer), 1);
    printf("check_route: AUTO: %s\n", answer);
    ck_assert_msg(strncmp(answer, "host data -> ", 13) == 0 && strstr(answer, "; device data -> "),
                  "\"%s\"", answer);
    if (dev != SMM_BACKEND_AUTO) {
        printf("check_route: a GPU is present (%s): the GPU half runs in check_device\n", why);
        return;
    }
    ck_assert_msg(strstr(answer, "device data -> none (") != NULL, "\"%s\"", answer);
    ck_assert_msg(strstr(answer, why) != NULL, "\"%s\" lacks \"%s\"", answer, why);
    smm_context *ctx = tu_ctx(SMM_BACKEND_AUTO, 0);
    ck_assert_int_eq(smm_context_device_backend(ctx), SMM_BACKEND_AUTO);
    unsigned char src[64], *mem = NULL;
    for (int i = 0; i < 64; i++)
        src[i] = (unsigned char)(i * 7 + 1);
    void *v;
    ck_assert_int_eq(smm_malloc(ctx, 64, &v), SMM_OK);
    mem = v;
    ck_assert_uint_eq((uintptr_t)mem % 64, 0);
    for (int kind = 0; kind < 4; kind++) {
        memset(mem, 0, 64);
        ck_assert_int_eq(smm_memcpy(ctx, mem, src, 64, (smm_memcpy_kind)kind), SMM_OK);
        ck_assert_int_eq(memcmp(mem, src, 64), 0);
    }
    ck_assert_int_eq(smm_memcpy(ctx, mem, mem + 8, 16, SMM_MEMCPY_DEVICE_TO_DEVICE),
                     SMM_ERR_OVERLAP);
    ck_assert_int_eq(smm_memcpy(ctx, mem, src, 8, (smm_memcpy_kind)4), SMM_ERR_INVALID_ARG);
    int dummy;
    ck_assert_int_eq(smm_context_set_stream(ctx, &dummy), SMM_ERR_UNSUPPORTED);
    ck_assert_int_eq(smm_context_set_stream(ctx, NULL), SMM_OK);
    ck_assert_int_eq(smm_synchronize(ctx), SMM_OK);
    ck_assert_int_eq(smm_free(ctx, mem), SMM_OK);
    smm_context_destroy(ctx);
    /* A host context still refuses the device kinds. */
    ctx = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    ck_assert_int_eq(smm_context_device_backend(ctx), SMM_BACKEND_AUTO);
    ck_assert_int_eq(smm_memcpy(ctx, src, src + 32, 8, SMM_MEMCPY_HOST_TO_DEVICE),
                     SMM_ERR_INVALID_ARG);
    smm_context_destroy(ctx);
    ck_assert_int_eq(smm_context_device_backend(NULL), SMM_BACKEND_AUTO);
}
END_TEST

/* SMM_BACKEND overrides AUTO, and AUTO's answer says so (or why not). */
START_TEST(test_auto_env)
{
    const char *old = getenv("SMM_BACKEND");
    char *saved = old ? strdup(old) : NULL;
    const char *why = NULL;
    smm_context *ctx = NULL;

    setenv("SMM_BACKEND", "reference", 1);
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &why), 1);
    ck_assert_str_eq(why, "SMM_BACKEND=reference: every call -> reference (always available "
                          "(scalar C, the executable form of the numerics contract))");
    ck_assert_int_eq(smm_backend_auto_device(&why), SMM_BACKEND_AUTO);
    ck_assert_ptr_nonnull(strstr(why, "SMM_BACKEND"));
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_OK);
    ck_assert_int_eq(smm_context_backend(ctx), SMM_BACKEND_REFERENCE);
    ck_assert_int_eq(smm_context_device_backend(ctx), SMM_BACKEND_AUTO);
    /* Not routed: a device kind is refused as on any host context. */
    char buf[16];
    ck_assert_int_eq(smm_memcpy(ctx, buf, buf + 8, 4, SMM_MEMCPY_HOST_TO_DEVICE),
                     SMM_ERR_INVALID_ARG);
    smm_context_destroy(ctx);

    setenv("SMM_BACKEND", "cdua", 1);
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &why), 0);
    ck_assert_msg(strstr(why, "names no backend") != NULL, "\"%s\"", why);
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_ERR_INVALID_ARG);

    static const smm_backend gpus[2] = {SMM_BACKEND_ROCM, SMM_BACKEND_CUDA};
    for (int i = 0; i < 2; i++) {
        const char *reason = NULL;
        if (smm_backend_available(gpus[i], &reason))
            continue;
        setenv("SMM_BACKEND", smm_backend_name(gpus[i]), 1);
        ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &why), 0);
        ck_assert_msg(strstr(why, reason) != NULL, "\"%s\" lacks \"%s\"", why, reason);
        ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_ERR_NOT_AVAILABLE);
    }
    setenv("SMM_BACKEND", "auto", 1);
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &why), 1);
    ck_assert_msg(strncmp(why, "host data -> ", 13) == 0, "\"%s\"", why);

    if (saved) {
        setenv("SMM_BACKEND", saved, 1);
        free(saved);
    } else {
        unsetenv("SMM_BACKEND");
    }
}
END_TEST

static Suite *route_suite(void)
{
    Suite *s = suite_create("route");
    TCase *tc = tu_tcase(s, "route", 600);
    tcase_add_test(tc, test_decide_random);
    tcase_add_test(tc, test_decide_messages);
    tcase_add_test(tc, test_call_pointers);
    tcase_add_test(tc, test_auto_host_pointers);
    tcase_add_test(tc, test_auto_without_gpu);
    tcase_add_test(tc, test_auto_env);
    return s;
}

int main(void)
{
    return tu_main(route_suite(), "check_route");
}
