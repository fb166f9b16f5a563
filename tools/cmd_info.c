/*
 * cmd_info.c - `scaledmm info`: library and contract versions, CPU name and
 * features, every backend with whether it can run here and why, AUTO's
 * answer (where host data and device data run), the default thread count,
 * the CPU kernel levels (smm_cpu_levels). Text, or JSON with --json; with
 * --levels[=SET], one level name a line, for scripts.
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
    fputs("Usage: scaledmm info [--json | --levels[=SET]]\n"
          "\n"
          "Shows the library version and numerics-contract version, the CPU and the\n"
          "features the library found usable (CPUID confirmed by XGETBV), every\n"
          "backend (reference, cpu, rocm, cuda) with whether it can run here and\n"
          "why, the backend AUTO picks (honouring SMM_BACKEND), and the default\n"
          "thread count (omp_get_max_threads, i.e. OMP_NUM_THREADS or the cores).\n"
          "The cpu backend's line names the kernel level its contexts use (the\n"
          "highest this CPU and OS run, capped by SMM_CPU_ISA), why, and every level\n"
          "this CPU runs; the \"CPU levels\" line lists those and the chosen one.\n"
          "The GPU backends are plugins (libscaledmm-rocm.so, libscaledmm-cuda.so)\n"
          "loaded from $SMM_GPU_PLUGIN_DIR when set, else from the library's install\n"
          "folder; their line says why one cannot run (not built, runtime library\n"
          "missing, no device). The AUTO line gives AUTO's whole answer: the backend\n"
          "host data runs on and the GPU backend device data runs on (a context on\n"
          "AUTO runs each call where its pointers live), or what SMM_BACKEND names.\n"
          "\n"
          "Options:\n"
          "  --json       print one JSON object on stdout instead of text\n"
          "  --levels[=SET]\n"
          "               print CPU kernel level names, one a line, lowest first, and\n"
          "               nothing else: SET is runnable (the default: the levels this\n"
          "               CPU runs), all (every level the library knows), emulated\n"
          "               (the portable emulations SMM_CPU_ISA may name) or chosen\n"
          "               (the level a cpu context created now runs)\n"
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

/* The names of a set of CPU levels as a JSON array (NULL: out of memory). */
static json_t *json_levels(smm_cpu_level_set set)
{
    const char *names[64];
    int n = 0;
    json_t *a = json_array();
    if (!a || smm_cpu_levels(set, names, 64, &n) != SMM_OK) {
        json_decref(a);
        return NULL;
    }
    for (int i = 0; i < n && i < 64; i++)
        json_array_append_new(a, json_string(names[i]));
    return a;
}

/* --levels=SET: one name a line. */
static int print_levels(const char *set)
{
    static const struct {
        const char *name;
        smm_cpu_level_set set;
    } sets[] = {
        {"runnable", SMM_CPU_LEVELS_RUNNABLE},
        {"all", SMM_CPU_LEVELS_ALL},
        {"emulated", SMM_CPU_LEVELS_EMULATED},
    };
    const char *names[64];
    int n = 0;
    if (strcmp(set, "chosen") == 0) {
        printf("%s\n", smm_cpu_level_chosen());
        return EXIT_PASS;
    }
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        if (strcmp(set, sets[i].name) != 0)
            continue;
        if (smm_cpu_levels(sets[i].set, names, 64, &n) != SMM_OK) {
            cli_error("info", "smm_cpu_levels failed");
            return EXIT_FAILED;
        }
        for (int j = 0; j < n && j < 64; j++)
            printf("%s\n", names[j]);
        return EXIT_PASS;
    }
    return cli_usage_error("info", "--levels: '%s' is not runnable, all, emulated or chosen",
                           set);
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
    json_object_set_new(doc, "cpu_levels", json_levels(SMM_CPU_LEVELS_RUNNABLE));
    json_object_set_new(doc, "cpu_levels_all", json_levels(SMM_CPU_LEVELS_ALL));
    json_object_set_new(doc, "cpu_levels_emulated", json_levels(SMM_CPU_LEVELS_EMULATED));
    json_object_set_new(doc, "cpu_level_chosen", json_string(smm_cpu_level_chosen()));
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
    {
        const char *names[64];
        int n = 0;
        printf("CPU levels:     ");
        if (smm_cpu_levels(SMM_CPU_LEVELS_RUNNABLE, names, 64, &n) == SMM_OK)
            for (i = 0; i < n && i < 64; i++)
                printf(" %s", names[i]);
        printf(" (cpu contexts run %s)\n", smm_cpu_level_chosen());
    }
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
        { "levels", optional_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int json = 0, c;
    const char *levels = NULL;
    const char *env;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'l': levels = optarg ? optarg : "runnable"; break;
        case 'h': cmd_info_help(stdout); return EXIT_PASS;
        default:  return cli_getopt_error("info", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    if (levels && json)
        return cli_usage_error("info", "--levels and --json do not go together");
    if (levels)
        return print_levels(levels);
    env = getenv("SMM_BACKEND");
    if (env && !*env)
        env = NULL;
    return json ? print_json(env) : print_text(env);
}
