/*
 * commands.h - the subcommands of `scaledmm`.
 *
 * Each command gets its own argv, argv[0] being the command's name, and
 * returns the process exit status (cli.h: EXIT_PASS, EXIT_FAILED,
 * EXIT_USAGE). Each help function prints the command's --help text.
 */
#ifndef SMM_TOOL_COMMANDS_H
#define SMM_TOOL_COMMANDS_H

#include <stdio.h>

typedef struct command {
    const char *name;
    const char *summary;               /* one line for `scaledmm --help` */
    int (*run)(int argc, char **argv);
    void (*help)(FILE *f);
} command;

int cmd_info(int argc, char **argv);
void cmd_info_help(FILE *f);

int cmd_check(int argc, char **argv);
void cmd_check_help(FILE *f);

int cmd_bench(int argc, char **argv);
void cmd_bench_help(FILE *f);

int cmd_quantize(int argc, char **argv);
void cmd_quantize_help(FILE *f);

int cmd_run(int argc, char **argv);
void cmd_run_help(FILE *f);

int cmd_accuracy(int argc, char **argv);
void cmd_accuracy_help(FILE *f);

#endif
