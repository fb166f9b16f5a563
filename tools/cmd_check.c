/*
 * cmd_check.c - `scaledmm check`: the conformance battery (conformance.h)
 * on each available non-reference backend, or the one named, against a
 * reference context. One table row per backend and group of cases.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "conformance.h"
#include "output.h"
#include "scaledmm.h"
#include "sysinfo.h"

void cmd_check_help(FILE *f)
{
    fputs("Usage: scaledmm check [--backend NAME] [--quick] [--seed S] [--threads N]\n"
          "                      [--format table|csv|json]\n"
          "\n"
          "Runs the conformance battery (smm_gemm_s8s8s32, smm_scaled_mm in every\n"
          "output type and scale mode, with and without bias and zero points,\n"
          "strided views, tails, extreme values; smm_quantize_i8 in every mode) on\n"
          "each available non-reference backend, or on the one named (--backend;\n"
          "else SMM_BACKEND, when set, as for every AUTO context: a name that is no\n"
          "backend, or one that cannot run here, is an error), and compares every\n"
          "output bit for bit with the reference backend. When only the\n"
          "reference can run here, it is checked against itself (and the output\n"
          "says so). Progress goes to stderr when stderr is a terminal.\n"
          "\n"
          "Options:\n"
          "  -b, --backend NAME  check only NAME: auto, reference, cpu, rocm, cuda\n"
          "      --quick         fewer and smaller cases\n"
          "      --seed S        battery seed, decimal or 0x hex (default:\n"
          "                      SMM_TEST_SEED, else a fresh one; always printed)\n"
          "  -t, --threads N     threads of the tested context (default: OpenMP's)\n"
          "  -f, --format FMT    table (default), csv or json, on stdout\n"
          "  -h, --help          show this help\n"
          "\n"
          "Exit status: 0 all cases equal, 1 a mismatch (the first one is printed\n"
          "with both values' bits) or a backend cannot run, 2 bad command line.\n", f);
}

enum { COL_BACKEND, COL_GROUP, COL_CASES, COL_FAILURES, COL_SKIPPED, COL_STATUS, NCOLS };

static const out_column columns[NCOLS] = {
    { "backend",  COL_STR, 0 },
    { "group",    COL_STR, 0 },
    { "cases",    COL_INT, 0 },
    { "failures", COL_INT, 0 },
    { "skipped",  COL_INT, 0 },
    { "status",   COL_STR, 0 },
};

static void show_progress(const char *case_name, int index, int total, void *user)
{
    progress_update("[%d/%d] %s: %s", index + 1, total, (const char *)user,
                    case_name ? case_name : "");
}

/* Runs the battery on one backend; adds its rows to t. Returns the number
 * of failing cases, or -1 when a context could not be created. */
static int check_backend(smm_backend b, smm_context *ref, const cf_options *base,
                         out_table *t, char *first_failure, size_t ffsize)
{
    smm_context *ctx = NULL;
    smm_status st = smm_context_create(&ctx, b);
    cf_options opt = *base;
    cf_report *rep;
    int failures, g;

    if (st != SMM_OK) {
        cli_error("check", "cannot create a %s context: %s", smm_backend_name(b),
                  smm_strerror(st));
        return -1;
    }
    if (opt.num_threads > 0 && smm_context_set_num_threads(ctx, opt.num_threads) != SMM_OK) {
        cli_error("check", "cannot set %d threads: %s", opt.num_threads,
                  smm_context_last_error(ctx));
        smm_context_destroy(ctx);
        return -1;
    }
    rep = calloc(1, sizeof *rep);
    if (!rep) {
        cli_error("check", "out of memory");
        smm_context_destroy(ctx);
        return -1;
    }
    opt.progress = progress_enabled() ? show_progress : NULL;
    opt.user = (void *)smm_backend_name(b);
    failures = cf_run_battery(ctx, ref, &opt, rep);
    progress_clear();

    for (g = 0; g < rep->ngroups && g < CF_MAX_GROUPS; g++) {
        const cf_group_result *gr = &rep->groups[g];
        int row = out_add_row(t);
        const char *status;
        if (row < 0)
            break;
        if (gr->failures > 0)
            status = "FAIL";
        else if (gr->cases > 0 && gr->skipped == gr->cases)
            status = "skipped";
        else
            status = "pass";
        out_set_str(t, row, COL_BACKEND, smm_backend_name(b));
        out_set_str(t, row, COL_GROUP, gr->group ? gr->group : "?");
        out_set_int(t, row, COL_CASES, gr->cases);
        out_set_int(t, row, COL_FAILURES, gr->failures);
        out_set_int(t, row, COL_SKIPPED, gr->skipped);
        out_set_str(t, row, COL_STATUS, status);
    }
    if (failures > 0 && first_failure[0] == '\0')
        snprintf(first_failure, ffsize, "%s: %s", smm_backend_name(b),
                 rep->first_failure[0] ? rep->first_failure : "(no details)");
    if (failures > 0 && rep->ngroups == 0) {
        /* a failure outside any group: still show a row */
        int row = out_add_row(t);
        if (row >= 0) {
            out_set_str(t, row, COL_BACKEND, smm_backend_name(b));
            out_set_str(t, row, COL_GROUP, "(battery)");
            out_set_int(t, row, COL_FAILURES, failures);
            out_set_str(t, row, COL_STATUS, "FAIL");
        }
    }
    free(rep);
    smm_context_destroy(ctx);
    return failures;
}

int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backend", required_argument, NULL, 'b' },
        { "quick",   no_argument,       NULL, 'q' },
        { "seed",    required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 't' },
        { "format",  required_argument, NULL, 'f' },
        { "help",    no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    smm_backend tested[4];
    int ntested = 0, have_backend = 0, have_seed = 0, i, c, rc = EXIT_PASS;
    int total_failures = 0;
    smm_backend named = SMM_BACKEND_AUTO;
    out_format fmt = OUT_TABLE;
    cf_options opt;
    smm_context *ref = NULL;
    out_table *t = NULL;
    char first_failure[1200] = "", buf[64], names[64] = "";
    long v;

    memset(&opt, 0, sizeof opt);
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:t:f:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (cli_parse_backend("check", "--backend", optarg, &named) != 0)
                return EXIT_USAGE;
            have_backend = 1;
            break;
        case 'q':
            opt.quick = 1;
            break;
        case 's':
            if (cli_parse_u64("check", "--seed", optarg, &opt.seed) != 0)
                return EXIT_USAGE;
            have_seed = 1;
            break;
        case 't':
            if (cli_parse_long("check", "--threads", optarg, 1, 1024, &v) != 0)
                return EXIT_USAGE;
            opt.num_threads = (int)v;
            break;
        case 'f':
            if (out_parse_format(optarg, &fmt) != 0)
                return cli_usage_error("check", "--format: unknown format '%s' "
                                       "(expected table, csv or json)", optarg);
            break;
        case 'h':
            cmd_check_help(stdout);
            return EXIT_PASS;
        default:
            return cli_getopt_error("check", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);
    if (!have_seed) {
        /* A replay asked for through the environment must not run on
         * another seed: an unreadable SMM_TEST_SEED is an error, as an
         * unreadable --seed is. */
        const char *env = getenv("SMM_TEST_SEED");
        if (!env || !*env)
            (void)cf_seed(&opt.seed); /* a fresh seed: cannot fail */
        else if (cli_parse_u64("check", "SMM_TEST_SEED", env, &opt.seed) != 0)
            return EXIT_USAGE;
    }

    /* Which backends: the one named (--backend, else SMM_BACKEND through
     * AUTO: a name that is no backend, or one that cannot run here, fails
     * as in info and bench), else every available non-reference one, else
     * the reference against itself. */
    if (!have_backend && getenv("SMM_BACKEND") && *getenv("SMM_BACKEND") &&
        (smm_backend_from_name(getenv("SMM_BACKEND"), &named) != SMM_OK ||
         named != SMM_BACKEND_AUTO)) {
        named = SMM_BACKEND_AUTO;
        have_backend = 1;
    }
    if (have_backend) {
        smm_context *probe = NULL;
        if (cli_open_backend("check", named, &probe) != 0)
            return EXIT_FAILED;
        tested[ntested++] = smm_context_backend(probe);
        smm_context_destroy(probe);
    } else {
        static const smm_backend candidates[] = {
            SMM_BACKEND_CPU, SMM_BACKEND_ROCM, SMM_BACKEND_CUDA,
        };
        for (i = 0; i < 3; i++)
            if (smm_backend_available(candidates[i], NULL))
                tested[ntested++] = candidates[i];
        if (ntested == 0)
            tested[ntested++] = SMM_BACKEND_REFERENCE;
    }

    if (smm_context_create(&ref, SMM_BACKEND_REFERENCE) != SMM_OK)
        return cli_error("check", "cannot create the reference context");
    t = out_table_new(columns, NCOLS);
    if (!t) {
        smm_context_destroy(ref);
        return cli_error("check", "out of memory");
    }

    for (i = 0; i < ntested; i++) {
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i ? " " : "", smm_backend_name(tested[i]));
    }
    snprintf(buf, sizeof buf, "%" PRIu64, opt.seed);
    out_meta_str(t, "seed", buf);
    out_meta_str(t, "backends", names);
    out_meta_str(t, "reference", "reference");
    out_meta_int(t, "threads", opt.num_threads > 0 ? opt.num_threads
                                                    : sysinfo_default_threads());
    out_meta_str(t, "battery", opt.quick ? "quick" : "full");
    if (ntested == 1 && tested[0] == SMM_BACKEND_REFERENCE)
        out_meta_str(t, "note", have_backend
                     ? "the reference backend is checked against itself"
                     : "only the reference backend can run here: it is checked "
                       "against itself");
    if (progress_enabled())
        fprintf(stderr, "scaledmm check: seed %" PRIu64 " (replay with --seed %" PRIu64
                " or SMM_TEST_SEED=%" PRIu64 ")\n", opt.seed, opt.seed, opt.seed);

    for (i = 0; i < ntested; i++) {
        int f = check_backend(tested[i], ref, &opt, t, first_failure, sizeof first_failure);
        if (f < 0) {
            rc = EXIT_FAILED;
            continue;
        }
        total_failures += f;
    }
    out_meta_int(t, "failures", total_failures);
    if (total_failures > 0) {
        rc = EXIT_FAILED;
        if (fmt == OUT_JSON)
            out_meta_str(t, "first_failure", first_failure);
    }
    if (out_write(t, fmt, stdout, stderr) != 0)
        rc = cli_error("check", "cannot write the results");
    if (total_failures > 0) {
        FILE *f = (fmt == OUT_TABLE) ? stdout : stderr;
        fprintf(f, "%sFIRST FAILURE: %s\n", fmt == OUT_TABLE ? "\n" : "", first_failure);
        fprintf(f, "replay: scaledmm check --seed %" PRIu64 "%s\n", opt.seed,
                opt.quick ? " --quick" : "");
    } else if (fmt == OUT_TABLE) {
        printf("\n%s\n", rc == EXIT_PASS ? "all cases bit-exact" : "some backends could not run");
    }
    out_table_free(t);
    smm_context_destroy(ref);
    return rc;
}
