/*
 * cmd_quantize.c - `scaledmm quantize INPUT_DIR OUTPUT_DIR`: a float
 * checkpoint to a compressed-tensors w8a8 one (ct_quantize_checkpoint in
 * ctensors.c does the work; doc/accuracy.md gives the formula).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "ctensors.h"

void cmd_quantize_help(FILE *f)
{
    fputs("Usage: scaledmm quantize [--match float32|llm-compressor] INPUT_DIR OUTPUT_DIR\n"
          "\n"
          "Turns a float checkpoint (F32, F16 or BF16 safetensors: model.safetensors,\n"
          "or shards listed by model.safetensors.index.json) into a compressed-tensors\n"
          "int8 w8a8 checkpoint that vLLM serves (format \"int-quantized\"):\n"
          "  - every Linear weight is quantized per output channel, symmetric, with\n"
          "    compressed-tensors' formula:\n"
          "      scale = max(|min(w_row, 0)|, max(w_row, 0)) / 127.5  (float32;\n"
          "              FLT_EPSILON when 0)\n"
          "      q     = round_half_even(clamp(w / scale, -128, 127))\n"
          "    and stored as <module>.weight (I8, N x K) and <module>.weight_scale\n"
          "    (F32, N x 1); with --match llm-compressor, a float16 or bfloat16\n"
          "    weight is quantized in its own dtype as llm-compressor does (the\n"
          "    scale and w / scale rounded to that dtype, eps of that dtype for a\n"
          "    zero scale) and its scale stored in that dtype: the same bits as\n"
          "    llm-compressor's checkpoint;\n"
          "  - activations are declared dynamic per-token symmetric;\n"
          "  - every other tensor (embeddings, norms, biases, lm_head) is copied\n"
          "    unchanged; lm_head is listed in \"ignore\".\n"
          "A Linear weight is a 2-D float tensor named <module>.weight whose module\n"
          "name contains neither \"embed\" nor \"norm\" (any case) and does not end in\n"
          "\"lm_head\".\n"
          "\n"
          "OUTPUT_DIR (created when absent) gets the same shard files as INPUT_DIR,\n"
          "the index rewritten, config.json = the input's plus \"quantization_config\"\n"
          "(every key compressed-tensors writes), and a copy of every other file and\n"
          "folder (tokenizer, README, sentence-transformers' 1_Pooling/ ...; hidden\n"
          "folders such as .git and other top-level *.safetensors files excepted).\n"
          "Everything is written into OUTPUT_DIR/.scaledmm-quantize.XXXXXX first and\n"
          "moved into OUTPUT_DIR once all of it is written: a failed run leaves\n"
          "OUTPUT_DIR as it was. An existing file of the same name is replaced, a\n"
          "symbolic link replaced itself (not followed).\n"
          "\n"
          "Options:\n"
          "  -m, --match MODE  float32 (default): the formula above in float32, F32\n"
          "                    scales; llm-compressor: llm-compressor's int8 values\n"
          "                    and scale dtype, bit for bit\n"
          "  -h, --help        show this help\n"
          "\n"
          "Progress goes to stderr when stderr is a terminal; a one-line summary\n"
          "goes to stderr on success.\n"
          "Exit status: 0 written, 1 an error (message on stderr), 2 bad command line.\n",
          f);
}

static void show_progress(size_t done, size_t total, const char *name, void *user)
{
    (void)user;
    progress_update("[%zu/%zu] %s", done, total, name);
}

int cmd_quantize(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "match", required_argument, NULL, 'm' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    char err[1024] = "";
    int c, rc;
    ct_match_mode mode = CT_MATCH_CONTRACT;
    ct_quantize_stats stats;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (strcmp(optarg, "float32") == 0)
                mode = CT_MATCH_CONTRACT;
            else if (strcmp(optarg, "llm-compressor") == 0)
                mode = CT_MATCH_LLM_COMPRESSOR;
            else
                return cli_usage_error("quantize", "--match: '%s' is not a mode (float32 or "
                                       "llm-compressor)", optarg);
            break;
        case 'h':
            cmd_quantize_help(stdout);
            return EXIT_PASS;
        default:
            return cli_getopt_error("quantize", c, argv);
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("quantize", "expected INPUT_DIR and OUTPUT_DIR");
    if (cli_check_path("quantize", "INPUT_DIR", argv[optind]) != 0 ||
        cli_check_path("quantize", "OUTPUT_DIR", argv[optind + 1]) != 0)
        return EXIT_USAGE;
    rc = ct_quantize_checkpoint_ex(argv[optind], argv[optind + 1], mode,
                                   progress_enabled() ? show_progress : NULL, NULL, &stats,
                                   err, sizeof err);
    progress_clear();
    if (rc != 0)
        return cli_error("quantize", "%s", err);
    fprintf(stderr, "scaledmm quantize: wrote %s: %zu of %zu tensors quantized to int8 "
            "(%s), %zu safetensors file%s, %zu other file%s copied\n", argv[optind + 1],
            stats.quantized, stats.tensors,
            mode == CT_MATCH_LLM_COMPRESSOR ? "llm-compressor's arithmetic" : "float32",
            stats.shards, stats.shards == 1 ? "" : "s", stats.files_copied,
            stats.files_copied == 1 ? "" : "s");
    return EXIT_PASS;
}
