/*
 * main.c - `scaledmm`: entry point, subcommand dispatch, --help, --version.
 *
 *   scaledmm info      library, CPU and backends
 *   scaledmm check     the conformance battery against the reference
 *   scaledmm bench     w8a8 linear layers of real models
 *   scaledmm quantize  float checkpoint -> compressed-tensors w8a8
 *   scaledmm run       one layer of a w8a8 checkpoint
 *   scaledmm accuracy  w8a8 layers against float32 SGEMM
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "scaledmm.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

static const command commands[] = {
    { "info",  "show the library, CPU and backends (and where AUTO runs calls)",
      cmd_info, cmd_info_help },
    { "check", "run the conformance battery on each backend against the reference",
      cmd_check, cmd_check_help },
    { "bench", "time the w8a8 linear layers of real models, verified bit for bit",
      cmd_bench, cmd_bench_help },
    { "quantize", "turn a float checkpoint into a compressed-tensors int8 w8a8 one",
      cmd_quantize, cmd_quantize_help },
    { "run", "run one linear layer of a w8a8 checkpoint on activations from a file",
      cmd_run, cmd_run_help },
    { "accuracy", "error of each w8a8 layer against float32 SGEMM; backends agree?",
      cmd_accuracy, cmd_accuracy_help },
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static const command *find_command(const char *name)
{
    int i;
    for (i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    int i;
    fputs("Usage: scaledmm COMMAND [OPTION]...\n"
          "       scaledmm help [COMMAND]\n"
          "       scaledmm --help | --version\n"
          "\n"
          "int8 (w8a8) scaled matrix multiplication: inspect, verify and benchmark\n"
          "the scaledmm library.\n"
          "\n"
          "Commands:\n", f);
    for (i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Run 'scaledmm COMMAND --help' for a command's options.\n"
          "\n"
          "Environment: SMM_BACKEND (backend AUTO picks), SMM_CPU_ISA (caps the CPU\n"
          "kernel level:", f);
    /* The level names come from the library's table of levels. */
    const char *levels[16];
    int nlevels = 0;
    if (smm_cpu_levels(SMM_CPU_LEVELS_ALL, levels, 16, &nlevels) != SMM_OK)
        nlevels = 0;
    for (i = 0; i < nlevels && i < 16; i++)
        fprintf(f, "%s %s", i ? "," : "", levels[i]);
    fputs("),\n"
          "SMM_GPU_PLUGIN_DIR (where the GPU plugins are), OMP_NUM_THREADS (default\n"
          "thread count), SMM_TEST_SEED (seed of 'check'), OPENBLAS_CORETYPE (the\n"
          "SGEMM kernel of the 'bench' baseline).\n"
          "\n"
          "Exit status: 0 success, 1 a check failed or a backend cannot run,\n"
          "2 bad command line. See scaledmm(1).\n", f);
}

static void version(void)
{
    printf("scaledmm %s (library %s, numerics contract %d)\n", PACKAGE_VERSION,
           smm_version(), smm_contract_version());
}

/* What was written to stdout must have reached it: a command that
 * succeeded but whose output could not be written (a full disk, a closed
 * stdout, /dev/full) fails. Commands that write results check this
 * themselves and have returned EXIT_FAILED with their own message. */
static int finish(int rc)
{
    int err = fflush(stdout) != 0 ? errno : 0;
    if (rc == EXIT_PASS && (err != 0 || ferror(stdout)))
        return cli_error(NULL, "cannot write to standard output%s%s", err ? ": " : "",
                         err ? strerror(err) : "");
    return rc;
}

static int dispatch(int argc, char **argv)
{
    const command *cmd;

    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const int want_help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
    const int want_version = strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0;
    if (want_help || want_version) {
        if (argc > 2)
            return cli_usage_error(NULL, "%s takes no arguments", argv[1]);
        if (want_help)
            usage(stdout);
        else
            version();
        return EXIT_PASS;
    }
    if (strcmp(argv[1], "help") == 0) {
        if (argc == 2 || (argc == 3 && (strcmp(argv[2], "--help") == 0 ||
                                        strcmp(argv[2], "-h") == 0))) {
            usage(stdout);
            return EXIT_PASS;
        }
        if (argc > 3)
            return cli_usage_error(NULL, "help: too many arguments");
        cmd = find_command(argv[2]);
        if (!cmd)
            return cli_usage_error(NULL, "help: unknown command '%s'", argv[2]);
        cmd->help(stdout);
        return EXIT_PASS;
    }
    if (argv[1][0] == '-')
        return cli_usage_error(NULL, "unknown option '%s' (options go after the command)",
                               argv[1]);
    cmd = find_command(argv[1]);
    if (!cmd)
        return cli_usage_error(NULL, "unknown command '%s' (expected info, check, "
                               "bench, quantize, run or accuracy)",
                               argv[1]);
    return cmd->run(argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
    return finish(dispatch(argc, argv));
}
