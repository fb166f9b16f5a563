/*
 * testutil.c - helpers shared by the Check suites (see testutil.h).
 */
#include "config.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t tu_seed;

cf_rng tu_rng(const char *test_name)
{
    uint64_t h = 0xcbf29ce484222325ull;            /* FNV-1a of the name */
    for (const char *p = test_name; p && *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    cf_rng r;
    cf_rng_seed(&r, tu_seed ^ h);
    return r;
}

int tu_main(Suite *s, const char *name)
{
    if (cf_seed(&tu_seed) != 0) {
        /* A replay asked for a seed this suite cannot read: running on
         * another would pass or fail for the wrong reason. 99 is the hard
         * error of automake's test driver. */
        printf("%s: SMM_TEST_SEED is not a seed; nothing run\n", name);
        srunner_free(srunner_create(s)); /* the runner owns and frees s */
        return 99;
    }
    printf("%s: seed: 0x%016" PRIx64 " (replay with SMM_TEST_SEED=0x%016" PRIx64 ")\n",
           name, tu_seed, tu_seed);
    int any_gpu = 0;
    for (int b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CUDA; b++) {
        const char *why = "";
        int ok = smm_backend_available((smm_backend)b, &why);
        int gpu = b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA;
        if (!tu_backend_selected((smm_backend)b)) {
            printf("%s: backend %s: not tested (SMM_TEST_BACKENDS)\n", name,
                   smm_backend_name((smm_backend)b));
            continue;
        }
        any_gpu |= ok && gpu;
        printf("%s: backend %s: %s%s%s\n", name, smm_backend_name((smm_backend)b),
               ok ? "available" : gpu ? "SKIP (not available)" : "not available",
               why && *why ? ": " : "", why ? why : "");
    }
    SRunner *sr = srunner_create(s);
    if (any_gpu) {
        /* The probe has initialised the GPU runtime in this process, and
         * neither CUDA nor HIP can be used in a child forked after that:
         * run the tests in this process. */
        srunner_set_fork_status(sr, CK_NOFORK);
        printf("%s: a GPU backend is available: tests run without fork\n", name);
    }
    fflush(stdout);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed)
        printf("%s: %d test(s) failed; replay with SMM_TEST_SEED=0x%016" PRIx64 "\n",
               name, failed, tu_seed);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

TCase *tu_tcase(Suite *s, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

int tu_backend_selected(smm_backend b)
{
    const char *list = getenv("SMM_TEST_BACKENDS");
    if (!list || !*list)
        return 1;
    const char *want = smm_backend_name(b);
    size_t len = strlen(want);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ", ");
        if (n == len && strncmp(p, want, len) == 0)
            return 1;
        p += n;
        p += strspn(p, ", ");
    }
    return 0;
}

int tu_backends(smm_backend out[4])
{
    int n = 0;
    for (int b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CUDA; b++)
        if (tu_backend_selected((smm_backend)b) && smm_backend_available((smm_backend)b, NULL))
            out[n++] = (smm_backend)b;
    return n;
}

int tu_host_backends(smm_backend out[4])
{
    int n = 0;
    for (int b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CPU; b++)
        if (tu_backend_selected((smm_backend)b) && smm_backend_available((smm_backend)b, NULL))
            out[n++] = (smm_backend)b;
    return n;
}

smm_context *tu_ctx(smm_backend backend, int threads)
{
    smm_context *ctx = NULL;
    smm_status st = smm_context_create(&ctx, backend);
    ck_assert_msg(st == SMM_OK && ctx != NULL, "smm_context_create(%s): %s",
                  smm_backend_name(backend), smm_strerror(st));
    st = smm_context_set_num_threads(ctx, threads);
    ck_assert_msg(st == SMM_OK, "smm_context_set_num_threads(%d): %s", threads,
                  smm_strerror(st));
    return ctx;
}

void tu_buf_alloc(tu_buf *b, size_t size, size_t offset, unsigned char poison)
{
    b->guard = 64 + offset;
    b->size = size;
    b->mem = malloc(size + b->guard + 64);
    ck_assert_ptr_nonnull(b->mem);
    b->p = b->mem + b->guard;
    tu_buf_poison(b, poison);
}

void tu_buf_poison(tu_buf *b, unsigned char poison)
{
    b->poison = poison;
    memset(b->mem, poison, b->size + b->guard + 64);
}

int tu_buf_untouched(const tu_buf *b)
{
    for (size_t i = 0; i < b->size + b->guard + 64; i++)
        if (b->mem[i] != b->poison)
            return 0;
    return 1;
}

void tu_buf_free(tu_buf *b)
{
    free(b->mem);
    memset(b, 0, sizeof *b);
}

uint32_t tu_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float tu_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void *counting_alloc(size_t size, size_t alignment, void *user)
{
    tu_counting *c = user;
    int64_t idx = __atomic_fetch_add(&c->calls, 1, __ATOMIC_SEQ_CST);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
        __atomic_store_n(&c->bad_request, 1, __ATOMIC_SEQ_CST);
    if (idx == __atomic_load_n(&c->fail_at, __ATOMIC_SEQ_CST))
        return NULL;
    size_t al = alignment < sizeof(void *) ? sizeof(void *) : alignment;
    if (al & (al - 1))
        al = 4096;
    void *p = NULL;
    if (posix_memalign(&p, al, size ? size : 1) != 0)
        return NULL;
    memset(p, 0xCD, size);
    __atomic_fetch_add(&c->live, 1, __ATOMIC_SEQ_CST);
#pragma omp critical(tu_counting_largest)
    if (size > c->largest_size) {
        c->largest = p;
        c->largest_size = size;
    }
    return p;
}

static void counting_free(void *p, void *user)
{
    tu_counting *c = user;
    if (!p)
        return;
    __atomic_fetch_sub(&c->live, 1, __ATOMIC_SEQ_CST);
    free(p);
}

void tu_counting_init(tu_counting *c)
{
    memset(c, 0, sizeof *c);
    c->fail_at = -1;
}

smm_allocator tu_counting_allocator(tu_counting *c)
{
    smm_allocator al = { counting_alloc, counting_free, c };
    return al;
}

void tu_counting_fail_in(tu_counting *c, int64_t n)
{
    int64_t at = n < 0 ? -1 : __atomic_load_n(&c->calls, __ATOMIC_SEQ_CST) + n;
    __atomic_store_n(&c->fail_at, at, __ATOMIC_SEQ_CST);
}

int tu_thread_counts(smm_backend b, int out[3])
{
    out[0] = 1;
    /* The reference is single-threaded; a GPU backend ignores the count. */
    if (b == SMM_BACKEND_REFERENCE || b == SMM_BACKEND_ROCM || b == SMM_BACKEND_CUDA)
        return 1;
    out[1] = 2;
    out[2] = 3;
    return 3;
}

int tu_main_gpu(Suite *s, const char *name)
{
    int rc = tu_main(s, name);
    if (rc != EXIT_SUCCESS)
        return rc;
    /* The GPU backends this tree builds: when one cannot run here, this
     * suite's GPU part did not run, and a PASS would say more than it did. */
    static const struct { smm_backend b; int built; } gpus[] = {
#ifdef SMM_BUILD_ROCM
        {SMM_BACKEND_ROCM, 1},
#else
        {SMM_BACKEND_ROCM, 0},
#endif
#ifdef SMM_BUILD_CUDA
        {SMM_BACKEND_CUDA, 1},
#else
        {SMM_BACKEND_CUDA, 0},
#endif
    };
    for (int i = 0; i < 2; i++) {
        const char *why = "";
        if (gpus[i].built && tu_backend_selected(gpus[i].b) &&
            !smm_backend_available(gpus[i].b, &why)) {
            printf("%s: SKIP: the host part passed; the %s part cannot run here: %s\n", name,
                   smm_backend_name(gpus[i].b), why ? why : "");
            return 77;
        }
    }
    return rc;
}
