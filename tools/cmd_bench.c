/*
 * cmd_bench.c - `scaledmm bench`: options, the loop over models, layers and
 * M, and the results table. The measurement itself is bench_point (bench.h).
 */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "bench.h"
#include "bench_onednn.h"
#include "bench_trust.h"
#include "buffers.h"
#include "cli.h"
#include "commands.h"
#include "ctensors.h"
#include "models.h"
#include "output.h"
#include "scaledmm.h"
#include "sysinfo.h"
#include "timer.h"

#define MAX_M 32
#define PROGRESS_LOG_S 5.0  /* seconds between progress lines off a terminal */
#define DEFAULT_SEED 20240723u

void cmd_bench_help(FILE *f)
{
    int i;
    fputs("Usage: scaledmm bench [--model NAME|all | --checkpoint DIR] [--m LIST] [OPTIONS]\n"
          "Times w8a8 linear layers (smm_quantize_i8 + smm_scaled_mm) of real models at\n"
          "token counts M beside OpenBLAS SGEMM and oneDNN, verifies every point bit for\n"
          "bit against the reference, and flags unreliable runs. man scaledmm: the rest.\n"
          "      --model NAME|all  a model below (default llama-3.1-8b), or all of them\n"
          "      --checkpoint DIR  every linear layer of a compressed-tensors checkpoint\n"
          "      --m LIST        token counts (default 1,16,128,512; GPU 1,16,32,2048,...)\n"
          "  -b, --backend NAME  auto (default), reference, cpu, rocm, cuda\n"
          "  -t, --threads N     threads (default: OMP_NUM_THREADS, else the cores)\n"
          "  -r, --repeats N     timed runs per measurement, at most (default 5)\n"
          "      --max-time SEC  stop a measurement's runs after SEC seconds (default 2)\n"
          "      --seed S        data seed (default 20240723)\n"
          "  -f, --format FMT    table (default), csv or json, on stdout\n"
          "      --wide          table: every column, not only those that fit 120\n"
          "      --weights W     packed (default: smm_pack_b once per copy) or raw\n"
          "      --no-baseline, --no-onednn  skip the SGEMM, the oneDNN baseline\n"
          "      --no-machine    skip the int8 peak and read-bandwidth probes\n"
          "      --device-api    time through the device API (default on rocm, cuda)\n"
          "      --quick         M = 1,128 (GPU 1,2048), 3 runs, --max-time 0.25\n"
          "  -h, --help          show this help\n"
          "Models:", f);
    for (i = 0; i < models_count(); i++)
        fprintf(f, " %s", models_get(i)->name);
    fputs("\n"
          "Exit status: 0 all points verified, 1 a mismatch or failed call, 2 bad usage.\n",
          f);
}

enum {
    C_MODEL, C_LAYER, C_M, C_N, C_K, C_RUNS, C_QUANT, C_MM, C_LAYER_MS, C_GOPS,
    C_PCT_PEAK, C_PCT_TILE, C_GBPS, C_PCT_BW, C_SGEMM_RUNS, C_SGEMM, C_SPEEDUP, C_ONEDNN_RUNS,
    C_ONEDNN, C_VS_ONEDNN, C_VERIFY, NCOLS
};

static const out_column columns[NCOLS] = {
    { "model",       COL_STR,  0 },
    { "layer",       COL_STR,  0 },
    { "M",           COL_INT,  0 },
    { "N",           COL_INT,  0 },
    { "K",           COL_INT,  0 },
    { "runs",        COL_INT,  0 },
    { "quant_ms",    COL_REAL, 3 },
    { "mm_ms",       COL_REAL, 3 },
    { "layer_ms",    COL_REAL, 3 },
    { "GOPS",        COL_REAL, 1 },
    { "pct_peak",    COL_REAL, 1 },
    { "pct_tile",    COL_REAL, 1 },
    { "weight_GBps", COL_REAL, 2 },
    { "pct_bw",      COL_REAL, 1 },
    { "sgemm_runs",  COL_INT,  0 },
    { "sgemm_ms",    COL_REAL, 3 },
    { "speedup",     COL_REAL, 2 },
    { "onednn_runs", COL_INT,  0 },
    { "onednn_ms",   COL_REAL, 3 },
    { "vs_onednn",   COL_REAL, 2 },
    { "verify",      COL_STR,  0 },
};

/* The table of the device path (GPU backends, --device-api). */
enum {
    G_MODEL, G_LAYER, G_M, G_N, G_K, G_RUNS, G_LAUNCHES, G_QUANT, G_MM, G_LAYER_MS,
    G_GOPS, G_MM_GOPS, G_MM_GBPS, G_PCT_COPY_BW, G_VERIFY, NGCOLS
};

static const out_column gpu_columns[NGCOLS] = {
    { "model",       COL_STR,  0 },
    { "layer",       COL_STR,  0 },
    { "M",           COL_INT,  0 },
    { "N",           COL_INT,  0 },
    { "K",           COL_INT,  0 },
    { "runs",        COL_INT,  0 },
    { "launches",    COL_INT,  0 },
    { "quant_ms",    COL_REAL, 4 },
    { "mm_ms",       COL_REAL, 4 },
    { "layer_ms",    COL_REAL, 4 },
    { "GOPS",        COL_REAL, 1 },
    { "mm_GOPS",     COL_REAL, 1 },
    { "mm_GBps",     COL_REAL, 1 },
    { "pct_copy_bw", COL_REAL, 1 },
    { "verify",      COL_STR,  0 },
};

/* M bounds of the 'geomean' lines. */
#define CPU_LARGE_M 128
#define CPU_SMALL_M 16
#define GPU_LARGE_M 2048
#define GPU_SMALL_M 32

/* Geometric means of positive values. */
typedef struct gmean {
    double logsum;
    int n;
} gmean;

static void gm_add(gmean *g, double v)
{
    if (v > 0.0) {
        g->logsum += log(v);
        g->n++;
    }
}

static double gm_get(const gmean *g)
{
    return g->n ? exp(g->logsum / g->n) : 0.0;
}

/* "M = 128, 512 (M >= 128), 8 points:", the start of a geomean summary
 * line: the token counts of ms[0..nm-1] on the line's side of the bound m
 * (op ">=" or "<="). */
static void summary_head(char *buf, size_t size, const long *ms, int nm, const char *op,
                         int m, int points)
{
    size_t len;
    int i, n = 0;
    snprintf(buf, size, "M = ");
    for (i = 0; i < nm; i++) {
        if (op[0] == '>' ? ms[i] < m : ms[i] > m)
            continue;
        len = strlen(buf);
        snprintf(buf + len, size - len, "%s%ld", n++ ? ", " : "", ms[i]);
    }
    len = strlen(buf);
    snprintf(buf + len, size - len, " (M %s %d), %d point%s:", op, m, points,
             points == 1 ? "" : "s");
}

/* The token counts of ms[0..nm-1] in neither geomean line (small < M <
 * large), as "M = 32, 64: in neither geomean line (M <= 16, M >= 128)";
 * 0 when there are none. */
static int summary_left_out(char *buf, size_t size, const long *ms, int nm, int small,
                            int large)
{
    size_t len;
    int i, n = 0;
    snprintf(buf, size, "M = ");
    for (i = 0; i < nm; i++) {
        if (ms[i] <= small || ms[i] >= large)
            continue;
        len = strlen(buf);
        snprintf(buf + len, size - len, "%s%ld", n++ ? ", " : "", ms[i]);
    }
    len = strlen(buf);
    snprintf(buf + len, size - len, ": in neither geomean line (they cover M <= %d and "
             "M >= %d)", small, large);
    return n;
}

/* Appends " name value" (after the head) or ", name value" to a summary
 * line; nothing when g has no samples. */
static void gm_append(char *buf, size_t size, const char *name, int decimals, const gmean *g)
{
    if (!g->n)
        return;
    size_t len = strlen(buf);
    snprintf(buf + len, size - len, "%s%s %.*f", buf[len - 1] == ':' ? " " : ", ", name,
             decimals, gm_get(g));
}

/* What the geomean lines and the oneDNN line collect over the rows. */
typedef struct bench_summary {
    int large_points, small_points;
    gmean large_vs_onednn, large_speedup, large_pct_peak, large_pct_tile, large_mm_gops;
    gmean small_vs_onednn, small_pct_bw, small_pct_copy_bw;
    char impls[4][160];   /* distinct oneDNN implementations seen */
    int nimpls;
    char onednn_error[300];
} bench_summary;

typedef struct bench_opts {
    const model_shapes *models[8];
    int nmodels;
    long m[MAX_M];
    int nm;
    smm_backend backend;
    int threads;          /* 0: default */
    int repeats;
    double max_time;
    uint64_t seed;
    out_format fmt;
    int baseline;
    int onednn;           /* run the oneDNN baseline (when built with it) */
    int device_api;       /* --device-api */
    int quick;            /* --quick */
    int m_given, repeats_given, max_time_given;
    int machine;          /* measure the peak and the bandwidth */
    int raw_weights;      /* --weights raw */
    int wide;             /* --wide: every column in the table format */
    double load_before;   /* 1-minute load average at the start, -1 unknown */
    const char *checkpoint;  /* --checkpoint DIR, or NULL */
} bench_opts;

static int parse_options(int argc, char **argv, bench_opts *o)
{
    static const struct option longopts[] = {
        { "model",       required_argument, NULL, 'M' },
        { "checkpoint",  required_argument, NULL, 'C' },
        { "m",           required_argument, NULL, 'm' },
        { "backend",     required_argument, NULL, 'b' },
        { "threads",     required_argument, NULL, 't' },
        { "repeats",     required_argument, NULL, 'r' },
        { "max-time",    required_argument, NULL, 'T' },
        { "seed",        required_argument, NULL, 's' },
        { "format",      required_argument, NULL, 'f' },
        { "no-baseline", no_argument,       NULL, 'n' },
        { "no-machine",  no_argument,       NULL, 'N' },
        { "no-onednn",   no_argument,       NULL, 'O' },
        { "device-api",  no_argument,       NULL, 'D' },
        { "quick",       no_argument,       NULL, 'Q' },
        { "weights",     required_argument, NULL, 'W' },
        { "wide",        no_argument,       NULL, 'w' },
        { "help",        no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c, i, model_given = 0;
    long v;

    memset(o, 0, sizeof *o);
    o->models[0] = models_find("llama-3.1-8b");
    o->nmodels = 1;
    o->m[0] = 1; o->m[1] = 16; o->m[2] = 128; o->m[3] = 512;
    o->nm = 4;
    o->backend = SMM_BACKEND_AUTO;
    o->repeats = 5;
    o->max_time = 2.0;
    o->seed = DEFAULT_SEED;
    o->fmt = OUT_TABLE;
    o->baseline = 1;
    o->onednn = bench_onednn_built();
    o->machine = 1;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:t:r:f:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'M':
            if (strcmp(optarg, "all") == 0) {
                o->nmodels = 0;
                for (i = 0; i < models_count() && i < 8; i++)
                    o->models[o->nmodels++] = models_get(i);
            } else if ((o->models[0] = models_find(optarg)) != NULL) {
                o->nmodels = 1;
            } else {
                cli_usage_error("bench", "--model: unknown model '%s' (see 'scaledmm "
                                "bench --help' for the list, or use 'all')", optarg);
                return -1;
            }
            model_given = 1;
            break;
        case 'C':
            if (cli_check_path("bench", "--checkpoint", optarg) != 0)
                return -1;
            o->checkpoint = optarg;
            break;
        case 'm':
            if (cli_parse_long_list("bench", "--m", optarg, 1, 65536, o->m, MAX_M,
                                    &o->nm) != 0)
                return -1;
            o->m_given = 1;
            break;
        case 'b':
            if (cli_parse_backend("bench", "--backend", optarg, &o->backend) != 0)
                return -1;
            break;
        case 't':
            if (cli_parse_long("bench", "--threads", optarg, 1, 1024, &v) != 0)
                return -1;
            o->threads = (int)v;
            break;
        case 'r':
            if (cli_parse_long("bench", "--repeats", optarg, 1, 1000, &v) != 0)
                return -1;
            o->repeats = (int)v;
            o->repeats_given = 1;
            break;
        case 'T':
            if (cli_parse_double("bench", "--max-time", optarg, 0.0, 86400.0,
                                 &o->max_time) != 0)
                return -1;
            o->max_time_given = 1;
            break;
        case 's':
            if (cli_parse_u64("bench", "--seed", optarg, &o->seed) != 0)
                return -1;
            break;
        case 'f':
            if (out_parse_format(optarg, &o->fmt) != 0) {
                cli_usage_error("bench", "--format: unknown format '%s' (expected "
                                "table, csv or json)", optarg);
                return -1;
            }
            break;
        case 'n':
            o->baseline = 0;
            break;
        case 'N':
            o->machine = 0;
            break;
        case 'O':
            o->onednn = 0;
            break;
        case 'D':
            o->device_api = 1;
            break;
        case 'Q':
            o->quick = 1;
            break;
        case 'W':
            if (strcasecmp(optarg, "packed") == 0 || strcasecmp(optarg, "raw") == 0) {
                o->raw_weights = strcasecmp(optarg, "raw") == 0;
            } else {
                cli_usage_error("bench", "--weights: unknown value '%s' (expected packed "
                                "or raw)", optarg);
                return -1;
            }
            break;
        case 'w':
            o->wide = 1;
            break;
        case 'h':
            cmd_bench_help(stdout);
            return 1;
        default:
            cli_getopt_error("bench", c, argv);
            return -1;
        }
    }
    if (model_given && o->checkpoint) {
        cli_usage_error("bench", "--model and --checkpoint exclude each other (the "
                        "layers come from one or the other)");
        return -1;
    }
    if (optind < argc) {
        cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
        return -1;
    }
    if (o->wide && o->fmt != OUT_TABLE) {
        cli_usage_error("bench", "--wide applies to the table format only (csv and json "
                        "always have every column)");
        return -1;
    }
    return 0;
}

/* A checkpoint's layers as a model table (names point into the model). */
typedef struct ckpt_bench {
    ct_model *model;
    model_layer *layers;
    model_shapes shapes;
} ckpt_bench;

static int ckpt_open(ckpt_bench *cb, const char *dir)
{
    char err[1024];
    size_t i;
    memset(cb, 0, sizeof *cb);
    cb->model = ct_model_open(dir, err, sizeof err);
    if (!cb->model) {
        cli_error("bench", "%s", err);
        return -1;
    }
    for (i = 0; i < cb->model->nunusable; i++)
        cli_error("bench", "%s: layer %s skipped, it cannot run: %s", dir,
                  cb->model->unusable[i].name, cb->model->unusable[i].why);
    cb->layers = calloc(cb->model->nlayers, sizeof *cb->layers);
    if (!cb->layers) {
        cli_error("bench", "out of memory");
        return -1;
    }
    for (i = 0; i < cb->model->nlayers; i++) {
        cb->layers[i].name = cb->model->layers[i].name;
        cb->layers[i].n = cb->model->layers[i].n;
        cb->layers[i].k = cb->model->layers[i].k;
    }
    cb->shapes.name = dir;
    cb->shapes.description = "compressed-tensors w8a8 checkpoint";
    cb->shapes.nlayers = (int)cb->model->nlayers;
    cb->shapes.layers = cb->layers;
    return 0;
}

static void ckpt_close(ckpt_bench *cb)
{
    free(cb->layers);
    ct_model_close(cb->model);
    memset(cb, 0, sizeof *cb);
}

/* bench_weights holding a checkpoint layer's own int8 weights and scales
 * (a per-tensor scale repeated N times: smm_scaled_mm reads scale_b[0] or
 * scale_b[n], the same value, so the results are the same bits). */
static int ckpt_weights_init(bench_weights *w, const bench_config *cfg, const ct_layer *L,
                             char *err, size_t errsize)
{
    size_t nk = (size_t)L->n * (size_t)L->k, i;
    int c;

    memset(w, 0, sizeof *w);
    w->n = L->n;
    w->k = L->k;
    w->copies = bench_copies(nk + (size_t)L->n * sizeof(float), cfg->llc_bytes);
    w->b = calloc((size_t)w->copies, sizeof *w->b);
    w->scale_b = calloc((size_t)w->copies, sizeof *w->scale_b);
    if (!w->b || !w->scale_b)
        goto oom;
    for (c = 0; c < w->copies; c++) {
        w->b[c] = buf_alloc(nk);
        w->scale_b[c] = buf_alloc((size_t)L->n * sizeof(float));
        if (!w->b[c] || !w->scale_b[c])
            goto oom;
        memcpy(w->b[c], L->weight, nk);
        for (i = 0; i < (size_t)L->n; i++)
            w->scale_b[c][i] = L->weight_scale[L->weight_scale_len == 1 ? 0 : i];
    }
    if (cfg->baseline) {
        w->copies_f32 = bench_copies(nk * sizeof(float), cfg->llc_bytes);
        w->b_f32 = calloc((size_t)w->copies_f32, sizeof *w->b_f32);
        if (!w->b_f32)
            goto oom;
        for (c = 0; c < w->copies_f32; c++) {
            w->b_f32[c] = buf_alloc(nk * sizeof(float));
            if (!w->b_f32[c])
                goto oom;
            for (i = 0; i < nk; i++)
                w->b_f32[c][i] = (float)L->weight[i];
        }
    }
    return 0;
oom:
    snprintf(err, errsize, "out of memory for the weights of %s (%d int8 copies, %d "
             "float copies)", L->name, w->copies, w->copies_f32);
    bench_weights_free(w);
    return -1;
}

/* Adds the metadata that describes the run. */
static void add_meta(out_table *t, const bench_opts *o, const bench_config *cfg,
                     const char *llc_source, const bench_machine *mc,
                     const bench_device *dev, const bench_summary *sum, double load_end)
{
    char buf[1024];
    const char *ct = getenv("OPENBLAS_CORETYPE");
    int i;

    snprintf(buf, sizeof buf, "%s (library %s, contract %d)",
             smm_backend_name(smm_context_backend(cfg->ctx)), smm_version(),
             smm_contract_version());
    out_meta_str(t, "backend", buf);
    out_meta_str(t, "cpu", smm_cpu_name());
    out_meta_int(t, "threads", cfg->threads);
    snprintf(buf, sizeof buf, "%" PRIu64, cfg->seed);
    out_meta_str(t, "seed", buf);
    if (cfg->device) {
        snprintf(buf, sizeof buf, "weights rotate over device copies totalling > %zu MiB",
                 BENCH_DEVICE_ROTATE_BYTES >> 20);
        out_meta_str(t, "rotation", buf);
        if (!o->machine)
            snprintf(buf, sizeof buf, "not measured (--no-machine)");
        else if (dev->copy_gbps > 0.0)
            snprintf(buf, sizeof buf, "%.1f GB/s; device-to-device smm_memcpy of %zu MiB, "
                     "bytes read + written, median of 5 runs of %d copies (%.2f s)",
                     dev->copy_gbps, dev->copy_bytes >> 20, dev->copies, dev->copy_s);
        else
            snprintf(buf, sizeof buf, "%s", dev->how);
        out_meta_str(t, "device_copy", buf);
    } else {
        snprintf(buf, sizeof buf, "%zu MiB (%s); weights rotate over copies totalling "
                 "> %zu MiB", cfg->llc_bytes >> 20, llc_source, (2 * cfg->llc_bytes) >> 20);
        out_meta_str(t, "llc", buf);
    }
    if (cfg->device) {
        /* the CPU's peak and bandwidth say nothing about a device */
    } else if (!o->machine) {
        out_meta_str(t, "peak", "not measured (--no-machine)");
        out_meta_str(t, "bandwidth", "not measured (--no-machine)");
    } else {
        if (mc->peak_gops > 0.0)
            snprintf(buf, sizeof buf, "%.1f GOPS int8, %s; %d thread%s, register-only "
                     "loop, median of 3 (%.2f s)", mc->peak_gops, mc->peak_insn,
                     mc->threads, mc->threads == 1 ? "" : "s", mc->peak_s);
        else
            snprintf(buf, sizeof buf, "not measured (%s)", mc->peak_insn);
        out_meta_str(t, "peak", buf);
        if (mc->tile_gops > 0.0) {
            snprintf(buf, sizeof buf, "%.1f GOPS int8, %s; %d thread%s, register-only "
                     "loop, median of 3 (%.2f s)", mc->tile_gops, mc->tile_insn,
                     mc->threads, mc->threads == 1 ? "" : "s", mc->tile_s);
            out_meta_str(t, "peak_tile", buf);
        } else if (mc->tile_insn[0]) {
            snprintf(buf, sizeof buf, "not measured (%s)", mc->tile_insn);
            out_meta_str(t, "peak_tile", buf);
        }
        if (mc->bw_gbps > 0.0)
            snprintf(buf, sizeof buf, "%.2f GB/s read (fastest; median %.2f, slowest %.2f); "
                     "%d thread%s OR-ing %zu MiB with %s, %d repetitions of %d pass%s "
                     "(%.2f s)", mc->bw_max_gbps, mc->bw_median_gbps, mc->bw_min_gbps,
                     mc->threads, mc->threads == 1 ? "" : "s", mc->bw_bytes >> 20,
                     mc->bw_how, mc->bw_reps, mc->bw_passes, mc->bw_passes == 1 ? "" : "es",
                     mc->bw_s);
        else
            snprintf(buf, sizeof buf, "%s", mc->bw_how);
        out_meta_str(t, "bandwidth", buf);
        if (mc->bw_gbps > 0.0) {
            out_meta_real(t, "bw_min_GBps", mc->bw_min_gbps);
            out_meta_real(t, "bw_median_GBps", mc->bw_median_gbps);
            out_meta_real(t, "bw_max_GBps", mc->bw_max_gbps);
        }
    }
    buf[0] = '\0';
    for (i = 0; i < o->nmodels; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? " " : "",
                 o->models[i]->name);
    out_meta_str(t, "models", buf);
    if (cfg->device && cfg->prepack)
        snprintf(buf, sizeof buf, "int8 rows (N x K) in smm_malloc memory, packed once per "
                 "copy with smm_pack_b (format \"%s\"), passed as b_packed",
                 cfg->packed_format ? cfg->packed_format : "?");
    else if (cfg->device)
        snprintf(buf, sizeof buf, "int8 rows (N x K) in smm_malloc memory, passed as b "
                 "(--weights raw)");
    else if (cfg->prepack)
        snprintf(buf, sizeof buf, "packed once per copy with smm_pack_b (format \"%s\"), "
                 "passed as b_packed", cfg->packed_format ? cfg->packed_format : "?");
    else
        snprintf(buf, sizeof buf, "int8 rows (N x K) passed as b (--weights raw)");
    if (o->checkpoint)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "; the checkpoint's int8 weights "
                 "and weight scales; activations random bf16, quantized dynamic per-token");
    out_meta_str(t, "weights", buf);
    if (cfg->device)
        out_meta_str(t, "timed", "layer = smm_linear: smm_quantize_i8 (bf16, dynamic per-token) "
                     "+ smm_scaled_mm (per-token x per-channel, bf16 out) in one call, and "
                     "each part alone, device memory; "
                     "a timed run = 'launches' launches back to back + smm_synchronize "
                     "(host CLOCK_MONOTONIC), a sample = run / launches; medians after "
                     "one warm-up");
    else
        out_meta_str(t, "timed", "layer = smm_linear: smm_quantize_i8 (bf16, dynamic "
                     "per-token) + smm_scaled_mm (per-token x per-channel, bf16 out) in one "
                     "call, and each part alone; medians after one warm-up");
    snprintf(buf, sizeof buf, "at most %d timed runs per measurement, fewer once "
             "they took %g s", cfg->repeats, cfg->max_time);
    out_meta_str(t, "runs", buf);
    if (cfg->baseline) {
        snprintf(buf, sizeof buf, "%s; core %s; OPENBLAS_CORETYPE=%s",
                 openblas_get_config(), openblas_get_corename(), ct ? ct : "(unset)");
        out_meta_str(t, "openblas", buf);
    } else if (!cfg->device) {
        out_meta_str(t, "openblas", "baseline skipped (--no-baseline)");
    }
    if (!cfg->device) {
        if (cfg->onednn) {
            bench_onednn_describe(buf, sizeof buf);
            for (i = 0; i < sum->nimpls; i++)
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s",
                         i ? "; " : "; implementation: ", sum->impls[i]);
            if (sum->onednn_error[0])
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "; %s",
                         sum->onednn_error);
        } else if (bench_onednn_built()) {
            snprintf(buf, sizeof buf, "baseline skipped (--no-onednn)");
        } else {
            bench_onednn_describe(buf, sizeof buf);
        }
        out_meta_str(t, "onednn", buf);
    }
    out_meta_str(t, "verify", "rows 0, M/2, M-1 of every point equal the reference "
                 "bit for bit (int8 row, scale, bf16 output)");
    if (cfg->device) {
        if (sum->large_mm_gops.n) {
            summary_head(buf, sizeof buf, o->m, o->nm, ">=", GPU_LARGE_M, sum->large_points);
            gm_append(buf, sizeof buf, "mm_GOPS", 1, &sum->large_mm_gops);
            out_meta_str(t, "geomean_large", buf);
        }
        if (sum->small_pct_copy_bw.n) {
            summary_head(buf, sizeof buf, o->m, o->nm, "<=", GPU_SMALL_M, sum->small_points);
            gm_append(buf, sizeof buf, "pct_copy_bw", 1, &sum->small_pct_copy_bw);
            out_meta_str(t, "geomean_small", buf);
        }
        if (summary_left_out(buf, sizeof buf, o->m, o->nm, GPU_SMALL_M, GPU_LARGE_M))
            out_meta_str(t, "geomean_none", buf);
    } else {
        if (sum->large_points > 0) {
            summary_head(buf, sizeof buf, o->m, o->nm, ">=", CPU_LARGE_M, sum->large_points);
            gm_append(buf, sizeof buf, "vs_onednn", 2, &sum->large_vs_onednn);
            gm_append(buf, sizeof buf, "speedup", 2, &sum->large_speedup);
            gm_append(buf, sizeof buf, "pct_peak", 1, &sum->large_pct_peak);
            gm_append(buf, sizeof buf, "pct_tile", 1, &sum->large_pct_tile);
            out_meta_str(t, "geomean_large", buf);
        }
        if (sum->small_points > 0) {
            summary_head(buf, sizeof buf, o->m, o->nm, "<=", CPU_SMALL_M, sum->small_points);
            gm_append(buf, sizeof buf, "vs_onednn", 2, &sum->small_vs_onednn);
            gm_append(buf, sizeof buf, "pct_bw", 1, &sum->small_pct_bw);
            out_meta_str(t, "geomean_small", buf);
        }
        if (summary_left_out(buf, sizeof buf, o->m, o->nm, CPU_SMALL_M, CPU_LARGE_M))
            out_meta_str(t, "geomean_none", buf);
    }
    if (o->load_before >= 0.0) {
        snprintf(buf, sizeof buf, "%.2f at the start, %.2f at the end (1-minute load "
                 "average; other work on the machine skews the timings)",
                 o->load_before, load_end);
        out_meta_str(t, "load", buf);
    }
}

/* Adds a row to either table with the point's shape (model .. K are the
 * first five columns of both) and its verdict in column verify_col; its
 * index, or -1. */
_Static_assert((int)C_MODEL == (int)G_MODEL && (int)C_LAYER == (int)G_LAYER &&
                   (int)C_M == (int)G_M && (int)C_N == (int)G_N && (int)C_K == (int)G_K,
               "the two tables start with the same columns");
static int add_row_head(out_table *t, const model_shapes *model, const model_layer *layer,
                        int64_t m, int verify_col, const char *verify)
{
    int row = out_add_row(t);
    if (row < 0)
        return -1;
    out_set_str(t, row, C_MODEL, model->name);
    out_set_str(t, row, C_LAYER, layer->name);
    out_set_int(t, row, C_M, m);
    out_set_int(t, row, C_N, layer->n);
    out_set_int(t, row, C_K, layer->k);
    out_set_str(t, row, verify_col, verify);
    return row;
}

/* Fills one row of the table from a point's result (r NULL or !status_ok:
 * only the shape and the verdict). */
static void add_row(out_table *t, const model_shapes *model, const model_layer *layer,
                    int64_t m, const bench_result *r, int status_ok, const char *verify,
                    const bench_machine *mc, bench_summary *sum)
{
    const int row = add_row_head(t, model, layer, m, C_VERIFY, verify);
    if (row < 0 || !status_ok)
        return;
    {
        const double ops = 2.0 * (double)m * (double)layer->n * (double)layer->k;
        const double bytes = (double)layer->n * (double)layer->k;
        const int large = m >= CPU_LARGE_M, small = m <= CPU_SMALL_M;
        sum->large_points += large;
        sum->small_points += small;
        out_set_int(t, row, C_RUNS, r->runs);
        out_set_real(t, row, C_QUANT, r->quant_s * 1e3);
        out_set_real(t, row, C_MM, r->mm_s * 1e3);
        out_set_real(t, row, C_LAYER_MS, r->layer_s * 1e3);
        out_set_real(t, row, C_GOPS, ops / r->layer_s * 1e-9);
        out_set_real(t, row, C_GBPS, bytes / r->layer_s * 1e-9);
        if (mc->peak_gops > 0.0) {
            const double pct = ops / r->layer_s * 1e-9 / mc->peak_gops * 100.0;
            out_set_real(t, row, C_PCT_PEAK, pct);
            if (large)
                gm_add(&sum->large_pct_peak, pct);
        }
        if (mc->tile_gops > 0.0) {
            const double pct = ops / r->layer_s * 1e-9 / mc->tile_gops * 100.0;
            out_set_real(t, row, C_PCT_TILE, pct);
            if (large)
                gm_add(&sum->large_pct_tile, pct);
        }
        if (mc->bw_gbps > 0.0) {
            const double pct = bytes / r->layer_s * 1e-9 / mc->bw_gbps * 100.0;
            out_set_real(t, row, C_PCT_BW, pct);
            if (small)
                gm_add(&sum->small_pct_bw, pct);
        }
        if (r->sgemm_runs > 0) {
            out_set_int(t, row, C_SGEMM_RUNS, r->sgemm_runs);
            out_set_real(t, row, C_SGEMM, r->sgemm_s * 1e3);
            out_set_real(t, row, C_SPEEDUP, r->sgemm_s / r->layer_s);
            if (large)
                gm_add(&sum->large_speedup, r->sgemm_s / r->layer_s);
        }
        if (r->onednn_runs > 0) {
            int i;
            out_set_int(t, row, C_ONEDNN_RUNS, r->onednn_runs);
            out_set_real(t, row, C_ONEDNN, r->onednn_s * 1e3);
            out_set_real(t, row, C_VS_ONEDNN, r->onednn_s / r->mm_s);
            if (large)
                gm_add(&sum->large_vs_onednn, r->onednn_s / r->mm_s);
            if (small)
                gm_add(&sum->small_vs_onednn, r->onednn_s / r->mm_s);
            for (i = 0; i < sum->nimpls && strcmp(sum->impls[i], r->onednn_impl) != 0; i++)
                ;
            if (i == sum->nimpls && i < 4)
                snprintf(sum->impls[sum->nimpls++], sizeof sum->impls[0], "%s",
                         r->onednn_impl);
        } else if (r->onednn_impl[0] && !sum->onednn_error[0]) {
            snprintf(sum->onednn_error, sizeof sum->onednn_error, "%s %s M=%lld: %s",
                     model->name, layer->name, (long long)m, r->onednn_impl);
        }
    }
}

/* The same for the device path's table. */
static void add_row_device(out_table *t, const model_shapes *model, const model_layer *layer,
                           int64_t m, const bench_result *r, int status_ok,
                           const char *verify, const bench_device *dev, bench_summary *sum)
{
    const int row = add_row_head(t, model, layer, m, G_VERIFY, verify);
    if (row < 0 || !status_ok)
        return;
    {
        const double ops = 2.0 * (double)m * (double)layer->n * (double)layer->k;
        const double bytes = (double)layer->n * (double)layer->k;
        out_set_int(t, row, G_RUNS, r->runs);
        out_set_int(t, row, G_LAUNCHES, r->launches);
        out_set_real(t, row, G_QUANT, r->quant_s * 1e3);
        out_set_real(t, row, G_MM, r->mm_s * 1e3);
        out_set_real(t, row, G_LAYER_MS, r->layer_s * 1e3);
        out_set_real(t, row, G_GOPS, ops / r->layer_s * 1e-9);
        out_set_real(t, row, G_MM_GOPS, ops / r->mm_s * 1e-9);
        out_set_real(t, row, G_MM_GBPS, bytes / r->mm_s * 1e-9);
        if (m >= GPU_LARGE_M) {
            sum->large_points++;
            gm_add(&sum->large_mm_gops, ops / r->mm_s * 1e-9);
        }
        if (m <= GPU_SMALL_M) {
            sum->small_points++;
            if (dev->copy_gbps > 0.0) {
                const double pct = bytes / r->mm_s * 1e-9 / dev->copy_gbps * 100.0;
                out_set_real(t, row, G_PCT_COPY_BW, pct);
                gm_add(&sum->small_pct_copy_bw, pct);
            }
        }
    }
}

/* OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE when it is loaded,
 * so the baseline runs with the kernel it picks itself only if they are
 * unset from the start: restart the tool once without them. Returns when
 * neither is set, or when the restart failed (said on stderr). */
static void openblas_env_restart(int argc, char **argv)
{
    const char *names[2] = { "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE" };
    char set[64] = "";
    char **nargv;
    int i;

    for (i = 0; i < 2; i++)
        if (getenv(names[i]))
            snprintf(set + strlen(set), sizeof set - strlen(set), "%s%s",
                     set[0] ? " and " : "", names[i]);
    if (!set[0])
        return;
    nargv = calloc((size_t)argc + 2, sizeof *nargv);
    if (!nargv)
        return;
    nargv[0] = (char *)"scaledmm";
    for (i = 0; i < argc; i++)
        nargv[i + 1] = argv[i];
    fprintf(stderr, "scaledmm bench: %s unset, restarting so that OpenBLAS picks its own "
            "kernel\n", set);
    fflush(NULL);
    for (i = 0; i < 2; i++)
        unsetenv(names[i]);
    execv("/proc/self/exe", nargv);
    fprintf(stderr, "scaledmm bench: cannot restart (%s); the SGEMM baseline keeps the "
            "kernel OpenBLAS chose at start-up\n", strerror(errno));
    free(nargv);
}

int cmd_bench(int argc, char **argv)
{
    static const long gpu_m[] = { 1, 16, 32, 2048, 4096, 8192 };
    bench_opts o;
    bench_config cfg, wcfg;
    bench_machine mc;
    bench_device dev;
    bench_summary sum;
    ckpt_bench cb;
    out_table *t = NULL;
    const char *llc_source = "";
    smm_backend backend;
    char failures[2048] = "";
    double *trust_s = NULL, load_end = -1.0;
    /* CPU time at the start and end: other processes' share while the
     * bench ran, and the hypervisor's steal time. */
    sysinfo_cpu_sample cpu_before, cpu_after;
    double other_cpus = -1.0, steal_frac = -1.0, wait_frac = -1.0;
    int sample_cpus = 0;
    int *trust_n = NULL, trust_points = 0;
    size_t trust_len = 0;
    int rc = EXIT_PASS, total, index = 0, mi, li, pr, i;
    double start = timer_now();

    pr = parse_options(argc, argv, &o);
    if (pr != 0)
        return pr > 0 ? EXIT_PASS : EXIT_USAGE;
    if (o.baseline)
        openblas_env_restart(argc, argv);

    memset(&cfg, 0, sizeof cfg);
    memset(&mc, 0, sizeof mc);
    memset(&dev, 0, sizeof dev);
    memset(&sum, 0, sizeof sum);
    memset(&cb, 0, sizeof cb);
    if (o.checkpoint) {
        if (ckpt_open(&cb, o.checkpoint) != 0) {
            ckpt_close(&cb);
            return EXIT_FAILED;
        }
        o.models[0] = &cb.shapes;
        o.nmodels = 1;
    }
    if (getloadavg(&o.load_before, 1) != 1)
        o.load_before = -1.0;
    sysinfo_cpu_sample_take(&cpu_before);
    if (cli_open_backend("bench", o.backend, &cfg.ctx) != 0) {
        ckpt_close(&cb);
        return EXIT_FAILED;
    }
    backend = smm_context_backend(cfg.ctx);
    if (smm_context_create(&cfg.ref, SMM_BACKEND_REFERENCE) != SMM_OK) {
        smm_context_destroy(cfg.ctx);
        ckpt_close(&cb);
        return cli_error("bench", "cannot create the reference context");
    }
    cfg.device = o.device_api || backend == SMM_BACKEND_ROCM || backend == SMM_BACKEND_CUDA;
    if (!o.m_given && cfg.device) {
        for (i = 0; i < (int)(sizeof gpu_m / sizeof gpu_m[0]); i++)
            o.m[i] = gpu_m[i];
        o.nm = i;
    }
    if (o.quick) {
        if (!o.m_given) {
            o.m[0] = 1;
            o.m[1] = cfg.device ? 2048 : 128;
            o.nm = 2;
        }
        if (!o.repeats_given)
            o.repeats = 3;
        if (!o.max_time_given)
            o.max_time = 0.25;
    }
    cfg.threads = o.threads > 0 ? o.threads : sysinfo_default_threads();
    if (cfg.threads < 1)
        cfg.threads = 1;
    smm_context_set_num_threads(cfg.ctx, cfg.threads);
    cfg.repeats = o.repeats;
    cfg.max_time = o.max_time;
    /* The CPU baselines say nothing about a device. */
    cfg.baseline = o.baseline && !cfg.device;
    cfg.onednn = o.onednn && !cfg.device;
    cfg.prepack = !o.raw_weights;
    cfg.seed = o.seed;
    cfg.llc_bytes = sysinfo_llc_bytes(&llc_source);
    /* The device path keeps one host copy of the weights (for the upload
     * and the verification); bench_copies gives 1 for llc 0. */
    wcfg = cfg;
    if (cfg.device)
        wcfg.llc_bytes = 0;

    t = cfg.device ? out_table_new(gpu_columns, NGCOLS) : out_table_new(columns, NCOLS);
    if (!t) {
        rc = cli_error("bench", "out of memory");
        goto done;
    }
    /* The default table fits 120 columns (model names up to 18 characters);
     * --wide shows the rest, csv and json always have it all. */
    if (!o.wide) {
        static const int cpu_hidden[] = { C_RUNS, C_QUANT, C_PCT_TILE, C_GBPS, C_SGEMM_RUNS,
                                          C_SGEMM, C_ONEDNN_RUNS, C_ONEDNN };
        static const int gpu_hidden[] = { G_RUNS, G_LAUNCHES, G_QUANT };
        const int *hide = cfg.device ? gpu_hidden : cpu_hidden;
        const int nhide = cfg.device ? (int)(sizeof gpu_hidden / sizeof gpu_hidden[0])
                                     : (int)(sizeof cpu_hidden / sizeof cpu_hidden[0]);
        for (i = 0; i < nhide; i++)
            out_hide_column(t, hide[i], 1);
        /* one model: the 'models' line names it */
        if (o.nmodels == 1)
            out_hide_column(t, C_MODEL, 1);
    }
    total = 0;
    for (mi = 0; mi < o.nmodels; mi++)
        total += o.models[mi]->nlayers * o.nm;
    /* Every point's timed runs, for bench_trust_assess. */
    trust_n = calloc((size_t)total + 1, sizeof *trust_n);
    trust_s = malloc(((size_t)total * (size_t)cfg.repeats + 1) * sizeof *trust_s);
    if (!trust_n || !trust_s) {
        rc = cli_error("bench", "out of memory");
        goto done;
    }
    progress_log("bench", PROGRESS_LOG_S);
    if (progress_shown())
        fprintf(stderr, "scaledmm bench: %s backend%s, %d threads, seed %" PRIu64
                ", %d points\n", smm_backend_name(backend),
                cfg.device ? " (device API)" : "", cfg.threads, cfg.seed, total);
    if (o.machine && cfg.device) {
        progress_update("measuring the device's copy bandwidth ...");
        bench_device_measure(&dev, cfg.ctx);
        progress_clear();
    } else if (o.machine) {
        progress_update("measuring the int8 peak and the memory bandwidth ...");
        bench_machine_measure(&mc, cfg.threads, cfg.llc_bytes, sysinfo_l3_instances());
        progress_clear();
    }

    for (mi = 0; mi < o.nmodels; mi++) {
        const model_shapes *model = o.models[mi];
        for (li = 0; li < model->nlayers; li++) {
            const model_layer *layer = &model->layers[li];
            bench_weights w;
            char err[256];
            int k, ok;

            progress_update("[%d/%d] %s %s: preparing weights ...", index + 1, total,
                            model->name, layer->name);
            ok = (o.checkpoint
                  ? ckpt_weights_init(&w, &wcfg, &cb.model->layers[li], err, sizeof err)
                  : bench_weights_init(&w, &wcfg, layer->n, layer->k, (uint64_t)mi,
                                       (uint64_t)li, err, sizeof err)) == 0;
            if (ok && cfg.device &&
                bench_weights_to_device(&w, cfg.ctx, cfg.prepack, err, sizeof err) != 0) {
                bench_weights_free(&w);
                ok = 0;
            } else if (ok && cfg.device && w.dev_packed) {
                cfg.packed_format = smm_packed_b_format(w.dev_packed[0]);
            }
            if (ok && cfg.prepack && !cfg.device) {
                progress_update("[%d/%d] %s %s: packing %d weight cop%s ...", index + 1, total,
                                model->name, layer->name, w.copies, w.copies == 1 ? "y" : "ies");
                if (bench_weights_pack(&w, cfg.ctx, err, sizeof err) != 0) {
                    bench_weights_free(&w);
                    ok = 0;
                } else {
                    cfg.packed_format = smm_packed_b_format(w.packed[0]);
                }
            }
            if (!ok) {
                progress_clear();
                cli_error("bench", "%s %s: %s", model->name, layer->name, err);
                for (k = 0; k < o.nm; k++) {
                    if (cfg.device)
                        add_row_device(t, model, layer, o.m[k], NULL, 0, "ERROR", &dev, &sum);
                    else
                        add_row(t, model, layer, o.m[k], NULL, 0, "ERROR", &mc, &sum);
                }
                index += o.nm;
                rc = EXIT_FAILED;
                continue;
            }
            if (cfg.onednn) {
                w.onednn = bench_onednn_new(&w, err, sizeof err);
                if (!w.onednn && !sum.onednn_error[0])
                    snprintf(sum.onednn_error, sizeof sum.onednn_error, "%s %s: error: %s",
                             model->name, layer->name, err);
            }
            for (k = 0; k < o.nm; k++) {
                bench_result r;
                const char *verify;
                progress_update("[%d/%d] %s %s M=%ld ...", ++index, total, model->name,
                                layer->name, o.m[k]);
                ok = bench_point(&cfg, &w, o.m[k], (uint64_t)mi, (uint64_t)li, &r) == 0;
                progress_clear();
                verify = !ok ? "ERROR" : r.verified ? "ok" : "FAIL";
                if (!ok || !r.verified) {
                    char line[700];
                    rc = EXIT_FAILED;
                    snprintf(line, sizeof line, "%s %s M=%ld: %s", model->name,
                             layer->name, o.m[k], r.message);
                    cli_error("bench", "%s: %s", verify, line);
                    snprintf(failures + strlen(failures), sizeof failures - strlen(failures),
                             "%s%s", failures[0] ? "; " : "", line);
                }
                if (ok) {
                    memcpy(trust_s + trust_len, r.run_s, (size_t)r.runs * sizeof *trust_s);
                    trust_len += (size_t)r.runs;
                    trust_n[trust_points++] = r.runs;
                }
                if (cfg.device)
                    add_row_device(t, model, layer, o.m[k], &r, ok && r.verified, verify,
                                   &dev, &sum);
                else
                    add_row(t, model, layer, o.m[k], &r, ok && r.verified, verify, &mc,
                            &sum);
            }
            bench_weights_free(&w);
        }
    }
    progress_clear();
    if (sum.onednn_error[0])
        fprintf(stderr, "scaledmm bench: warning: oneDNN baseline: %s\n", sum.onednn_error);

    if (getloadavg(&load_end, 1) != 1)
        load_end = -1.0;
    sysinfo_cpu_sample_take(&cpu_after);
    /* Over the CPUs the bench may run on (both samples saw the same
     * ones): other processes' CPU time there, the steal time, and how
     * long the bench's own threads waited for a CPU. */
    if (cpu_before.ncpus > 0 && cpu_after.ncpus == cpu_before.ncpus &&
        cpu_after.wall_s > cpu_before.wall_s) {
        const double wall = cpu_after.wall_s - cpu_before.wall_s;
        sample_cpus = cpu_after.ncpus;
        other_cpus = ((cpu_after.busy_s - cpu_before.busy_s) -
                      (cpu_after.self_s - cpu_before.self_s)) / wall;
        /* The two clocks differ in resolution (ticks against microseconds). */
        if (other_cpus < 0.0)
            other_cpus = 0.0;
        steal_frac = (cpu_after.steal_s - cpu_before.steal_s) / (wall * sample_cpus);
        if (cpu_before.wait_s >= 0.0 && cpu_after.wait_s >= 0.0) {
            wait_frac = (cpu_after.wait_s - cpu_before.wait_s) / (wall * cfg.threads);
            if (wait_frac < 0.0)   /* threads that ended took their delay along */
                wait_frac = 0.0;
        }
    }
    add_meta(t, &o, &cfg, llc_source, &mc, &dev, &sum, load_end);
    if (other_cpus >= 0.0) {
        char buf[300], waited[80] = "";
        if (wait_frac >= 0.0)
            snprintf(waited, sizeof waited, "; the bench's threads waited for a CPU %.1f%% "
                     "of the time", wait_frac * 100.0);
        snprintf(buf, sizeof buf, "other processes kept %.2f of the %d CPUs the bench may "
                 "use busy on average while it ran; steal %.1f%%%s (/proc/stat, less the "
                 "bench's own CPU time)", other_cpus, sample_cpus, steal_frac * 100.0, waited);
        out_meta_str(t, "other_work", buf);
    }
    {
        bench_trust_input ti;
        bench_trust tr;
        const char *reasons[BENCH_TRUST_MAX_REASONS];
        memset(&ti, 0, sizeof ti);
        ti.samples = trust_s;
        ti.counts = trust_n;
        ti.npoints = trust_points;
        ti.load_start = o.load_before;
        ti.load_end = load_end;
        ti.other_cpus = other_cpus;
        ti.steal_frac = steal_frac;
        ti.wait_frac = wait_frac;
        ti.threads = cfg.threads;
        ti.runs_calibrated = cfg.device;
        /* a GPU run's host threads only wait */
        ti.cpus = cfg.device ? 0 : sample_cpus > 0 ? sample_cpus : sysinfo_online_cpus();
        ti.probe_min = mc.bw_min_gbps;
        ti.probe_max = mc.bw_max_gbps;
        bench_trust_assess(&ti, &tr);
        out_meta_bool(t, "reliable", tr.reliable);
        for (i = 0; i < tr.nreasons; i++) {
            char line[300];
            reasons[i] = tr.reasons[i];
            snprintf(line, sizeof line, "WARNING: these figures are unreliable: %s",
                     tr.reasons[i]);
            fprintf(stderr, "scaledmm bench: %s\n", line);
            if (out_banner(t, line) != 0)
                rc = cli_error("bench", "out of memory");
        }
        out_meta_strs(t, "unreliable_reasons", reasons, tr.nreasons);
    }
    if (failures[0])
        out_meta_str(t, "failures", failures);
    out_meta_real(t, "wall_s", timer_now() - start);
    if (out_write(t, o.fmt, stdout, stderr) != 0)
        rc = cli_error("bench", "cannot write the results");
done:
    free(trust_s);
    free(trust_n);
    out_table_free(t);
    smm_context_destroy(cfg.ctx);
    smm_context_destroy(cfg.ref);
    ckpt_close(&cb);
    return rc;
}
