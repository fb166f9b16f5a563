/*
 * cmd_accuracy.c - `scaledmm accuracy CHECKPOINT --reference FLOAT_DIR`:
 * for each linear layer of a compressed-tensors w8a8 checkpoint, the error
 * of its w8a8 output against OpenBLAS SGEMM on the float checkpoint it came
 * from, and whether every backend produced the same bits.
 */
#include <cblas.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "commands.h"
#include "conformance.h"
#include "ctensors.h"
#include "npy.h"
#include "output.h"
#include "timer.h"

#define DEFAULT_SEED 20240723u
#define DEFAULT_M 64
#define MAX_LAYERS 64

void cmd_accuracy_help(FILE *f)
{
    fputs("Usage: scaledmm accuracy CHECKPOINT --reference FLOAT_DIR\n"
          "                         [--input X] [--layer NAME]... [--m M] [--seed S]\n"
          "                         [--bias model|f32] [--threads N]\n"
          "                         [--format table|csv|json]\n"
          "\n"
          "Measures how far each linear layer of a compressed-tensors int8 w8a8\n"
          "checkpoint (CHECKPOINT, e.g. written by 'scaledmm quantize') is from the\n"
          "float layer it was made from (FLOAT_DIR, the unquantized checkpoint):\n"
          "  w8a8       the layer as vLLM runs it (activations quantized in the\n"
          "             layer's scheme, smm_scaled_mm, bias), float32 in and out;\n"
          "  reference  OpenBLAS cblas_sgemm of the same float32 activations by the\n"
          "             float checkpoint's weights, plus its bias (float32).\n"
          "Per layer: rel_fro = ||w8a8 - ref||_F / ||ref||_F, max_abs = the largest\n"
          "|w8a8 - ref|, cosine = the cosine similarity of the two outputs taken as\n"
          "vectors (all in double precision; '-' where a figure is not finite, or\n"
          "the cosine of an all-zero output). The w8a8 layer runs on every host\n"
          "backend (reference, cpu); 'agree' says whether all their\n"
          "outputs were equal bit for bit (memcmp). A disagreement exits with 1.\n"
          "The w8a8 bias is first rounded to the model's dtype (config.json's\n"
          "torch_dtype, or dtype: float16 or bfloat16), as vLLM holds it; --bias f32\n"
          "keeps it as stored. A quantized layer that cannot run is reported on\n"
          "stderr with the reason, the others are measured, and the exit status is 1.\n"
          "\n"
          "Activations: from --input (M x K float32/float16 .npy, or single-tensor\n"
          ".safetensors, also bfloat16; widened to float32; only the layers whose\n"
          "input width is K are measured), or by default synthetic, M rows per layer\n"
          "from --seed: uniform in [-1, 1] with outlier channels as LLM activations\n"
          "have them (max(1, K/64) columns, chosen at random, multiplied by a factor\n"
          "uniform in [20, 100]). The output's 'activations' line says which.\n"
          "\n"
          "Options:\n"
          "  -r, --reference DIR  the float checkpoint (required)\n"
          "  -i, --input X        activations file (default: synthetic)\n"
          "  -l, --layer NAME     measure this layer only (repeatable)\n"
          "      --m M            synthetic rows per layer (default 64)\n"
          "      --seed S         synthetic-data seed, decimal or 0x hex (default\n"
          "                       20240723)\n"
          "      --bias MODE      model (default): the w8a8 bias rounded to the\n"
          "                       model's dtype; f32: as stored, in float32\n"
          "  -t, --threads N      threads of the backends and OpenBLAS\n"
          "  -f, --format FMT     table (default), csv or json, on stdout\n"
          "  -h, --help           show this help\n"
          "\n"
          "Progress goes to stderr when stderr is a terminal.\n"
          "Exit status: 0 all backends agreed, 1 a disagreement or an error, 2 bad\n"
          "command line.\n", f);
}

enum { C_LAYER, C_M, C_N, C_K, C_SCHEME, C_REL, C_MAXABS, C_REFMAX, C_COS, C_BACKENDS,
       C_AGREE, NCOLS };

static const out_column columns[NCOLS] = {
    { "layer",       COL_STR,  0 },
    { "M",           COL_INT,  0 },
    { "N",           COL_INT,  0 },
    { "K",           COL_INT,  0 },
    { "scheme",      COL_STR,  0 },
    { "rel_fro",     COL_REAL, 6 },
    { "max_abs",     COL_REAL, 6 },
    { "ref_max_abs", COL_REAL, 4 },
    { "cosine",      COL_REAL, 8 },
    { "backends",    COL_STR,  0 },
    { "agree",       COL_STR,  0 },
};

typedef struct acc_opts {
    const char *dir, *ref_dir, *input;
    const char *layers[MAX_LAYERS];
    int nlayers;
    long m;
    long threads;
    uint64_t seed;
    out_format fmt;
    int bias_f32;
    smm_dtype bias_dtype;   /* what the w8a8 bias is rounded to */
} acc_opts;

static int parse_options(int argc, char **argv, acc_opts *o)
{
    static const struct option longopts[] = {
        { "reference", required_argument, NULL, 'r' },
        { "input",     required_argument, NULL, 'i' },
        { "layer",     required_argument, NULL, 'l' },
        { "m",         required_argument, NULL, 'm' },
        { "seed",      required_argument, NULL, 's' },
        { "threads",   required_argument, NULL, 't' },
        { "bias",      required_argument, NULL, 'B' },
        { "format",    required_argument, NULL, 'f' },
        { "help",      no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;

    memset(o, 0, sizeof *o);
    o->m = DEFAULT_M;
    o->seed = DEFAULT_SEED;
    o->fmt = OUT_TABLE;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":r:i:l:t:f:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': o->ref_dir = optarg; break;
        case 'i': o->input = optarg; break;
        case 'l':
            if (o->nlayers == MAX_LAYERS) {
                cli_usage_error("accuracy", "--layer: at most %d layers", MAX_LAYERS);
                return -1;
            }
            o->layers[o->nlayers++] = optarg;
            break;
        case 'm':
            if (cli_parse_long("accuracy", "--m", optarg, 1, 65536, &o->m) != 0)
                return -1;
            break;
        case 's':
            if (cli_parse_u64("accuracy", "--seed", optarg, &o->seed) != 0)
                return -1;
            break;
        case 't':
            if (cli_parse_long("accuracy", "--threads", optarg, 1, 1024, &o->threads) != 0)
                return -1;
            break;
        case 'B':
            if (strcmp(optarg, "model") == 0) {
                o->bias_f32 = 0;
            } else if (strcmp(optarg, "f32") == 0) {
                o->bias_f32 = 1;
            } else {
                cli_usage_error("accuracy", "--bias: '%s' is not a mode (model or f32)",
                                optarg);
                return -1;
            }
            break;
        case 'f':
            if (out_parse_format(optarg, &o->fmt) != 0) {
                cli_usage_error("accuracy", "--format: unknown format '%s' (expected "
                                "table, csv or json)", optarg);
                return -1;
            }
            break;
        case 'h':
            cmd_accuracy_help(stdout);
            return 1;
        default:
            cli_getopt_error("accuracy", c, argv);
            return -1;
        }
    }
    if (argc - optind != 1) {
        cli_usage_error("accuracy", "expected one CHECKPOINT directory");
        return -1;
    }
    o->dir = argv[optind];
    if (!o->ref_dir) {
        cli_usage_error("accuracy", "--reference FLOAT_DIR is required (the float "
                        "checkpoint the w8a8 one was made from)");
        return -1;
    }
    if (cli_check_path("accuracy", "CHECKPOINT", o->dir) != 0 ||
        cli_check_path("accuracy", "--reference", o->ref_dir) != 0 ||
        (o->input && cli_check_path("accuracy", "--input", o->input) != 0))
        return -1;
    return 0;
}

static float widen(st_dtype d, const void *p, size_t i)
{
    const unsigned char *b = p;
    if (d == ST_F32) {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        return d == ST_F16 ? smm_f16_to_f32(h) : smm_bf16_to_f32(h);
    }
}

static double rng_unit(cf_rng *r)   /* uniform in [0, 1) */
{
    return (double)(cf_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Synthetic activations: uniform [-1, 1], max(1, K/64) outlier columns x20-100. */
static void synth(float *x, int64_t m, int64_t k, uint64_t seed, uint64_t tag)
{
    cf_rng r;
    int64_t i, j, nout = k / 64 > 0 ? k / 64 : 1;
    cf_rng_seed(&r, seed ^ (0x9E3779B97F4A7C15ull * (tag + 1)));
    for (i = 0; i < m * k; i++)
        x[i] = (float)(2.0 * rng_unit(&r) - 1.0);
    for (j = 0; j < nout; j++) {
        int64_t col = cf_rng_range(&r, 0, k - 1);
        float f = (float)(20.0 + 80.0 * rng_unit(&r));
        for (i = 0; i < m; i++)
            x[i * k + col] *= f;
    }
}

static int wanted(const acc_opts *o, const char *name)
{
    int i;
    if (o->nlayers == 0)
        return 1;
    for (i = 0; i < o->nlayers; i++)
        if (strcmp(o->layers[i], name) == 0)
            return 1;
    return 0;
}

/* Measures one layer; fills a row. Returns 0 (agree), 1 (disagree), -1 error. */
static int measure(const acc_opts *o, const ct_layer *L, const st_checkpoint *ref,
                   smm_context **ctxs, int nctx, const float *xin, int64_t m, size_t li,
                   out_table *t)
{
    const st_tensor *w, *b;
    char name[1024], backends[64] = "";
    float *x = NULL, *wf = NULL, *yr = NULL, *y = NULL, *y2 = NULL;
    double se = 0, sr = 0, sy = 0, dot = 0, maxabs = 0, refmax = 0;
    int64_t i, nk = L->n * L->k, mn = m * L->n;
    int rc = -1, agree = 1, c, row;
    char err[1024];

    snprintf(name, sizeof name, "%s.weight", L->name);
    w = st_checkpoint_find(ref, name);
    if (!w || w->ndim != 2 || w->shape[0] != L->n || w->shape[1] != L->k ||
        (w->dtype != ST_F32 && w->dtype != ST_F16 && w->dtype != ST_BF16)) {
        cli_error("accuracy", "%s: %s: %s (expected a float %lld x %lld weight)",
                  o->ref_dir, name, w ? "wrong shape or dtype" : "missing",
                  (long long)L->n, (long long)L->k);
        return -1;
    }
    snprintf(name, sizeof name, "%s.bias", L->name);
    b = st_checkpoint_find(ref, name);
    if (b && (b->ndim != 1 || b->shape[0] != L->n ||
              (b->dtype != ST_F32 && b->dtype != ST_F16 && b->dtype != ST_BF16))) {
        cli_error("accuracy", "%s: %s: expected a float vector of %lld", o->ref_dir, name,
                  (long long)L->n);
        return -1;
    }
    x = malloc((size_t)(m * L->k) * sizeof *x);
    wf = malloc((size_t)nk * sizeof *wf);
    yr = malloc((size_t)mn * sizeof *yr);
    y = malloc((size_t)mn * sizeof *y);
    y2 = malloc((size_t)mn * sizeof *y2);
    if (!x || !wf || !yr || !y || !y2) {
        cli_error("accuracy", "%s: out of memory", L->name);
        goto done;
    }
    if (xin)
        memcpy(x, xin, (size_t)(m * L->k) * sizeof *x);
    else
        synth(x, m, L->k, o->seed, li);
    for (i = 0; i < nk; i++)
        wf[i] = widen(w->dtype, w->data, (size_t)i);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)L->n, (int)L->k,
                1.0f, x, (int)L->k, wf, (int)L->k, 0.0f, yr, (int)L->n);
    if (b)
        for (i = 0; i < mn; i++)
            yr[i] += widen(b->dtype, b->data, (size_t)(i % L->n));

    for (c = 0; c < nctx; c++) {
        float *out = c == 0 ? y : y2;
        memset(out, 0xA5, (size_t)mn * sizeof *out);      /* poison */
        if (ct_layer_forward_bias(ctxs[c], L, m, x, SMM_DTYPE_F32, out, SMM_DTYPE_F32,
                                  o->bias_dtype, err, sizeof err) != 0) {
            cli_error("accuracy", "%s backend: %s", smm_backend_name(smm_context_backend(
                      ctxs[c])), err);
            goto done;
        }
        if (c > 0 && memcmp(y, y2, (size_t)mn * sizeof *y) != 0)
            agree = 0;
        snprintf(backends + strlen(backends), sizeof backends - strlen(backends), "%s%s",
                 c ? "," : "", smm_backend_name(smm_context_backend(ctxs[c])));
    }
    for (i = 0; i < mn; i++) {
        double d = (double)y[i] - (double)yr[i];
        se += d * d;
        sr += (double)yr[i] * yr[i];
        sy += (double)y[i] * y[i];
        dot += (double)y[i] * yr[i];
        if (fabs(d) > maxabs || d != d)
            maxabs = fabs(d);
        if (fabs((double)yr[i]) > refmax || yr[i] != yr[i])
            refmax = fabs((double)yr[i]);
    }
    row = out_add_row(t);
    if (row >= 0) {
        out_set_str(t, row, C_LAYER, L->name);
        out_set_int(t, row, C_M, m);
        out_set_int(t, row, C_N, L->n);
        out_set_int(t, row, C_K, L->k);
        out_set_str(t, row, C_SCHEME, ct_scheme_words(&L->scheme));
        out_set_real(t, row, C_REL, sr > 0 ? sqrt(se / sr) : sqrt(se));
        out_set_real(t, row, C_MAXABS, maxabs);
        out_set_real(t, row, C_REFMAX, refmax);
        /* Undefined (shown as "-") for a zero or non-finite output. */
        out_set_real(t, row, C_COS, sr > 0 && sy > 0 ? dot / (sqrt(sr) * sqrt(sy)) : NAN);
        out_set_str(t, row, C_BACKENDS, backends);
        out_set_str(t, row, C_AGREE, agree ? "yes" : "NO");
    }
    rc = agree ? 0 : 1;
done:
    free(x);
    free(wf);
    free(yr);
    free(y);
    free(y2);
    return rc;
}

int cmd_accuracy(int argc, char **argv)
{
    acc_opts o;
    ct_model *model = NULL;
    st_checkpoint *ref = NULL;
    smm_context *ctxs[4] = { NULL };
    int nctx = 0, b, pr, rc = EXIT_PASS, measured = 0, skipped = 0, unusable = 0;
    npy_array xa;
    float *xin = NULL;
    int64_t xm = 0, xk = 0, i;
    out_table *t = NULL;
    char err[1024] = "", buf[512];
    size_t li;
    double start = timer_now();

    memset(&xa, 0, sizeof xa);
    pr = parse_options(argc, argv, &o);
    if (pr != 0)
        return pr > 0 ? EXIT_PASS : EXIT_USAGE;

    model = ct_model_open(o.dir, err, sizeof err);
    if (!model)
        return cli_error("accuracy", "%s", err);
    ref = st_checkpoint_open(o.ref_dir, err, sizeof err);
    if (!ref) {
        rc = cli_error("accuracy", "%s", err);
        goto done;
    }
    o.bias_dtype = SMM_DTYPE_F32;
    if (!o.bias_f32 && ct_config_model_dtype(model->config, &o.bias_dtype) != 0)
        o.bias_dtype = SMM_DTYPE_F32;
    for (i = 0; i < o.nlayers; i++)
        if (!ct_model_find(model, o.layers[i])) {
            const char *why = ct_model_unusable(model, o.layers[i]);
            if (why)
                rc = cli_error("accuracy", "%s: layer %s cannot run: %s", o.dir, o.layers[i],
                               why);
            else
                rc = cli_error("accuracy", "%s: no quantized layer named '%s'", o.dir,
                               o.layers[i]);
            goto done;
        }
    for (li = 0; li < model->nunusable; li++)
        if (wanted(&o, model->unusable[li].name)) {
            cli_error("accuracy", "%s: layer %s skipped, it cannot run: %s", o.dir,
                      model->unusable[li].name, model->unusable[li].why);
            unusable++;
        }
    if (o.input) {
        if (tensor_file_read(o.input, &xa, err, sizeof err) != 0) {
            rc = cli_error("accuracy", "%s", err);
            goto done;
        }
        if ((xa.dtype != ST_F32 && xa.dtype != ST_F16 && xa.dtype != ST_BF16) ||
            xa.ndim != 2 || xa.shape[0] < 1 || xa.shape[1] < 1) {
            rc = cli_error("accuracy", "%s: expected an M x K float32, float16 or bfloat16 "
                           "matrix", o.input);
            goto done;
        }
        xm = xa.shape[0];
        xk = xa.shape[1];
        xin = malloc((size_t)(xm * xk) * sizeof *xin);
        if (!xin) {
            rc = cli_error("accuracy", "out of memory");
            goto done;
        }
        for (i = 0; i < xm * xk; i++)
            xin[i] = widen(xa.dtype, xa.data, (size_t)i);
    }
    /* The host backends: the layer's buffers are host memory, which a GPU
     * context refuses (the conformance battery compares the GPUs). */
    for (b = SMM_BACKEND_REFERENCE; b <= SMM_BACKEND_CPU; b++) {
        if (!smm_backend_available((smm_backend)b, NULL))
            continue;
        if (smm_context_create(&ctxs[nctx], (smm_backend)b) != SMM_OK) {
            rc = cli_error("accuracy", "cannot create a %s context",
                           smm_backend_name((smm_backend)b));
            goto done;
        }
        if (o.threads > 0)
            smm_context_set_num_threads(ctxs[nctx], (int)o.threads);
        nctx++;
    }
    if (o.threads > 0)
        openblas_set_num_threads((int)o.threads);

    t = out_table_new(columns, NCOLS);
    if (!t) {
        rc = cli_error("accuracy", "out of memory");
        goto done;
    }
    for (li = 0; li < model->nlayers; li++) {
        const ct_layer *L = &model->layers[li];
        int r;
        if (!wanted(&o, L->name))
            continue;
        if (xin && xk != L->k) {
            skipped++;
            continue;
        }
        progress_update("[%zu/%zu] %s ...", li + 1, model->nlayers, L->name);
        r = measure(&o, L, ref, ctxs, nctx, xin, xin ? xm : o.m, li, t);
        progress_clear();
        if (r < 0) {
            rc = EXIT_FAILED;
            goto done;
        }
        if (r > 0) {
            rc = EXIT_FAILED;
            cli_error("accuracy", "%s: the backends' outputs differ", L->name);
        }
        measured++;
    }
    if (measured == 0) {
        rc = cli_error("accuracy", "no layer measured%s", xin ? " (no layer has the "
                       "input's width)" : "");
        goto done;
    }
    out_meta_str(t, "checkpoint", o.dir);
    out_meta_str(t, "reference", o.ref_dir);
    if (xin) {
        snprintf(buf, sizeof buf, "file %s (%lld x %lld %s, widened to float32); %d "
                 "layers of another input width skipped", o.input, (long long)xm,
                 (long long)xk, st_dtype_name(xa.dtype), skipped);
    } else {
        snprintf(buf, sizeof buf, "synthetic, seed %" PRIu64 ": %ld rows per layer, "
                 "uniform [-1, 1], max(1, K/64) outlier columns scaled x20-100", o.seed,
                 o.m);
    }
    out_meta_str(t, "activations", buf);
    snprintf(buf, sizeof buf, "ct_layer_forward: smm_quantize_i8 in the layer's scheme + "
             "smm_scaled_mm (+ bias%s), float32 output",
             o.bias_dtype == SMM_DTYPE_F16 ? " rounded to F16"
             : o.bias_dtype == SMM_DTYPE_BF16 ? " rounded to BF16" : " in float32");
    out_meta_str(t, "w8a8", buf);
    snprintf(buf, sizeof buf, "OpenBLAS cblas_sgemm on the float checkpoint's weights "
             "(+ bias), float32 (%s)", openblas_get_config());
    out_meta_str(t, "reference_output", buf);
    out_meta_str(t, "agree", "yes = every backend's float32 output equal bit for bit "
                 "(memcmp)");
    out_meta_real(t, "wall_s", timer_now() - start);
    if (out_write(t, o.fmt, stdout, stderr) != 0)
        rc = cli_error("accuracy", "cannot write the results");
    if (unusable > 0)
        rc = cli_error("accuracy", "%d quantized layer%s could not run (see above)", unusable,
                       unusable > 1 ? "s" : "");
done:
    out_table_free(t);
    for (b = 0; b < nctx; b++)
        smm_context_destroy(ctxs[b]);
    free(xin);
    npy_array_free(&xa);
    st_checkpoint_close(ref);
    ct_model_close(model);
    return rc;
}
