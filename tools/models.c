/*
 * models.c - shape tables of the models `scaledmm bench` knows (models.h).
 *
 * Llama 3.1 (config.json of meta-llama/Llama-3.1-8B and -405B):
 *   8B:   hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head 128
 *         qkv     = (32 + 2*8) * 128 = 6144  x 4096
 *         o       = 4096                     x 4096
 *         gate_up = 2 * 14336 = 28672        x 4096
 *         down    = 4096                     x 14336
 *   405B: hidden 16384, intermediate 53248, 128 heads, 8 KV heads, head 128;
 *         tensor parallel 4 splits qkv and gate_up by output (column
 *         parallel) and o and down by input (row parallel):
 *         qkv     = (128 + 2*8) * 128 / 4 = 4608  x 16384
 *         o       = 16384                         x 16384 / 4 = 4096
 *         gate_up = 2 * 53248 / 4 = 26624         x 16384
 *         down    = 16384                         x 53248 / 4 = 13312
 */
#include "models.h"

#include <string.h>

static const model_layer llama31_8b[] = {
    { "qkv",      6144,  4096 },
    { "o",        4096,  4096 },
    { "gate_up", 28672,  4096 },
    { "down",     4096, 14336 },
};

static const model_layer llama31_405b_tp4[] = {
    { "qkv",      4608, 16384 },
    { "o",       16384,  4096 },
    { "gate_up", 26624, 16384 },
    { "down",    16384, 13312 },
};

static const model_shapes models[] = {
    { "llama-3.1-8b", "Llama 3.1 8B, one GPU/socket (no tensor parallelism)",
      (int)(sizeof llama31_8b / sizeof llama31_8b[0]), llama31_8b },
    { "llama-3.1-405b-tp4", "Llama 3.1 405B, one rank of tensor parallelism 4",
      (int)(sizeof llama31_405b_tp4 / sizeof llama31_405b_tp4[0]), llama31_405b_tp4 },
};

int models_count(void)
{
    return (int)(sizeof models / sizeof models[0]);
}

const model_shapes *models_get(int i)
{
    if (i < 0 || i >= models_count())
        return NULL;
    return &models[i];
}

const model_shapes *models_find(const char *name)
{
    int i;
    for (i = 0; name && i < models_count(); i++)
        if (strcmp(models[i].name, name) == 0)
            return &models[i];
    return NULL;
}
