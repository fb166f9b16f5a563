/*
 * cmd_run.c - `scaledmm run CHECKPOINT --layer NAME --input X --output Y`:
 * one linear layer of a compressed-tensors w8a8 checkpoint, run as vLLM
 * runs it (ct_layer_forward), on activations from a file.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "ctensors.h"
#include "npy.h"

void cmd_run_help(FILE *f)
{
    fputs("Usage: scaledmm run CHECKPOINT --layer NAME --input X --output Y\n"
          "                    [--bias model|f32] [--backend NAME] [--threads N]\n"
          "       scaledmm run CHECKPOINT --list\n"
          "\n"
          "Runs one linear layer of a compressed-tensors int8 w8a8 checkpoint as\n"
          "vLLM's compressed-tensors scheme runs it:\n"
          "  1. smm_quantize_i8 of the activations X in the layer's scheme (dynamic\n"
          "     per-token symmetric or asymmetric, or static per-tensor with the\n"
          "     checkpoint's input_scale and input_zero_point);\n"
          "  2. smm_scaled_mm with the weight scales (per channel or per tensor),\n"
          "     the zero points and the bias when there are any; the bias is first\n"
          "     rounded to X's dtype, as vLLM holds it in the model's dtype\n"
          "     (--bias f32 keeps it as stored, widened to float32).\n"
          "X is M x K (or a vector of K) of float32 or float16 in a .npy file, or of\n"
          "float32, float16 or bfloat16 in a single-tensor .safetensors file; K is\n"
          "the layer's input width. Y is M x N of X's dtype (vLLM's output dtype is\n"
          "the activations' dtype), written as .npy or, by its extension,\n"
          ".safetensors (needed for bfloat16). NAME is the module name, e.g.\n"
          "model.layers.0.mlp.down_proj (the tensor name without \".weight\");\n"
          "--list prints every quantized layer of CHECKPOINT, one a line: NAME, N,\n"
          "K and the scheme, tab-separated (a layer that cannot run: NAME and\n"
          "\"unusable:\" with the reason). A one-line summary goes to stderr on\n"
          "success.\n"
          "\n"
          "Options:\n"
          "  -l, --layer NAME    the layer to run (required)\n"
          "  -i, --input X       activations (required)\n"
          "  -o, --output Y      result (required; written only on success)\n"
          "      --bias MODE     model (default): the bias rounded to X's dtype, as\n"
          "                      vLLM holds it; f32: the bias as stored, in float32\n"
          "      --list          list the checkpoint's quantized layers and exit\n"
          "  -b, --backend NAME  auto (default, honours SMM_BACKEND), reference, cpu,\n"
          "                      rocm, cuda; every backend gives the same bits\n"
          "  -t, --threads N     threads of the backend (default: OpenMP's)\n"
          "  -h, --help          show this help\n"
          "\n"
          "Exit status: 0 written, 1 an error (message on stderr), 2 bad command line.\n",
          f);
}

static int to_smm_dtype(st_dtype d, smm_dtype *out)
{
    switch (d) {
    case ST_F32: *out = SMM_DTYPE_F32; return 0;
    case ST_F16: *out = SMM_DTYPE_F16; return 0;
    case ST_BF16: *out = SMM_DTYPE_BF16; return 0;
    default: return -1;
    }
}

/* run CHECKPOINT --list: one line per quantized layer, in tensor order. */
static int list_layers(const char *dir)
{
    char err[1024] = "";
    ct_model *model = ct_model_open(dir, err, sizeof err);
    size_t i, j;
    if (!model)
        return cli_error("run", "%s", err);
    for (i = 0; i < model->nlayers; i++) {
        const ct_layer *L = &model->layers[i];
        printf("%s\t%lld\t%lld\t%s\n", L->name, (long long)L->n, (long long)L->k,
               ct_scheme_words(&L->scheme));
    }
    for (j = 0; j < model->nunusable; j++)
        printf("%s\tunusable: %s\n", model->unusable[j].name, model->unusable[j].why);
    ct_model_close(model);
    return EXIT_PASS;
}

int cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "layer",   required_argument, NULL, 'l' },
        { "input",   required_argument, NULL, 'i' },
        { "output",  required_argument, NULL, 'o' },
        { "backend", required_argument, NULL, 'b' },
        { "threads", required_argument, NULL, 't' },
        { "bias",    required_argument, NULL, 'B' },
        { "list",    no_argument,       NULL, 'L' },
        { "help",    no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *layer_name = NULL, *in_path = NULL, *out_path = NULL, *dir;
    smm_backend backend = SMM_BACKEND_AUTO;
    long threads = 0;
    int bias_f32 = 0, list = 0;
    const char *why;
    ct_model *model = NULL;
    const ct_layer *L;
    smm_context *ctx = NULL;
    npy_array x, y;
    smm_dtype dt;
    char err[1024] = "";
    int64_t m;
    int c, rc = EXIT_FAILED;

    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":l:i:o:b:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': layer_name = optarg; break;
        case 'i': in_path = optarg; break;
        case 'o': out_path = optarg; break;
        case 'b':
            if (cli_parse_backend("run", "--backend", optarg, &backend) != 0)
                return EXIT_USAGE;
            break;
        case 't':
            if (cli_parse_long("run", "--threads", optarg, 1, 1024, &threads) != 0)
                return EXIT_USAGE;
            break;
        case 'B':
            if (strcmp(optarg, "model") == 0)
                bias_f32 = 0;
            else if (strcmp(optarg, "f32") == 0)
                bias_f32 = 1;
            else
                return cli_usage_error("run", "--bias: '%s' is not a mode (model or f32)",
                                       optarg);
            break;
        case 'L':
            list = 1;
            break;
        case 'h':
            cmd_run_help(stdout);
            return EXIT_PASS;
        default:
            return cli_getopt_error("run", c, argv);
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("run", "expected one CHECKPOINT directory");
    if (list) {
        if (layer_name || in_path || out_path)
            return cli_usage_error("run", "--list takes no --layer, --input or --output");
        if (cli_check_path("run", "CHECKPOINT", argv[optind]) != 0)
            return EXIT_USAGE;
        return list_layers(argv[optind]);
    }
    if (!layer_name || !in_path || !out_path)
        return cli_usage_error("run", "--layer, --input and --output are required");
    dir = argv[optind];
    if (cli_check_path("run", "CHECKPOINT", dir) != 0 ||
        cli_check_path("run", "--input", in_path) != 0 ||
        cli_check_path("run", "--output", out_path) != 0)
        return EXIT_USAGE;

    model = ct_model_open(dir, err, sizeof err);
    if (!model)
        return cli_error("run", "%s", err);
    L = ct_model_find(model, layer_name);
    if (!L && (why = ct_model_unusable(model, layer_name)) != NULL) {
        cli_error("run", "%s: layer %s cannot run: %s", dir, layer_name, why);
        goto done;
    }
    if (!L) {
        cli_error("run", "%s: no quantized layer named '%s' (the module name, without "
                  "\".weight\"; e.g. '%s')", dir, layer_name, model->layers[0].name);
        goto done;
    }
    if (tensor_file_read(in_path, &x, err, sizeof err) != 0) {
        cli_error("run", "%s", err);
        goto done;
    }
    if (to_smm_dtype(x.dtype, &dt) != 0) {
        cli_error("run", "%s: %s activations, expected float32, float16 or bfloat16",
                  in_path, st_dtype_name(x.dtype));
        goto done;
    }
    if (x.ndim == 1 && x.shape[0] == L->k) {
        m = 1;
    } else if (x.ndim == 2 && x.shape[1] == L->k && x.shape[0] >= 1) {
        m = x.shape[0];
    } else {
        cli_error("run", "%s: shape does not fit layer %s: expected M x %lld (or %lld)",
                  in_path, L->name, (long long)L->k, (long long)L->k);
        goto done;
    }
    y.dtype = x.dtype;
    y.ndim = x.ndim;
    if (x.ndim == 1) {
        y.shape[0] = L->n;
    } else {
        y.shape[0] = m;
        y.shape[1] = L->n;
    }
    y.nbytes = (size_t)m * (size_t)L->n * st_dtype_size(y.dtype);
    y.data = malloc(y.nbytes ? y.nbytes : 1);
    if (!y.data) {
        cli_error("run", "out of memory for the %lld x %lld output", (long long)m,
                  (long long)L->n);
        goto done;
    }
    if (cli_open_backend("run", backend, &ctx) != 0)
        goto done;
    if (threads > 0)
        smm_context_set_num_threads(ctx, (int)threads);
    if (ct_layer_forward_bias(ctx, L, m, x.data, dt, y.data, dt,
                              bias_f32 ? SMM_DTYPE_F32 : dt, err, sizeof err) != 0) {
        cli_error("run", "%s", err);
        goto done;
    }
    if (tensor_file_write(out_path, &y, err, sizeof err) != 0) {
        cli_error("run", "%s", err);
        goto done;
    }
    fprintf(stderr, "scaledmm run: layer %s: %lld x %lld %s -> %lld x %lld%s, written to "
            "%s\n", L->name, (long long)m, (long long)L->k, st_dtype_name(x.dtype),
            (long long)m, (long long)L->n,
            L->bias ? (bias_f32 || dt == SMM_DTYPE_F32 ? ", bias float32"
                       : dt == SMM_DTYPE_F16 ? ", bias rounded to F16"
                                             : ", bias rounded to BF16") : "",
            out_path);
    rc = EXIT_PASS;
done:
    smm_context_destroy(ctx);
    npy_array_free(&x);
    npy_array_free(&y);
    ct_model_close(model);
    return rc;
}
