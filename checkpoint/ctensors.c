/*
 * ctensors.c - compressed-tensors int8 w8a8 checkpoints (ctensors.h):
 * config parsing and validation, layer loading, the vLLM forward of one
 * layer, and the quantization of float checkpoints.
 *
 * Field names and formulas follow compressed-tensors
 * (quantization/quant_args.py, quant_config.py, utils/helpers.py
 * calculate_qparams, lifecycle/forward.py _quantize) and vLLM's
 * compressed_tensors loader (schemes/compressed_tensors_w8a8_int8.py).
 * doc/accuracy.md describes the whole mapping.
 */
#include "ctensors.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static char *path_join(const char *dir, const char *name)
{
    return st_path_join(dir, name);
}

/* The largest config.json or index this tool reads. */
#define CT_MAX_JSON ((size_t)64 << 20)

/* Loads a JSON file (a regular file, st_read_small's checks: a FIFO or a
 * directory is an error, never a hang). */
static json_t *load_json_file(const char *path, char *err, size_t errlen)
{
    size_t len;
    json_error_t je;
    char *text = st_read_small(path, CT_MAX_JSON, &len, err, errlen);
    json_t *v;
    if (!text)
        return NULL;
    v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!v)
        set_err(err, errlen, "%s: line %d, column %d: %s", path, je.line, je.column, je.text);
    return v;
}

/* 0 when `dir` is a directory; -1 with "DIR: not a directory" (or why it
 * cannot be read) otherwise. */
static int check_dir(const char *dir, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        set_err(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        set_err(err, errlen, "%s: not a directory", dir);
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A JSON value in words, for messages: "group", 4, true, null, an object. */
static void json_words(const json_t *v, char *buf, size_t len)
{
    if (!v)
        snprintf(buf, len, "missing");
    else if (json_is_string(v))
        snprintf(buf, len, "\"%s\"", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    else if (json_is_true(v))
        snprintf(buf, len, "true");
    else if (json_is_false(v))
        snprintf(buf, len, "false");
    else if (json_is_null(v))
        snprintf(buf, len, "null");
    else if (json_is_array(v))
        snprintf(buf, len, "an array");
    else
        snprintf(buf, len, "an object");
}

/* Widens element i of a F32/F16/BF16 tensor (data possibly unaligned). */
static float tensor_f32_at(const st_tensor *t, size_t i)
{
    const unsigned char *p = t->data;
    if (t->dtype == ST_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return t->dtype == ST_F16 ? smm_f16_to_f32(h) : smm_bf16_to_f32(h);
    }
}

static int is_float_dtype(st_dtype d)
{
    return d == ST_F32 || d == ST_F16 || d == ST_BF16;
}

static int64_t tensor_numel(const st_tensor *t)
{
    int64_t n = 1;
    int i;
    for (i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

static void shape_words(const st_tensor *t, char *buf, size_t len)
{
    int i;
    size_t used;
    snprintf(buf, len, "[");
    for (i = 0; i < t->ndim; i++) {
        used = strlen(buf);
        snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    used = strlen(buf);
    snprintf(buf + used, len - used, "]");
}

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

typedef struct ct_matcher {
    char *text;          /* as written (with "re:") */
    int is_regex;
    pcre2_code *re;
} ct_matcher;

/* Bounds on user patterns (a config.json may be hostile): the pattern's
 * length and parenthesis nesting at compile time (PCRE2 also refuses a
 * compiled pattern over its 64 KiB link-size limit, e.g. nested counted
 * repeats), and the work and memory of each match. A match that reaches a
 * limit is an error naming the pattern, never a guess. */
#define CT_RE_MAX_PATTERN 4096
#define CT_RE_MAX_NEST 64
#define CT_RE_MATCH_LIMIT 1000000u     /* backtracking steps per match */
#define CT_RE_DEPTH_LIMIT 10000u
#define CT_RE_HEAP_LIMIT 4096u         /* KiB per match */

typedef struct ct_group {
    char *name;
    ct_scheme scheme;
    ct_matcher *targets;
    size_t ntargets;
} ct_group;

struct ct_config {
    int has_dtype;      /* config.json's torch_dtype / dtype */
    smm_dtype dtype;
    ct_group *groups;
    size_t ngroups;
    ct_matcher *ignore;
    size_t nignore;
};

static void matcher_free(ct_matcher *m)
{
    if (m->is_regex)
        pcre2_code_free(m->re);
    free(m->text);
}

void ct_config_free(ct_config *c)
{
    size_t i, j;
    if (!c)
        return;
    for (i = 0; i < c->ngroups; i++) {
        for (j = 0; j < c->groups[i].ntargets; j++)
            matcher_free(&c->groups[i].targets[j]);
        free(c->groups[i].targets);
        free(c->groups[i].name);
    }
    free(c->groups);
    for (i = 0; i < c->nignore; i++)
        matcher_free(&c->ignore[i]);
    free(c->ignore);
    free(c);
}

/* Compiles a target or ignore entry. "re:P" is compiled by PCRE2 with
 * PCRE2_ANCHORED, which is Python's re.match: every alternative anchored
 * at the start of the name, nothing added to the pattern (so a stray ")"
 * is a syntax error, as in Python, not an escape from an added group). */
static int matcher_init(ct_matcher *m, const char *text, const char *where,
                        char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->text = xstrdup(text);
    if (!m->text) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (strncmp(text, "re:", 3) == 0) {
        pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
        const char *pat = text + 3;
        size_t n = strlen(pat);
        int ecode = 0;
        PCRE2_SIZE eoff = 0;
        if (!cc) {
            set_err(err, errlen, "out of memory");
            free(m->text);
            m->text = NULL;
            return -1;
        }
        pcre2_set_max_pattern_length(cc, CT_RE_MAX_PATTERN);
        pcre2_set_parens_nest_limit(cc, CT_RE_MAX_NEST);
        m->re = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_ANCHORED | PCRE2_UTF |
                              PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C,
                              &ecode, &eoff, cc);
        pcre2_compile_context_free(cc);
        if (!m->re) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(ecode, msg, sizeof msg) < 0)
                snprintf((char *)msg, sizeof msg, "error %d", ecode);
            set_err(err, errlen, "%s: \"%s\" is not a valid regular expression (%s, at "
                    "offset %zu of the pattern)", where, text, (const char *)msg,
                    (size_t)eoff);
            free(m->text);
            m->text = NULL;
            return -1;
        }
        m->is_regex = 1;
    }
    return 0;
}

/* Parses one QuantizationArgs object ("weights" or "input_activations").
 * path is e.g. "config.json: quantization_config.config_groups.group_0.weights". */
static int parse_args(const json_t *a, const char *path, int weights, ct_scheme *s,
                      char *err, size_t errlen)
{
    const json_t *v;
    char w[160];
    const char *strategy = "tensor";
    int dynamic = 0, symmetric = 1;

    if (!json_is_object(a)) {
        json_words(a, w, sizeof w);
        set_err(err, errlen, "%s: %s is not supported (%s)", path, w,
                weights ? "w8a8 needs int8 weights" : "w8a8 needs int8 activations");
        return -1;
    }
    v = json_object_get(a, "num_bits");
    if (!json_is_integer(v) || json_integer_value(v) != 8) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s.num_bits: %s is not supported (8)", path, w);
        return -1;
    }
    v = json_object_get(a, "type");
    if (v && !json_is_null(v) && !(json_is_string(v) && strcmp(json_string_value(v), "int") == 0)) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s.type: %s is not supported (int)", path, w);
        return -1;
    }
    v = json_object_get(a, "symmetric");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            json_words(v, w, sizeof w);
            set_err(err, errlen, "%s.symmetric: %s is not a boolean", path, w);
            return -1;
        }
        symmetric = json_is_true(v);
    }
    v = json_object_get(a, "dynamic");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            json_words(v, w, sizeof w);
            set_err(err, errlen, "%s.dynamic: %s is not supported (true or false)", path, w);
            return -1;
        }
        dynamic = json_is_true(v);
    }
    v = json_object_get(a, "strategy");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) {
            json_words(v, w, sizeof w);
            set_err(err, errlen, "%s.strategy: %s is not a string", path, w);
            return -1;
        }
        strategy = json_string_value(v);
    }
    v = json_object_get(a, "group_size");
    if (v && !json_is_null(v)) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s.group_size: %s is not supported (null: no groups)", path, w);
        return -1;
    }
    v = json_object_get(a, "block_structure");
    if (v && !json_is_null(v)) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s.block_structure: %s is not supported (null: no blocks)",
                path, w);
        return -1;
    }
    v = json_object_get(a, "actorder");
    if (v && !json_is_null(v) && !json_is_false(v)) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s.actorder: %s is not supported (null)", path, w);
        return -1;
    }

    if (weights) {
        if (strcmp(strategy, "channel") == 0) {
            s->weight_per_channel = 1;
        } else if (strcmp(strategy, "tensor") == 0) {
            s->weight_per_channel = 0;
        } else {
            set_err(err, errlen, "%s.strategy: \"%s\" is not supported (tensor or channel)",
                    path, strategy);
            return -1;
        }
        if (!symmetric) {
            set_err(err, errlen, "%s.symmetric: false is not supported (weights are "
                    "symmetric)", path);
            return -1;
        }
        if (dynamic) {
            set_err(err, errlen, "%s.dynamic: true is not supported (weights are stored "
                    "quantized)", path);
            return -1;
        }
    } else {
        if (strcmp(strategy, "token") == 0) {
            if (!dynamic) {
                set_err(err, errlen, "%s.dynamic: false is not supported with strategy "
                        "\"token\" (static activations are per tensor)", path);
                return -1;
            }
        } else if (strcmp(strategy, "tensor") == 0) {
            if (dynamic) {
                set_err(err, errlen, "%s.dynamic: true is not supported with strategy "
                        "\"tensor\" (dynamic activations are per token)", path);
                return -1;
            }
        } else {
            set_err(err, errlen, "%s.strategy: \"%s\" is not supported (token or tensor)",
                    path, strategy);
            return -1;
        }
        s->act_dynamic = dynamic;
        s->act_symmetric = symmetric;
    }
    return 0;
}

static int check_format(const json_t *v, const char *path, char *err, size_t errlen)
{
    char w[160];
    if (json_is_string(v) && (strcmp(json_string_value(v), "int-quantized") == 0 ||
                              strcmp(json_string_value(v), "naive-quantized") == 0))
        return 0;
    json_words(v, w, sizeof w);
    set_err(err, errlen, "%s: %s is not supported (int-quantized or naive-quantized)",
            path, w);
    return -1;
}

static int parse_group(ct_group *g, const char *key, const json_t *obj, const char *dn,
                       char *err, size_t errlen)
{
    char path[512], where[600], w[160];
    const json_t *targets, *v;
    size_t i;

    snprintf(path, sizeof path, "%s: quantization_config.config_groups.%s", dn, key);
    g->name = xstrdup(key);
    if (!g->name) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (!json_is_object(obj)) {
        set_err(err, errlen, "%s: not an object", path);
        return -1;
    }
    targets = json_object_get(obj, "targets");
    if (!json_is_array(targets) || json_array_size(targets) == 0) {
        json_words(targets, w, sizeof w);
        set_err(err, errlen, "%s.targets: %s is not supported (a non-empty list of "
                "names)", path, w);
        return -1;
    }
    g->targets = calloc(json_array_size(targets), sizeof *g->targets);
    if (!g->targets) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    for (i = 0; i < json_array_size(targets); i++) {
        v = json_array_get(targets, i);
        snprintf(where, sizeof where, "%s.targets[%zu]", path, i);
        if (!json_is_string(v)) {
            set_err(err, errlen, "%s: not a string", where);
            return -1;
        }
        if (matcher_init(&g->targets[i], json_string_value(v), where, err, errlen) != 0)
            return -1;
        g->ntargets = i + 1;
    }
    v = json_object_get(obj, "format");
    if (v && !json_is_null(v)) {
        snprintf(where, sizeof where, "%s.format", path);
        if (check_format(v, where, err, errlen) != 0)
            return -1;
    }
    snprintf(where, sizeof where, "%s.weights", path);
    if (parse_args(json_object_get(obj, "weights"), where, 1, &g->scheme, err, errlen) != 0)
        return -1;
    snprintf(where, sizeof where, "%s.input_activations", path);
    if (parse_args(json_object_get(obj, "input_activations"), where, 0, &g->scheme, err,
                   errlen) != 0)
        return -1;
    v = json_object_get(obj, "output_activations");
    if (v && !json_is_null(v)) {
        set_err(err, errlen, "%s.output_activations: not supported (null)", path);
        return -1;
    }
    return 0;
}

ct_config *ct_config_parse(const char *json, size_t len, const char *dn,
                           char *err, size_t errlen)
{
    json_error_t je;
    json_t *root, *qc, *v, *groups, *val;
    ct_config *c = NULL;
    const char *key;
    char w[160], where[512];
    size_t i;

    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        set_err(err, errlen, "%s: line %d, column %d: %s", dn, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        set_err(err, errlen, "%s: not a JSON object", dn);
        goto fail;
    }
    qc = json_object_get(root, "quantization_config");
    if (!json_is_object(qc)) {
        set_err(err, errlen, "%s: quantization_config: %s (not a quantized checkpoint)", dn,
                qc ? "not an object" : "missing");
        goto fail;
    }
    v = json_object_get(qc, "quant_method");
    if (!json_is_string(v) || strcmp(json_string_value(v), "compressed-tensors") != 0) {
        json_words(v, w, sizeof w);
        set_err(err, errlen, "%s: quantization_config.quant_method: %s is not supported "
                "(compressed-tensors)", dn, w);
        goto fail;
    }
    snprintf(where, sizeof where, "%s: quantization_config.format", dn);
    if (check_format(json_object_get(qc, "format"), where, err, errlen) != 0)
        goto fail;

    c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    v = json_object_get(root, "torch_dtype");
    if (!json_is_string(v))
        v = json_object_get(root, "dtype");
    if (json_is_string(v)) {
        const char *d = json_string_value(v);
        if (strncmp(d, "torch.", 6) == 0)
            d += 6;
        c->has_dtype = 1;
        if (strcmp(d, "float32") == 0)
            c->dtype = SMM_DTYPE_F32;
        else if (strcmp(d, "float16") == 0)
            c->dtype = SMM_DTYPE_F16;
        else if (strcmp(d, "bfloat16") == 0)
            c->dtype = SMM_DTYPE_BF16;
        else
            c->has_dtype = 0;
    }
    groups = json_object_get(qc, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) == 0) {
        json_words(groups, w, sizeof w);
        set_err(err, errlen, "%s: quantization_config.config_groups: %s is not supported "
                "(an object of one or more groups)", dn,
                json_is_object(groups) ? "an empty object" : w);
        goto fail;
    }
    c->groups = calloc(json_object_size(groups), sizeof *c->groups);
    if (!c->groups) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    json_object_foreach(groups, key, val) {
        ct_group *g = &c->groups[c->ngroups++];
        if (parse_group(g, key, val, dn, err, errlen) != 0)
            goto fail;
    }
    v = json_object_get(qc, "ignore");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v)) {
            set_err(err, errlen, "%s: quantization_config.ignore: not a list", dn);
            goto fail;
        }
        c->ignore = calloc(json_array_size(v) + 1, sizeof *c->ignore);
        if (!c->ignore) {
            set_err(err, errlen, "out of memory");
            goto fail;
        }
        for (i = 0; i < json_array_size(v); i++) {
            const json_t *e = json_array_get(v, i);
            snprintf(where, sizeof where, "%s: quantization_config.ignore[%zu]", dn, i);
            if (!json_is_string(e)) {
                set_err(err, errlen, "%s: not a string", where);
                goto fail;
            }
            if (matcher_init(&c->ignore[i], json_string_value(e), where, err, errlen) != 0)
                goto fail;
            c->nignore = i + 1;
        }
    }
    json_decref(root);
    return c;
fail:
    ct_config_free(c);
    json_decref(root);
    return NULL;
}

/* Reads a whole (small) file. */
static char *read_text(const char *path, size_t *len, char *err, size_t errlen)
{
    return st_read_small(path, CT_MAX_JSON, len, err, errlen);
}

ct_config *ct_config_load(const char *dir, char *err, size_t errlen)
{
    char *path = path_join(dir, "config.json");
    char *text;
    size_t len;
    ct_config *c;
    if (check_dir(dir, err, errlen) != 0) {
        free(path);
        return NULL;
    }
    if (!path) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    text = read_text(path, &len, err, errlen);
    if (!text) {
        free(path);
        return NULL;
    }
    c = ct_config_parse(text, len, path, err, errlen);
    free(text);
    free(path);
    return c;
}

/* 1 match, 0 no match, -1 a limit was reached (err says which pattern). */
static int matcher_hits(const ct_matcher *m, const char *name, char *err, size_t errlen)
{
    pcre2_match_data *md;
    pcre2_match_context *mc;
    int rc;
    if (!m->is_regex)
        return strcmp(m->text, name) == 0;
    md = pcre2_match_data_create(1, NULL);
    mc = pcre2_match_context_create(NULL);
    if (!md || !mc) {
        pcre2_match_data_free(md);
        pcre2_match_context_free(mc);
        set_err(err, errlen, "out of memory");
        return -1;
    }
    pcre2_set_match_limit(mc, CT_RE_MATCH_LIMIT);
    pcre2_set_depth_limit(mc, CT_RE_DEPTH_LIMIT);
    pcre2_set_heap_limit(mc, CT_RE_HEAP_LIMIT);
    rc = pcre2_match(m->re, (PCRE2_SPTR)name, strlen(name), 0, 0, md, mc);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    {
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
            snprintf((char *)msg, sizeof msg, "error %d", rc);
        set_err(err, errlen, "pattern \"%s\" on name %s: %s (the pattern needs too much "
                "backtracking; simplify it)", m->text, name, (const char *)msg);
    }
    return -1;
}

static int ignored_checked(const ct_config *c, const char *layer, char *err, size_t errlen)
{
    size_t i;
    for (i = 0; i < c->nignore; i++) {
        int h = matcher_hits(&c->ignore[i], layer, err, errlen);
        if (h != 0)
            return h;
    }
    return 0;
}

int ct_config_lookup(const ct_config *c, const char *layer, const ct_scheme **scheme,
                     const char **group_name, char *err, size_t errlen)
{
    size_t i, j;
    int pass, h;
    *scheme = NULL;
    h = ignored_checked(c, layer, err, errlen);
    if (h != 0)
        return h < 0 ? -1 : 0;
    /* exact names first, then regexes, then the class name (vLLM's order) */
    for (pass = 0; pass < 3; pass++) {
        for (i = 0; i < c->ngroups; i++) {
            for (j = 0; j < c->groups[i].ntargets; j++) {
                const ct_matcher *m = &c->groups[i].targets[j];
                int hit;
                if (pass == 0)
                    hit = !m->is_regex && strcmp(m->text, layer) == 0;
                else if (pass == 1)
                    hit = m->is_regex ? matcher_hits(m, layer, err, errlen) : 0;
                else
                    hit = !m->is_regex && strcmp(m->text, "Linear") == 0;
                if (hit < 0)
                    return -1;
                if (hit) {
                    if (group_name)
                        *group_name = c->groups[i].name;
                    *scheme = &c->groups[i].scheme;
                    return 0;
                }
            }
        }
    }
    return 0;
}

int ct_config_model_dtype(const ct_config *c, smm_dtype *out)
{
    if (!c->has_dtype)
        return -1;
    *out = c->dtype;
    return 0;
}

int ct_config_ignored(const ct_config *c, const char *layer)
{
    return ignored_checked(c, layer, NULL, 0) == 1;
}

const ct_scheme *ct_config_match(const ct_config *c, const char *layer,
                                 const char **group_name)
{
    const ct_scheme *s = NULL;
    if (ct_config_lookup(c, layer, &s, group_name, NULL, 0) != 0)
        return NULL;
    return s;
}

/* ------------------------------------------------------------------ */
/* Checkpoint layers                                                   */
/* ------------------------------------------------------------------ */

void ct_model_close(ct_model *m)
{
    size_t i;
    if (!m)
        return;
    for (i = 0; i < m->nlayers; i++) {
        free(m->layers[i].name);
        free(m->layers[i].weight_scale);
        free(m->layers[i].bias);
    }
    free(m->layers);
    for (i = 0; i < m->nunusable; i++) {
        free(m->unusable[i].name);
        free(m->unusable[i].why);
    }
    free(m->unusable);
    ct_config_free(m->config);
    st_checkpoint_close(m->ckpt);
    free(m);
}

const ct_layer *ct_model_find(const ct_model *m, const char *name)
{
    size_t i;
    for (i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].name, name) == 0)
            return &m->layers[i];
    return NULL;
}

const char *ct_model_unusable(const ct_model *m, const char *name)
{
    size_t i;
    for (i = 0; i < m->nunusable; i++)
        if (strcmp(m->unusable[i].name, name) == 0)
            return m->unusable[i].why;
    return NULL;
}

static void layer_free(ct_layer *L)
{
    free(L->name);
    free(L->weight_scale);
    free(L->bias);
    memset(L, 0, sizeof *L);
}

/* Looks up "<layer><suffix>". */
static const st_tensor *find_part(const st_checkpoint *ck, const char *layer,
                                  const char *suffix)
{
    char name[1024];
    if (snprintf(name, sizeof name, "%s%s", layer, suffix) >= (int)sizeof name)
        return NULL;
    return st_checkpoint_find(ck, name);
}

/* A single float value from a 1-element (any rank) float tensor. */
static int scalar_float(const st_tensor *t, float *out, char *err, size_t errlen)
{
    char sh[128];
    if (!is_float_dtype(t->dtype) || tensor_numel(t) != 1) {
        shape_words(t, sh, sizeof sh);
        set_err(err, errlen, "tensor %s: %s %s, expected one F32, F16 or BF16 value",
                t->name, st_dtype_name(t->dtype), sh);
        return -1;
    }
    *out = tensor_f32_at(t, 0);
    return 0;
}

static int load_layer(const ct_model *m, ct_layer *L, const st_tensor *w,
                      char *err, size_t errlen)
{
    const st_checkpoint *ck = m->ckpt;
    const st_tensor *t;
    char sh[128];
    int64_t i, len;
    size_t nl = strlen(w->name) - strlen(".weight");
    const ct_scheme *s;

    L->name = malloc(nl + 1);
    if (!L->name) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    memcpy(L->name, w->name, nl);
    L->name[nl] = '\0';
    if (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] < 1) {
        shape_words(w, sh, sizeof sh);
        set_err(err, errlen, "tensor %s: I8 %s, expected a 2-D [out_features, "
                "in_features] weight", w->name, sh);
        return -1;
    }
    L->n = w->shape[0];
    L->k = w->shape[1];
    L->weight = w->data;
    {
        int h = ignored_checked(m->config, L->name, err, errlen);
        if (h < 0)
            return -1;
        if (h) {
            set_err(err, errlen, "tensor %s is int8 but quantization_config.ignore names "
                    "layer %s", w->name, L->name);
            return -1;
        }
    }
    if (ct_config_lookup(m->config, L->name, &s, &L->group, err, errlen) != 0)
        return -1;
    if (!s) {
        set_err(err, errlen, "tensor %s is int8 but no quantization_config.config_groups "
                "entry targets layer %s", w->name, L->name);
        return -1;
    }
    L->scheme = *s;

    t = find_part(ck, L->name, ".weight_scale");
    if (!t) {
        set_err(err, errlen, "layer %s: tensor %s.weight_scale is missing", L->name,
                L->name);
        return -1;
    }
    len = tensor_numel(t);
    shape_words(t, sh, sizeof sh);
    if (!is_float_dtype(t->dtype) ||
        (s->weight_per_channel &&
         !((t->ndim == 2 && t->shape[0] == L->n && t->shape[1] == 1) ||
           (t->ndim == 1 && t->shape[0] == L->n))) ||
        (!s->weight_per_channel && len != 1)) {
        set_err(err, errlen, "tensor %s: %s %s, expected F32, F16 or BF16 %s (weights "
                "strategy \"%s\" of group %s)", t->name, st_dtype_name(t->dtype), sh,
                s->weight_per_channel ? "[N, 1] or [N] with N the weight's rows" :
                "[1] (one value)", s->weight_per_channel ? "channel" : "tensor", L->group);
        return -1;
    }
    L->weight_scale_len = len;
    L->weight_scale = malloc((size_t)len * sizeof(float));
    if (!L->weight_scale) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    for (i = 0; i < len; i++) {
        float v = tensor_f32_at(t, (size_t)i);
        if (!isfinite(v) || v < 0.0f) {
            set_err(err, errlen, "tensor %s: element %lld is %g (scales are finite and "
                    ">= 0)", t->name, (long long)i, (double)v);
            return -1;
        }
        L->weight_scale[i] = v;
    }

    if (!s->act_dynamic) {
        t = find_part(ck, L->name, ".input_scale");
        if (!t) {
            set_err(err, errlen, "layer %s: tensor %s.input_scale is missing (group %s has "
                    "static activations)", L->name, L->name, L->group);
            return -1;
        }
        if (scalar_float(t, &L->input_scale, err, errlen) != 0)
            return -1;
        if (!isfinite(L->input_scale) || !(L->input_scale > 0.0f)) {
            set_err(err, errlen, "tensor %s: %g (the scale must be finite and > 0)",
                    t->name, (double)L->input_scale);
            return -1;
        }
        if (!s->act_symmetric) {
            t = find_part(ck, L->name, ".input_zero_point");
            if (!t) {
                set_err(err, errlen, "layer %s: tensor %s.input_zero_point is missing "
                        "(group %s has static asymmetric activations)", L->name, L->name,
                        L->group);
                return -1;
            }
            if ((t->dtype != ST_I8 && t->dtype != ST_I32) || tensor_numel(t) != 1) {
                shape_words(t, sh, sizeof sh);
                set_err(err, errlen, "tensor %s: %s %s, expected one I8 or I32 value",
                        t->name, st_dtype_name(t->dtype), sh);
                return -1;
            }
            if (t->dtype == ST_I8) {
                L->input_zero_point = *(const int8_t *)t->data;
            } else {
                int32_t z;
                memcpy(&z, t->data, 4);
                L->input_zero_point = z;
            }
        }
    }

    t = find_part(ck, L->name, ".bias");
    if (t) {
        if (!is_float_dtype(t->dtype) || t->ndim != 1 || t->shape[0] != L->n) {
            shape_words(t, sh, sizeof sh);
            set_err(err, errlen, "tensor %s: %s %s, expected F32, F16 or BF16 [%lld]",
                    t->name, st_dtype_name(t->dtype), sh, (long long)L->n);
            return -1;
        }
        L->bias = malloc((size_t)L->n * sizeof(float));
        if (!L->bias) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        for (i = 0; i < L->n; i++)
            L->bias[i] = tensor_f32_at(t, (size_t)i);
    }
    return 0;
}

ct_model *ct_model_open(const char *dir, char *err, size_t errlen)
{
    ct_model *m = calloc(1, sizeof *m);
    size_t i, count;

    if (!m) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    m->config = ct_config_load(dir, err, errlen);
    if (!m->config)
        goto fail;
    m->ckpt = st_checkpoint_open(dir, err, errlen);
    if (!m->ckpt)
        goto fail;
    count = st_checkpoint_count(m->ckpt);
    m->layers = calloc(count ? count : 1, sizeof *m->layers);
    m->unusable = calloc(count ? count : 1, sizeof *m->unusable);
    if (!m->layers || !m->unusable) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    for (i = 0; i < count; i++) {
        const st_tensor *t = st_checkpoint_at(m->ckpt, i);
        ct_layer *L = &m->layers[m->nlayers];
        char why[1024] = "";
        if (t->dtype != ST_I8 || !ends_with(t->name, ".weight"))
            continue;
        if (load_layer(m, L, t, why, sizeof why) == 0) {
            m->nlayers++;
            continue;
        }
        /* this layer fails alone */
        if (!L->name) {
            set_err(err, errlen, "%s", why);
            goto fail;
        }
        m->unusable[m->nunusable].name = L->name;
        L->name = NULL;
        layer_free(L);
        m->unusable[m->nunusable].why = xstrdup(why);
        if (!m->unusable[m->nunusable++].why) {
            set_err(err, errlen, "out of memory");
            goto fail;
        }
    }
    if (m->nlayers == 0) {
        if (m->nunusable > 0)
            set_err(err, errlen, "%s%s", m->unusable[0].why,
                    m->nunusable > 1 ? " (and no other layer is usable)" : "");
        else
            set_err(err, errlen, "%s: no quantized layer (no I8 \"*.weight\" tensor)", dir);
        goto fail;
    }
    return m;
fail:
    ct_model_close(m);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* The forward of one layer                                            */
/* ------------------------------------------------------------------ */

int ct_layer_forward(smm_context *ctx, const ct_layer *L, int64_t m, const void *x,
                     smm_dtype x_dtype, void *y, smm_dtype y_dtype, char *err, size_t errlen)
{
    return ct_layer_forward_bias(ctx, L, m, x, x_dtype, y, y_dtype, SMM_DTYPE_F32, err,
                                 errlen);
}

int ct_layer_forward_bias(smm_context *ctx, const ct_layer *L, int64_t m, const void *x,
                          smm_dtype x_dtype, void *y, smm_dtype y_dtype, smm_dtype bias_dtype,
                          char *err, size_t errlen)
{
    float *bias = NULL;
    smm_quantize_args qa;
    smm_scaled_mm_args sa;
    int8_t *q = NULL;
    float *scale = NULL;
    int32_t *azp = NULL;
    int64_t nscale = L->scheme.act_dynamic ? m : 1;
    int use_azp = !L->scheme.act_symmetric;
    smm_status st;
    int rc = -1;

    if (m < 1) {
        set_err(err, errlen, "layer %s: no activation rows", L->name);
        return -1;
    }
    if (L->bias && (bias_dtype == SMM_DTYPE_F16 || bias_dtype == SMM_DTYPE_BF16)) {
        int64_t i;
        bias = malloc((size_t)L->n * sizeof *bias);
        if (!bias) {
            set_err(err, errlen, "layer %s: out of memory", L->name);
            return -1;
        }
        for (i = 0; i < L->n; i++)
            bias[i] = bias_dtype == SMM_DTYPE_F16 ? smm_f16_to_f32(smm_f32_to_f16(L->bias[i]))
                                                  : smm_bf16_to_f32(smm_f32_to_bf16(L->bias[i]));
    }
    q = malloc((size_t)m * (size_t)L->k);
    scale = malloc((size_t)nscale * sizeof *scale);
    azp = use_azp ? malloc((size_t)nscale * sizeof *azp) : NULL;
    if (!q || !scale || (use_azp && !azp)) {
        set_err(err, errlen, "layer %s: out of memory for %lld activation rows", L->name,
                (long long)m);
        goto done;
    }
    if (!L->scheme.act_dynamic) {
        scale[0] = L->input_scale;
        if (use_azp)
            azp[0] = L->input_zero_point;
    }

    memset(&qa, 0, sizeof qa);
    qa.m = m;
    qa.k = L->k;
    qa.x = x;
    qa.x_dtype = x_dtype;
    qa.ldx = L->k;
    qa.q = q;
    qa.ldq = L->k;
    qa.scale = scale;
    qa.azp = azp;
    qa.mode = L->scheme.act_dynamic ? SMM_QUANT_DYNAMIC_PER_TOKEN
                                    : SMM_QUANT_STATIC_PER_TENSOR;
    st = smm_quantize_i8(ctx, &qa);
    if (st != SMM_OK) {
        set_err(err, errlen, "layer %s: smm_quantize_i8: %s (%s)", L->name,
                smm_strerror(st), smm_context_last_error(ctx));
        goto done;
    }

    memset(&sa, 0, sizeof sa);
    sa.m = m;
    sa.n = L->n;
    sa.k = L->k;
    sa.a = q;
    sa.lda = L->k;
    sa.b = L->weight;
    sa.ldb = L->k;
    sa.scale_a = scale;
    sa.scale_a_len = nscale;
    sa.scale_b = L->weight_scale;
    sa.scale_b_len = L->weight_scale_len;
    sa.bias = bias ? bias : L->bias;
    sa.azp = azp;
    sa.azp_len = use_azp ? nscale : 0;
    sa.c = y;
    sa.ldc = L->n;
    sa.c_dtype = y_dtype;
    st = smm_scaled_mm(ctx, &sa);
    if (st != SMM_OK) {
        set_err(err, errlen, "layer %s: smm_scaled_mm: %s (%s)", L->name, smm_strerror(st),
                smm_context_last_error(ctx));
        goto done;
    }
    rc = 0;
done:
    free(q);
    free(scale);
    free(azp);
    free(bias);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Quantizing a float checkpoint                                       */
/* ------------------------------------------------------------------ */

int ct_is_linear_weight(const st_tensor *t)
{
    const char *name = t->name, *last, *p;
    size_t nl;
    char module[1024];

    if (t->ndim != 2 || !is_float_dtype(t->dtype) || !ends_with(name, ".weight"))
        return 0;
    if (t->shape[0] < 1 || t->shape[1] < 1)
        return 0;   /* an empty Linear is copied as is: no int8 layer to run */
    nl = strlen(name) - strlen(".weight");
    if (nl == 0 || nl >= sizeof module)
        return 0;
    memcpy(module, name, nl);
    module[nl] = '\0';
    /* any component with "embed" or "norm", case-insensitive */
    for (p = module; *p; p++)
        if (strncasecmp(p, "embed", 5) == 0 || strncasecmp(p, "norm", 4) == 0)
            return 0;
    last = strrchr(module, '.');
    last = last ? last + 1 : module;
    if (strcmp(last, "lm_head") == 0)
        return 0;
    return 1;
}

float ct_quantize_row(const float *w, int64_t k, int8_t *q)
{
    float mn = 0.0f, mx = 0.0f, amax, scale;
    int64_t i;

    /* min(w, 0) and max(w, 0): the observer's running extremes clamped so
     * that zero is representable */
    for (i = 0; i < k; i++) {
        if (w[i] < mn)
            mn = w[i];
        if (w[i] > mx)
            mx = w[i];
    }
    amax = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
    scale = amax / 127.5f;               /* (qmax - qmin) / 2 = 255 / 2 */
    if (scale == 0.0f)
        scale = FLT_EPSILON;             /* torch.finfo(float32).eps */
    for (i = 0; i < k; i++) {
        float v = w[i] / scale;
        if (v < -128.0f)
            v = -128.0f;
        if (v > 127.0f)
            v = 127.0f;
        q[i] = (int8_t)nearbyintf(v);    /* ties to even (default rounding) */
    }
    return scale;
}

static float round_to(st_dtype dt, float v)
{
    return dt == ST_F16 ? smm_f16_to_f32(smm_f32_to_f16(v))
                        : smm_bf16_to_f32(smm_f32_to_bf16(v));
}

float ct_quantize_row_dtype(const float *w, int64_t k, st_dtype dt, int8_t *q)
{
    float mn = 0.0f, mx = 0.0f, amax, scale;
    int64_t i;

    if (dt != ST_F16 && dt != ST_BF16)
        return ct_quantize_row(w, k, q);
    for (i = 0; i < k; i++) {
        if (w[i] < mn)
            mn = w[i];
        if (w[i] > mx)
            mx = w[i];
    }
    amax = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
    scale = round_to(dt, amax / 127.5f);   /* 255 and 127.5 are exact in both types */
    if (scale == 0.0f)
        scale = dt == ST_F16 ? 0x1p-10f : 0x1p-7f;   /* torch.finfo(dt).eps */
    for (i = 0; i < k; i++) {
        float v = round_to(dt, w[i] / scale);
        if (v < -128.0f)
            v = -128.0f;
        if (v > 127.0f)
            v = 127.0f;
        q[i] = (int8_t)nearbyintf(v);
    }
    return scale;
}

/* Which file of in_dir holds each tensor. */
typedef struct shard_map {
    char **files;        /* distinct file names, in order of appearance */
    size_t nfiles;
    json_t *weight_map;  /* index's weight_map (NULL: one model.safetensors) */
    json_t *index;
} shard_map;

static void shard_map_free(shard_map *s)
{
    size_t i;
    for (i = 0; i < s->nfiles; i++)
        free(s->files[i]);
    free(s->files);
    json_decref(s->index);
    memset(s, 0, sizeof *s);
}

static int shard_map_load(shard_map *s, const char *in_dir, char *err, size_t errlen)
{
    char *path = path_join(in_dir, "model.safetensors.index.json");
    const char *key;
    json_t *val;
    struct stat sb;

    memset(s, 0, sizeof *s);
    if (!path) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (lstat(path, &sb) != 0) {
        free(path);
        s->files = malloc(sizeof *s->files);
        if (!s->files || !(s->files[0] = xstrdup("model.safetensors"))) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        s->nfiles = 1;
        return 0;
    }
    s->index = load_json_file(path, err, errlen);
    if (!s->index || !json_is_object(json_object_get(s->index, "weight_map"))) {
        if (s->index)
            set_err(err, errlen, "%s: no weight_map object", path);
        free(path);
        return -1;
    }
    free(path);
    s->weight_map = json_object_get(s->index, "weight_map");
    s->files = calloc(json_object_size(s->weight_map) + 1, sizeof *s->files);
    if (!s->files) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    json_object_foreach(s->weight_map, key, val) {
        const char *f = json_string_value(val);
        size_t i;
        if (!f) {
            set_err(err, errlen, "model.safetensors.index.json: weight_map.%s: not a "
                    "string", key);
            return -1;
        }
        for (i = 0; i < s->nfiles; i++)
            if (strcmp(s->files[i], f) == 0)
                break;
        if (i == s->nfiles && !(s->files[s->nfiles++] = xstrdup(f))) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

static const char *shard_of(const shard_map *s, const char *tensor)
{
    if (!s->weight_map)
        return s->files[0];
    return json_string_value(json_object_get(s->weight_map, tensor));
}

/* Writes a JSON value to path through a temporary file renamed into place. */
static int write_json(const char *path, const json_t *v, char *err, size_t errlen)
{
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    int rc = -1;
    if (!tmp) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    if (json_dump_file(v, tmp, JSON_INDENT(2)) != 0) {
        set_err(err, errlen, "%s: cannot write", tmp);
    } else if (rename(tmp, path) != 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
    } else {
        rc = 0;
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    int fd = st_open_regular(from, NULL, err, errlen);
    FILE *in, *out;
    char buf[65536];
    size_t n, len = strlen(to) + 16;
    char *tmp;
    int rc = 0;

    if (fd < 0)
        return -1;
    in = fdopen(fd, "rb");
    if (!in) {
        set_err(err, errlen, "%s: %s", from, strerror(errno));
        close(fd);
        return -1;
    }
    tmp = malloc(len);
    if (!tmp) {
        fclose(in);
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, len, "%s.tmp%ld", to, (long)getpid());
    out = fopen(tmp, "wb");
    if (!out) {
        set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        fclose(in);
        free(tmp);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = -1;
            break;
        }
    if (ferror(in))
        rc = -1;
    if (fclose(out) != 0)
        rc = -1;
    fclose(in);
    if (rc == 0 && rename(tmp, to) != 0)
        rc = -1;
    if (rc != 0) {
        set_err(err, errlen, "%s: cannot copy to %s", from, to);
        unlink(tmp);
    }
    free(tmp);
    return rc;
}

/* The version of compressed-tensors whose quantization_config layout this
 * tool writes (the keys of tests/data/ct-quantization-config.json). */
#define CT_FORMAT_VERSION "0.20.1"

/* The quantization_config this tool writes: every key compressed-tensors
 * (llm-compressor's save_pretrained) writes for an int8 w8a8 model, in its
 * order. `ignore` lists lm_head when the model has one, as
 * compressed-tensors lists the ignored modules that exist. */
static json_t *qconfig_json(int has_lm_head)
{
    json_t *w = json_pack("{s:b, s:n, s:i, s:s, s:b, s:s}",
                          "dynamic", 0, "group_size", "num_bits", 8,
                          "strategy", "channel", "symmetric", 1, "type", "int");
    json_t *a = json_pack("{s:b, s:n, s:i, s:s, s:b, s:s}",
                          "dynamic", 1, "group_size", "num_bits", 8,
                          "strategy", "token", "symmetric", 1, "type", "int");
    json_t *ignore = has_lm_head ? json_pack("[s]", "lm_head") : json_array();
    return json_pack("{s:{s:{s:s, s:o, s:n, s:[s], s:o}}, s:s, s:n, s:o, s:n, s:n, s:s, "
                     "s:s, s:{}, s:{}, s:s}",
                     "config_groups", "group_0", "format", "int-quantized",
                     "input_activations", a, "output_activations", "targets", "Linear",
                     "weights", w,
                     "format", "int-quantized",
                     "global_compression_ratio",
                     "ignore", ignore,
                     "kv_cache_scheme",
                     "moe_sparsity_config",
                     "quant_method", "compressed-tensors",
                     "quantization_status", "compressed",
                     "sparsity_config",
                     "transform_config",
                     "version", CT_FORMAT_VERSION);
}

static int same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* One output tensor: either borrowed from the input or owned. */
typedef struct out_tensor {
    st_tensor t;
    void *owned;
    char *owned_name;
} out_tensor;

/* Builds the tensors of one output shard: quantized Linear weights with
 * their scales, everything else as is. */
static int build_shard(const st_checkpoint *ck, const shard_map *map, const char *file,
                       ct_match_mode mode, out_tensor **out, size_t *nout, size_t *done,
                       size_t *quantized, size_t total, ct_progress_fn progress, void *user,
                       char *err, size_t errlen)
{
    size_t i, count = st_checkpoint_count(ck), n = 0;
    out_tensor *o = calloc(2 * count + 1, sizeof *o);
    float *row = NULL;

    if (!o) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    *out = o;
    for (i = 0; i < count; i++) {
        const st_tensor *t = st_checkpoint_at(ck, i);
        const char *f = shard_of(map, t->name);
        if (!f || strcmp(f, file) != 0)
            continue;
        if (progress)
            progress(++*done, total, t->name, user);
        if (!ct_is_linear_weight(t)) {
            o[n++].t = *t;
            continue;
        }
        {
            int64_t N = t->shape[0], K = t->shape[1], r, c;
            /* llm-compressor stores the scales in the model's (the weight's) dtype */
            st_dtype sdt = mode == CT_MATCH_LLM_COMPRESSOR ? t->dtype : ST_F32;
            int8_t *q = malloc((size_t)N * (size_t)K);
            float *sc = malloc((size_t)N * sizeof *sc);
            size_t nl = strlen(t->name);
            char *sname = malloc(nl + 8);
            out_tensor *qt = &o[n], *st = &o[n + 1];
            n += 2;
            row = realloc(row, (size_t)(K > 0 ? K : 1) * sizeof *row);
            qt->owned = q;
            st->owned = sc;
            st->owned_name = sname;
            if (!q || !sc || !sname || !row) {
                set_err(err, errlen, "%s: out of memory", t->name);
                goto fail;
            }
            snprintf(sname, nl + 8, "%s_scale", t->name);   /* <module>.weight_scale */
            if (st_checkpoint_find(ck, sname)) {
                set_err(err, errlen, "tensor %s: already present in the input (is it "
                        "already quantized?)", sname);
                goto fail;
            }
            for (r = 0; r < N; r++) {
                for (c = 0; c < K; c++) {
                    row[c] = tensor_f32_at(t, (size_t)(r * K + c));
                    if (!isfinite(row[c])) {
                        set_err(err, errlen, "tensor %s: element [%lld, %lld] is %g "
                                "(weights must be finite)", t->name, (long long)r,
                                (long long)c, (double)row[c]);
                        goto fail;
                    }
                }
                sc[r] = mode == CT_MATCH_LLM_COMPRESSOR
                    ? ct_quantize_row_dtype(row, K, t->dtype, q + r * K)
                    : ct_quantize_row(row, K, q + r * K);
            }
            if (sdt != ST_F32) {
                /* scale values of sdt, stored in place as 16-bit values */
                uint16_t *h = (uint16_t *)sc;
                for (r = 0; r < N; r++) {
                    uint16_t v = sdt == ST_F16 ? smm_f32_to_f16(sc[r]) : smm_f32_to_bf16(sc[r]);
                    memcpy(h + r, &v, 2);
                }
            }
            ++*quantized;
            qt->t = *t;
            qt->t.dtype = ST_I8;
            qt->t.data = q;
            qt->t.nbytes = (size_t)N * (size_t)K;
            memset(&st->t, 0, sizeof st->t);
            st->t.name = sname;
            st->t.dtype = sdt;
            st->t.ndim = 2;
            st->t.shape[0] = N;
            st->t.shape[1] = 1;
            st->t.data = sc;
            st->t.nbytes = (size_t)N * st_dtype_size(sdt);
        }
    }
    free(row);
    *nout = n;
    return 0;
fail:
    free(row);
    *nout = n;
    return -1;
}

static void free_shard(out_tensor *o, size_t n)
{
    size_t i;
    for (i = 0; o && i < n; i++) {
        free(o[i].owned);
        free(o[i].owned_name);
    }
    free(o);
}

/* The files ct_quantize_checkpoint has written into its staging
 * directory (names relative to it). */
typedef struct staged {
    char *dir;    /* OUT_DIR/.scaledmm-quantize.XXXXXX, or NULL */
    char **names; /* files, relative paths ("1_Pooling/config.json") */
    size_t n, cap;
    char **dirs;  /* subdirectories, parents before children */
    size_t ndirs, dcap;
} staged;

/* Creates the subdirectory `rel` in the staging directory and records it. */
static int stage_dir(staged *sg, const char *rel, char *err, size_t errlen)
{
    char *path, *copy;
    if (sg->ndirs == sg->dcap) {
        size_t cap = sg->dcap ? 2 * sg->dcap : 8;
        char **nd = realloc(sg->dirs, cap * sizeof *nd);
        if (!nd) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        sg->dirs = nd;
        sg->dcap = cap;
    }
    path = path_join(sg->dir, rel);
    copy = xstrdup(rel);
    if (!path || !copy) {
        free(path);
        free(copy);
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (mkdir(path, 0777) != 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        free(path);
        free(copy);
        return -1;
    }
    free(path);
    sg->dirs[sg->ndirs++] = copy;
    return 0;
}

/* The staging path of `name`, recorded as written (the caller writes it
 * next); NULL when out of memory or when `name` was staged already (err
 * set). */
static char *stage_file(staged *sg, const char *name, char *err, size_t errlen)
{
    char *path, *copy;
    size_t i;
    for (i = 0; i < sg->n; i++)
        if (strcmp(sg->names[i], name) == 0) {
            set_err(err, errlen, "%s: two outputs of that name", name);
            return NULL;
        }
    if (sg->n == sg->cap) {
        size_t cap = sg->cap ? 2 * sg->cap : 16;
        char **nn = realloc(sg->names, cap * sizeof *nn);
        if (!nn) {
            set_err(err, errlen, "out of memory");
            return NULL;
        }
        sg->names = nn;
        sg->cap = cap;
    }
    path = path_join(sg->dir, name);
    copy = strdup(name);
    if (!path || !copy) {
        free(path);
        free(copy);
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    sg->names[sg->n++] = copy;
    return path;
}

/* Moves every staged file into out_dir. Every name there is checked
 * first: a regular file or a symbolic link is replaced (the link itself,
 * not the file it names; a regular file keeps its mode), anything else (a
 * directory, a device) stops the commit before anything is moved. Returns
 * 0, or -1 with err set. */
static int stage_commit(staged *sg, const char *out_dir, char *err, size_t errlen)
{
    size_t i;
    int pass;
    for (pass = 0; pass < 2; pass++) {
        /* subdirectories: an existing directory is merged into (its other
         * entries stay), anything else of that name stops the commit */
        for (i = 0; i < sg->ndirs; i++) {
            char *to = path_join(out_dir, sg->dirs[i]);
            struct stat sb;
            int ok = to != NULL, exists = 0;
            if (!ok)
                set_err(err, errlen, "out of memory");
            if (ok && lstat(to, &sb) == 0)
                exists = 1;
            else if (ok && errno != ENOENT) {
                set_err(err, errlen, "%s: %s", to, strerror(errno));
                ok = 0;
            }
            if (ok && pass == 0 && exists && !S_ISDIR(sb.st_mode)) {
                set_err(err, errlen, "%s: exists and is not a directory (nothing was "
                        "written)", to);
                ok = 0;
            }
            if (ok && pass == 1 && !exists && mkdir(to, 0777) != 0) {
                set_err(err, errlen, "%s: %s (the files before it in %s were replaced)",
                        to, strerror(errno), out_dir);
                ok = 0;
            }
            free(to);
            if (!ok)
                return -1;
        }
        for (i = 0; i < sg->n; i++) {
            char *from = path_join(sg->dir, sg->names[i]), *to = path_join(out_dir, sg->names[i]);
            struct stat sb;
            int ok = from && to, exists = 0;
            if (!ok)
                set_err(err, errlen, "out of memory");
            if (ok && lstat(to, &sb) == 0)
                exists = 1;
            else if (ok && errno != ENOENT) {
                set_err(err, errlen, "%s: %s", to, strerror(errno));
                ok = 0;
            }
            if (ok && pass == 0 && exists && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
                set_err(err, errlen, "%s: exists and is not a file (nothing was written)",
                        to);
                ok = 0;
            }
            if (ok && pass == 1) {
                if (exists && S_ISREG(sb.st_mode))
                    (void)chmod(from, sb.st_mode & 07777);
                if (rename(from, to) != 0) {
                    set_err(err, errlen, "%s: %s (the files before it in %s were replaced)",
                            to, strerror(errno), out_dir);
                    ok = 0;
                }
            }
            free(from);
            free(to);
            if (!ok)
                return -1;
        }
    }
    return 0;
}

/* Removes what is left in the staging directory, and the directory. */
static void stage_free(staged *sg)
{
    size_t i;
    for (i = 0; i < sg->n; i++) {
        char *p = sg->dir ? path_join(sg->dir, sg->names[i]) : NULL;
        if (p)
            (void)unlink(p); /* gone already once committed */
        free(p);
        free(sg->names[i]);
    }
    for (i = sg->ndirs; i-- > 0;) {
        char *p = sg->dir ? path_join(sg->dir, sg->dirs[i]) : NULL;
        if (p)
            (void)rmdir(p);
        free(p);
        free(sg->dirs[i]);
    }
    if (sg->dir)
        (void)rmdir(sg->dir);
    free(sg->names);
    free(sg->dirs);
    free(sg->dir);
}

/* Copies the directory in_root/rel (rel "" for the top) into the staging
 * directory, recursively: regular files and directories (symbolic links
 * followed); hidden folders (".git", ".cache") and other file types (FIFOs,
 * sockets, devices) left out. At the top, config.json, the index and the
 * *.safetensors files (the weights, written quantized) are not copied. The
 * output directory, when it lies inside the input, is not copied. */
#define CT_COPY_MAX_DEPTH 32
static int copy_tree(staged *sg, const char *in_root, const char *rel, int depth,
                     const struct stat *out_sb, const shard_map *map,
                     ct_quantize_stats *stats, char *err, size_t errlen)
{
    char *dirpath = rel[0] ? path_join(in_root, rel) : xstrdup(in_root);
    DIR *d;
    struct dirent *e;
    int rc = -1;
    size_t fi;

    if (!dirpath) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    if (depth > CT_COPY_MAX_DEPTH) {
        set_err(err, errlen, "%s: more than %d directory levels (a symbolic link loop?)",
                dirpath, CT_COPY_MAX_DEPTH);
        free(dirpath);
        return -1;
    }
    d = opendir(dirpath);
    if (!d) {
        set_err(err, errlen, "%s: %s", dirpath, strerror(errno));
        free(dirpath);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        char *from = NULL, *relname = NULL, *to = NULL;
        struct stat sb;
        int skip = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0, ok = 1;
        if (!skip && rel[0] == '\0') {
            skip = ends_with(e->d_name, ".safetensors") ||
                   strcmp(e->d_name, "model.safetensors.index.json") == 0 ||
                   strcmp(e->d_name, "config.json") == 0;
            for (fi = 0; !skip && fi < map->nfiles; fi++)
                skip = strcmp(e->d_name, map->files[fi]) == 0; /* a shard, quantized */
        }
        if (skip)
            continue;
        from = path_join(dirpath, e->d_name);
        relname = rel[0] ? path_join(rel, e->d_name) : xstrdup(e->d_name);
        if (!from || !relname) {
            set_err(err, errlen, "out of memory");
            ok = 0;
        } else if (stat(from, &sb) != 0) {
            ok = 1; /* a dangling link: nothing to copy */
        } else if (S_ISDIR(sb.st_mode)) {
            /* not hidden folders (.git, .cache), nor the output */
            if (e->d_name[0] != '.' &&
                !(sb.st_dev == out_sb->st_dev && sb.st_ino == out_sb->st_ino)) {
                ok = stage_dir(sg, relname, err, errlen) == 0 &&
                     copy_tree(sg, in_root, relname, depth + 1, out_sb, map, stats, err,
                               errlen) == 0;
                if (ok && stats)
                    stats->dirs_copied++;
            }
        } else if (S_ISREG(sb.st_mode)) {
            to = stage_file(sg, relname, err, errlen);
            ok = to && copy_file(from, to, err, errlen) == 0;
            if (ok && stats)
                stats->files_copied++;
        }
        free(from);
        free(relname);
        free(to);
        if (!ok)
            goto done;
    }
    rc = 0;
done:
    closedir(d);
    free(dirpath);
    return rc;
}

int ct_quantize_checkpoint(const char *in_dir, const char *out_dir,
                           ct_progress_fn progress, void *user, char *err, size_t errlen)
{
    return ct_quantize_checkpoint_ex(in_dir, out_dir, CT_MATCH_CONTRACT, progress, user, NULL,
                                     err, errlen);
}

int ct_quantize_checkpoint_ex(const char *in_dir, const char *out_dir, ct_match_mode mode,
                              ct_progress_fn progress, void *user, ct_quantize_stats *stats,
                              char *err, size_t errlen)
{
    st_checkpoint *ck = NULL;
    shard_map map;
    json_t *config = NULL, *index_out = NULL, *wm_out = NULL;
    char *path = NULL;
    size_t fi, done = 0, total;
    double total_size = 0;
    int rc = -1, created = 0;
    struct stat sb;
    staged sg;
    size_t quantized = 0;
    static const char *const meta_keys[] = { "format" };
    static const char *const meta_values[] = { "pt" };

    memset(&map, 0, sizeof map);
    memset(&sg, 0, sizeof sg);
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (check_dir(in_dir, err, errlen) != 0)
        return -1;
    ck = st_checkpoint_open(in_dir, err, errlen);
    if (!ck)
        return -1;
    if (shard_map_load(&map, in_dir, err, errlen) != 0)
        goto done;

    /* config.json: the input's, which must not be quantized already */
    path = path_join(in_dir, "config.json");
    if (!path) {
        set_err(err, errlen, "out of memory");
        goto done;
    }
    if (lstat(path, &sb) == 0) {
        config = load_json_file(path, err, errlen);
        if (!config)
            goto done;
        if (!json_is_object(config)) {
            set_err(err, errlen, "%s: not a JSON object", path);
            goto done;
        }
        if (json_object_get(config, "quantization_config")) {
            set_err(err, errlen, "%s: has a quantization_config already (the input must "
                    "be a float checkpoint)", path);
            goto done;
        }
    } else {
        config = json_object();
    }
    free(path);
    path = NULL;
    if (!config || json_object_set_new(config, "quantization_config",
                                       qconfig_json(st_checkpoint_find(ck, "lm_head.weight")
                                                    != NULL)) != 0) {
        set_err(err, errlen, "out of memory");
        goto done;
    }

    if (mkdir(out_dir, 0777) == 0) {
        created = 1;
    } else if (errno != EEXIST) {
        set_err(err, errlen, "%s: %s", out_dir, strerror(errno));
        goto done;
    }
    if (stat(out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        set_err(err, errlen, "%s: not a directory", out_dir);
        goto done;
    }
    if (same_dir(in_dir, out_dir)) {
        set_err(err, errlen, "%s: the output directory is the input directory", out_dir);
        goto done;
    }
    /* Everything is written into a staging directory inside out_dir and
     * moved into out_dir once all of it is written: a failure (a
     * non-finite weight in the last shard, a full disk) leaves out_dir as
     * it was. */
    sg.dir = path_join(out_dir, ".scaledmm-quantize.XXXXXX");
    if (!sg.dir) {
        set_err(err, errlen, "out of memory");
        goto done;
    }
    if (!mkdtemp(sg.dir)) {
        set_err(err, errlen, "%s: cannot create a staging directory: %s", out_dir,
                strerror(errno));
        free(sg.dir);
        sg.dir = NULL;
        goto done;
    }

    if (map.weight_map) {
        index_out = json_object();
        wm_out = json_object();
        if (!index_out || !wm_out) {
            set_err(err, errlen, "out of memory");
            goto done;
        }
    }
    total = st_checkpoint_count(ck);
    if (stats) {
        stats->tensors = total;
        stats->shards = map.nfiles;
    }
    for (fi = 0; fi < map.nfiles; fi++) {
        out_tensor *o = NULL;
        st_tensor *ts;
        size_t n = 0, i;
        int ok;
        if (strchr(map.files[fi], '/')) {
            set_err(err, errlen, "model.safetensors.index.json: shard \"%s\" is not a file "
                    "name of the directory", map.files[fi]);
            goto done;
        }
        ok = build_shard(ck, &map, map.files[fi], mode, &o, &n, &done,
                         stats ? &stats->quantized : &quantized, total, progress, user, err,
                         errlen) == 0;
        ts = ok ? malloc((n ? n : 1) * sizeof *ts) : NULL;
        if (ok && !ts) {
            set_err(err, errlen, "out of memory");
            ok = 0;
        }
        if (ok) {
            for (i = 0; i < n; i++) {
                ts[i] = o[i].t;
                total_size += (double)o[i].t.nbytes;
                if (wm_out && json_object_set_new(wm_out, o[i].t.name,
                                                  json_string(map.files[fi])) != 0) {
                    set_err(err, errlen, "out of memory");
                    ok = 0;
                    break;
                }
            }
        }
        if (ok) {
            path = stage_file(&sg, map.files[fi], err, errlen);
            ok = path && st_write(path, ts, n, meta_keys, meta_values, 1, err, errlen) == 0;
            free(path);
            path = NULL;
        }
        free(ts);
        free_shard(o, n);
        if (!ok)
            goto done;
    }
    if (index_out) {
        json_object_set_new(index_out, "metadata",
                            json_pack("{s:I}", "total_size", (json_int_t)total_size));
        json_object_set(index_out, "weight_map", wm_out);
        path = stage_file(&sg, "model.safetensors.index.json", err, errlen);
        if (!path || write_json(path, index_out, err, errlen) != 0)
            goto done;
        free(path);
        path = NULL;
    }
    path = stage_file(&sg, "config.json", err, errlen);
    if (!path || write_json(path, config, err, errlen) != 0)
        goto done;
    free(path);
    path = NULL;

    /* the other files and folders of the model (tokenizer, generation
     * config, sentence-transformers' 1_Pooling/ and 2_Normalize/, README) */
    if (stat(out_dir, &sb) != 0) {
        set_err(err, errlen, "%s: %s", out_dir, strerror(errno));
        goto done;
    }
    if (copy_tree(&sg, in_dir, "", 0, &sb, &map, stats, err, errlen) != 0)
        goto done;
    if (stage_commit(&sg, out_dir, err, errlen) != 0)
        goto done;
    rc = 0;
done:
    stage_free(&sg);
    if (rc != 0 && created)
        (void)rmdir(out_dir); /* empty: nothing was moved into it */
    free(path);
    json_decref(config);
    json_decref(index_out);
    json_decref(wm_out);
    shard_map_free(&map);
    st_checkpoint_close(ck);
    return rc;
}

const char *ct_scheme_words(const ct_scheme *s)
{
    if (s->act_dynamic)
        return s->weight_per_channel
            ? (s->act_symmetric ? "w:channel a:token-sym" : "w:channel a:token-asym")
            : (s->act_symmetric ? "w:tensor a:token-sym" : "w:tensor a:token-asym");
    return s->weight_per_channel
        ? (s->act_symmetric ? "w:channel a:static-sym" : "w:channel a:static-asym")
        : (s->act_symmetric ? "w:tensor a:static-sym" : "w:tensor a:static-asym");
}
