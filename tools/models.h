/*
 * models.h - the w8a8 linear layers of real models, as `scaledmm bench`
 * runs them.
 *
 * Each layer is one smm_scaled_mm: activations M x K (M = tokens) times
 * weights N x K (the checkpoint's [out_features, in_features] layout), so
 * N is the layer's output width and K its input width. Fused projections
 * are one GEMM, as vLLM runs them (qkv = q, k and v stacked; gate_up = gate
 * and up stacked). Tensor-parallel tables give one rank's shard.
 */
#ifndef SMM_TOOL_MODELS_H
#define SMM_TOOL_MODELS_H

#include <stdint.h>

typedef struct model_layer {
    const char *name;   /* "qkv", "o", "gate_up", "down" */
    int64_t n;          /* output features (rows of B) */
    int64_t k;          /* input features (columns of A and B) */
} model_layer;

typedef struct model_shapes {
    const char *name;          /* as given to --model */
    const char *description;   /* one line: source of the shapes */
    int nlayers;
    const model_layer *layers;
} model_shapes;

/* Number of built-in models and the i-th one (0 <= i < models_count()). */
int models_count(void);
const model_shapes *models_get(int i);

/* The model called `name` (case-sensitive), or NULL. */
const model_shapes *models_find(const char *name);

#endif
