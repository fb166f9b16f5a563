/*
 * ctensors.h - compressed-tensors int8 w8a8 checkpoints: the
 * "quantization_config" of config.json, the layers it describes, running one
 * layer as vLLM runs it, and turning a float checkpoint into one.
 *
 * The layout is llm-compressor's (what vLLM's compressed-tensors loader
 * serves, e.g. RedHatAI/Meta-Llama-3.1-405B-Instruct-quantized.w8a8):
 *
 *   config.json  "quantization_config": {
 *       "quant_method": "compressed-tensors",
 *       "format": "int-quantized" (or "naive-quantized"),
 *       "ignore": ["lm_head", "re:.*mlp.gate$", ...],
 *       "config_groups": { "group_0": {
 *           "targets": ["Linear"],
 *           "weights": {"num_bits": 8, "type": "int", "symmetric": true,
 *                       "strategy": "channel" | "tensor", "dynamic": false},
 *           "input_activations": {"num_bits": 8, "type": "int",
 *                       "symmetric": true | false,
 *                       "strategy": "token" (dynamic) | "tensor" (static),
 *                       "dynamic": true | false} } } }
 *   tensors      <layer>.weight            I8, N x K ([out, in])
 *                <layer>.weight_scale      F32/F16/BF16, N x 1 or N (channel),
 *                                          1 or 1 x 1 (tensor)
 *                <layer>.input_scale       static activations: 1 element
 *                <layer>.input_zero_point  static asymmetric: 1 element,
 *                                          I8 or I32
 *                <layer>.bias              optional, N, F32/F16/BF16
 *
 * Scheme -> library modes (doc/accuracy.md):
 *   weights channel -> scale_b per channel (N); tensor -> per tensor (1)
 *   activations dynamic token symmetric  -> SMM_QUANT_DYNAMIC_PER_TOKEN, azp NULL
 *               dynamic token asymmetric -> SMM_QUANT_DYNAMIC_PER_TOKEN with a
 *                                           per-token azp into smm_scaled_mm
 *               static tensor symmetric  -> SMM_QUANT_STATIC_PER_TENSOR, input_scale
 *               static tensor asymmetric -> the same with input_zero_point as
 *                                           the per-tensor azp
 * Anything else (num_bits != 8, type "float", asymmetric weights, group,
 * block or attn_head strategies, actorder, dynamic weights, output
 * activations, ...) is rejected with a message naming the field, e.g.
 *   config.json: quantization_config.config_groups.group_0.weights.strategy:
 *   "group" is not supported (tensor or channel)
 */
#ifndef SMM_CTENSORS_H
#define SMM_CTENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "scaledmm.h"

/* One config group's scheme, in the library's terms. */
typedef struct ct_scheme {
    int weight_per_channel;   /* 1: "channel" (scale_b has N entries); 0: "tensor" */
    int act_dynamic;          /* 1: dynamic per token; 0: static per tensor */
    int act_symmetric;        /* 0: activations carry a zero point */
} ct_scheme;

/* A static short name of a scheme, e.g. "w:channel a:token-sym" (weights
 * per channel or per tensor; activations per token or static, symmetric or
 * with a zero point), as `run --list` and `accuracy` print it. */
const char *ct_scheme_words(const ct_scheme *s);

typedef struct ct_config ct_config;

/*
 * Parses a config.json text (the whole file; its "quantization_config" is
 * what is read). display_name prefixes messages ("config.json"). Returns the
 * configuration, or NULL with a message naming the offending field in err.
 */
ct_config *ct_config_parse(const char *json, size_t len, const char *display_name,
                           char *err, size_t errlen);
/* Reads DIR/config.json and parses it as above. */
ct_config *ct_config_load(const char *dir, char *err, size_t errlen);
void ct_config_free(ct_config *c);

/* The group a layer (module name, e.g. "model.layers.0.mlp.down_proj")
 * belongs to, or NULL when no group targets it or the ignore list names it.
 * Targets and ignore entries match as vLLM matches them: an exact module
 * name, "re:PATTERN" (a PCRE2 pattern matched as Python's re.match: at the
 * start of the name, every alternative; Python's syntax for names is
 * PCRE2's), or the class name "Linear" (every quantized layer of a
 * checkpoint is a Linear). *group_name receives the group's key when
 * non-NULL. A pattern whose match reaches the backtracking or memory
 * limits gives NULL here; ct_config_lookup reports it. */
const ct_scheme *ct_config_match(const ct_config *c, const char *layer,
                                 const char **group_name);
/* As ct_config_match, with errors: 0 and *scheme (NULL when ignored or not
 * targeted), or -1 with a message naming the pattern when a match reached
 * a limit. */
int ct_config_lookup(const ct_config *c, const char *layer, const ct_scheme **scheme,
                     const char **group_name, char *err, size_t errlen);
/* 1 when the ignore list names `layer`. */
int ct_config_ignored(const ct_config *c, const char *layer);

/* A quantized linear layer of a checkpoint. Weight data point into the
 * checkpoint's mapping; the float vectors are widened copies (owned). */
typedef struct ct_layer {
    char *name;                 /* module name, without ".weight" */
    const char *group;          /* config group key */
    ct_scheme scheme;
    int64_t n, k;               /* weight N x K */
    const int8_t *weight;       /* N x K, row-major */
    float *weight_scale;        /* N (channel) or 1 (tensor) float32 values */
    int64_t weight_scale_len;
    float input_scale;          /* static activations */
    int32_t input_zero_point;   /* static asymmetric activations */
    float *bias;                /* N float32 values, or NULL */
} ct_layer;

/* A quantized layer that cannot run (a bad shape, a missing or malformed
 * scale, no config group targets it): it fails alone, with its name. */
typedef struct ct_unusable {
    char *name;                 /* module name */
    char *why;                  /* the message, naming the tensor */
} ct_unusable;

typedef struct ct_model {
    st_checkpoint *ckpt;
    ct_config *config;
    ct_layer *layers;           /* the usable layers, in the checkpoint's tensor order */
    size_t nlayers;
    ct_unusable *unusable;      /* the others, in the same order */
    size_t nunusable;
} ct_model;

/*
 * Opens a compressed-tensors checkpoint directory (config.json and
 * model.safetensors or a sharded index) and validates every quantized
 * layer: each I8 "<layer>.weight" (2-D, both sizes >= 1) must be targeted
 * by a config group, have a weight_scale of the scheme's shape in
 * F32/F16/BF16 with finite values >= 0, input_scale (finite, > 0) for
 * static activations, input_zero_point (I8 or I32, 1 element) for static
 * asymmetric ones, and a bias, when present, of N float values. A layer
 * that fails these checks goes to m->unusable with its message; the
 * others stay usable. Returns the model, or NULL with a message naming the
 * file or tensor in err (also when no layer is usable: the first one's
 * message).
 */
ct_model *ct_model_open(const char *dir, char *err, size_t errlen);
void ct_model_close(ct_model *m);
/* A usable layer by module name, or NULL. */
const ct_layer *ct_model_find(const ct_model *m, const char *name);
/* Why the quantized layer `name` cannot run, or NULL when it is not an
 * unusable layer of m. */
const char *ct_model_unusable(const ct_model *m, const char *name);

/*
 * Runs one layer as vLLM's compressed-tensors w8a8 int8 scheme runs it:
 *   1. smm_quantize_i8 of x (M x K of x_dtype, row-major, contiguous) in the
 *      scheme's activation mode (dynamic: per-token scales, and zero points
 *      when asymmetric; static: input_scale, input_zero_point);
 *   2. smm_scaled_mm with the weight scales, the zero points (if any) and the
 *      bias (if any) into y (M x N of y_dtype: F32, F16 or BF16, row-major,
 *      contiguous). vLLM's output dtype is the activation dtype.
 * Returns 0, or -1 with the library's message in err (y then untouched).
 */
int ct_layer_forward(smm_context *ctx, const ct_layer *layer, int64_t m,
                     const void *x, smm_dtype x_dtype, void *y, smm_dtype y_dtype,
                     char *err, size_t errlen);
/*
 * ct_layer_forward with the bias first rounded to bias_dtype, as vLLM holds
 * it: vLLM loads every parameter, the bias included, in the model's dtype,
 * so a float32 bias of a model run in float16 or bfloat16 is rounded
 * (round to nearest even) to that type before the epilogue adds it.
 * bias_dtype SMM_DTYPE_F32 uses the bias as stored (widened exactly);
 * SMM_DTYPE_F16 or SMM_DTYPE_BF16 rounds each value to that type and widens
 * it back.
 */
int ct_layer_forward_bias(smm_context *ctx, const ct_layer *layer, int64_t m,
                          const void *x, smm_dtype x_dtype, void *y, smm_dtype y_dtype,
                          smm_dtype bias_dtype, char *err, size_t errlen);
/* The dtype config.json gives the model ("torch_dtype", or "dtype" as newer
 * transformers write it: "float32", "float16" or "bfloat16"): 0 and *out,
 * or -1 when absent or another type. */
int ct_config_model_dtype(const ct_config *c, smm_dtype *out);

/* ---- Quantizing a float checkpoint (scaledmm quantize) ---- */

/*
 * Whether a tensor of a float checkpoint is treated as a Linear layer's
 * weight and quantized: a 2-D F32/F16/BF16 tensor named "<module>.weight",
 * with at least one row and one column (an empty [N, 0] or [0, K] weight
 * is copied unchanged, so that the reader never meets an int8 layer it
 * cannot run), whose module name has no component containing "embed" or "norm"
 * (case-insensitive) and whose last component is not "lm_head". 1 yes,
 * 0 no.
 */
int ct_is_linear_weight(const st_tensor *t);

/*
 * Per-channel symmetric int8 quantization of one weight row, with
 * compressed-tensors' formula (calculate_qparams, _quantize):
 *   amax  = max(|min(w, 0)|, max(w, 0)) over the row     (float32)
 *   scale = amax / 127.5f                                ((qmax - qmin) / 2)
 *   scale = FLT_EPSILON when it is 0                     (finfo(float32).eps)
 *   q     = round_half_even(clamp(w / scale, -128, 127)) (true division)
 * w: k float32 values (finite). Writes q[0..k-1] and returns the scale.
 */
float ct_quantize_row(const float *w, int64_t k, int8_t *q);

/*
 * llm-compressor's arithmetic for a bfloat16 or float16 weight row (dt
 * ST_BF16 or ST_F16; w holds its values widened exactly): compressed-tensors
 * computes in the tensor's dtype, every operation being a float32 operation
 * rounded (to nearest even) to dt:
 *   amax  = max(|min(w, 0)|, max(w, 0))                  (exact)
 *   scale = rnd_dt(amax / 127.5f)
 *   scale = finfo(dt).eps (bf16 2^-7, f16 2^-10) when it is 0
 *   q     = round_half_even(clamp(rnd_dt(w / scale), -128, 127))
 * The rounding of w / scale to dt before the rounding to an integer is
 * where this differs from ct_quantize_row. Returns the scale (a value of
 * dt); dt ST_F32 is ct_quantize_row.
 */
float ct_quantize_row_dtype(const float *w, int64_t k, st_dtype dt, int8_t *q);

/* Which arithmetic `scaledmm quantize` uses. */
typedef enum ct_match_mode {
    CT_MATCH_CONTRACT = 0,       /* ct_quantize_row in float32, F32 scales (default) */
    CT_MATCH_LLM_COMPRESSOR = 1  /* ct_quantize_row_dtype in the weight's dtype,
                                    scales stored in that dtype (as llm-compressor) */
} ct_match_mode;

/* What ct_quantize_checkpoint_ex wrote (for the summary line). */
typedef struct ct_quantize_stats {
    size_t tensors;        /* tensors of the input */
    size_t quantized;      /* Linear weights quantized */
    size_t shards;         /* safetensors files written */
    size_t files_copied;   /* other files copied (subdirectories included) */
    size_t dirs_copied;    /* subdirectories copied */
} ct_quantize_stats;

/* Progress callback of ct_quantize_checkpoint: tensor `done` of `total`. */
typedef void (*ct_progress_fn)(size_t done, size_t total, const char *name, void *user);

/*
 * scaledmm quantize: reads the float checkpoint in in_dir (model.safetensors
 * or a sharded index; F32/F16/BF16 weights) and writes out_dir (created if
 * absent, must not be in_dir) as a compressed-tensors w8a8 checkpoint:
 * every Linear weight (ct_is_linear_weight) quantized per channel with
 * ct_quantize_row (I8 N x K, weight_scale F32 N x 1), activations dynamic
 * per-token symmetric; every other tensor copied unchanged; the shards
 * mirror the input's (same file names, same tensors in each, index
 * rewritten); config.json is the input's (or {}) with
 * "quantization_config" added; every other file and folder of in_dir
 * (tokenizer, generation config, README, sentence-transformers'
 * 1_Pooling/ and 2_Normalize/, .gitattributes) is copied, recursively,
 * except hidden folders (.git, .cache), other *.safetensors files at the
 * top, and file types other than regular files and directories. An input that already has a
 * quantization_config, a non-finite weight, or a Linear weight whose
 * module already has a "weight_scale" tensor is an error.
 * Everything is written into a staging directory inside out_dir
 * (.scaledmm-quantize.XXXXXX) and moved into out_dir only once all of it
 * is written and every name it takes there was checked: an existing
 * regular file is replaced (its mode kept), a symbolic link is replaced
 * itself (not followed), anything else (a directory) is an error before
 * anything moves. Returns 0, or -1 with a message in err; out_dir is then
 * as it was (and removed if this call created it), except when a rename
 * itself fails after the checks (err says so). A process killed while
 * writing leaves the staging directory behind.
 */
int ct_quantize_checkpoint(const char *in_dir, const char *out_dir,
                           ct_progress_fn progress, void *user,
                           char *err, size_t errlen);
/* ct_quantize_checkpoint with the arithmetic chosen by `mode`, and what was
 * written in *stats (when non-NULL). */
int ct_quantize_checkpoint_ex(const char *in_dir, const char *out_dir, ct_match_mode mode,
                              ct_progress_fn progress, void *user, ct_quantize_stats *stats,
                              char *err, size_t errlen);

#endif
