/*
 * check_api.c - the public API's contract outside the numbers: every class
 * of bad input of every public function gets its exact status, a non-empty
 * message and writes nothing; sizes that are legal edge cases (M == 1 with
 * lda == 0, M == 0, K == 0) work; allocation failures are reported and leak
 * nothing; the SMM_BACKEND override; names and versions.
 */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Versions, names                                                     */
/* ------------------------------------------------------------------ */

START_TEST(test_versions)
{
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", SMM_VERSION_MAJOR, SMM_VERSION_MINOR,
             SMM_VERSION_PATCH);
    ck_assert_ptr_nonnull(smm_version());
    ck_assert_str_eq(smm_version(), expect);
    ck_assert_int_eq(smm_contract_version(), 1);
    ck_assert_int_eq(smm_contract_version(), SMM_CONTRACT_VERSION);
}
END_TEST

START_TEST(test_names)
{
    static const smm_status all[] = { SMM_OK, SMM_ERR_INVALID_ARG, SMM_ERR_UNSUPPORTED,
                                      SMM_ERR_NO_MEMORY, SMM_ERR_OVERLAP, SMM_ERR_DEVICE,
                                      SMM_ERR_NOT_AVAILABLE };
    const int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        const char *s = smm_strerror(all[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(s[0] != '\0', "smm_strerror(%d) is empty", (int)all[i]);
        ck_assert_str_ne(s, "unknown status");
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(s, smm_strerror(all[j])) != 0,
                          "smm_strerror(%d) == smm_strerror(%d)", (int)all[i], (int)all[j]);
    }
    ck_assert_str_eq(smm_strerror((smm_status)99), "unknown status");
    ck_assert_str_eq(smm_strerror((smm_status)-1), "unknown status");

    ck_assert_str_eq(smm_dtype_name(SMM_DTYPE_I8), "i8");
    ck_assert_str_eq(smm_dtype_name(SMM_DTYPE_I32), "i32");
    ck_assert_str_eq(smm_dtype_name(SMM_DTYPE_F32), "f32");
    ck_assert_str_eq(smm_dtype_name(SMM_DTYPE_F16), "f16");
    ck_assert_str_eq(smm_dtype_name(SMM_DTYPE_BF16), "bf16");
    ck_assert_str_eq(smm_dtype_name((smm_dtype)5), "unknown");
    ck_assert_str_eq(smm_dtype_name((smm_dtype)-1), "unknown");

    ck_assert_str_eq(smm_backend_name(SMM_BACKEND_AUTO), "auto");
    ck_assert_str_eq(smm_backend_name(SMM_BACKEND_REFERENCE), "reference");
    ck_assert_str_eq(smm_backend_name(SMM_BACKEND_CPU), "cpu");
    ck_assert_str_eq(smm_backend_name(SMM_BACKEND_ROCM), "rocm");
    ck_assert_str_eq(smm_backend_name(SMM_BACKEND_CUDA), "cuda");
    ck_assert_str_eq(smm_backend_name((smm_backend)5), "unknown");
    ck_assert_str_eq(smm_backend_name((smm_backend)-1), "unknown");
}
END_TEST

START_TEST(test_backend_from_name)
{
    for (int b = SMM_BACKEND_AUTO; b <= SMM_BACKEND_CUDA; b++) {
        smm_backend out = (smm_backend)77;
        ck_assert_int_eq(smm_backend_from_name(smm_backend_name((smm_backend)b), &out), SMM_OK);
        ck_assert_int_eq(out, b);
    }
    static const struct { const char *name; smm_backend b; } mixed[] = {
        { "CPU", SMM_BACKEND_CPU }, { "Reference", SMM_BACKEND_REFERENCE },
        { "rEfErEnCe", SMM_BACKEND_REFERENCE }, { "AUTO", SMM_BACKEND_AUTO },
        { "Cuda", SMM_BACKEND_CUDA }, { "ROCm", SMM_BACKEND_ROCM },
    };
    for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++) {
        smm_backend out = (smm_backend)77;
        ck_assert_int_eq(smm_backend_from_name(mixed[i].name, &out), SMM_OK);
        ck_assert_int_eq(out, mixed[i].b);
    }
    static const char *const bad[] = { "", "gpu", "cp", "cpux", "cpu ", " cpu", "referenc",
                                       "unknown", "hip", "reference\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        smm_backend out = (smm_backend)77;
        ck_assert_msg(smm_backend_from_name(bad[i], &out) == SMM_ERR_INVALID_ARG,
                      "smm_backend_from_name(\"%s\") accepted", bad[i]);
        ck_assert_int_eq(out, 77);
    }
    smm_backend out = (smm_backend)77;
    ck_assert_int_eq(smm_backend_from_name(NULL, &out), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(out, 77);
    ck_assert_int_eq(smm_backend_from_name("cpu", NULL), SMM_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_probe)
{
    const char *why = NULL;
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_REFERENCE, &why), 1);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_REFERENCE, NULL), 1);
    why = NULL;
    /* AUTO: whether a context can be made on it, and AUTO's whole answer
     * (tests/check_route.c looks at it in detail). */
    ck_assert_int_eq(smm_backend_available(SMM_BACKEND_AUTO, &why),
                     getenv("SMM_BACKEND") ? smm_backend_available(smm_backend_auto(), NULL) : 1);
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(why[0] != '\0', "AUTO: empty reason");
    why = NULL;
    ck_assert_int_eq(smm_backend_available((smm_backend)5, &why), 0);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(smm_backend_available((smm_backend)-1, NULL), 0);
    for (int b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CUDA; b++) {
        why = NULL;
        int av = smm_backend_available((smm_backend)b, &why);
        ck_assert(av == 0 || av == 1);
        ck_assert_ptr_nonnull(why);
        ck_assert_int_eq(smm_backend_available((smm_backend)b, NULL), av);   /* stable */
    }
    smm_backend a = smm_backend_auto();
    ck_assert_int_ne(a, SMM_BACKEND_AUTO);
    ck_assert_int_eq(smm_backend_available(a, NULL), 1);
    ck_assert_ptr_nonnull(smm_cpu_features());
    ck_assert_ptr_nonnull(smm_cpu_name());
}
END_TEST

/* The CPU levels: bad arguments, the sets, and the choice under the cap
 * SMM_CPU_ISA. */
static int in_list(const char *name, const char *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return 1;
    return 0;
}

START_TEST(test_cpu_levels)
{
    enum { CAP = 32 };
    const char *runs[CAP], *all[CAP], *emu[CAP], *names[CAP];
    int nruns = -1, nall = -1, nemu = -1, n = -7;
    const char *const sentinel = "untouched";

    /* Errors: nothing written. */
    names[0] = sentinel;
    ck_assert_int_eq(smm_cpu_levels((smm_cpu_level_set)-1, names, CAP, &n), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_cpu_levels((smm_cpu_level_set)3, names, CAP, &n), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_RUNNABLE, names, -1, &n), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, NULL, 1, &n), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, names, CAP, NULL), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(n, -7);
    ck_assert_ptr_eq(names[0], sentinel);

    /* The sets. */
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_RUNNABLE, runs, CAP, &nruns), SMM_OK);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, all, CAP, &nall), SMM_OK);
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_EMULATED, emu, CAP, &nemu), SMM_OK);
    ck_assert(nruns >= 1 && nruns <= nall && nall <= CAP && nemu >= 0 && nemu <= CAP);
    ck_assert_str_eq(runs[0], "scalar");
    ck_assert_str_eq(all[0], "scalar");
    /* The count alone, and a short array: the first max names, the count
     * of the whole set. */
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, NULL, 0, &n), SMM_OK);
    ck_assert_int_eq(n, nall);
    names[1] = sentinel;
    ck_assert_int_eq(smm_cpu_levels(SMM_CPU_LEVELS_ALL, names, 1, &n), SMM_OK);
    ck_assert_int_eq(n, nall);
    ck_assert_str_eq(names[0], "scalar");
    ck_assert_ptr_eq(names[1], sentinel);
    /* Unique names, runnable ones in the library's order, each described. */
    for (int i = 0; i < nall; i++) {
        ck_assert_msg(!in_list(all[i], all, i) && !in_list(all[i], emu, nemu),
                      "level %s listed twice", all[i]);
        ck_assert_ptr_nonnull(smm_cpu_level_description(all[i]));
    }
    for (int i = 0; i < nemu; i++) {
        ck_assert_msg(!in_list(emu[i], emu, i), "emulation %s listed twice", emu[i]);
        ck_assert_ptr_nonnull(smm_cpu_level_description(emu[i]));
    }
    for (int i = 0, j = 0; i < nruns; i++, j++) {
        while (j < nall && strcmp(all[j], runs[i]) != 0)
            j++;
        ck_assert_msg(j < nall, "runnable level %s not in order among all levels", runs[i]);
    }
    ck_assert_ptr_null(smm_cpu_level_description(NULL));
    ck_assert_ptr_null(smm_cpu_level_description("no-such-level"));
    ck_assert_str_eq(smm_cpu_level_description("C"), smm_cpu_level_description("scalar"));

    /* The choice: the highest runnable level, capped by SMM_CPU_ISA. */
    const char *old = getenv("SMM_CPU_ISA");
    char *saved = old ? strdup(old) : NULL;
    unsetenv("SMM_CPU_ISA");
    ck_assert_str_eq(smm_cpu_level_chosen(), runs[nruns - 1]);
    setenv("SMM_CPU_ISA", "no-such-level", 1);   /* caps nothing */
    ck_assert_str_eq(smm_cpu_level_chosen(), runs[nruns - 1]);
    for (int i = 0; i < nruns; i++) {
        setenv("SMM_CPU_ISA", runs[i], 1);
        ck_assert_str_eq(smm_cpu_level_chosen(), runs[i]);
    }
    for (int i = 0; i < nall; i++) {
        /* A level this CPU lacks caps at the highest one below it. */
        const char *want = "scalar";
        for (int j = 0; j <= i; j++)
            if (in_list(all[j], runs, nruns))
                want = all[j];
        setenv("SMM_CPU_ISA", all[i], 1);
        ck_assert_str_eq(smm_cpu_level_chosen(), want);
    }
    for (int i = 0; i < nemu; i++) {
        setenv("SMM_CPU_ISA", emu[i], 1);
        ck_assert_str_eq(smm_cpu_level_chosen(), emu[i]);
    }
    setenv("SMM_CPU_ISA", "SCALAR", 1);
    ck_assert_str_eq(smm_cpu_level_chosen(), "scalar");
    setenv("SMM_CPU_ISA", "c", 1);
    ck_assert_str_eq(smm_cpu_level_chosen(), "scalar");
    /* A cpu context runs the chosen level: its packed format is the one a
     * context capped at that level has. */
    if (smm_backend_available(SMM_BACKEND_CPU, NULL)) {
        for (int i = 0; i < nruns + nemu; i++) {
            const char *lvl = i < nruns ? runs[i] : emu[i - nruns];
            smm_context *ctx = NULL;
            smm_packed_b *pb = NULL;
            int8_t b[4] = {1, 2, 3, 4};
            setenv("SMM_CPU_ISA", lvl, 1);
            ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_CPU), SMM_OK);
            ck_assert_int_eq(smm_pack_b(ctx, 1, 4, b, 4, &pb), SMM_OK);
            ck_assert_msg(strncmp(smm_packed_b_format(pb), "cpu ", 4) == 0, "%s: \"%s\"", lvl,
                          smm_packed_b_format(pb));
            smm_packed_b_destroy(pb);
            smm_context_destroy(ctx);
        }
    }
    if (saved) {
        setenv("SMM_CPU_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("SMM_CPU_ISA");
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

START_TEST(test_context_errors)
{
    smm_context *ctx = (smm_context *)(uintptr_t)0x1234;
    ck_assert_int_eq(smm_context_create(NULL, SMM_BACKEND_REFERENCE), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_context_create(&ctx, (smm_backend)5), SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    ctx = (smm_context *)(uintptr_t)0x1234;
    ck_assert_int_eq(smm_context_create(&ctx, (smm_backend)-1), SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    for (int b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CUDA; b++) {
        if (smm_backend_available((smm_backend)b, NULL))
            continue;
        ctx = (smm_context *)(uintptr_t)0x1234;
        ck_assert_int_eq(smm_context_create(&ctx, (smm_backend)b), SMM_ERR_NOT_AVAILABLE);
        ck_assert_ptr_null(ctx);
    }
    /* allocator with a NULL member */
    smm_allocator al = { .alloc = NULL, .free = NULL };
    ctx = (smm_context *)(uintptr_t)0x1234;
    ck_assert_int_eq(smm_context_create_with_allocator(&ctx, SMM_BACKEND_REFERENCE, &al),
                     SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    /* NULL allocator: malloc */
    ck_assert_int_eq(smm_context_create_with_allocator(&ctx, SMM_BACKEND_REFERENCE, NULL), SMM_OK);
    ck_assert_ptr_nonnull(ctx);
    smm_context_destroy(ctx);
    ck_assert_int_eq(smm_context_create_with_allocator(NULL, SMM_BACKEND_REFERENCE, NULL),
                     SMM_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_context_basics)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = NULL;
        ck_assert_int_eq(smm_context_create(&ctx, bs[i]), SMM_OK);
        ck_assert_int_eq(smm_context_backend(ctx), bs[i]);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        ck_assert_int_eq(smm_context_get_num_threads(ctx), 0);
        ck_assert_int_eq(smm_context_set_num_threads(ctx, 3), SMM_OK);
        ck_assert_int_eq(smm_context_get_num_threads(ctx), 3);
        ck_assert_int_eq(smm_context_set_num_threads(ctx, -1), SMM_ERR_INVALID_ARG);
        ck_assert_str_ne(smm_context_last_error(ctx), "");
        ck_assert_int_eq(smm_context_get_num_threads(ctx), 3);
        ck_assert_int_eq(smm_context_set_num_threads(ctx, 0), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        ck_assert_int_eq(smm_context_get_num_threads(ctx), 0);
        smm_context_destroy(ctx);
    }
    smm_context *ctx = NULL;
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_OK);
    ck_assert_int_ne(smm_context_backend(ctx), SMM_BACKEND_AUTO);
    smm_context_destroy(ctx);
    ck_assert_int_eq(smm_context_set_num_threads(NULL, 1), SMM_ERR_INVALID_ARG);
    ck_assert_int_eq(smm_context_get_num_threads(NULL), -1);
    ck_assert_int_eq(smm_context_backend(NULL), SMM_BACKEND_AUTO);
    ck_assert_str_eq(smm_context_last_error(NULL), "");
    smm_context_destroy(NULL);
}
END_TEST

START_TEST(test_env_override)
{
    const char *old = getenv("SMM_BACKEND");
    char *saved = old ? strdup(old) : NULL;
    smm_context *ctx = NULL;

    setenv("SMM_BACKEND", "reference", 1);
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_OK);
    ck_assert_int_eq(smm_context_backend(ctx), SMM_BACKEND_REFERENCE);
    smm_context_destroy(ctx);
    ck_assert_int_eq(smm_backend_auto(), SMM_BACKEND_REFERENCE);

    if (smm_backend_available(SMM_BACKEND_CPU, NULL)) {
        setenv("SMM_BACKEND", "cpu", 1);
        ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_OK);
        ck_assert_int_eq(smm_context_backend(ctx), SMM_BACKEND_CPU);
        smm_context_destroy(ctx);
        /* the variable overrides AUTO only */
        setenv("SMM_BACKEND", "reference", 1);
        ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_CPU), SMM_OK);
        ck_assert_int_eq(smm_context_backend(ctx), SMM_BACKEND_CPU);
        smm_context_destroy(ctx);
    }

    setenv("SMM_BACKEND", "no-such-backend", 1);
    ctx = (smm_context *)(uintptr_t)0x1234;
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_AUTO), SMM_ERR_INVALID_ARG);
    ck_assert_ptr_null(ctx);
    /* an explicit backend ignores the variable */
    ck_assert_int_eq(smm_context_create(&ctx, SMM_BACKEND_REFERENCE), SMM_OK);
    smm_context_destroy(ctx);

    if (saved) {
        setenv("SMM_BACKEND", saved, 1);
        free(saved);
    } else {
        unsetenv("SMM_BACKEND");
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* smm_scaled_mm / smm_gemm_s8s8s32 argument errors                    */
/* ------------------------------------------------------------------ */

enum { M = 3, N = 4, K = 5, LDA = 7, LDB = 6, LDC = 9 };

typedef struct fixture {
    int8_t a[M * LDA], b[N * LDB];
    float sa[M], sb[N], bias[N];
    int32_t azp[M];
    tu_buf c;                  /* M x LDC floats (or int32), guarded, poisoned */
    smm_scaled_mm_args args;   /* valid problem writing into c */
} fixture;

static void fixture_init(fixture *f, smm_dtype dt)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < M * LDA; i++)
        f->a[i] = (int8_t)(i * 7 - 50);
    for (int i = 0; i < N * LDB; i++)
        f->b[i] = (int8_t)(i * 5 - 40);
    for (int i = 0; i < M; i++) {
        f->sa[i] = 0.5f + (float)i;
        f->azp[i] = i - 1;
    }
    for (int i = 0; i < N; i++) {
        f->sb[i] = 0.25f * (float)(i + 1);
        f->bias[i] = (float)i - 1.5f;
    }
    tu_buf_alloc(&f->c, M * LDC * 4, 0, 0xA5);
    f->args = (smm_scaled_mm_args){
        .m = M, .n = N, .k = K, .a = f->a, .lda = LDA, .b = f->b, .ldb = LDB,
        .scale_a = f->sa, .scale_a_len = M, .scale_b = f->sb, .scale_b_len = N,
        .bias = f->bias, .azp = f->azp, .azp_len = M,
        .c = f->c.p, .ldc = LDC, .c_dtype = dt,
    };
}

/* Runs one bad call: exact status, nothing written in `watch`, a message. */
static void expect_mm_error(smm_context *ctx, const smm_scaled_mm_args *args, smm_status expect,
                            tu_buf *watch, const char *what, int line)
{
    tu_buf_poison(watch, watch->poison);
    smm_status st = smm_scaled_mm(ctx, args);
    ck_assert_msg(st == expect, "line %d: smm_scaled_mm with %s on %s: %s, expected %s", line,
                  what, smm_backend_name(smm_context_backend(ctx)), smm_strerror(st),
                  smm_strerror(expect));
    ck_assert_msg(tu_buf_untouched(watch), "line %d: smm_scaled_mm with %s wrote to its output",
                  line, what);
    if (ctx)
        ck_assert_msg(smm_context_last_error(ctx)[0] != '\0',
                      "line %d: no message after an error (%s)", line, what);
}

static void expect_gemm_error(smm_context *ctx, int64_t m, int64_t n, int64_t k, const int8_t *a,
                              int64_t lda, const int8_t *b, int64_t ldb, int32_t *c, int64_t ldc,
                              smm_status expect, tu_buf *watch, const char *what, int line)
{
    tu_buf_poison(watch, watch->poison);
    smm_status st = smm_gemm_s8s8s32(ctx, m, n, k, a, lda, b, ldb, c, ldc);
    ck_assert_msg(st == expect, "line %d: smm_gemm_s8s8s32 with %s: %s, expected %s", line, what,
                  smm_strerror(st), smm_strerror(expect));
    ck_assert_msg(tu_buf_untouched(watch), "line %d: smm_gemm_s8s8s32 with %s wrote its output",
                  line, what);
    if (ctx)
        ck_assert_msg(smm_context_last_error(ctx)[0] != '\0',
                      "line %d: no message after an error (%s)", line, what);
}

/* Variant of the fixture's valid problem with one change. */
#define MM_BAD(ctx, f, change, expect)                                            \
    do {                                                                          \
        smm_scaled_mm_args a_ = (f)->args;                                        \
        smm_scaled_mm_args *A = &a_;                                              \
        change;                                                                   \
        expect_mm_error((ctx), A, (expect), &(f)->c, #change, __LINE__);          \
    } while (0)

START_TEST(test_scaled_mm_bad_args)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    static const smm_dtype dts[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    for (int i = 0; i < nb; i++)
        for (int d = 0; d < 3; d++) {
            smm_context *ctx = tu_ctx(bs[i], 0);
            fixture fx, *f = &fx;
            fixture_init(f, dts[d]);
            /* the fixture itself is valid */
            ck_assert_int_eq(smm_scaled_mm(ctx, &f->args), SMM_OK);
            ck_assert_str_eq(smm_context_last_error(ctx), "");
            const int8_t *const_null_i8 = NULL;
            const float *const_null_f = NULL;

            MM_BAD(NULL, f, (void)A, SMM_ERR_INVALID_ARG);
            expect_mm_error(ctx, NULL, SMM_ERR_INVALID_ARG, &f->c, "args NULL", __LINE__);
            MM_BAD(ctx, f, A->m = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->n = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->k = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->m = INT64_MIN, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->k = INT64_MIN, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->a = const_null_i8, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->b = const_null_i8, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->c = NULL, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a = const_null_f, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b = const_null_f, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->lda = K - 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->lda = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldb = K - 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldb = 0, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldc = N - 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldc = -LDC, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a_len = 0, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a_len = 2, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a_len = M + 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a_len = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a_len = N, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b_len = 0, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b_len = M, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b_len = N + 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b_len = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->azp_len = 0, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->azp_len = 2, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->azp_len = N, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->azp_len = -1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->c_dtype = SMM_DTYPE_I32, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->c_dtype = SMM_DTYPE_I8, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->c_dtype = (smm_dtype)5, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->c_dtype = (smm_dtype)-1, SMM_ERR_INVALID_ARG);
            /* elements wider than a byte must be naturally aligned */
            MM_BAD(ctx, f, A->c = f->c.p + 1, SMM_ERR_INVALID_ARG);
            if (dts[d] == SMM_DTYPE_F32)
                MM_BAD(ctx, f, A->c = f->c.p + 2, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_a = (const float *)(const void *)((const char *)f->sa + 1),
                   SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->scale_b = (const float *)(const void *)((const char *)f->sb + 2),
                   SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->bias = (const float *)(const void *)((const char *)f->bias + 3),
                   SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->azp = (const int32_t *)(const void *)((const char *)f->azp + 1),
                   SMM_ERR_INVALID_ARG);
            /* byte counts that overflow (nothing may be touched, no crash) */
            MM_BAD(ctx, f, (A->m = INT64_MAX / 2, A->scale_a_len = 1, A->azp_len = 1),
                   SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, (A->n = INT64_MAX / 2, A->scale_b_len = 1, A->bias = NULL),
                   SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->lda = INT64_MAX / 2 + 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->lda = INT64_MAX, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldb = INT64_MAX / 2 + 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldc = INT64_MAX / 4 + 1, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, A->ldc = INT64_MAX, SMM_ERR_INVALID_ARG);
            MM_BAD(ctx, f, (A->m = 1, A->n = INT64_MAX / 2, A->scale_a_len = 1, A->azp_len = 1,
                            A->scale_b_len = 1, A->bias = NULL, A->ldb = K),
                   SMM_ERR_INVALID_ARG);
            tu_buf_free(&f->c);
            smm_context_destroy(ctx);
        }
}
END_TEST

START_TEST(test_gemm_bad_args)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        fixture fx, *f = &fx;
        fixture_init(f, SMM_DTYPE_I32);
        int32_t *c = (int32_t *)f->c.p;
        tu_buf *w = &f->c;
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, M, N, K, f->a, LDA, f->b, LDB, c, LDC), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
#define GEMM_BAD(cx, m, n, k, a, lda, b, ldb, cc, ldc, expect)                                \
        expect_gemm_error((cx), (m), (n), (k), (a), (lda), (b), (ldb), (cc), (ldc), (expect), \
                          w, #m " " #n " " #k " " #a " " #lda " " #b " " #ldb " " #cc " " #ldc, \
                          __LINE__)
        GEMM_BAD(NULL, M, N, K, f->a, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, -1, N, K, f->a, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, -1, K, f->a, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, -1, f->a, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, NULL, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, NULL, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, LDB, NULL, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, K - 1, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, K - 1, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, LDB, c, N - 1, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, LDB, (int32_t *)(void *)(f->c.p + 2), LDC,
                 SMM_ERR_INVALID_ARG);   /* misaligned int32 output */
        GEMM_BAD(ctx, M, N, K, f->a, INT64_MAX / 2 + 1, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, INT64_MAX, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, f->b, LDB, c, INT64_MAX / 4 + 1, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, INT64_MAX / 2, N, K, f->a, LDA, f->b, LDB, c, LDC, SMM_ERR_INVALID_ARG);
        GEMM_BAD(ctx, 1, INT64_MAX / 2, 1, f->a, 1, f->b, 1, c, 0, SMM_ERR_INVALID_ARG);
        /* C overlapping A or B (C's footprint is in f->c; put A/B inside it) */
        GEMM_BAD(ctx, M, N, K, (const int8_t *)c + 4, LDA, f->b, LDB, c, LDC, SMM_ERR_OVERLAP);
        GEMM_BAD(ctx, M, N, K, f->a, LDA, (const int8_t *)c + 40, LDB, c, LDC, SMM_ERR_OVERLAP);
        tu_buf_free(&f->c);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* A copy of args with input j (A, B, scale_a, scale_b, bias, azp) at p. */
static smm_scaled_mm_args with_input(const smm_scaled_mm_args *args, int j, const void *p)
{
    smm_scaled_mm_args a = *args;
    switch (j) {
    case 0: a.a = p; break;
    case 1: a.b = p; break;
    case 2: a.scale_a = p; break;
    case 3: a.scale_b = p; break;
    case 4: a.bias = p; break;
    default: a.azp = p; break;
    }
    return a;
}

/*
 * Overlap is judged on footprints: C's byte range [c, c + ((M-1)*ldc + N) *
 * esize) against each input's. Everything lives in one arena that must come
 * back untouched after an OVERLAP error.
 */
START_TEST(test_scaled_mm_overlap)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    static const smm_dtype dts[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    for (int i = 0; i < nb; i++)
        for (int d = 0; d < 3; d++) {
            smm_context *ctx = tu_ctx(bs[i], 0);
            const size_t es = dts[d] == SMM_DTYPE_F32 ? 4 : 2;
            tu_buf arena;
            tu_buf_alloc(&arena, 8192, 0, 0x11);
            unsigned char *base = arena.p;
            /* C at offset 1024: footprint ((M-1)*LDC + N) * es bytes; the
             * gap after row 0 is bytes [N*es, LDC*es). */
            unsigned char *c = base + 1024;
            const size_t cfoot = ((size_t)(M - 1) * LDC + N) * es;
            /* inputs placed away from C by default */
            smm_scaled_mm_args good = {
                .m = M, .n = N, .k = K,
                .a = (const int8_t *)(base + 0), .lda = LDA,
                .b = (const int8_t *)(base + 100), .ldb = LDB,
                .scale_a = (const float *)(base + 200), .scale_a_len = M,
                .scale_b = (const float *)(base + 300), .scale_b_len = N,
                .bias = (const float *)(base + 400),
                .azp = (const int32_t *)(base + 500), .azp_len = M,
                .c = c, .ldc = LDC, .c_dtype = dts[d],
            };
            const size_t afoot = (M - 1) * LDA + K, bfoot = (N - 1) * LDB + K;
            /* each input, one byte into C from either end, and in the gap */
            struct { size_t foot, align; } in[6] = {
                { afoot, 1 }, { bfoot, 1 }, { M * 4, 4 }, { N * 4, 4 }, { N * 4, 4 }, { M * 4, 4 },
            };
            for (int j = 0; j < 6; j++) {
                const size_t al = in[j].align;
                /* (1) input ending inside C's first element(s) */
                size_t start = 1024 - in[j].foot + al;
                start -= start % al;
                /* (2) input starting in C's last element */
                size_t start2 = 1024 + cfoot - es;
                start2 -= start2 % al;
                /* (3) input inside the gap after C's row 0 (no element
                 * shared, but the footprints intersect) */
                size_t start3 = 1024 + N * es;
                start3 += (al - start3 % al) % al;
                size_t starts[3] = { start, start2, start3 };
                for (int s = 0; s < 3; s++) {
                    smm_scaled_mm_args a = with_input(&good, j, base + starts[s]);
                    char what[64];
                    snprintf(what, sizeof what, "input %d at C%+lld (case %d)", j,
                             (long long)starts[s] - 1024, s);
                    expect_mm_error(ctx, &a, SMM_ERR_OVERLAP, &arena, what, __LINE__);
                }
                /* just outside: ending at C's first byte, starting right
                 * after C's last byte: no overlap, runs fine */
                size_t before = 1024 - in[j].foot;
                size_t after = 1024 + cfoot;
                after += (al - after % al) % al;
                if (before % al == 0) {
                    smm_scaled_mm_args a = with_input(&good, j, base + before);
                    smm_status st = smm_scaled_mm(ctx, &a);
                    ck_assert_msg(st == SMM_OK, "input %d touching C from below: %s (%s)", j,
                                  smm_strerror(st), smm_context_last_error(ctx));
                }
                {
                    smm_scaled_mm_args a = with_input(&good, j, base + after);
                    smm_status st = smm_scaled_mm(ctx, &a);
                    ck_assert_msg(st == SMM_OK, "input %d right after C: %s (%s)", j,
                                  smm_strerror(st), smm_context_last_error(ctx));
                }
            }
            tu_buf_free(&arena);
            smm_context_destroy(ctx);
        }
}
END_TEST

/* ------------------------------------------------------------------ */
/* smm_quantize_i8 argument errors                                     */
/* ------------------------------------------------------------------ */

enum { QM = 3, QK = 6, LDX = 8, LDQ = 7 };

/* w: the outputs' buffers and x's (x holds the poison pattern as data). */
static void expect_q_error(smm_context *ctx, const smm_quantize_args *args, smm_status expect,
                           tu_buf *w[4], const char *what, int line)
{
    for (int i = 0; i < 4; i++)
        tu_buf_poison(w[i], w[i]->poison);
    smm_status st = smm_quantize_i8(ctx, args);
    ck_assert_msg(st == expect, "line %d: smm_quantize_i8 with %s: %s, expected %s", line, what,
                  smm_strerror(st), smm_strerror(expect));
    for (int i = 0; i < 4; i++)
        ck_assert_msg(tu_buf_untouched(w[i]), "line %d: smm_quantize_i8 with %s wrote to memory",
                      line, what);
    if (ctx)
        ck_assert_msg(smm_context_last_error(ctx)[0] != '\0',
                      "line %d: no message after an error (%s)", line, what);
}

#define Q_BAD(ctx, base, change, expect)                                            \
    do {                                                                           \
        smm_quantize_args a_ = (base);                                             \
        smm_quantize_args *A = &a_;                                                \
        change;                                                                    \
        expect_q_error((ctx), A, (expect), watch, #change, __LINE__);              \
    } while (0)

START_TEST(test_quantize_bad_args)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        tu_buf qb, sb, zb, xb;
        tu_buf_alloc(&xb, QM * LDX * 4, 0, 0xA5);   /* x's values: the poison */
        float *x = (float *)xb.p;
        tu_buf *watch[4] = { &qb, &sb, &zb, &xb };
        tu_buf_alloc(&qb, QM * LDQ, 0, 0xA5);
        tu_buf_alloc(&sb, QM * 4, 0, 0xA5);
        tu_buf_alloc(&zb, QM * 4, 0, 0xA5);
        float s_in = 0.25f;
        int32_t z_in = 3;
        const smm_quantize_args dyn = { .m = QM, .k = QK, .x = x, .x_dtype = SMM_DTYPE_F32,
                                        .ldx = LDX, .q = (int8_t *)qb.p, .ldq = LDQ,
                                        .scale = (float *)sb.p, .azp = (int32_t *)zb.p,
                                        .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
        const smm_quantize_args sta = { .m = QM, .k = QK, .x = x, .x_dtype = SMM_DTYPE_F32,
                                        .ldx = LDX, .q = (int8_t *)qb.p, .ldq = LDQ,
                                        .scale = &s_in, .azp = &z_in,
                                        .mode = SMM_QUANT_STATIC_PER_TENSOR };
        ck_assert_int_eq(smm_quantize_i8(ctx, &dyn), SMM_OK);
        ck_assert_int_eq(smm_quantize_i8(ctx, &sta), SMM_OK);
        ck_assert_str_eq(smm_context_last_error(ctx), "");
        const smm_quantize_args *bases[2] = { &dyn, &sta };
        for (int b = 0; b < 2; b++) {
            const smm_quantize_args base = *bases[b];
            Q_BAD(NULL, base, (void)A, SMM_ERR_INVALID_ARG);
            expect_q_error(ctx, NULL, SMM_ERR_INVALID_ARG, watch, "args NULL", __LINE__);
            Q_BAD(ctx, base, A->m = -1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->k = -1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->m = INT64_MIN, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x_dtype = SMM_DTYPE_I8, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x_dtype = SMM_DTYPE_I32, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x_dtype = (smm_dtype)5, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x_dtype = (smm_dtype)-1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->mode = (smm_quant_mode)2, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->mode = (smm_quant_mode)-1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x = NULL, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->q = NULL, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->scale = NULL, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->x = (const char *)x + 2, SMM_ERR_INVALID_ARG);   /* f32 */
            Q_BAD(ctx, base, (A->x = (const char *)x + 1, A->x_dtype = SMM_DTYPE_BF16),
                  SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->scale = (float *)(void *)((char *)A->scale + 1), SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->azp = (int32_t *)(void *)((char *)A->azp + 2), SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->ldx = QK - 1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->ldq = QK - 1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->ldx = -1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->ldx = INT64_MAX / 2 + 1, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, A->ldx = INT64_MAX / 4 + 1, SMM_ERR_INVALID_ARG);   /* f32: x4 */
            Q_BAD(ctx, base, A->ldq = INT64_MAX, SMM_ERR_INVALID_ARG);
            Q_BAD(ctx, base, (A->m = INT64_MAX / 2, A->ldx = 1, A->ldq = 1, A->k = 1),
                  SMM_ERR_INVALID_ARG);
            /* q overlapping x (partially: q's last row on x's first bytes) */
            Q_BAD(ctx, base, A->q = (int8_t *)x + 4 - ((QM - 1) * LDQ + QK), SMM_ERR_OVERLAP);
            Q_BAD(ctx, base, A->q = (int8_t *)x + ((QM - 1) * LDX + QK) * 4 - 1, SMM_ERR_OVERLAP);
            /* q inside x's gap (between rows: footprints intersect) */
            Q_BAD(ctx, base, A->q = (int8_t *)(x + QK), SMM_ERR_OVERLAP);
        }
        /* static: q overlapping the input scale or zero point */
        Q_BAD(ctx, sta, A->scale = (float *)(qb.p + 8), SMM_ERR_OVERLAP);
        Q_BAD(ctx, sta, A->azp = (int32_t *)(qb.p + 12), SMM_ERR_OVERLAP);
        /* dynamic: each output overlapping the input or another output */
        Q_BAD(ctx, dyn, A->scale = x + 2, SMM_ERR_OVERLAP);
        Q_BAD(ctx, dyn, A->azp = (int32_t *)(x + 5), SMM_ERR_OVERLAP);
        Q_BAD(ctx, dyn, A->scale = (float *)(zb.p + 4), SMM_ERR_OVERLAP);
        Q_BAD(ctx, dyn, A->azp = (int32_t *)(sb.p + 8), SMM_ERR_OVERLAP);
        Q_BAD(ctx, dyn, A->scale = (float *)(qb.p + 4), SMM_ERR_OVERLAP);
        Q_BAD(ctx, dyn, A->azp = (int32_t *)(qb.p + 8), SMM_ERR_OVERLAP);
        /* static: azp NULL is symmetric; dynamic: azp NULL gives no zero
         * points (both valid) */
        {
            smm_quantize_args a = sta;
            a.azp = NULL;
            ck_assert_int_eq(smm_quantize_i8(ctx, &a), SMM_OK);
            a = dyn;
            a.azp = NULL;
            tu_buf_poison(&zb, 0xA5);
            ck_assert_int_eq(smm_quantize_i8(ctx, &a), SMM_OK);
            ck_assert(tu_buf_untouched(&zb));
        }
        tu_buf_free(&qb);
        tu_buf_free(&sb);
        tu_buf_free(&zb);
        tu_buf_free(&xb);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Legal edge cases                                                    */
/* ------------------------------------------------------------------ */

/* A single-row matrix's leading dimension is neither read nor validated:
 * M == 1 with lda == 0 (or negative) and ldc == 0 gives the same bits as
 * lda == K; N == 1 with ldb == 0 likewise; ldx / ldq of the quantizer. */
START_TEST(test_single_row_ld)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    cf_rng r = tu_rng("single_row_ld");
    enum { KK = 37, NN = 11 };
    int8_t a[KK], b[NN * KK];
    float sa = 0.125f, sb[NN], bias[NN];
    cf_fill_i8(&r, a, 1, KK, KK, CF_VALUES_UNIFORM);
    cf_fill_i8(&r, b, NN, KK, KK, CF_VALUES_UNIFORM);
    for (int j = 0; j < NN; j++) {
        sb[j] = 0.01f * (float)(j + 1);
        bias[j] = (float)j;
    }
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        float want[NN], got[NN];
        smm_scaled_mm_args args = { .m = 1, .n = NN, .k = KK, .a = a, .lda = KK, .b = b,
                                    .ldb = KK, .scale_a = &sa, .scale_a_len = 1, .scale_b = sb,
                                    .scale_b_len = NN, .bias = bias, .c = want, .ldc = NN,
                                    .c_dtype = SMM_DTYPE_F32 };
        ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
        static const int64_t lds[4] = { 0, -1, 1, INT64_MAX };
        for (int l = 0; l < 4; l++) {
            memset(got, 0xA5, sizeof got);
            args.c = got;
            args.lda = lds[l];
            args.ldc = lds[3 - l];
            smm_status st = smm_scaled_mm(ctx, &args);
            ck_assert_msg(st == SMM_OK, "%s: M == 1 with lda %lld, ldc %lld: %s (%s)",
                          smm_backend_name(bs[i]), (long long)args.lda, (long long)args.ldc,
                          smm_strerror(st), smm_context_last_error(ctx));
            ck_assert_msg(memcmp(got, want, sizeof got) == 0, "M == 1, lda %lld: different bits",
                          (long long)lds[l]);
        }
        /* gemm, N == 1 with ldb == 0, M == 1 with lda == ldc == 0 */
        int32_t cw[1], cg[1];
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 1, 1, KK, a, KK, b, KK, cw, 1), SMM_OK);
        cg[0] = (int32_t)0xA5A5A5A5;
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 1, 1, KK, a, 0, b, 0, cg, 0), SMM_OK);
        ck_assert_int_eq(cg[0], cw[0]);
        int32_t col_w[NN], col_g[NN];
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, NN, 1, KK, b, KK, a, KK, col_w, 1), SMM_OK);
        memset(col_g, 0xA5, sizeof col_g);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, NN, 1, KK, b, KK, a, 0, col_g, 1), SMM_OK);
        ck_assert_int_eq(memcmp(col_g, col_w, sizeof col_g), 0);
        /* quantizer, M == 1 with ldx == ldq == 0 */
        float x[KK];
        for (int k = 0; k < KK; k++)
            x[k] = (float)k * 0.37f - 5.0f;
        int8_t qw[KK], qg[KK];
        float sw, sg;
        int32_t zw, zg;
        smm_quantize_args qa = { .m = 1, .k = KK, .x = x, .x_dtype = SMM_DTYPE_F32, .ldx = KK,
                                 .q = qw, .ldq = KK, .scale = &sw, .azp = &zw,
                                 .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
        ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
        qa.q = qg;
        qa.scale = &sg;
        qa.azp = &zg;
        qa.ldx = 0;
        qa.ldq = -3;
        memset(qg, 0xA5, sizeof qg);
        ck_assert_int_eq(smm_quantize_i8(ctx, &qa), SMM_OK);
        ck_assert_int_eq(memcmp(qg, qw, sizeof qg), 0);
        ck_assert_uint_eq(tu_f2u(sg), tu_f2u(sw));
        ck_assert_int_eq(zg, zw);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* M == 0 or N == 0: success, nothing written (pointers to zero elements
 * may be NULL); K == 0 with NULL A and B runs the epilogue. */
START_TEST(test_empty_problems)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        fixture fx, *f = &fx;
        fixture_init(f, SMM_DTYPE_F32);
        smm_scaled_mm_args a = f->args;
        a.m = 0;
        a.scale_a_len = 1;
        a.azp_len = 1;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        ck_assert(tu_buf_untouched(&f->c));
        a.a = NULL;   /* zero rows: A and C have no elements */
        a.c = NULL;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        a = f->args;
        a.n = 0;
        a.scale_b_len = 1;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        ck_assert(tu_buf_untouched(&f->c));
        a.m = 0;
        a.scale_a_len = 1;
        a.azp_len = 1;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        ck_assert(tu_buf_untouched(&f->c));
        int32_t *c = (int32_t *)f->c.p;
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 0, N, K, f->a, LDA, f->b, LDB, c, LDC), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, M, 0, K, f->a, LDA, f->b, LDB, c, LDC), SMM_OK);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 0, 0, 0, NULL, 0, NULL, 0, NULL, 0), SMM_OK);
        ck_assert(tu_buf_untouched(&f->c));
        /* K == 0: A and B have no elements (NULL allowed): C = 0 */
        memset(c, 0xA5, sizeof(int32_t) * LDC);
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 2, 3, 0, NULL, 0, NULL, 0, c, LDC), SMM_OK);
        for (int m = 0; m < 2; m++)
            for (int n = 0; n < 3; n++)
                ck_assert_int_eq(c[m * LDC + n], 0);
        /* quantizer M == 0 */
        smm_quantize_args q = { .m = 0, .k = 5, .x = NULL, .x_dtype = SMM_DTYPE_F16, .ldx = 5,
                                .q = NULL, .ldq = 5, .scale = (float *)f->c.p,
                                .azp = (int32_t *)(f->c.p + 16),
                                .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
        tu_buf_poison(&f->c, 0xA5);
        ck_assert_int_eq(smm_quantize_i8(ctx, &q), SMM_OK);
        ck_assert(tu_buf_untouched(&f->c));
        /* an azp_len with azp NULL is ignored */
        a = f->args;
        a.azp = NULL;
        a.azp_len = -77;
        ck_assert_int_eq(smm_scaled_mm(ctx, &a), SMM_OK);
        tu_buf_free(&f->c);
        smm_context_destroy(ctx);
    }
}
END_TEST

/*
 * K == 0 runs the formulas with acc = 0 (doc/numerics.md): t = 0 * sb is +0
 * or -0 by sb's sign; y = sa * t (signs multiply); with a bias, fmaf(sa, t,
 * b): -0 + +0 = +0, -0 + -0 = -0, +0 + -0 = +0; with azp and no bias
 * fmaf(sa, t, +0) = +0 everywhere. sa = {1, -1} per token, sb = {1, -1, 2}.
 */
START_TEST(test_k0_formulas)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    const float sa[2] = { 1.0f, -1.0f }, sb[3] = { 1.0f, -1.0f, 2.0f };
    const float bias[3] = { 0.0f, -0.0f, 1.5f };
    const int32_t azp[2] = { 5, -7 };
    /* f32 bits: no bias / bias / azp without bias */
    static const uint32_t nobias[2][3] = { { 0x00000000u, 0x80000000u, 0x00000000u },
                                           { 0x80000000u, 0x00000000u, 0x80000000u } };
    static const uint32_t withbias[2][3] = { { 0x00000000u, 0x80000000u, 0x3FC00000u },
                                             { 0x00000000u, 0x00000000u, 0x3FC00000u } };
    static const smm_dtype dts[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        for (int d = 0; d < 3; d++)
            for (int mode = 0; mode < 3; mode++) {
                uint32_t c32[2 * 4];
                memset(c32, 0xA5, sizeof c32);
                smm_scaled_mm_args args = { .m = 2, .n = 3, .k = 0, .a = NULL, .lda = 0,
                                            .b = NULL, .ldb = 0, .scale_a = sa,
                                            .scale_a_len = 2, .scale_b = sb, .scale_b_len = 3,
                                            .bias = mode == 1 ? bias : NULL,
                                            .azp = mode == 2 ? azp : NULL, .azp_len = 2,
                                            .c = c32, .ldc = 4, .c_dtype = dts[d] };
                ck_assert_int_eq(smm_scaled_mm(ctx, &args), SMM_OK);
                for (int m = 0; m < 2; m++)
                    for (int n = 0; n < 3; n++) {
                        uint32_t e32 = mode == 0 ? nobias[m][n] : mode == 1 ? withbias[m][n] : 0u;
                        uint32_t expect, got = 0;
                        if (dts[d] == SMM_DTYPE_F32) {
                            expect = e32;
                            got = c32[m * 4 + n];
                        } else {
                            /* +-0 keep their sign; 1.5 is 0x3E00 (f16), 0x3FC0 (bf16) */
                            expect = e32 == 0x3FC00000u ? (dts[d] == SMM_DTYPE_F16 ? 0x3E00u : 0x3FC0u)
                                                        : e32 >> 16;
                            uint16_t h;
                            memcpy(&h, (unsigned char *)c32 + ((size_t)m * 4 + n) * 2, 2);
                            got = h;
                        }
                        ck_assert_msg(got == expect,
                                      "%s K == 0 %s mode %d: C[%d][%d] = 0x%x, expected 0x%x",
                                      smm_backend_name(bs[i]), smm_dtype_name(dts[d]), mode, m, n,
                                      got, expect);
                    }
            }
        smm_context_destroy(ctx);
    }
}
END_TEST

/* An output right next to an input (touching, not overlapping) is fine. */
START_TEST(test_adjacent_not_overlap)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        smm_context *ctx = tu_ctx(bs[i], 0);
        int32_t buf[64];
        int8_t *ab = (int8_t *)buf;
        memset(buf, 1, sizeof buf);
        /* A = 2 x 4 at bytes [0, 8), C = 2 x 2 int32 at bytes [8, 24), B at [24, 32) */
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 2, 2, 4, ab, 4, ab + 24, 4, buf + 2, 2), SMM_OK);
        for (int e = 0; e < 4; e++)
            ck_assert_int_eq(buf[2 + e], 4);
        smm_context_destroy(ctx);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Allocation failures                                                 */
/* ------------------------------------------------------------------ */

START_TEST(test_alloc_failure_create)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    for (int i = 0; i < nb; i++) {
        int64_t n;
        for (n = 0; n < 1000; n++) {
            tu_counting cnt;
            tu_counting_init(&cnt);
            tu_counting_fail_in(&cnt, n);
            smm_allocator al = tu_counting_allocator(&cnt);
            smm_context *ctx = (smm_context *)(uintptr_t)0x1234;
            smm_status st = smm_context_create_with_allocator(&ctx, bs[i], &al);
            if (st == SMM_OK) {
                ck_assert_ptr_nonnull(ctx);
                ck_assert_int_eq(smm_context_backend(ctx), bs[i]);
                smm_context_destroy(ctx);
                ck_assert_msg(cnt.live == 0, "%s: %lld allocation(s) leaked after destroy",
                              smm_backend_name(bs[i]), (long long)cnt.live);
                ck_assert(!cnt.bad_request);
                ck_assert_msg(n >= 1 && cnt.calls >= 1,
                              "%s: the context was not allocated through the allocator",
                              smm_backend_name(bs[i]));
                break;
            }
            ck_assert_msg(st == SMM_ERR_NO_MEMORY,
                          "%s: failing allocation %lld: %s, expected SMM_ERR_NO_MEMORY",
                          smm_backend_name(bs[i]), (long long)n, smm_strerror(st));
            ck_assert_ptr_null(ctx);
            ck_assert_msg(cnt.live == 0, "%s: failing allocation %lld: %lld allocation(s) leaked",
                          smm_backend_name(bs[i]), (long long)n, (long long)cnt.live);
        }
        ck_assert_int_lt(n, 1000);
    }
}
END_TEST

/* Fails the n-th allocation of one call, n = 0, 1, 2, ... until the call
 * succeeds: every failure is SMM_ERR_NO_MEMORY with the outputs untouched;
 * the final result equals the reference's; nothing leaks. */
START_TEST(test_alloc_failure_calls)
{
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    cf_rng r = tu_rng("alloc_calls");
    enum { AM = 150, AN = 140, AK = 260 };
    int8_t *a = malloc(AM * AK), *b = malloc(AN * AK);
    float *sa = malloc(AM * 4), *sb = malloc(AN * 4), *bias = malloc(AN * 4), *x = malloc(AM * AK * 4);
    int32_t *azp = malloc(AM * 4);
    ck_assert(a && b && sa && sb && bias && x && azp);
    cf_fill_i8(&r, a, AM, AK, AK, CF_VALUES_UNIFORM);
    cf_fill_i8(&r, b, AN, AK, AK, CF_VALUES_UNIFORM);
    for (int i = 0; i < AM; i++) {
        sa[i] = (float)cf_rng_range(&r, 1, 99) * 0x1p-12f;
        azp[i] = (int32_t)cf_rng_range(&r, -9, 9);
    }
    for (int i = 0; i < AN; i++) {
        sb[i] = (float)cf_rng_range(&r, 1, 99) * 0x1p-10f;
        bias[i] = (float)cf_rng_range(&r, -99, 99);
    }
    for (int i = 0; i < AM * AK; i++)
        x[i] = (float)cf_rng_range(&r, -100000, 100000) * 0x1p-8f;

    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    const size_t csize = (size_t)AM * AN * 4;
    unsigned char *want = malloc(csize), *qwant = malloc(AM * AK + AM * 8);
    ck_assert(want && qwant);

    for (int i = 0; i < nb; i++)
        for (int op = 0; op < 4; op++) {
            tu_counting cnt;
            tu_counting_init(&cnt);
            smm_allocator al = tu_counting_allocator(&cnt);
            smm_context *ctx = NULL;
            ck_assert_int_eq(smm_context_create_with_allocator(&ctx, bs[i], &al), SMM_OK);
            ck_assert_int_eq(smm_context_set_num_threads(ctx, 2), SMM_OK);
            tu_buf out;
            tu_buf_alloc(&out, csize + AM * 8, 0, 0xA5);
            smm_scaled_mm_args args = { .m = AM, .n = AN, .k = AK, .a = a, .lda = AK, .b = b,
                                        .ldb = AK, .scale_a = sa, .scale_a_len = AM,
                                        .scale_b = sb, .scale_b_len = AN,
                                        .bias = op == 1 ? bias : NULL,
                                        .azp = op == 1 ? azp : NULL, .azp_len = AM,
                                        .c = out.p, .ldc = AN,
                                        .c_dtype = op == 1 ? SMM_DTYPE_BF16 : SMM_DTYPE_F32 };
            smm_quantize_args qa = { .m = AM, .k = AK, .x = x, .x_dtype = SMM_DTYPE_F32,
                                     .ldx = AK, .q = (int8_t *)out.p, .ldq = AK,
                                     .scale = (float *)(out.p + AM * AK),
                                     .azp = (int32_t *)(out.p + AM * AK + AM * 4),
                                     .mode = SMM_QUANT_DYNAMIC_PER_TOKEN };
            /* expected result from the reference */
            smm_status st;
            memset(want, 0, csize);
            if (op == 0)
                st = smm_gemm_s8s8s32(ref, AM, AN, AK, a, AK, b, AK, (int32_t *)want, AN);
            else if (op == 1 || op == 2) {
                smm_scaled_mm_args w = args;
                w.c = want;
                st = smm_scaled_mm(ref, &w);
            } else {
                smm_quantize_args w = qa;
                w.q = (int8_t *)qwant;
                w.scale = (float *)(qwant + AM * AK);
                w.azp = (int32_t *)(qwant + AM * AK + AM * 4);
                st = smm_quantize_i8(ref, &w);
            }
            ck_assert_int_eq(st, SMM_OK);
            int64_t n;
            for (n = 0; n < 10000; n++) {
                tu_buf_poison(&out, 0xA5);
                tu_counting_fail_in(&cnt, n);
                if (op == 0)
                    st = smm_gemm_s8s8s32(ctx, AM, AN, AK, a, AK, b, AK, (int32_t *)out.p, AN);
                else if (op == 1 || op == 2)
                    st = smm_scaled_mm(ctx, &args);
                else
                    st = smm_quantize_i8(ctx, &qa);
                tu_counting_fail_in(&cnt, -1);
                if (st == SMM_OK)
                    break;
                ck_assert_msg(st == SMM_ERR_NO_MEMORY,
                              "%s op %d, failing allocation %lld: %s, expected SMM_ERR_NO_MEMORY",
                              smm_backend_name(bs[i]), op, (long long)n, smm_strerror(st));
                ck_assert_msg(tu_buf_untouched(&out),
                              "%s op %d, failing allocation %lld: output written",
                              smm_backend_name(bs[i]), op, (long long)n);
                ck_assert_str_ne(smm_context_last_error(ctx), "");
            }
            ck_assert_int_lt(n, 10000);
            if (op < 3)
                ck_assert_msg(memcmp(out.p, want, op == 1 ? csize / 2 : csize) == 0,
                              "%s op %d: result after %lld failed attempts differs from the reference",
                              smm_backend_name(bs[i]), op, (long long)n);
            else
                ck_assert_msg(memcmp(out.p, qwant, AM * AK + AM * 8) == 0,
                              "%s quantize: result differs from the reference",
                              smm_backend_name(bs[i]));
            smm_context_destroy(ctx);
            ck_assert_msg(cnt.live == 0, "%s op %d: %lld allocation(s) leaked",
                          smm_backend_name(bs[i]), op, (long long)cnt.live);
            ck_assert(!cnt.bad_request);
            tu_buf_free(&out);
        }
    smm_context_destroy(ref);
    free(want);
    free(qwant);
    free(a);
    free(b);
    free(sa);
    free(sb);
    free(bias);
    free(x);
    free(azp);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tu_tcase(s, "names", 60);
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_backend_from_name);
    tcase_add_test(tc, test_probe);
    tcase_add_test(tc, test_cpu_levels);
    tc = tu_tcase(s, "contexts", 60);
    tcase_add_test(tc, test_context_errors);
    tcase_add_test(tc, test_context_basics);
    tcase_add_test(tc, test_env_override);
    tc = tu_tcase(s, "bad_args", 120);
    tcase_add_test(tc, test_scaled_mm_bad_args);
    tcase_add_test(tc, test_gemm_bad_args);
    tcase_add_test(tc, test_scaled_mm_overlap);
    tcase_add_test(tc, test_quantize_bad_args);
    tc = tu_tcase(s, "edges", 120);
    tcase_add_test(tc, test_single_row_ld);
    tcase_add_test(tc, test_empty_problems);
    tcase_add_test(tc, test_k0_formulas);
    tcase_add_test(tc, test_adjacent_not_overlap);
    tc = tu_tcase(s, "allocation", 600);
    tcase_add_test(tc, test_alloc_failure_create);
    tcase_add_test(tc, test_alloc_failure_calls);
    return s;
}

int main(void)
{
    return tu_main(api_suite(), "check_api");
}
