/*
 * check_lazy_probe.c - a program that only uses host backends never loads a
 * GPU plugin (and so never starts a GPU runtime): backends are probed the
 * first time they are asked about (lib/dispatch.c). AUTO looks for a GPU,
 * but on a machine with no GPU runtime it loads no plugin either.
 *
 * Runs in one process without Check's fork and without tu_main, which
 * probes every backend to print them. The loaded objects are read with
 * dl_iterate_phdr. In a build with a GPU plugin in SMM_GPU_PLUGIN_DIR
 * (make check sets it), the test also shows that asking for that backend
 * does load it, so that the first half cannot pass for the wrong reason.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <link.h>
#include <scaledmm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *name = info->dlpi_name;
    if (name && (strstr(name, "libscaledmm-cuda.so") || strstr(name, "libscaledmm-rocm.so")))
        ++*(int *)data;
    return 0;
}

static int plugins_loaded(void)
{
    int n = 0;
    dl_iterate_phdr(count_cb, &n);
    return n;
}

/* Whether the plugin file for backend b exists in SMM_GPU_PLUGIN_DIR. */
static int plugin_present(const char *file)
{
    const char *dir = getenv("SMM_GPU_PLUGIN_DIR");
    if (!dir || !*dir)
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return access(path, R_OK) == 0;
}

START_TEST(test_host_contexts_load_no_plugin)
{
    ck_assert_int_eq(plugins_loaded(), 0);
    const smm_backend host[] = {SMM_BACKEND_CPU, SMM_BACKEND_REFERENCE, SMM_BACKEND_AUTO};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
        smm_context *ctx = NULL;
        ck_assert_int_eq(smm_context_create(&ctx, host[i]), SMM_OK);
        int8_t a[6] = {1, -2, 3, -4, 5, -6}, b[6] = {7, 8, -9, 10, 11, -12};
        int32_t c[4] = {0};
        ck_assert_int_eq(smm_gemm_s8s8s32(ctx, 2, 2, 3, a, 3, b, 3, c, 2), SMM_OK);
        ck_assert_int_eq(c[0], 1 * 7 - 2 * 8 - 3 * 9);
        void *p = NULL;
        ck_assert_int_eq(smm_malloc(ctx, 64, &p), SMM_OK);
        ck_assert_int_eq(smm_free(ctx, p), SMM_OK);
        smm_context_destroy(ctx);
        if (host[i] != SMM_BACKEND_AUTO)
            ck_assert_msg(plugins_loaded() == 0, "a %s context loaded %d GPU plugin(s)",
                          smm_backend_name(host[i]), plugins_loaded());
    }
    (void)smm_backend_auto();
    (void)smm_backend_available(SMM_BACKEND_CPU, NULL);
    (void)smm_backend_available(SMM_BACKEND_REFERENCE, NULL);
    /* AUTO probed for a GPU when its context was made: it loads a plugin
     * only where a GPU runtime is found. */
    const char *auto_why = "";
    (void)smm_backend_available(SMM_BACKEND_AUTO, &auto_why);
    int no_runtime = strstr(auto_why, "no GPU runtime found") != NULL;
    printf("check_lazy_probe: AUTO: %s\n", auto_why);
    if (no_runtime || (getenv("SMM_BACKEND") && *getenv("SMM_BACKEND")))
        ck_assert_msg(plugins_loaded() == 0,
                      "host and AUTO contexts loaded %d GPU plugin(s)", plugins_loaded());

    /* The control: a GPU backend that is asked about is probed, which
     * loads its plugin when the build tree has one. */
    int expect = plugin_present("libscaledmm-cuda.so") + plugin_present("libscaledmm-rocm.so");
    (void)smm_backend_available(SMM_BACKEND_CUDA, NULL);
    (void)smm_backend_available(SMM_BACKEND_ROCM, NULL);
    printf("check_lazy_probe: %d GPU plugin(s) in SMM_GPU_PLUGIN_DIR, %d loaded once asked for\n",
           expect, plugins_loaded());
    ck_assert_int_eq(plugins_loaded(), expect);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lazy_probe");
    TCase *tc = tcase_create("lazy_probe");
    tcase_add_test(tc, test_host_contexts_load_no_plugin);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
