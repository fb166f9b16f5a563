/*
 * cmd_info.c - `scaledmm info`: library and contract versions, CPU name and
 * features, every backend with whether it can run here and why, AUTO's
 * answer (where host data and device data run), the default thread count.
 * Text, or JSON with --json.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "scaledmm.h"
#include "sysinfo.h"

static const smm_backend all_backends[] = {
    SMM_BACKEND_REFERENCE, SMM_BACKEND_CPU, SMM_BACKEND_ROCM, SMM_BACKEND_CUDA,
};
#define NBACKENDS (int)(sizeof all_backends / sizeof all_backends[0])

void cmd_info_help(FILE *f)
{
    fputs("Usage: scaledmm info [--json]\n"
          "\n"
          "Shows the library version and numerics-contract version, the CPU and the\n"
          "features the library found usable (CPUID confirmed by XGETBV), every\n"
          "backend (reference, cpu, rocm, cuda) with whether it can run here and\n"
          "why, the backend AUTO picks (honouring SMM_BACKEND), and the default\n"
          "thread count (omp_get_max_threads, i.e. OMP_NUM_THREADS or the cores).\n"
          "The cpu backend's line names the kernel level its contexts use (scalar,\n"
          "avx2, avx_vnni, avx512_vnni or amx_int8: the highest this CPU and OS run,\n"
          "capped by SMM_CPU_ISA), why, and every level this CPU runs.\n"
          "The GPU backends are plugins (libscaledmm-rocm.so, libscaledmm-cuda.so)\n"
          "loaded from $SMM_GPU_PLUGIN_DIR when set, else from the library's install\n"
          "folder; their line says why one cannot run (not built, runtime library\n"
          "missing, no device). The AUTO line gives AUTO's whole answer: the backend\n"
          "host data runs on and the GPU backend device data runs on (a context on\n"
          "AUTO runs each call where its pointers live), or what SMM_BACKEND names.\n"
          "\n"
          "Options:\n"
          "  --json       print one JSON object on stdout instead of text\n"
          "  -h, --help   show this help\n", f);
}

/* What a context created on AUTO gets: its backend, or (backend AUTO and)
 * the error, in words, in *why. */
static smm_backend auto_context(const char **why)
{
    smm_context *ctx = NULL;
    smm_status st = smm_context_create(&ctx, SMM_BACKEND_AUTO);
    smm_backend b;
    if (st != SMM_OK) {
        *why = smm_strerror(st);
        return SMM_BACKEND_AUTO;
    }
    *why = NULL;
    b = smm_context_backend(ctx);
    smm_context_destroy(ctx);
    return b;
}

static int print_json(const char *env)
{
    json_t *doc = json_object(), *backends = json_array(), *features = json_array();
    char *copy = strdup(smm_cpu_features()), *tok, *save = NULL;
    const char *why = NULL;
    smm_backend b;
    int i, rc = EXIT_FAILED;

    if (!doc || !backends || !features || !copy) {
        cli_error("info", "out of memory");
        goto done;
    }
    for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
        json_array_append_new(features, json_string(tok));
    for (i = 0; i < NBACKENDS; i++) {
        const char *reason = "";
        int ok = smm_backend_available(all_backends[i], &reason);
        json_array_append_new(backends,
                              json_pack("{s:s, s:b, s:s}", "name",
                                        smm_backend_name(all_backends[i]),
                                        "available", ok, "reason", reason ? reason : ""));
    }
    json_object_set_new(doc, "version", json_string(smm_version()));
    json_object_set_new(doc, "contract_version", json_integer(smm_contract_version()));
    json_object_set_new(doc, "header_contract_version", json_integer(SMM_CONTRACT_VERSION));
    json_object_set_new(doc, "cpu_name", json_string(smm_cpu_name()));
    json_object_set(doc, "cpu_features", features);
    json_object_set_new(doc, "default_threads", json_integer(sysinfo_default_threads()));
    json_object_set(doc, "backends", backends);
    /* What a context created on AUTO runs on, as the text's "AUTO picks"
     * line: null when such a context fails (auto_context says why), even
     * where smm_backend_auto() names a backend (SMM_BACKEND naming one that
     * cannot run here, or an unknown name). */
    b = auto_context(&why);
    json_object_set_new(doc, "auto", why ? json_null() : json_string(smm_backend_name(b)));
    {
        const char *answer = "";
        smm_backend dev = smm_backend_auto_device(NULL);
        (void)smm_backend_available(SMM_BACKEND_AUTO, &answer);
        json_object_set_new(doc, "auto_answer", json_string(answer ? answer : ""));
        json_object_set_new(doc, "auto_device",
                            why || dev == SMM_BACKEND_AUTO ? json_null()
                                                           : json_string(smm_backend_name(dev)));
    }
    json_object_set_new(doc, "smm_backend_env", env ? json_string(env) : json_null());
    json_object_set_new(doc, "gpu_plugin_dir_env",
                        getenv("SMM_GPU_PLUGIN_DIR") ? json_string(getenv("SMM_GPU_PLUGIN_DIR"))
                                                     : json_null());
    json_object_set_new(doc, "auto_context",
                        why ? json_pack("{s:b, s:s}", "ok", 0, "error", why)
                            : json_pack("{s:b, s:s}", "ok", 1, "backend",
                                        smm_backend_name(b)));
    /* A failed write is reported by main (stdout's error flag); any
     * other failure of the encoder here. */
    if (json_dumpf(doc, stdout, JSON_INDENT(2)) != 0 && !ferror(stdout)) {
        cli_error("info", "cannot encode the JSON document");
        goto done;
    }
    putchar('\n');
    rc = EXIT_PASS;
done:
    json_decref(doc);
    json_decref(backends);
    json_decref(features);
    free(copy);
    return rc;
}

static int print_text(const char *env)
{
    const char *why = NULL;
    smm_backend b = auto_context(&why);
    int i;

    printf("scaledmm library %s, numerics contract %d (headers: contract %d)\n",
           smm_version(), smm_contract_version(), SMM_CONTRACT_VERSION);
    printf("CPU:             %s\n", *smm_cpu_name() ? smm_cpu_name() : "(unknown)");
    printf("CPU features:    %s\n", *smm_cpu_features() ? smm_cpu_features() : "(none)");
    printf("Default threads: %d (omp_get_max_threads)\n", sysinfo_default_threads());
    printf("Backends:\n");
    for (i = 0; i < NBACKENDS; i++) {
        const char *reason = "";
        int ok = smm_backend_available(all_backends[i], &reason);
        printf("  %-10s %-3s  %s\n", smm_backend_name(all_backends[i]), ok ? "yes" : "no",
               reason ? reason : "");
    }
    if (getenv("SMM_GPU_PLUGIN_DIR") && *getenv("SMM_GPU_PLUGIN_DIR"))
        printf("GPU plugins:     from %s (SMM_GPU_PLUGIN_DIR)\n", getenv("SMM_GPU_PLUGIN_DIR"));
    if (why) {
        /* An SMM_BACKEND that names no backend, or one that cannot run
         * here: there is no pick. */
        printf("AUTO:            nothing: contexts created on AUTO fail (%s)", why);
        if (env)
            printf("; SMM_BACKEND=%s is not a backend that runs here", env);
        putchar('\n');
        return EXIT_PASS; /* write errors: reported by main */
    }
    const char *answer = "";
    (void)smm_backend_available(SMM_BACKEND_AUTO, &answer);
    printf("AUTO:            %s\n", answer ? answer : "");
    if (b != smm_backend_auto())  /* not expected; say it if it happens */
        printf("                 (but contexts created on AUTO run on %s)\n",
               smm_backend_name(b));
    return EXIT_PASS; /* write errors: reported by main */
}

int cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int json = 0, c;
    const char *env;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'h': cmd_info_help(stdout); return EXIT_PASS;
        default:  return cli_getopt_error("info", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    env = getenv("SMM_BACKEND");
    if (env && !*env)
        env = NULL;
    return json ? print_json(env) : print_text(env);
}
