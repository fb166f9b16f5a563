/*
 * check_checkpoint.c - compressed-tensors w8a8 checkpoints
 * (checkpoint/ctensors.c): quantizing a small sharded float checkpoint
 * made here, golden checks of the quantized weights and scales against the
 * documented formula (recomputed independently), running the layers on
 * every backend bit for bit, each activation scheme against the library
 * calls it maps to, and the rejection of unsupported schemes with messages
 * that name the field.
 */
#include "testutil.h"

#include <dirent.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctensors.h"
#include "npy.h"
#include "safetensors.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static void make_tmpdir(char *buf, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/smm-ckpt-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(buf));
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4096];
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[4096];
    FILE *f;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq((int)fwrite(text, 1, strlen(text), f), (int)strlen(text));
    ck_assert_int_eq(fclose(f), 0);
}

static void write_json(const char *dir, const char *name, json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(1));
    ck_assert_ptr_nonnull(s);
    write_text(dir, name, s);
    free(s);
}

/* Uniform float in [-1, 1). */
static float frand(cf_rng *r)
{
    return (float)((double)(cf_rng_next(r) >> 40) / (double)(1u << 23)) - 1.0f;
}

/* A tensor description pointing at caller data. */
static st_tensor tensor(const char *name, st_dtype dt, int ndim, int64_t d0, int64_t d1,
                        const void *data)
{
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = (char *)name;
    t.dtype = dt;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.data = data;
    t.nbytes = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1) * st_dtype_size(dt);
    return t;
}

static void write_st(const char *dir, const char *file, const st_tensor *ts, size_t n)
{
    char p[4096], err[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    ck_assert_msg(st_write(p, ts, n, NULL, NULL, 0, err, sizeof err) == 0, "st_write: %s", err);
}

/* Widening of a F32/F16/BF16 tensor element, written independently of
 * ctensors.c. */
static float elem(const st_tensor *t, size_t i)
{
    const unsigned char *p = t->data;
    uint16_t h;
    float f;
    if (t->dtype == ST_F32) {
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == ST_F16 ? smm_f16_to_f32(h) : smm_bf16_to_f32(h);
}

/* ------------------------------------------------------------------ */
/* The float checkpoint                                                */
/* ------------------------------------------------------------------ */

/* Layers: q_proj 37 x 29 F32 with bias, down_proj 5 x 130 BF16, up_proj
 * 64 x 1 F16; not Linear: embed_tokens 11 x 29, norm 29, lm_head 11 x 29.
 * Two shards with an index. */
#define NQ 37
#define KQ 29
typedef struct float_ckpt {
    float q[NQ * KQ], qb[NQ];
    uint16_t down[5 * 130];
    uint16_t up[64];
    float embed[11 * KQ], norm[KQ], head[11 * KQ];
} float_ckpt;

static const char *const shard_a = "model-00001-of-00002.safetensors";
static const char *const shard_b = "model-00002-of-00002.safetensors";

static void make_float_ckpt(const char *dir, float_ckpt *c, cf_rng *r)
{
    int i;
    static const float tie_row[5] = { 127.5f, 0.5f, 1.5f, -2.5f, 2.5f };
    json_t *idx, *wm;
    st_tensor a[4], b[3];

    for (i = 0; i < NQ * KQ; i++)
        c->q[i] = frand(r) * 0.05f;
    for (i = 0; i < KQ; i++) {
        c->q[0 * KQ + i] = 0.0f;                     /* zero row: eps scale */
        c->q[1 * KQ + i] = i < 5 ? tie_row[i] : 0.0f; /* scale 1, ties */
        c->q[2 * KQ + i] = c->q[3 * KQ + i] = 0.0f;
    }
    c->q[2 * KQ + 3] = -0.75f;                       /* negative amax -> -128 */
    c->q[2 * KQ + 4] = 0.25f;
    c->q[3 * KQ + 7] = 1e-40f;                       /* subnormal-only row */
    for (i = 0; i < NQ; i++)
        c->qb[i] = frand(r);
    for (i = 0; i < 5 * 130; i++)
        c->down[i] = smm_f32_to_bf16(frand(r) * (i % 13 == 0 ? 3.0f : 0.1f));
    for (i = 0; i < 64; i++)
        c->up[i] = smm_f32_to_f16(frand(r));
    for (i = 0; i < 11 * KQ; i++) {
        c->embed[i] = frand(r);
        c->head[i] = frand(r);
    }
    for (i = 0; i < KQ; i++)
        c->norm[i] = 1.0f + frand(r) * 0.1f;

    a[0] = tensor("model.embed_tokens.weight", ST_F32, 2, 11, KQ, c->embed);
    a[1] = tensor("model.layers.0.self_attn.q_proj.weight", ST_F32, 2, NQ, KQ, c->q);
    a[2] = tensor("model.layers.0.self_attn.q_proj.bias", ST_F32, 1, NQ, 0, c->qb);
    a[3] = tensor("model.norm.weight", ST_F32, 1, KQ, 0, c->norm);
    b[0] = tensor("model.layers.0.mlp.down_proj.weight", ST_BF16, 2, 5, 130, c->down);
    b[1] = tensor("model.layers.1.mlp.up_proj.weight", ST_F16, 2, 64, 1, c->up);
    b[2] = tensor("lm_head.weight", ST_F32, 2, 11, KQ, c->head);
    write_st(dir, shard_a, a, 4);
    write_st(dir, shard_b, b, 3);

    wm = json_object();
    for (i = 0; i < 4; i++)
        json_object_set_new(wm, a[i].name, json_string(shard_a));
    for (i = 0; i < 3; i++)
        json_object_set_new(wm, b[i].name, json_string(shard_b));
    idx = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", wm);
    write_json(dir, "model.safetensors.index.json", idx);
    json_decref(idx);
    write_text(dir, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], "
               "\"hidden_size\": 29, \"torch_dtype\": \"float32\"}");
    write_text(dir, "tokenizer.json", "{\"version\": \"1.0\"}");
}

/* Independent per-channel symmetric quantization of one row: the scale
 * from the largest magnitude, ties rounded to even by hand. */
static float golden_row(const float *w, int64_t k, int8_t *q)
{
    float amax = 0.0f, scale;
    int64_t i;
    for (i = 0; i < k; i++)
        if (fabsf(w[i]) > amax)
            amax = fabsf(w[i]);
    scale = amax / 127.5f;
    if (scale == 0.0f)
        scale = 0x1p-23f;
    for (i = 0; i < k; i++) {
        float v = w[i] / scale;
        float fl = floorf(v), d = v - fl;
        float rv = d > 0.5f ? fl + 1.0f : d < 0.5f ? fl : (fmodf(fl, 2.0f) == 0.0f ? fl : fl + 1.0f);
        if (rv < -128.0f)
            rv = -128.0f;
        if (rv > 127.0f)
            rv = 127.0f;
        q[i] = (int8_t)rv;
    }
    return scale;
}

static void quantize_dirs(char *in, char *out, size_t len, float_ckpt *c, cf_rng *r)
{
    char err[1024] = "";
    make_tmpdir(in, len);
    make_tmpdir(out, len);
    make_float_ckpt(in, c, r);
    ck_assert_msg(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err) == 0,
                  "ct_quantize_checkpoint: %s", err);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void check_quantized(const st_checkpoint *in, const st_checkpoint *out,
                            const char *module)
{
    char name[512];
    const st_tensor *w, *q, *s;
    int64_t n, k, r, i;
    float *row;
    int8_t *gq;

    snprintf(name, sizeof name, "%s.weight", module);
    w = st_checkpoint_find(in, name);
    q = st_checkpoint_find(out, name);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(q);
    snprintf(name, sizeof name, "%s.weight_scale", module);
    s = st_checkpoint_find(out, name);
    ck_assert_msg(s != NULL, "%s missing", name);
    n = w->shape[0];
    k = w->shape[1];
    ck_assert_int_eq(q->dtype, ST_I8);
    ck_assert_int_eq(q->ndim, 2);
    ck_assert_int_eq(q->shape[0], n);
    ck_assert_int_eq(q->shape[1], k);
    ck_assert_int_eq(s->dtype, ST_F32);
    ck_assert_int_eq(s->ndim, 2);
    ck_assert_int_eq(s->shape[0], n);
    ck_assert_int_eq(s->shape[1], 1);
    row = malloc((size_t)k * sizeof *row);
    gq = malloc((size_t)k);
    for (r = 0; r < n; r++) {
        float gs, os;
        for (i = 0; i < k; i++)
            row[i] = elem(w, (size_t)(r * k + i));
        gs = golden_row(row, k, gq);
        memcpy(&os, (const char *)s->data + 4 * r, 4);
        ck_assert_msg(memcmp(&gs, &os, 4) == 0, "%s row %lld: scale %a, expected %a",
                      module, (long long)r, (double)os, (double)gs);
        ck_assert_msg(memcmp(gq, (const int8_t *)q->data + r * k, (size_t)k) == 0,
                      "%s row %lld: quantized values differ from the formula", module,
                      (long long)r);
    }
    free(row);
    free(gq);
}

START_TEST(test_quantize_golden)
{
    char in[512], out[512], err[1024], p[1024];
    float_ckpt *c = calloc(1, sizeof *c);
    cf_rng r = tu_rng("quantize_golden");
    st_checkpoint *ci, *co;
    const char *copied[] = { "model.embed_tokens.weight", "model.norm.weight",
                             "lm_head.weight", "model.layers.0.self_attn.q_proj.bias" };
    const st_tensor *q;
    ct_config *cfg;
    const ct_scheme *s;
    json_t *idx;
    json_error_t je;
    float sc;
    size_t i;

    quantize_dirs(in, out, sizeof in, c, &r);
    ci = st_checkpoint_open(in, err, sizeof err);
    ck_assert_msg(ci != NULL, "%s", err);
    co = st_checkpoint_open(out, err, sizeof err);
    ck_assert_msg(co != NULL, "%s", err);

    check_quantized(ci, co, "model.layers.0.self_attn.q_proj");
    check_quantized(ci, co, "model.layers.0.mlp.down_proj");
    check_quantized(ci, co, "model.layers.1.mlp.up_proj");

    /* hand-checked rows of q_proj */
    q = st_checkpoint_find(co, "model.layers.0.self_attn.q_proj.weight");
    {
        static const int8_t ties[5] = { 127, 0, 2, -2, 2 };
        const int8_t *d = q->data;
        const st_tensor *st = st_checkpoint_find(co, "model.layers.0.self_attn.q_proj.weight_scale");
        ck_assert_mem_eq(d + 1 * KQ, ties, 5);
        ck_assert_int_eq(d[2 * KQ + 3], -128);          /* -0.75 / (0.75 / 127.5) */
        memcpy(&sc, st->data, 4);
        ck_assert_msg(sc == FLT_EPSILON, "zero row: scale %a, expected FLT_EPSILON", (double)sc);
        memcpy(&sc, (const char *)st->data + 4, 4);
        ck_assert(sc == 1.0f);
        for (i = 0; i < KQ; i++)
            ck_assert_int_eq(d[i], 0);
    }

    /* everything else unchanged */
    for (i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        const st_tensor *a = st_checkpoint_find(ci, copied[i]), *b = st_checkpoint_find(co, copied[i]);
        ck_assert_msg(a && b, "%s missing", copied[i]);
        ck_assert_int_eq(a->dtype, b->dtype);
        ck_assert_int_eq(a->ndim, b->ndim);
        ck_assert_int_eq(a->nbytes, b->nbytes);
        ck_assert_msg(memcmp(a->data, b->data, a->nbytes) == 0, "%s changed", copied[i]);
    }
    ck_assert_uint_eq(st_checkpoint_count(co), st_checkpoint_count(ci) + 3);

    /* shards mirror the input; the index maps the scales to their weight's shard */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
    idx = json_load_file(p, 0, &je);
    ck_assert_msg(idx != NULL, "%s: %s", p, je.text);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(idx, "weight_map"),
                     "model.layers.0.self_attn.q_proj.weight_scale")), shard_a);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(idx, "weight_map"),
                     "model.layers.0.mlp.down_proj.weight_scale")), shard_b);
    json_decref(idx);
    snprintf(p, sizeof p, "%s/%s", out, shard_b);
    ck_assert_int_eq(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    ck_assert_int_eq(access(p, R_OK), 0);

    /* the config it wrote: the input's keys plus the scheme */
    cfg = ct_config_load(out, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    s = ct_config_match(cfg, "model.layers.0.mlp.down_proj", NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->weight_per_channel, 1);
    ck_assert_int_eq(s->act_dynamic, 1);
    ck_assert_int_eq(s->act_symmetric, 1);
    ck_assert(ct_config_ignored(cfg, "lm_head"));
    ck_assert_ptr_null(ct_config_match(cfg, "lm_head", NULL));
    ct_config_free(cfg);
    snprintf(p, sizeof p, "%s/config.json", out);
    idx = json_load_file(p, 0, &je);
    ck_assert_ptr_nonnull(idx);
    ck_assert_int_eq(json_integer_value(json_object_get(idx, "hidden_size")), 29);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(idx,
                     "quantization_config"), "format")), "int-quantized");
    json_decref(idx);

    st_checkpoint_close(ci);
    st_checkpoint_close(co);
    rm_tree(in);
    rm_tree(out);
    free(c);
}
END_TEST

static int guards_ok(const tu_buf *b)
{
    size_t i;
    for (i = 0; i < b->guard; i++)
        if (b->mem[i] != b->poison)
            return 0;
    for (i = 0; i < 64; i++)
        if (b->p[b->size + i] != b->poison)
            return 0;
    return 1;
}

/* Runs the layer on ctx with two poisons; checks the guards and that both
 * runs wrote the same (hence every) byte. Returns the output (malloc'd). */
static void *forward_checked(smm_context *ctx, const ct_layer *L, int64_t m, const void *x,
                             smm_dtype dt, size_t esz)
{
    size_t bytes = (size_t)m * (size_t)L->n * esz;
    tu_buf y1, y2;
    char err[1024];
    void *res;
    tu_buf_alloc(&y1, bytes, esz, 0xA5);   /* element-aligned, not 64-byte aligned */
    tu_buf_alloc(&y2, bytes, 0, 0x5A);
    ck_assert_msg(ct_layer_forward(ctx, L, m, x, dt, y1.p, dt, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ct_layer_forward(ctx, L, m, x, dt, y2.p, dt, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(guards_ok(&y1) && guards_ok(&y2), "%s: bytes outside the output written",
                  L->name);
    ck_assert_msg(memcmp(y1.p, y2.p, bytes) == 0, "%s: output not fully written or not "
                  "deterministic", L->name);
    res = malloc(bytes);
    memcpy(res, y1.p, bytes);
    tu_buf_free(&y1);
    tu_buf_free(&y2);
    return res;
}

/* What the layer must compute: the library calls of its scheme, spelled out
 * here, on the reference backend. */
static void *expected_forward(const ct_layer *L, int64_t m, const void *x, smm_dtype dt,
                              size_t esz)
{
    smm_context *ref = tu_ctx(SMM_BACKEND_REFERENCE, 0);
    int8_t *q = malloc((size_t)(m * L->k));
    float *sa = malloc((size_t)m * sizeof *sa);
    int32_t *z = malloc((size_t)m * sizeof *z);
    void *y = malloc((size_t)(m * L->n) * esz);
    smm_quantize_args qa = { 0 };
    smm_scaled_mm_args a = { 0 };
    int asym = !L->scheme.act_symmetric;

    qa.m = m; qa.k = L->k; qa.x = x; qa.x_dtype = dt; qa.ldx = L->k;
    qa.q = q; qa.ldq = L->k; qa.scale = sa; qa.azp = asym ? z : NULL;
    if (L->scheme.act_dynamic) {
        qa.mode = SMM_QUANT_DYNAMIC_PER_TOKEN;
    } else {
        qa.mode = SMM_QUANT_STATIC_PER_TENSOR;
        sa[0] = L->input_scale;
        z[0] = L->input_zero_point;
    }
    ck_assert_int_eq(smm_quantize_i8(ref, &qa), SMM_OK);
    a.m = m; a.n = L->n; a.k = L->k; a.a = q; a.lda = L->k; a.b = L->weight; a.ldb = L->k;
    a.scale_a = sa; a.scale_a_len = L->scheme.act_dynamic ? m : 1;
    a.scale_b = L->weight_scale; a.scale_b_len = L->scheme.weight_per_channel ? L->n : 1;
    a.bias = L->bias;
    a.azp = asym ? z : NULL; a.azp_len = L->scheme.act_dynamic ? m : 1;
    a.c = y; a.ldc = L->n; a.c_dtype = dt;
    ck_assert_int_eq(smm_scaled_mm(ref, &a), SMM_OK);
    smm_context_destroy(ref);
    free(q);
    free(sa);
    free(z);
    return y;
}

static void fill_x(cf_rng *r, void *x, size_t count, smm_dtype dt, float range)
{
    size_t i;
    for (i = 0; i < count; i++) {
        float v = frand(r) * range * (i % 17 == 5 ? 40.0f : 1.0f);   /* outlier column */
        if (dt == SMM_DTYPE_F32)
            ((float *)x)[i] = v;
        else if (dt == SMM_DTYPE_F16)
            ((uint16_t *)x)[i] = smm_f32_to_f16(v);
        else
            ((uint16_t *)x)[i] = smm_f32_to_bf16(v);
    }
}

/* Every layer of a model, M in {1, 7}, x in each float type, every backend
 * at 1 and 3 threads: equal to the spelled-out library calls. */
static void run_model_everywhere(const ct_model *model, cf_rng *r)
{
    static const smm_dtype dts[3] = { SMM_DTYPE_F32, SMM_DTYPE_F16, SMM_DTYPE_BF16 };
    static const int64_t ms[2] = { 1, 7 };
    smm_backend bs[4];
    int nb = tu_host_backends(bs);
    size_t li;
    for (li = 0; li < model->nlayers; li++) {
        const ct_layer *L = &model->layers[li];
        for (int di = 0; di < 3; di++)
            for (int mi = 0; mi < 2; mi++) {
                size_t esz = dts[di] == SMM_DTYPE_F32 ? 4 : 2;
                int64_t m = ms[mi];
                void *x = malloc((size_t)(m * L->k) * esz), *want;
                fill_x(r, x, (size_t)(m * L->k), dts[di], 2.0f);
                want = expected_forward(L, m, x, dts[di], esz);
                for (int b = 0; b < nb; b++)
                    for (int th = 1; th <= 3; th += 2) {
                        smm_context *ctx = tu_ctx(bs[b], th);
                        void *got = forward_checked(ctx, L, m, x, dts[di], esz);
                        if (memcmp(got, want, (size_t)(m * L->n) * esz) != 0) {
                            char desc[256];
                            snprintf(desc, sizeof desc, "layer %s (%lld x %lld), M=%lld, %s",
                                     L->name, (long long)L->n, (long long)L->k,
                                     (long long)m, smm_dtype_name(dts[di]));
                            TU_FAIL_CASE(bs[b], th, desc, "output differs from the "
                                         "library calls of the layer's scheme");
                        }
                        free(got);
                        smm_context_destroy(ctx);
                    }
                free(want);
                free(x);
            }
    }
}

START_TEST(test_quantize_reload_run)
{
    char in[512], out[512], err[1024];
    float_ckpt *c = calloc(1, sizeof *c);
    cf_rng r = tu_rng("quantize_reload_run");
    ct_model *model;
    const ct_layer *L;

    quantize_dirs(in, out, sizeof in, c, &r);
    model = ct_model_open(out, err, sizeof err);
    ck_assert_msg(model != NULL, "ct_model_open: %s", err);
    ck_assert_uint_eq(model->nlayers, 3);
    ck_assert_ptr_null(ct_model_find(model, "lm_head"));
    L = ct_model_find(model, "model.layers.0.self_attn.q_proj");
    ck_assert_ptr_nonnull(L);
    ck_assert_ptr_nonnull(L->bias);
    ck_assert(memcmp(L->bias, c->qb, sizeof c->qb) == 0);
    ck_assert_int_eq(L->weight_scale_len, NQ);
    L = ct_model_find(model, "model.layers.1.mlp.up_proj");
    ck_assert_ptr_nonnull(L);
    ck_assert_int_eq(L->n, 64);
    ck_assert_int_eq(L->k, 1);
    ck_assert_ptr_null(L->bias);
    run_model_everywhere(model, &r);
    ct_model_close(model);
    rm_tree(in);
    rm_tree(out);
    free(c);
}
END_TEST

/* A hand-written w8a8 checkpoint with one layer per scheme: per-tensor
 * weights, static symmetric and asymmetric activations, dynamic
 * asymmetric, targets by exact name and by regex. */
START_TEST(test_schemes)
{
    char dir[512], err[1024];
    cf_rng r = tu_rng("schemes");
    enum { N = 19, K = 45 };
    static int8_t w[4][N * K];
    static float ws_ch[N], ws_t[1] = { 0.0123f }, isc[1] = { 0.037f }, bias[N];
    static int8_t zp8[1] = { -7 };
    static int32_t zp32[1] = { 11 };
    st_tensor ts[16];
    size_t n = 0;
    int i, j;
    json_t *cfg;
    ct_model *model;
    const ct_layer *L;

    make_tmpdir(dir, sizeof dir);
    for (j = 0; j < 4; j++)
        for (i = 0; i < N * K; i++)
            w[j][i] = (int8_t)cf_rng_range(&r, -128, 127);
    for (i = 0; i < N; i++) {
        ws_ch[i] = 1e-3f * (1.0f + (float)i);
        bias[i] = frand(&r);
    }
    /* a: dynamic asymmetric, channel, bias   (group "dyn_asym", exact name)
     * b: static symmetric, tensor            (group "static_sym", regex)
     * c: static asymmetric (I8 zero point)   (group "static_asym", regex)
     * d: static asymmetric (I32 zero point), channel weights (same group) */
    ts[n++] = tensor("m.a.weight", ST_I8, 2, N, K, w[0]);
    ts[n++] = tensor("m.a.weight_scale", ST_F32, 2, N, 1, ws_ch);
    ts[n++] = tensor("m.a.bias", ST_F32, 1, N, 0, bias);
    ts[n++] = tensor("m.b.weight", ST_I8, 2, N, K, w[1]);
    ts[n++] = tensor("m.b.weight_scale", ST_F32, 1, 1, 0, ws_t);
    ts[n++] = tensor("m.b.input_scale", ST_F32, 1, 1, 0, isc);
    ts[n++] = tensor("m.c.weight", ST_I8, 2, N, K, w[2]);
    ts[n++] = tensor("m.c.weight_scale", ST_F32, 1, N, 0, ws_ch);
    ts[n++] = tensor("m.c.input_scale", ST_F32, 1, 1, 0, isc);
    ts[n++] = tensor("m.c.input_zero_point", ST_I8, 1, 1, 0, zp8);
    ts[n++] = tensor("m.d.weight", ST_I8, 2, N, K, w[3]);
    ts[n++] = tensor("m.d.weight_scale", ST_F32, 2, N, 1, ws_ch);
    ts[n++] = tensor("m.d.input_scale", ST_F32, 1, 1, 0, isc);
    ts[n++] = tensor("m.d.input_zero_point", ST_I32, 1, 1, 0, zp32);
    write_st(dir, "model.safetensors", ts, n);
    cfg = json_pack(
        "{s:{s:s, s:s, s:[s], s:{"
        "s:{s:[s], s:{s:i, s:s, s:b, s:s, s:b}, s:{s:i, s:s, s:b, s:s, s:b}},"
        "s:{s:[s], s:{s:i, s:s, s:b, s:s, s:b}, s:{s:i, s:s, s:b, s:s, s:b}},"
        "s:{s:[s], s:{s:i, s:s, s:b, s:s, s:b}, s:{s:i, s:s, s:b, s:s, s:b}}}}}",
        "quantization_config", "quant_method", "compressed-tensors", "format", "int-quantized",
        "ignore", "lm_head", "config_groups",
        "dyn_asym", "targets", "m.a",
        "weights", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "channel", "dynamic", 0,
        "input_activations", "num_bits", 8, "type", "int", "symmetric", 0, "strategy", "token", "dynamic", 1,
        "static_sym", "targets", "re:m\\.b$",
        "weights", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "tensor", "dynamic", 0,
        "input_activations", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "tensor", "dynamic", 0,
        "static_asym", "targets", "re:m\\.[cd]",
        "weights", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "channel", "dynamic", 0,
        "input_activations", "num_bits", 8, "type", "int", "symmetric", 0, "strategy", "tensor", "dynamic", 0);
    ck_assert_ptr_nonnull(cfg);
    write_json(dir, "config.json", cfg);
    json_decref(cfg);

    model = ct_model_open(dir, err, sizeof err);
    ck_assert_msg(model != NULL, "ct_model_open: %s", err);
    ck_assert_uint_eq(model->nlayers, 4);
    L = ct_model_find(model, "m.a");
    ck_assert(L->scheme.act_dynamic && !L->scheme.act_symmetric && L->scheme.weight_per_channel);
    ck_assert_str_eq(L->group, "dyn_asym");
    ck_assert_ptr_nonnull(L->bias);
    L = ct_model_find(model, "m.b");
    ck_assert(!L->scheme.act_dynamic && L->scheme.act_symmetric && !L->scheme.weight_per_channel);
    ck_assert_int_eq(L->weight_scale_len, 1);
    ck_assert(L->input_scale == isc[0]);
    L = ct_model_find(model, "m.c");
    ck_assert(!L->scheme.act_dynamic && !L->scheme.act_symmetric);
    ck_assert_str_eq(L->group, "static_asym");
    ck_assert_int_eq(L->input_zero_point, -7);
    L = ct_model_find(model, "m.d");
    ck_assert_int_eq(L->input_zero_point, 11);
    ck_assert_int_eq(L->weight_scale_len, N);
    run_model_everywhere(model, &r);
    ct_model_close(model);
    rm_tree(dir);
}
END_TEST

/* A base config (one group, channel weights, dynamic token activations). */
static json_t *base_config(void)
{
    return json_pack(
        "{s:s, s:{s:s, s:s, s:[s], s:{s:{s:[s], s:{s:i, s:s, s:b, s:s, s:b, s:n},"
        " s:{s:i, s:s, s:b, s:s, s:b, s:n}}}}}",
        "model_type", "llama",
        "quantization_config", "quant_method", "compressed-tensors", "format", "int-quantized",
        "ignore", "lm_head", "config_groups", "group_0", "targets", "Linear",
        "weights", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "channel",
        "dynamic", 0, "group_size",
        "input_activations", "num_bits", 8, "type", "int", "symmetric", 1, "strategy", "token",
        "dynamic", 1, "group_size");
}

static json_t *qc_of(json_t *c) { return json_object_get(c, "quantization_config"); }
static json_t *grp_of(json_t *c, const char *part)
{
    json_t *g = json_object_get(json_object_get(qc_of(c), "config_groups"), "group_0");
    return part ? json_object_get(g, part) : g;
}

/* Unsupported schemes: each mutation of the base config must be rejected
 * with a message naming the field. */
START_TEST(test_reject_config)
{
    static const struct { const char *part, *key, *json, *want; } cases[] = {
        { "weights", "strategy", "\"group\"",
          "config.json: quantization_config.config_groups.group_0.weights.strategy: "
          "\"group\" is not supported (tensor or channel)" },
        { "weights", "strategy", "\"block\"", "group_0.weights.strategy: \"block\"" },
        { "weights", "num_bits", "4", "group_0.weights.num_bits: 4 is not supported (8)" },
        { "input_activations", "num_bits", "16", "input_activations.num_bits: 16" },
        { "weights", "type", "\"float\"", "group_0.weights.type: \"float\" is not supported (int)" },
        { "input_activations", "type", "\"float\"", "input_activations.type: \"float\"" },
        { "weights", "symmetric", "false", "group_0.weights.symmetric: false" },
        { "weights", "group_size", "128", "group_0.weights.group_size: 128" },
        { "weights", "actorder", "\"group\"", "group_0.weights.actorder: \"group\"" },
        { "weights", "block_structure", "[128, 128]", "group_0.weights.block_structure" },
        { "weights", "dynamic", "true", "group_0.weights.dynamic: true" },
        { "input_activations", "dynamic", "false", "input_activations.dynamic: false" },
        { "input_activations", "strategy", "\"tensor\"", "input_activations.dynamic: true" },
        { "input_activations", "strategy", "\"group\"",
          "input_activations.strategy: \"group\" is not supported (token or tensor)" },
        { "input_activations", "strategy", "\"attn_head\"", "input_activations.strategy" },
        { "input_activations", "dynamic", "\"local\"", "input_activations.dynamic: \"local\"" },
        { NULL, "input_activations", "null", "group_0.input_activations: null is not supported" },
        { NULL, "weights", "null", "group_0.weights: null is not supported" },
        { NULL, "output_activations", "{\"num_bits\": 8}", "group_0.output_activations" },
        { NULL, "targets", "[]", "group_0.targets" },
        { NULL, "targets", "[\"re:((\"]", "group_0.targets[0]: \"re:((\"" },
        { "qc", "quant_method", "\"gptq\"", "quantization_config.quant_method: \"gptq\"" },
        { "qc", "format", "\"float-quantized\"", "quantization_config.format: \"float-quantized\"" },
        { "qc", "format", "\"pack-quantized\"", "quantization_config.format" },
        { "qc", "ignore", "[\"lm_head\", \"re:a[\"]", "quantization_config.ignore[1]" },
        { "qc", "config_groups", "{}", "quantization_config.config_groups: an empty object" },
        { "top", "quantization_config", "null", "config.json: quantization_config: not an object" },
    };
    char err[1024];
    size_t i;
    ct_config *c;
    json_t *base = base_config();
    char *text = json_dumps(base, 0);

    /* the base itself parses */
    c = ct_config_parse(text, strlen(text), "config.json", err, sizeof err);
    ck_assert_msg(c != NULL, "base config rejected: %s", err);
    ct_config_free(c);
    free(text);
    json_decref(base);

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *cfg = base_config(), *v, *obj;
        json_error_t je;
        v = json_loads(cases[i].json, JSON_DECODE_ANY, &je);
        ck_assert_msg(v != NULL, "case %zu: %s", i, je.text);
        if (!cases[i].part)
            obj = grp_of(cfg, NULL);
        else if (strcmp(cases[i].part, "qc") == 0)
            obj = qc_of(cfg);
        else if (strcmp(cases[i].part, "top") == 0)
            obj = cfg;
        else
            obj = grp_of(cfg, cases[i].part);
        json_object_set_new(obj, cases[i].key, v);
        text = json_dumps(cfg, 0);
        err[0] = '\0';
        c = ct_config_parse(text, strlen(text), "config.json", err, sizeof err);
        ck_assert_msg(c == NULL, "case %zu (%s.%s = %s) accepted", i,
                      cases[i].part ? cases[i].part : "group", cases[i].key, cases[i].json);
        ck_assert_msg(strstr(err, cases[i].want) != NULL,
                      "case %zu: message\n  %s\ndoes not contain\n  %s", i, err, cases[i].want);
        free(text);
        json_decref(cfg);
    }
    /* missing entirely */
    c = ct_config_parse("{}", 2, "config.json", err, sizeof err);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err, "quantization_config: missing"));
}
END_TEST

/* Checkpoint-level errors: through ct_model_open and ct_quantize_checkpoint. */
START_TEST(test_reject_checkpoint)
{
    char dir[512], out[512], err[1024];
    static int8_t w[6 * 4];
    static float ws_bad[5], ws_ok[6] = { 1, 1, 1, 1, 1, 1 }, fw[6 * 4];
    st_tensor ts[2];
    json_t *cfg;

    make_tmpdir(dir, sizeof dir);
    cfg = base_config();
    write_json(dir, "config.json", cfg);

    /* weight_scale of the wrong length */
    ts[0] = tensor("l.weight", ST_I8, 2, 6, 4, w);
    ts[1] = tensor("l.weight_scale", ST_F32, 2, 5, 1, ws_bad);
    write_st(dir, "model.safetensors", ts, 2);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "l.weight_scale") != NULL, "%s", err);

    /* missing weight_scale */
    write_st(dir, "model.safetensors", ts, 1);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "l.weight_scale is missing") != NULL, "%s", err);

    /* static activations without input_scale */
    json_object_set_new(grp_of(cfg, "input_activations"), "strategy", json_string("tensor"));
    json_object_set_new(grp_of(cfg, "input_activations"), "dynamic", json_false());
    write_json(dir, "config.json", cfg);
    ts[1] = tensor("l.weight_scale", ST_F32, 2, 6, 1, ws_ok);
    write_st(dir, "model.safetensors", ts, 2);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "l.input_scale is missing") != NULL, "%s", err);

    /* an int8 weight the ignore list names */
    json_array_append_new(json_object_get(qc_of(cfg), "ignore"), json_string("re:l$"));
    write_json(dir, "config.json", cfg);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "ignore") != NULL, "%s", err);

    /* quantize: input already quantized */
    make_tmpdir(out, sizeof out);
    ck_assert_int_ne(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "quantization_config already") != NULL, "%s", err);

    /* quantize: non-finite weight, named */
    write_text(dir, "config.json", "{}");
    fw[9] = NAN;
    ts[0] = tensor("x.dense.weight", ST_F32, 2, 6, 4, fw);
    write_st(dir, "model.safetensors", ts, 1);
    ck_assert_int_ne(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "x.dense.weight") && strstr(err, "[2, 1]"), "%s", err);

    /* quantize: output = input */
    fw[9] = 0.5f;
    write_st(dir, "model.safetensors", ts, 1);
    ck_assert_int_ne(ct_quantize_checkpoint(dir, dir, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "input directory") != NULL, "%s", err);
    /* and the good case works with an empty config */
    ck_assert_msg(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err) == 0, "%s", err);

    json_decref(cfg);
    rm_tree(dir);
    rm_tree(out);
}
END_TEST

/* The names in a directory, sorted, joined by commas ("" when empty). */
static void dir_names(const char *dir, char *buf, size_t len)
{
    char names[32][256];
    int n = 0, i, j;
    DIR *d = opendir(dir);
    struct dirent *e;
    buf[0] = '\0';
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL && n < 32) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[256];
            memcpy(t, names[j], sizeof t);
            memcpy(names[j], names[j - 1], sizeof t);
            memcpy(names[j - 1], t, sizeof t);
        }
    for (i = 0; i < n; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? "," : "", names[i]);
}

static void read_text(const char *dir, const char *name, char *buf, size_t len)
{
    char p[4096];
    FILE *f;
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    f = fopen(p, "r");
    ck_assert_msg(f != NULL, "%s: cannot open", p);
    n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* A quantize that fails part-way (a non-finite weight in the second shard,
 * after the first is quantized) leaves the output directory as it was,
 * and does not create one that was absent; the same directory then takes
 * a good run, with nothing of the failed one left. */
START_TEST(test_quantize_fails_cleanly)
{
    char in[512], out[512], absent[600], err[1024], names[2048], text[4096];
    float_ckpt *c = calloc(1, sizeof *c);
    cf_rng r = tu_rng("quantize_fails_cleanly");
    st_tensor b[3];
    struct stat sb;

    ck_assert_ptr_nonnull(c);
    make_tmpdir(in, sizeof in);
    make_tmpdir(out, sizeof out);
    make_float_ckpt(in, c, &r);
    c->down[5 * 130 - 1] = 0x7F80; /* bf16 +inf, the last element of shard b */
    b[0] = tensor("model.layers.0.mlp.down_proj.weight", ST_BF16, 2, 5, 130, c->down);
    b[1] = tensor("model.layers.1.mlp.up_proj.weight", ST_F16, 2, 64, 1, c->up);
    b[2] = tensor("lm_head.weight", ST_F32, 2, 11, KQ, c->head);
    write_st(in, shard_b, b, 3);
    write_text(out, "config.json", "{\"old\": 1}");
    write_text(out, "keep.txt", "mine");

    ck_assert_int_ne(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "down_proj.weight") && strstr(err, "[4, 129]"), "%s", err);
    dir_names(out, names, sizeof names);
    ck_assert_msg(strcmp(names, "config.json,keep.txt") == 0,
                  "after a failed quantize the output holds: %s", names);
    read_text(out, "config.json", text, sizeof text);
    ck_assert_str_eq(text, "{\"old\": 1}");

    snprintf(absent, sizeof absent, "%s/new", out);
    ck_assert_int_ne(ct_quantize_checkpoint(in, absent, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(stat(absent, &sb) != 0, "%s was left behind", absent);

    /* the same directories, the weight made finite: a good run */
    c->down[5 * 130 - 1] = 0x3F80; /* 1.0 */
    write_st(in, shard_b, b, 3);
    ck_assert_msg(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err) == 0, "%s", err);
    dir_names(out, names, sizeof names);
    ck_assert_str_eq(names, "config.json,keep.txt,model-00001-of-00002.safetensors,"
                            "model-00002-of-00002.safetensors,"
                            "model.safetensors.index.json,tokenizer.json");
    read_text(out, "config.json", text, sizeof text);
    ck_assert_msg(strstr(text, "quantization_config") != NULL, "%s", text);
    read_text(out, "keep.txt", text, sizeof text);
    ck_assert_str_eq(text, "mine");

    rm_tree(in);
    rm_tree(out);
    free(c);
}
END_TEST

/* The names quantize takes in the output directory: a directory in the
 * way stops it before anything moves; a symbolic link is replaced, not
 * followed; a shard whose name has no .safetensors suffix is written
 * quantized once (it is not also copied as an "other file"). */
START_TEST(test_quantize_output_names)
{
    char in[512], out[512], err[1024], names[2048], text[256], p[1200], victim[1200];
    static float fw[6 * 4];
    st_tensor t;
    st_checkpoint *ck;
    const st_tensor *q;
    struct stat sb;
    int i;

    make_tmpdir(in, sizeof in);
    make_tmpdir(out, sizeof out);
    for (i = 0; i < 24; i++)
        fw[i] = (float)(i % 7) - 3.0f;
    t = tensor("x.dense.weight", ST_F32, 2, 6, 4, fw);
    write_st(in, "w.bin", &t, 1);
    write_text(in, "model.safetensors.index.json",
               "{\"weight_map\": {\"x.dense.weight\": \"w.bin\"}}");
    write_text(in, "notes.txt", "n");

    /* a directory where notes.txt goes: nothing moves */
    snprintf(p, sizeof p, "%s/notes.txt", out);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    write_text(out, "config.json", "{}");
    ck_assert_int_ne(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "notes.txt") && strstr(err, "not a file"), "%s", err);
    dir_names(out, names, sizeof names);
    ck_assert_msg(strcmp(names, "config.json,notes.txt") == 0, "output holds: %s", names);
    read_text(out, "config.json", text, sizeof text);
    ck_assert_str_eq(text, "{}");
    ck_assert_int_eq(rmdir(p), 0);

    /* a link named like the shard: replaced, the file it names untouched */
    snprintf(victim, sizeof victim, "%s/victim", out);
    write_text(out, "victim", "keep");
    snprintf(p, sizeof p, "%s/w.bin", out);
    ck_assert_int_eq(symlink(victim, p), 0);
    ck_assert_msg(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(lstat(p, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode));
    read_text(out, "victim", text, sizeof text);
    ck_assert_str_eq(text, "keep");
    dir_names(out, names, sizeof names);
    ck_assert_str_eq(names, "config.json,model.safetensors.index.json,notes.txt,victim,w.bin");

    /* the shard is the quantized one */
    ck = st_checkpoint_open(out, err, sizeof err);
    ck_assert_msg(ck != NULL, "%s", err);
    q = st_checkpoint_find(ck, "x.dense.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(q->dtype, ST_I8);
    ck_assert_ptr_nonnull(st_checkpoint_find(ck, "x.dense.weight_scale"));
    st_checkpoint_close(ck);

    rm_tree(in);
    rm_tree(out);
}
END_TEST

/* Which tensors count as Linear weights. */
START_TEST(test_linear_rule)
{
    static const struct { const char *name; int ndim; st_dtype dt; int linear; } cases[] = {
        { "encoder.layer.0.attention.self.query.weight", 2, ST_F32, 1 },
        { "model.layers.3.mlp.down_proj.weight", 2, ST_BF16, 1 },
        { "pooler.dense.weight", 2, ST_F16, 1 },
        { "embeddings.word_embeddings.weight", 2, ST_F32, 0 },
        { "model.embed_tokens.weight", 2, ST_F32, 0 },
        { "encoder.layer.0.attention.output.LayerNorm.weight", 1, ST_F32, 0 },
        { "model.layers.0.input_layernorm.weight", 2, ST_F32, 0 },
        { "lm_head.weight", 2, ST_F32, 0 },
        { "model.lm_head.weight", 2, ST_F32, 0 },
        { "model.layers.0.mlp.down_proj.bias", 1, ST_F32, 0 },
        { "model.layers.0.mlp.down_proj.weight", 2, ST_I8, 0 },
        { "conv.weight", 4, ST_F32, 0 },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_tensor t = tensor(cases[i].name, cases[i].dt, cases[i].ndim, 4, 4, NULL);
        ck_assert_msg(ct_is_linear_weight(&t) == cases[i].linear, "%s: %d, expected %d",
                      cases[i].name, ct_is_linear_weight(&t), cases[i].linear);
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Hostile files and Python's re.match                                 */
/* ------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A config whose group_0 targets `pattern` (and nothing else). */
static ct_config *config_with_target(const char *pattern, char *err, size_t errlen)
{
    json_t *cfg = base_config();
    char *text;
    ct_config *c;
    json_object_set_new(grp_of(cfg, NULL), "targets", json_pack("[s]", pattern));
    text = json_dumps(cfg, 0);
    c = ct_config_parse(text, strlen(text), "config.json", err, errlen);
    free(text);
    json_decref(cfg);
    return c;
}

/* "re:" patterns behave as Python's re.match (PCRE2 anchored), with
 * bounded time and memory. */
START_TEST(test_regex_python)
{
    static const struct { const char *pattern, *name; int hit; } cases[] = {
        { "re:mlp|attn", "attn.o", 1 },                 /* each alternative anchored */
        { "re:mlp|attn", "x.attn", 0 },
        { "re:mlp", "model.mlp", 0 },                   /* match, not search */
        { "re:.*down_proj$", "model.layers.0.mlp.down_proj", 1 },
        { "re:.*down_proj$", "model.layers.0.mlp.down_proj_x", 0 },
        { "re:model\\.layers\\.\\d+\\.mlp", "model.layers.12.mlp.up", 1 },
        { "re:(?:q|k)_proj", "k_proj", 1 },
        { "re:(?P<a>x)y(?P=a)", "xyx", 1 },
        { "re:a$", "a", 1 },
        { "re:a$", "ab", 0 },
    };
    static const char *const invalid[] = {
        "re:zzz)|(mlp",                  /* the stray ")" Python rejects */
        "re:((((a{1,255}){1,255}){1,255}){1,255})",
        "re:(",
        "re:a{2,1}",
    };
    char err[1024], name[128];
    const ct_scheme *s;
    const char *g;
    ct_config *c;
    size_t i;
    double t0;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = config_with_target(cases[i].pattern, err, sizeof err);
        ck_assert_msg(c != NULL, "%s rejected: %s", cases[i].pattern, err);
        ck_assert_int_eq(ct_config_lookup(c, cases[i].name, &s, &g, err, sizeof err), 0);
        ck_assert_msg((s != NULL) == cases[i].hit, "%s on %s: %d, expected %d",
                      cases[i].pattern, cases[i].name, s != NULL, cases[i].hit);
        ct_config_free(c);
    }
    for (i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        t0 = now_s();
        err[0] = '\0';
        c = config_with_target(invalid[i], err, sizeof err);
        ck_assert_msg(c == NULL, "%s accepted", invalid[i]);
        ck_assert_msg(strstr(err, "group_0.targets[0]") &&
                      strstr(err, "not a valid regular expression"), "%s", err);
        ck_assert_msg(now_s() - t0 < 2.0, "%s took %.1f s to reject", invalid[i],
                      now_s() - t0);
    }
    /* catastrophic backtracking stops at the match limit with a message */
    c = config_with_target("re:(a|aa)+$", err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    memset(name, 'a', 60);
    name[60] = '!';
    name[61] = '\0';
    t0 = now_s();
    ck_assert_int_eq(ct_config_lookup(c, name, &s, &g, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "(a|aa)+$") && strstr(err, "limit"), "%s", err);
    ck_assert_ptr_null(ct_config_match(c, name, &g));
    ck_assert_msg(now_s() - t0 < 5.0, "the limit took %.1f s", now_s() - t0);
    ct_config_free(c);
}
END_TEST

/* The fuzz seeds of fuzz/fuzz_config.c (tests/data/config): the valid
 * ones parse, the hostile patterns are refused, the backtracking one stops
 * at the match limit. */
START_TEST(test_config_corpus)
{
    static const struct { const char *file; int ok; } cases[] = {
        { "valid-linear.json", 1 },
        { "valid-python-regex.json", 1 },
        { "compressed-tensors-0.20.1.json", 1 },
        { "backtracking.json", 1 },
        { "nested-counted-repeat.json", 0 },
        { "stray-parenthesis.json", 0 },
    };
    const char *data = getenv("SMM_TEST_DATA");
    char dir[1024], err[1024], name[64];
    const ct_scheme *s;
    const char *g;
    size_t i;
    ck_assert_msg(data != NULL, "SMM_TEST_DATA is not set");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1200], *text;
        FILE *f;
        long n;
        ct_config *c;
        snprintf(dir, sizeof dir, "%s/config", data);
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "%s", path);
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc((size_t)n + 1);
        ck_assert_ptr_nonnull(text);
        ck_assert_int_eq((long)fread(text, 1, (size_t)n, f), n);
        fclose(f);
        err[0] = '\0';
        c = ct_config_parse(text, (size_t)n, cases[i].file, err, sizeof err);
        free(text);
        ck_assert_msg((c != NULL) == cases[i].ok, "%s: %s", cases[i].file, err);
        if (!c) {
            ck_assert_msg(strstr(err, "not a valid regular expression"), "%s", err);
            continue;
        }
        ck_assert_int_eq(ct_config_lookup(c, "model.layers.3.mlp.down_proj", &s, &g, err,
                                          sizeof err), 0);
        ck_assert_ptr_nonnull(s);
        memset(name, 'a', 50);
        name[50] = '!';
        name[51] = '\0';
        ck_assert_int_eq(ct_config_lookup(c, name, &s, &g, err, sizeof err),
                         strcmp(cases[i].file, "backtracking.json") == 0 ? -1 : 0);
        ct_config_free(c);
    }
}
END_TEST

/* FIFOs never hang a reader; a directory where a file belongs, a file
 * where a directory belongs and a trailing slash give clear messages. */
START_TEST(test_hostile_paths)
{
    char dir[512], out[512], p[1200], slash[600], err[1024];
    static int8_t w[2 * 3] = { 1, 2, 3, 4, 5, 6 };
    static float ws[2] = { 0.5f, 0.25f }, fw[2 * 3] = { 1, 2, 3, 4, 5, 6 };
    st_tensor ts[2];
    npy_array a;
    json_t *cfg;

    make_tmpdir(dir, sizeof dir);
    make_tmpdir(out, sizeof out);
    cfg = base_config();
    ts[0] = tensor("l.weight", ST_I8, 2, 2, 3, w);
    ts[1] = tensor("l.weight_scale", ST_F32, 2, 2, 1, ws);
    write_st(dir, "model.safetensors", ts, 2);

    /* config.json a FIFO, then a directory */
    snprintf(p, sizeof p, "%s/config.json", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "config.json: not a regular file"), "%s", err);
    ck_assert_int_ne(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "config.json: not a regular file"), "%s", err);
    unlink(p);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "config.json: not a regular file"), "%s", err);
    ck_assert_int_ne(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "config.json: not a regular file"), "%s", err);
    rmdir(p);
    write_json(dir, "config.json", cfg);

    /* model.safetensors a FIFO */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_ptr_null(ct_model_open(dir, err, sizeof err));
    ck_assert_msg(strstr(err, "model.safetensors: not a regular file"), "%s", err);
    /* an activations file that is a FIFO */
    ck_assert_int_ne(tensor_file_read(p, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    snprintf(p, sizeof p, "%s/x.npy", dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_int_ne(tensor_file_read(p, &a, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "x.npy: not a regular file"), "%s", err);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    write_st(dir, "model.safetensors", ts, 2);

    /* a file where a directory belongs */
    ck_assert_ptr_null(ct_model_open(p, err, sizeof err));
    ck_assert_msg(strstr(err, "model.safetensors: not a directory"), "%s", err);
    ck_assert_int_ne(ct_quantize_checkpoint(p, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "model.safetensors: not a directory"), "%s", err);

    /* a trailing slash: no double slash in messages */
    snprintf(slash, sizeof slash, "%s/", dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    ck_assert_ptr_null(ct_model_open(slash, err, sizeof err));
    ck_assert_msg(strstr(err, p) && !strstr(err, "//"), "%s", err);
    write_json(dir, "config.json", cfg);
    {
        ct_model *m = ct_model_open(slash, err, sizeof err);
        ck_assert_msg(m != NULL, "%s", err);
        ct_model_close(m);
    }
    /* quantize a float model given with a trailing slash */
    write_text(dir, "config.json", "{}");
    ts[0] = tensor("l.dense.weight", ST_F32, 2, 2, 3, fw);
    write_st(dir, "model.safetensors", ts, 1);
    ck_assert_msg(ct_quantize_checkpoint(slash, out, NULL, NULL, err, sizeof err) == 0,
                  "%s", err);

    json_decref(cfg);
    rm_tree(dir);
    rm_tree(out);
}
END_TEST

/* An empty [4, 0] Linear weight: quantize copies it as a float tensor (no
 * int8 layer the reader would refuse); an int8 layer that cannot run fails
 * alone, with its name, and the others run. */
START_TEST(test_empty_weight)
{
    char dir[512], out[512], err[1024];
    static float fw[2 * 3] = { 1, -2, 3, 4, 5, -6 }, empty[1];
    static int8_t w[2 * 3] = { 1, 2, 3, 4, 5, 6 };
    static float ws[2] = { 0.5f, 0.25f }, ws4[4] = { 1, 1, 1, 1 };
    st_tensor ts[4];
    st_checkpoint *ck;
    const st_tensor *t;
    ct_model *m;
    const char *why;

    make_tmpdir(dir, sizeof dir);
    make_tmpdir(out, sizeof out);
    write_text(dir, "config.json", "{}");
    ts[0] = tensor("a.dense.weight", ST_F32, 2, 2, 3, fw);
    ts[1] = tensor("b.dense.weight", ST_F32, 2, 4, 0, empty);
    ts[2] = tensor("c.dense.weight", ST_F32, 2, 0, 4, empty);
    write_st(dir, "model.safetensors", ts, 3);
    ck_assert_msg(ct_quantize_checkpoint(dir, out, NULL, NULL, err, sizeof err) == 0, "%s",
                  err);
    ck = st_checkpoint_open(out, err, sizeof err);
    ck_assert_msg(ck != NULL, "%s", err);
    t = st_checkpoint_find(ck, "b.dense.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ST_F32);
    ck_assert_ptr_null(st_checkpoint_find(ck, "b.dense.weight_scale"));
    ck_assert_int_eq(st_checkpoint_find(ck, "c.dense.weight")->dtype, ST_F32);
    st_checkpoint_close(ck);
    m = ct_model_open(out, err, sizeof err);
    ck_assert_msg(m != NULL, "the reader refuses what the writer wrote: %s", err);
    ck_assert_uint_eq(m->nlayers, 1);
    ck_assert_uint_eq(m->nunusable, 0);
    ct_model_close(m);

    /* a checkpoint written elsewhere with an I8 [4, 0] weight */
    ts[0] = tensor("a.weight", ST_I8, 2, 2, 3, w);
    ts[1] = tensor("a.weight_scale", ST_F32, 2, 2, 1, ws);
    ts[2] = tensor("b.weight", ST_I8, 2, 4, 0, empty);
    ts[3] = tensor("b.weight_scale", ST_F32, 2, 4, 1, ws4);
    write_st(out, "model.safetensors", ts, 4);
    m = ct_model_open(out, err, sizeof err);
    ck_assert_msg(m != NULL, "one unusable layer refused the checkpoint: %s", err);
    ck_assert_uint_eq(m->nlayers, 1);
    ck_assert_ptr_nonnull(ct_model_find(m, "a"));
    ck_assert_ptr_null(ct_model_find(m, "b"));
    why = ct_model_unusable(m, "b");
    ck_assert_msg(why && strstr(why, "b.weight") && strstr(why, "[4, 0]"), "%s",
                  why ? why : "(null)");
    ck_assert_ptr_null(ct_model_unusable(m, "a"));
    ct_model_close(m);
    /* only unusable layers: the checkpoint fails, naming the layer */
    write_st(out, "model.safetensors", ts + 2, 2);
    ck_assert_ptr_null(ct_model_open(out, err, sizeof err));
    ck_assert_msg(strstr(err, "b.weight") != NULL, "%s", err);

    rm_tree(dir);
    rm_tree(out);
}
END_TEST

/* Byte-for-byte equality of two files. */
static void same_file(const char *a, const char *b)
{
    char ta[4096], tb[4096];
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    size_t na, nb;
    ck_assert_msg(fa && fb, "%s or %s missing", a, b);
    na = fread(ta, 1, sizeof ta, fa);
    nb = fread(tb, 1, sizeof tb, fb);
    fclose(fa);
    fclose(fb);
    ck_assert_msg(na == nb && memcmp(ta, tb, na) == 0, "%s differs from %s", b, a);
}

/* quantize carries every file and folder of the model: sentence-transformers'
 * 1_Pooling/ and 2_Normalize/, README, .gitattributes; not .git/, not a
 * FIFO, not the output when it lies inside the input; a second run merges
 * into the folders the first one made. */
START_TEST(test_quantize_copies_tree)
{
    char in[512], out[1200], p[1400], q[1400], err[1024], names[2048];
    static float fw[2 * 3] = { 1, -2, 3, 4, 5, -6 };
    st_tensor t;
    struct stat sb;
    int run;
    ct_quantize_stats stats;

    make_tmpdir(in, sizeof in);
    t = tensor("l.dense.weight", ST_F32, 2, 2, 3, fw);
    write_st(in, "model.safetensors", &t, 1);
    write_text(in, "config.json", "{\"torch_dtype\": \"float32\"}");
    write_text(in, "README.md", "# model\n");
    write_text(in, ".gitattributes", "*.safetensors filter=lfs\n");
    write_text(in, "modules.json", "[]");
    snprintf(p, sizeof p, "%s/1_Pooling", in);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    write_text(p, "config.json", "{\"pooling_mode_mean_tokens\": true}");
    snprintf(p, sizeof p, "%s/2_Normalize", in);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/sub", in);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/sub/deeper", in);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    write_text(p, "x.txt", "deep");
    snprintf(p, sizeof p, "%s/.git", in);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    write_text(p, "HEAD", "ref");
    snprintf(p, sizeof p, "%s/pipe", in);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    snprintf(out, sizeof out, "%s/w8a8", in);   /* the output inside the input */

    for (run = 0; run < 2; run++) {
        ck_assert_msg(ct_quantize_checkpoint_ex(in, out, CT_MATCH_CONTRACT, NULL, NULL, &stats,
                                                err, sizeof err) == 0, "run %d: %s", run, err);
        dir_names(out, names, sizeof names);
        ck_assert_str_eq(names, ".gitattributes,1_Pooling,2_Normalize,README.md,config.json,"
                                "model.safetensors,modules.json,sub");
        ck_assert_uint_eq(stats.quantized, 1);
        ck_assert_uint_eq(stats.files_copied, 5);
        snprintf(p, sizeof p, "%s/1_Pooling/config.json", in);
        snprintf(q, sizeof q, "%s/1_Pooling/config.json", out);
        same_file(p, q);
        snprintf(p, sizeof p, "%s/sub/deeper/x.txt", in);
        snprintf(q, sizeof q, "%s/sub/deeper/x.txt", out);
        same_file(p, q);
        snprintf(q, sizeof q, "%s/2_Normalize", out);
        ck_assert(stat(q, &sb) == 0 && S_ISDIR(sb.st_mode));
    }
    /* a file where a copied folder goes: nothing moves */
    snprintf(q, sizeof q, "%s/sub", out);
    rm_tree(q);
    write_text(out, "sub", "a file");
    ck_assert_int_ne(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "sub: exists and is not a directory"), "%s", err);
    rm_tree(in);
}
END_TEST

/* The keys of an object, recursively, into buf ("a,b.c,b.d"), sorted per
 * level as jansson iterates them (insertion order) is not: we collect and
 * sort. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void key_paths(const json_t *v, const char *prefix, char **out, size_t *n, size_t cap)
{
    const char *key;
    json_t *val;
    if (!json_is_object(v))
        return;
    json_object_foreach((json_t *)v, key, val) {
        char path[512];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key);
        ck_assert(*n < cap);
        out[(*n)++] = strdup(path);
        key_paths(val, path, out, n, cap);
    }
}

/* The quantization_config quantize writes has exactly the keys
 * compressed-tensors writes (tests/data/ct-quantization-config.json, made by
 * scripts/ct-config-fixture.py from the real package). */
START_TEST(test_config_keys)
{
    char in[512], out[512], path[1200], err[1024];
    const char *data = getenv("SMM_TEST_DATA");
    json_t *fixture, *ours;
    json_error_t je;
    char *fk[128], *ok[128];
    size_t nf = 0, no = 0, i;
    static float fw[2 * 3] = { 1, -2, 3, 4, 5, -6 }, head[2 * 3];
    st_tensor t[2];

    ck_assert_msg(data != NULL, "SMM_TEST_DATA is not set");
    snprintf(path, sizeof path, "%s/ct-quantization-config.json", data);
    fixture = json_load_file(path, 0, &je);
    ck_assert_msg(fixture != NULL, "%s: %s", path, je.text);
    make_tmpdir(in, sizeof in);
    make_tmpdir(out, sizeof out);
    t[0] = tensor("l.dense.weight", ST_F32, 2, 2, 3, fw);
    t[1] = tensor("lm_head.weight", ST_F32, 2, 2, 3, head);
    write_st(in, "model.safetensors", t, 2);
    ck_assert_msg(ct_quantize_checkpoint(in, out, NULL, NULL, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/config.json", out);
    ours = json_load_file(path, 0, &je);
    ck_assert_ptr_nonnull(ours);
    key_paths(json_object_get(fixture, "quantization_config"), "", fk, &nf, 128);
    key_paths(json_object_get(ours, "quantization_config"), "", ok, &no, 128);
    qsort(fk, nf, sizeof *fk, cmp_str);
    qsort(ok, no, sizeof *ok, cmp_str);
    for (i = 0; i < nf || i < no; i++)
        ck_assert_msg(i < nf && i < no && strcmp(fk[i], ok[i]) == 0,
                      "key %zu: compressed-tensors %s, scaledmm %s", i, i < nf ? fk[i] : "-",
                      i < no ? ok[i] : "-");
    /* the values of the fields llm-compressor's readers compare */
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ours,
                     "quantization_config"), "version")),
                     json_string_value(json_object_get(json_object_get(fixture,
                     "quantization_config"), "version")));
    ck_assert(json_equal(json_object_get(json_object_get(ours, "quantization_config"),
                                         "ignore"),
                         json_object_get(json_object_get(fixture, "quantization_config"),
                                         "ignore")));
    for (i = 0; i < nf; i++)
        free(fk[i]);
    for (i = 0; i < no; i++)
        free(ok[i]);
    json_decref(fixture);
    json_decref(ours);
    rm_tree(in);
    rm_tree(out);
}
END_TEST

/* Rounds v to bfloat16 (ties to even) by hand, for the golden rows. */
static float golden_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&v, &u, 4);
    return v;
}

static float golden_round(st_dtype dt, float v)
{
    return dt == ST_BF16 ? golden_bf16(v) : smm_f16_to_f32(smm_f32_to_f16(v));
}

/* llm-compressor's row formula, independently: torch's ops in dt. */
static float golden_row_dtype(const float *w, int64_t k, st_dtype dt, int8_t *q)
{
    float amax = 0.0f, scale;
    int64_t i;
    for (i = 0; i < k; i++)
        if (fabsf(w[i]) > amax)
            amax = fabsf(w[i]);
    scale = golden_round(dt, amax / 127.5f);
    if (scale == 0.0f)
        scale = dt == ST_BF16 ? 0.0078125f : 0.0009765625f;
    for (i = 0; i < k; i++) {
        float v = golden_round(dt, w[i] / scale);
        v = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
        q[i] = (int8_t)lrintf(v);
    }
    return scale;
}

/* --match llm-compressor: bf16 and f16 weights quantized in their dtype,
 * scales stored in it; float32 weights as by default. */
START_TEST(test_match_llm_compressor)
{
    char in[512], out[512], err[1024];
    float_ckpt *c = calloc(1, sizeof *c);
    cf_rng r = tu_rng("match_llm_compressor");
    st_checkpoint *ck, *src;
    static const char *const names[] = { "model.layers.0.mlp.down_proj",
                                         "model.layers.1.mlp.up_proj",
                                         "model.layers.0.self_attn.q_proj" };
    size_t li;
    int differ = 0;

    ck_assert_ptr_nonnull(c);
    make_tmpdir(in, sizeof in);
    make_tmpdir(out, sizeof out);
    make_float_ckpt(in, c, &r);
    c->down[0] = c->down[1] = 0;   /* keep the zero-row cases below meaningful */
    ck_assert_msg(ct_quantize_checkpoint_ex(in, out, CT_MATCH_LLM_COMPRESSOR, NULL, NULL, NULL,
                                            err, sizeof err) == 0, "%s", err);
    src = st_checkpoint_open(in, err, sizeof err);
    ck = st_checkpoint_open(out, err, sizeof err);
    ck_assert_msg(src && ck, "%s", err);
    for (li = 0; li < 3; li++) {
        char wn[256], sn[256];
        const st_tensor *w, *q, *s;
        int64_t n, k, row, col;
        snprintf(wn, sizeof wn, "%s.weight", names[li]);
        snprintf(sn, sizeof sn, "%s.weight_scale", names[li]);
        w = st_checkpoint_find(src, wn);
        q = st_checkpoint_find(ck, wn);
        s = st_checkpoint_find(ck, sn);
        ck_assert(w && q && s);
        ck_assert_int_eq(q->dtype, ST_I8);
        ck_assert_msg(s->dtype == w->dtype, "%s: scale %s, weight %s", sn,
                      st_dtype_name(s->dtype), st_dtype_name(w->dtype));
        n = w->shape[0];
        k = w->shape[1];
        for (row = 0; row < n; row++) {
            float wr[256], gs, def;
            int8_t gq[256], dq[256];
            ck_assert(k <= 256);
            for (col = 0; col < k; col++)
                wr[col] = elem(w, (size_t)(row * k + col));
            gs = w->dtype == ST_F32 ? golden_row(wr, k, gq) : golden_row_dtype(wr, k, w->dtype, gq);
            ck_assert_msg(tu_f2u(elem(s, (size_t)row)) == tu_f2u(gs), "%s row %lld: scale %a, "
                          "expected %a", sn, (long long)row, (double)elem(s, (size_t)row),
                          (double)gs);
            ck_assert_msg(memcmp((const int8_t *)q->data + row * k, gq, (size_t)k) == 0,
                          "%s row %lld differs from llm-compressor's formula", wn,
                          (long long)row);
            def = golden_row(wr, k, dq);
            (void)def;
            differ += memcmp(dq, gq, (size_t)k) != 0;
        }
    }
    /* the two modes do differ on these 16-bit rows (else the test proves little) */
    ck_assert_msg(differ > 0, "no row differs between the float32 and llm-compressor modes");
    st_checkpoint_close(src);
    st_checkpoint_close(ck);
    rm_tree(in);
    rm_tree(out);
    free(c);
}
END_TEST

/* The bias rounded to the model's dtype (vLLM's): ct_layer_forward_bias
 * equals ct_layer_forward on a layer whose bias was rounded beforehand. */
START_TEST(test_bias_rounding)
{
    char in[512], out[512], err[1024];
    float_ckpt *c = calloc(1, sizeof *c);
    cf_rng r = tu_rng("bias_rounding");
    ct_model *m;
    ct_layer L2;
    const ct_layer *L;
    smm_context *ctx = tu_ctx(SMM_BACKEND_REFERENCE, 1);
    static const smm_dtype dts[3] = { SMM_DTYPE_F16, SMM_DTYPE_BF16, SMM_DTYPE_F32 };
    int d, i, changed = 0;
    const int64_t M = 3;

    ck_assert_ptr_nonnull(c);
    quantize_dirs(in, out, sizeof in, c, &r);
    m = ct_model_open(out, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    L = ct_model_find(m, "model.layers.0.self_attn.q_proj");
    ck_assert(L && L->bias);
    for (d = 0; d < 3; d++) {
        size_t es = dts[d] == SMM_DTYPE_F32 ? 4 : 2;
        unsigned char x[M * KQ * 4], y1[M * NQ * 4], y2[M * NQ * 4];
        float rb[NQ];
        for (i = 0; i < M * KQ; i++) {
            float v = frand(&r);
            uint16_t h = dts[d] == SMM_DTYPE_F16 ? smm_f32_to_f16(v) : smm_f32_to_bf16(v);
            if (es == 4)
                memcpy(x + 4 * i, &v, 4);
            else
                memcpy(x + 2 * i, &h, 2);
        }
        for (i = 0; i < NQ; i++) {
            rb[i] = dts[d] == SMM_DTYPE_F16 ? smm_f16_to_f32(smm_f32_to_f16(L->bias[i]))
                  : dts[d] == SMM_DTYPE_BF16 ? golden_bf16(L->bias[i]) : L->bias[i];
            changed += tu_f2u(rb[i]) != tu_f2u(L->bias[i]);
        }
        L2 = *L;
        L2.bias = rb;
        ck_assert_msg(ct_layer_forward_bias(ctx, L, M, x, dts[d], y1, dts[d], dts[d], err,
                                            sizeof err) == 0, "%s", err);
        ck_assert_msg(ct_layer_forward(ctx, &L2, M, x, dts[d], y2, dts[d], err, sizeof err) == 0,
                      "%s", err);
        ck_assert_msg(memcmp(y1, y2, (size_t)(M * NQ) * es) == 0, "dtype %d: outputs differ",
                      d);
        /* F32 keeps the stored bias */
        ck_assert_msg(ct_layer_forward_bias(ctx, L, M, x, dts[d], y1, dts[d], SMM_DTYPE_F32,
                                            err, sizeof err) == 0, "%s", err);
        ck_assert_msg(ct_layer_forward(ctx, L, M, x, dts[d], y2, dts[d], err, sizeof err) == 0,
                      "%s", err);
        ck_assert(memcmp(y1, y2, (size_t)(M * NQ) * es) == 0);
    }
    ck_assert_msg(changed > 0, "no bias value changed by rounding");
    {
        smm_dtype md;
        ck_assert_int_eq(ct_config_model_dtype(m->config, &md), 0);
        ck_assert_int_eq(md, SMM_DTYPE_F32);
    }
    smm_context_destroy(ctx);
    ct_model_close(m);
    rm_tree(in);
    rm_tree(out);
    free(c);
}
END_TEST

Suite *checkpoint_suite(void);
Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    tcase_add_test(tu_tcase(s, "quantize_golden", 60), test_quantize_golden);
    tcase_add_test(tu_tcase(s, "quantize_reload_run", 120), test_quantize_reload_run);
    tcase_add_test(tu_tcase(s, "schemes", 60), test_schemes);
    tcase_add_test(tu_tcase(s, "reject_config", 30), test_reject_config);
    tcase_add_test(tu_tcase(s, "reject_checkpoint", 30), test_reject_checkpoint);
    tcase_add_test(tu_tcase(s, "quantize_fails_cleanly", 30), test_quantize_fails_cleanly);
    tcase_add_test(tu_tcase(s, "quantize_output_names", 30), test_quantize_output_names);
    tcase_add_test(tu_tcase(s, "linear_rule", 10), test_linear_rule);
    tcase_add_test(tu_tcase(s, "regex_python", 30), test_regex_python);
    tcase_add_test(tu_tcase(s, "config_corpus", 30), test_config_corpus);
    tcase_add_test(tu_tcase(s, "hostile_paths", 30), test_hostile_paths);
    tcase_add_test(tu_tcase(s, "empty_weight", 30), test_empty_weight);
    tcase_add_test(tu_tcase(s, "quantize_copies_tree", 30), test_quantize_copies_tree);
    tcase_add_test(tu_tcase(s, "config_keys", 30), test_config_keys);
    tcase_add_test(tu_tcase(s, "match_llm_compressor", 30), test_match_llm_compressor);
    tcase_add_test(tu_tcase(s, "bias_rounding", 30), test_bias_rounding);
    return s;
}

int main(void)
{
    return tu_main(checkpoint_suite(), "check_checkpoint");
}
